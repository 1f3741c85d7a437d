"""Multi-token prediction (MTP) in the base estimate: DeepSeek-V3's extra prediction depths, as Megatron-Core runs them.

DeepSeek-V3 (arXiv 2412.19437) §2.2 trains with ``D`` sequential MTP modules; the k-th predicts the token k+1
ahead from the previous depth's hidden state and the embedding of the shifted tokens. Megatron-Core
(``--mtp-num-layers D``, ``megatron/core/transformer/multi_token_prediction.py``) builds per depth: the lookup of
the shifted tokens in the shared word embedding, ``enorm`` and ``hnorm`` (RMSNorm), the concat and ``eh_proj``
(2h -> h), one transformer layer of the model's last layer's kind (an MoE layer in DeepSeek-V3), ``final_layernorm``
and the shared output head with its cross-entropy over the vocabulary (scaled by ``--mtp-loss-scaling-factor``,
which costs nothing). Without a custom pipeline layout all depths sit on the **last pipeline stage**
(``mtp_on_this_rank``), which then also holds a copy of the word embedding whose gradient is all-reduced with the
first stage's (``finalize_model_grads._allreduce_word_embedding_grads``: ``share_embeddings_and_output_weights or
mtp_num_layers``).

Priced here, ``D`` = ``model.mtp_layers``, per micro-batch on the last stage: ``D`` x (that layer's table, the
extra kernels of :func:`dse.formulas.kernels.mtp_kernels`, the embedding's and the head's tables): time, saved
activations (the depth's logits and loss buffers beside the main head's), FLOPs (counted in the model's FLOPs and
MFU, as Megatron-LM's ``num_floating_point_operations`` counts them: ``num_layers + mtp_num_layers`` layers, the
eh_proj and norms, and ``(mtp_num_layers + 1)`` logit GEMMs), TP/EP traffic; the module's parameters
(:func:`dse.formulas.transformer.mtp_parameters`) and the embedding copy in the last stage's states.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.estimate.passes import layer_passes
from dse.formulas._array import maximum, where

if TYPE_CHECKING:
    from dse.estimate.aliases import Num, Section

#: the sums of :func:`sums` (per micro-batch on the last stage, all depths): not averaged over a mixed model's layers
END_SUMS = ("a_mtp", "flops_mtp", "flops_recompute_mtp", "tp_messages_mtp", "ep_messages_mtp")


def depths(model: Any) -> int:
    """MTP depths the estimate prices: ``model.mtp_layers`` (0: none)."""
    return int(getattr(model, "mtp_layers", 0) or 0)


def extra_table(model: Any, plan: Any, r: Any, K: Any, s: Num) -> dict[str, Any]:
    """One depth's own kernels (:func:`dse.formulas.kernels.mtp_kernels`); under full recompute Megatron-Core
    checkpoints the depth (``_checkpointed_forward``): the two norms keep their inputs, the rest is rerun."""
    t: dict[str, Any] = K.mtp_kernels(s, plan.micro_batch, model.hidden, tp=plan.tp,
                                      sequence_parallel=plan.sequence_parallel, norm=model.norm,
                                      bytes_per_element=r.activations, comm_bytes_per_element=r.tp_messages)
    if plan.recompute == "full":
        x_in = r.activations * s * plan.micro_batch * model.hidden * (1 / plan.tp if plan.sequence_parallel else 1)
        t = {name: {**row, "rerun": row["saved"], "saved": x_in if name in ("enorm", "hnorm") else 0}
             for name, row in t.items()}
    return t


def end_experts(prm: Section, pp: Num) -> tuple[Num, Num]:
    """Routed-expert parameters on a GPU of the first and of the last stage (the MTP layers' on the last)."""
    pe = prm["p_expert_gpu"]
    if "p_expert_mtp" not in prm:
        return pe, pe
    return pe + where(pp == 1, prm["p_expert_mtp"], 0.0), pe + prm["p_expert_mtp"]


def stage_experts(prm: Section) -> Num:
    """Routed-expert parameters on a GPU of the stage holding the most parameters (``p_gpu``): the last stage's
    include the MTP layers' (``p_expert_mtp``)."""
    if "p_expert_mtp" not in prm:
        return prm["p_expert_gpu"]
    return prm["p_expert_gpu"] + where(prm["p_last"] >= prm["p_first"], prm["p_expert_mtp"], 0.0)


def sums(layer_sums: Section, extra: dict[str, Any], D: int, recompute: str, K: Any) -> Section:
    """What D depths add per micro-batch on the last stage: saved bytes, model and recomputed FLOPs, TP/EP messages.

    ``layer_sums``: :func:`dse.estimate.kernel_table.table_sums` of the model's last layer kind with the head and
    embedding (an MoE model's MoE layer).
    """
    a = layer_sums["a_layer"] + K.saved_bytes(extra) + layer_sums["a_head"] + layer_sums["a_emb"]
    f = (layer_sums["flops_layer"] + layer_sums["flops_backward_layer"] + K.forward_flops(extra)
         + K.backward_flops(extra) + layer_sums["flops_head"] + layer_sums["flops_backward_head"])
    rec = layer_sums["flops_recompute"] + (K.forward_flops(extra) if recompute == "full" else 0)
    return {"a_mtp": D * a, "flops_mtp": D * f, "flops_recompute_mtp": D * rec,
            "tp_messages_mtp": D * (layer_sums["tp_messages"] + K.message_bytes(extra, "tp", recompute)),
            "ep_messages_mtp": D * layer_sums["ep_messages"]}


def pass_times(last: Section, own: Section, overhead: Num, dispatch: Num, recompute: str, sync: Num,
               layer_host: tuple[Num, Num] = (0.0, 0.0)) -> Section:
    """One depth's layer (``last``: :func:`dse.estimate.kernel_table.table_time` of the last layer kind's table, with
    the host floor and the MoE dispatcher's sync of :func:`~dse.estimate.passes.layer_passes`) and own kernels
    (``own``), and their tensor-parallel, expert-parallel and recompute shares, per micro-batch."""
    f, b, r = layer_passes(last, overhead, dispatch, recompute, sync, layer_host)
    full = recompute == "full"
    tp_f = last["tp_forward"] + own["tp_forward"]
    tp = tp_f + last["tp_backward"] + own["tp_backward"] + (tp_f if full else 0.0)
    ep = last["ep_forward"] + last["ep_backward"] + (last["ep_forward"] if full else 0.0)
    rec = r + own["recompute"] - ((tp_f + last["ep_forward"]) if full else 0.0)
    return {"mtp_layer": f + b + r, "mtp_own": own["forward"] + own["backward"] + own["recompute"], "mtp_tp": tp,
            "mtp_ep": ep, "mtp_rec": rec}


def time(kt: Section, D: int) -> Section:
    """D depths per micro-batch on the last stage (``t_mtp``): each the last-kind layer (with the context-parallel
    ring's exposed time where there is one), its own kernels, the embedding and the head; and the shares of it that
    are tensor-, expert- and context-parallel communication and recomputation."""
    cp = kt["cp_fwd"] + kt["cp_bwd"] + kt["cp_rec"] if "cp_fwd" in kt else 0.0
    return {"t_mtp": D * (kt["mtp_layer"] + cp + kt["mtp_own"] + kt["t_embed"] + kt["t_head"]),
            "t_mtp_tp": D * kt["mtp_tp"], "t_mtp_ep": D * kt["mtp_ep"], "t_mtp_cp": D * cp,
            "t_mtp_rec": D * kt["mtp_rec"]}


def breakdown(out: Section, kt: Section, m: Num, single: Any, dualpipe: bool = False, on_path: Num | None = None
              ) -> None:
    """The MTP depths in the iteration's parts, in place: ``mtp`` (of which: not a part) is what they add to the
    critical path, m micro-batches of the fullest stage's increase (the last one's head side against the first
    one's embedding side); it is split over compute, recompute and the TP/EP/CP communication as the depths' time
    is. Under DualPipe the depths count with the head in the pair's compute (rank 0 runs the last stage for half
    the micro-batches: m t_mtp / 2, already in ``compute``). ``on_path``: under a custom layout
    (:mod:`dse.estimate.stages`), the share of the depths' time per micro-batch on the slowest rank."""
    t_mtp, t_embed, t_head = kt["t_mtp"], kt["t_embed"], kt["t_head"]
    if dualpipe:
        out["mtp"] = m * t_mtp * (0.5 if on_path is None else on_path)
        return
    crit = m * (where(single, t_mtp, maximum(t_embed, t_head + t_mtp) - maximum(t_embed, t_head))
                if on_path is None else on_path * t_mtp)
    share = crit / t_mtp
    comm = 0.0
    for key, part in (("tp_communication", "t_mtp_tp"), ("ep_communication", "t_mtp_ep"),
                      ("cp_communication", "t_mtp_cp")):
        if key in out:   # ep_communication: MoE models only (a dense model's depths have no all-to-all)
            out[key] = out[key] + share * kt[part]
            comm = comm + share * kt[part]
    out["communication"] = out["communication"] + comm
    out["recompute"] = out["recompute"] + share * kt["t_mtp_rec"]
    out["compute"] = out["compute"] + crit - comm - share * kt["t_mtp_rec"]
    out["mtp"] = crit
