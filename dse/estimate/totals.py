"""The totals of the base estimate: the iteration time's parts, FLOPs and bytes per link.

Reductions of the terms :func:`dse.estimate.base.compose_time` computed (kernel times, pipeline,
data-parallel reduction, optimizer step); array-safe like the rest of the base estimate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.estimate import context as _context, dualpipe as _dualpipe, mtp as _mtp
from dse.formulas._array import maximum, where

if TYPE_CHECKING:
    from dse.estimate.aliases import Num, Section
    from dse.estimate.kernel_cost import Link
    from dse.estimate.terms import BaseTerms
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def breakdown(plan: Plan, i: BaseTerms, kt: Section, pp: Section, dp: Section, t_opt: Num,
              moe: bool = False) -> Section:
    """The iteration time and its parts (what each share of the critical path is spent on).

    ``moe``: an MoE model's breakdown also names its expert-parallel all-to-alls (``ep_communication``).
    """
    m, l_stage, mean = i.micro_batches, i.layers_per_stage, kt
    st = pp.get("stage")   # a custom layout (dse.estimate.stages): the slowest rank's layers, their mean, its ends
    if st is not None:
        l_stage, kt = st["layers"], {**kt, **st["kt"]}
    full = plan.recompute == "full"     # a string field: never an array
    single = plan.pp == 1
    t_iter = pp["t_pipe"] + dp["dp_exposed"] + dp["emb_sync"] + t_opt
    t_embed, t_head = kt["t_embed"], kt["t_head"]
    cp_f, cp_b, cp_r = kt.get("cp_fwd", 0.0), kt.get("cp_bwd", 0.0), kt.get("cp_rec", 0.0)   # the K/V ring
    ep_f, ep_b = kt["ep_fwd"], kt["ep_bwd"]                                                 # the MoE all-to-alls
    dual = pp.get("dualpipe")     # DualPipe: the all-to-alls and sends overlapped, their exposed share counts
    ends = where(single, t_embed + t_head, maximum(t_embed, t_head)) if dual is None else dual["ends"]
    ends = st["ends"] if st is not None and dual is None else ends
    compute_mb = (l_stage * (kt["gpu_fwd"] - kt["tp_fwd"] - cp_f - ep_f + kt["gpu_bwd"] - kt["tp_bwd"] - cp_b - ep_b)
                  + ends)
    recompute_mb = l_stage * ((kt["gpu_rec"] - kt["tp_fwd"] - ep_f if full else kt["gpu_rec"]) - cp_r)
    tp_mb = l_stage * (kt["tp_fwd"] + kt["tp_bwd"] + (kt["tp_fwd"] if full else 0.0))
    cp_mb = l_stage * (cp_f + cp_b + cp_r)
    ep_mb = l_stage * (ep_f + ep_b + (ep_f if full else 0.0)) if dual is None else dual["ep_exposed"]
    p2p_mb = pp["t_p2p"] if dual is None else dual["p2p_exposed"]
    overhead_mb = l_stage * kt["layer_host_excess"] + pp["t_mb_fixed"]
    out = {
        "iteration": t_iter,
        "compute": m * compute_mb,
        "recompute": m * recompute_mb,
        "communication": m * (tp_mb + cp_mb + p2p_mb + ep_mb) + dp["dp_exposed"] + dp["emb_sync"],
        "bubble": pp["bubble"],
        "optimizer": t_opt,
        "overhead": m * overhead_mb,
        "io_exposed": 0.0,
        "tp_communication": m * tp_mb,
        "pp_communication": m * p2p_mb,
        "cp_communication": m * cp_mb,
        "dp_communication": dp["dp_exposed"],
        "embedding_sync": dp["emb_sync"],
        "per_microbatch": pp["stage_max"],
        "layer_forward": mean["layer_fwd"],
        "layer_backward": mean["layer_bwd"],
        "host_load": host_load(kt),
    }
    if moe:
        out["ep_communication"] = m * ep_mb
    if "t_mtp" in kt:   # multi-token prediction: its depths on the last stage, in the parts (and "mtp": of which)
        _mtp.breakdown(out, kt, m, single, dual is not None, None if st is None else st["mtp"])
    return out


def host_load(kt: Section) -> Num:
    """How close the host is to setting a layer's time: the largest ratio of a layer pass's host time to its GPU
    time (forward, backward, recompute; :func:`dse.estimate.passes.layer_host_times`). Below 1 the GPU sets the
    pass and the host's speed does not enter the estimate; a host 1/load times slower would make it host-bound;
    at or above 1 the pass waits for the host (the ``overhead`` part). Dimensionless; 0 where the stack prices
    no host time."""
    ratio = [where(kt[g] > 0, kt[h] / maximum(kt[g], 1e-30), 0.0)
             for h, g in (("host_fwd", "gpu_fwd"), ("host_bwd", "gpu_bwd"), ("host_rec", "gpu_rec"))]
    return maximum(maximum(ratio[0], ratio[1]), ratio[2])


def flops(model: ModelSpec, plan: Plan, sums: Section) -> Section:
    """Model and hardware FLOPs of one iteration: the tables' FLOPs over every micro-batch and TP rank.

    Model FLOPs count forward and backward (3x the forward; a frozen weight's GEMM 2x: no weight gradient);
    hardware FLOPs add what recomputation runs again.
    """
    B: Num = plan.global_batch  # a resolved plan: set
    ranks = B / plan.micro_batch * plan.tp * plan.cp   # micro-batches of the iteration x TP and CP ranks each
    f_model = ranks * (model.layers * (sums["flops_layer"] + sums["flops_backward_layer"]) + sums["flops_head"]
                       + sums["flops_backward_head"])
    f_model = f_model + ranks * sums.get("flops_mtp", 0)         # multi-token prediction (Megatron-LM counts it)
    f_hw = f_model + ranks * model.layers * sums["flops_recompute"] + ranks * sums.get("flops_recompute_mtp", 0)
    return {"model_per_iteration": f_model, "hardware_per_iteration": f_hw}


def _dp_bytes(n: Num, zero: Num, m: Num, grad_b: Num, gather_b: Num, share: float = 1.0) -> Num:
    """Bytes through each of n data-parallel ranks per iteration: a ring moves (n-1)/n of each message; ZeRO-3's
    per micro-batch messages are ``share`` of the rank's (DualPipe: one stage, :func:`dse.estimate.dualpipe.
    microbatch_share`)."""
    return where(n > 1, (n - 1) / n, 0.0) * where(zero == 0, 2 * grad_b, where(zero < 3, grad_b + gather_b,
                                                                           m * share * (grad_b + 2 * gather_b)))


def traffic(model: ModelSpec, plan: Plan, i: BaseTerms, lk: dict[str, Link], pp: Section, dp: Section) -> Section:
    """Bytes per iteration per GPU on each parallel group and on the intra- and inter-node links.

    An MoE model also has ``ep``: the bytes its all-to-alls send, over NVLink and over the network, as its token
    dispatcher sends them (:func:`dse.formulas.parallelism.dispatch_shares`: NCCL's all-to-all, every copy for
    another node over the network, (q-1)/q of each message over NVLink; DeepEP, once per destination node and
    once per destination GPU); in one node (q = ep) the all-to-all's is (ep-1)/ep of each message; with expert
    parallelism the experts' gradient and weight traffic (over the dp/ep ranks holding them) counts in ``dp``;
    with expert tensor parallelism other than tp the etp group's token all-gathers and reduce-scatters count in
    ``tp``.
    """
    zero: Num = plan.zero       # a resolved plan: zero and dp are set
    d: Num = _context.grad_ranks(plan)     # the gradient group: dp x cp
    t, m = plan.tp, i.micro_batches
    ring = where(t > 1, 2 * (t - 1) / t, 0.0)      # an all-reduce moves 2 (t-1)/t of its message through each rank
    sums = i.kernels["sums"]   # (+ the MTP depths' messages: the last stage's)
    tp_bytes = m * i.layers_per_stage * ring * sums["tp_messages"] + m * ring * sums.get("tp_messages_mtp", 0)
    dp_bytes = _dp_bytes(d, zero, m, dp["grad_b"], dp["gather_b"], _dualpipe.microbatch_share(plan))
    pp_bytes = where(plan.pp == 1, 0.0, 2 * m * pp["pp_msg"] + dp["emb_bytes"])   # activations both ways + embedding
    cp_parts = _context.traffic(i.kernels, lk, plan, m * i.layers_per_stage)   # context parallelism, per link
    cp_bytes = sum((b for b, _ in cp_parts), 0.0)
    cp_intra = sum((where(inside, b, 0.0) for b, inside in cp_parts), 0.0)
    cp_inter = sum((where(inside, 0.0, b) for b, inside in cp_parts), 0.0)
    tp_in, dp_in, pp_in = lk["tp"].inside, lk["dp"].inside, lk["pp"].inside
    out = {
        "intra_node": where(tp_in, tp_bytes, 0.0) + where(dp_in, dp_bytes, 0.0) + where(pp_in, pp_bytes, 0.0)
        + cp_intra,
        "inter_node": where(tp_in, 0.0, tp_bytes) + where(dp_in, 0.0, dp_bytes) + where(pp_in, 0.0, pp_bytes)
        + cp_inter,
        "gpu_host": 0.0,
        "tp": tp_bytes,
        "dp": dp_bytes,
        "pp": pp_bytes,
        "cp": cp_bytes,
    }
    if "etp" in lk:   # expert TP other than tp: the etp group's token all-gathers and reduce-scatters count in tp
        et, et_in = lk["etp"].ranks, lk["etp"].inside
        etp_bytes = m * i.layers_per_stage * where(et > 1, 2 * (et - 1) / et, 0.0) * i.kernels["sums"]["etp_messages"]
        out["tp"] = out["tp"] + etp_bytes
        out["intra_node"] = out["intra_node"] + where(et_in, etp_bytes, 0.0)
        out["inter_node"] = out["inter_node"] + where(et_in, 0.0, etp_bytes)
    if "ep" in lk:   # expert parallelism: the all-to-alls, and the experts' share of the data-parallel traffic
        n_e, edp_in, q = lk["edp"].ranks, lk["edp"].inside, lk["ep"].per_node
        messages = m * i.layers_per_stage * sums["ep_messages"] + m * sums.get("ep_messages_mtp", 0)
        crossing = (q - 1) / q if lk["ep"].nvlink is None else lk["ep"].nvlink   # the dispatcher's NVLink share
        nvlink_bytes, network_bytes = crossing * messages, lk["ep"].share * messages
        edp_bytes = _dp_bytes(n_e, zero, m, dp["expert_grad_b"], dp["expert_gather_b"],
                               _dualpipe.microbatch_share(plan))
        out["intra_node"] = out["intra_node"] + nvlink_bytes + where(edp_in, edp_bytes, 0.0)
        out["inter_node"] = out["inter_node"] + network_bytes + where(edp_in, 0.0, edp_bytes)
        out["dp"] = dp_bytes + edp_bytes
        out["ep"] = nvlink_bytes + network_bytes
    elif model.moe_layers:
        out["ep"] = 0.0
    return out
