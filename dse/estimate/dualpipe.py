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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.formulas._array import where

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
