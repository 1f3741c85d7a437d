"""The DualPipe pipeline schedule (DeepSeek-V3 §3.2.1): bidirectional, each forward chunk overlapped with a
backward chunk so that the expert all-to-alls and the pipeline sends run under compute.

A rank holds pipeline stages i and p-1-i (twice the parameters: :func:`dse.estimate.parameters.dualpipe_copies`;
each stage's gradients reduced over 2 dp cp ranks: :func:`dse.estimate.context.grad_ranks`) and keeps p + 1
micro-batches of activations (:func:`dse.estimate.base.activations`). Per micro-batch a rank runs one stage's
forward and backward chunk, as under 1F1B; DualPipe pairs the forward chunk of one micro-batch with the backward
chunk of another and overlaps the communication of each with the compute of the other
(:func:`dse.formulas.parallelism.dualpipe_pair_time`), and its bubble is (p/2 - 1)(F&B + B - 3W)
(:func:`dse.formulas.parallelism.dualpipe_bubble`). What is not modelled: the head's and the embedding's share
of the bubble (the layers' chunks set it), and the two copies' gradient sum beyond the doubled data-parallel
group (priced as one reduction over 2 dp cp ranks, contiguous).

With ZeRO-3 and with parameter / optimizer offload to host or CXL memory (torchtitan runs FSDP2, and its
``enable_cpu_offload`` ``CPUOffloadPolicy``, on every pipeline schedule, DualPipeV included:
``torchtitan/distributed/fsdp.py`` ``apply_fsdp_to_decoder``, ``pipeline_parallel.py``): a micro-batch runs one of
the rank's two stages, so what ZeRO-3 and the offload move per micro-batch is one stage's share
(:func:`microbatch_share`); the F&B pair runs two chunks at once, so two layers' weights are gathered at once
(:func:`gathered_layers`); and the forward and backward chunks interleave, so the parameter fetches hide behind
the whole pipeline rather than behind each phase (:func:`offload_phases`). Not modelled: torchtitan's default
for pipelines, ``reshard_after_forward`` off (weights kept gathered across micro-batches); dse prices ZeRO-3 as
under 1F1B, gathered per micro-batch (``fsdp_reshard_after_forward = "always"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.formulas._array import maximum, where

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Num, Section
    from dse.estimate.terms import BaseTerms
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def rank_time(plan: Plan, l_stage: Num, kt: Section, ends: Num, t_p2p: Num, P: FormulaModule) -> Section:
    """One rank's micro-batch: compute C = l (t_layer - t_ep) + ends, communication M = l t_ep + t_p2p, overlapped as
    max(M, C + sigma M) (``plan.comm_sm_share`` = sigma); ``l`` its layers per micro-batch, ``kt`` their layer
    entries (:func:`dse.estimate.kernel_table.kernel_times`), ``ends`` its embedding's and head's share."""
    ep_all = kt["ep_fwd"] + kt["ep_bwd"] + (kt["ep_fwd"] if plan.recompute == "full" else 0.0)
    comm = l_stage * ep_all + t_p2p
    compute = l_stage * (kt["layer_total"] - ep_all) + ends
    return {"pair": P.dualpipe_pair_time(compute, comm, plan.comm_sm_share), "compute": compute, "comm": comm,
            "ep": l_stage * ep_all, "bwd": l_stage * (kt["layer_bwd"] + kt["layer_rec"]),
            "wgrad": l_stage * kt["layer_wgrad"], "ends": ends}


def schedule(model: ModelSpec, plan: Plan, i: BaseTerms, kt: Section, pp_msg: Num, t_p2p: Num, t_mb_fixed: Num,
             P: FormulaModule, rank: Section | None = None) -> Section:
    """The pipeline section of :func:`dse.estimate.base.pipeline` under DualPipe.

    Per micro-batch on the slowest rank (``rank``: :func:`rank_time`; default rank 0 of an even split: the first
    and the last stage, so half the embedding's and half the head's time on average over the two directions):
    the pair time; the bubble with F&B that pair time, B = l (t_layer_bwd + t_layer_rec), W = l t_wgrad.
    ``exposed``: the share of M left on the critical path (the breakdown's all-to-all and pipeline communication),
    split in proportion.
    """
    p, m = plan.pp, i.micro_batches
    if rank is None:
        rank = rank_time(plan, i.layers_per_stage, kt, (kt["t_embed"] + kt["t_head"]) / 2, t_p2p, P)
    pair, comm = rank["pair"], rank["comm"]
    ep_all = kt["ep_fwd"] + kt["ep_bwd"] + (kt["ep_fwd"] if plan.recompute == "full" else 0.0)
    exposed = pair - rank["compute"]
    ep_share = where(comm > 0, rank["ep"] / where(comm > 0, comm, 1.0), 0.0)
    stage_max = pair + t_mb_fixed
    mean_compute = (model.layers * (kt["layer_total"] - ep_all) + kt["t_embed"] + kt["t_head"]) / p
    stage_mean = P.dualpipe_pair_time(mean_compute, model.layers / p * ep_all + t_p2p, plan.comm_sm_share) + t_mb_fixed
    bubble = P.dualpipe_bubble(p, pair, rank["bwd"], rank["wgrad"])
    return {"pp_msg": pp_msg, "t_p2p": t_p2p, "t_mb_fixed": t_mb_fixed, "stage_max": stage_max,
            "stage_mean": stage_mean, "t_pipe": m * stage_max + bubble, "bubble": bubble,
            "dualpipe": {"ends": rank["ends"], "ep_exposed": exposed * ep_share,
                         "p2p_exposed": exposed * (1 - ep_share)}}


def microbatch_share(plan: Plan) -> float:
    """Share of a rank's model state one micro-batch touches: 1/2 under DualPipe, 1 otherwise.

    A DualPipe rank holds stages i and p-1-i and runs a micro-batch through one of them (forward-direction
    micro-batches through stage i, reverse ones through p-1-i: DeepSeek-V3 §3.2.1, github.com/deepseek-ai/DualPipe
    ``dualpipe/dualpipe.py``), so ZeRO-3's per micro-batch gathers and reduce-scatters, the offloaded parameters'
    fetches and the gradients handed to an offloaded optimizer are one stage's, half the rank's (the embedding's and
    the head's share of rank 0 aside). Per iteration (the step, the updated weights back) both stages count.
    """
    return 0.5 if plan.schedule == "dualpipe" else 1.0


def gathered_layers(plan: Plan) -> float:
    """Layers whose weights ZeRO-3 holds gathered at once, per chunk in flight: 2 under DualPipe (the F&B pair runs
    a forward chunk of one stage and a backward chunk of the other together), 1 otherwise."""
    return 2.0 if plan.schedule == "dualpipe" else 1.0


def offload_phases(compute_fw: Num, compute_bw: Num, fetch_fw: Num, fetch_bw: Num) -> tuple[Num, Num]:
    """(forward, backward) compute segments of an offloaded DualPipe iteration, before the gradient hand-off.

    Formula: T = max(C_f + C_b, F_f + F_b), split in proportion to compute: T_f = T C_f / (C_f + C_b), T_b = T - T_f.
    Under 1F1B the phases are serial segments, max(C_f, F_f) + max(C_b, F_b) (ZeRO-Infinity §6 overlap,
    :func:`dse.formulas.offload.forward_phase_time`); DualPipe pairs every forward chunk with a backward chunk
    (DeepSeek-V3 §3.2.1, "F&B"), so both chunks' parameter fetches share the host link during the same windows and
    hide behind the compute of both: T <= the serial form, equal when neither phase's fetches outlast its compute.
    """
    total = compute_fw + compute_bw
    t = maximum(total, fetch_fw + fetch_bw)
    t_fw = t * where(total > 0, compute_fw / where(total > 0, total, 1.0), 0.5)
    return t_fw, t - t_fw
