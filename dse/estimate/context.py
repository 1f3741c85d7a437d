"""Context parallelism (Megatron-LM ``--context-parallel-size``): the sequence split over ``cp`` GPUs.

Each of the cp ranks of a tensor-parallel group's ring holds s/cp tokens of every sequence (two chunks of
s/(2 cp), the load-balanced causal split), so every kernel of the layer, the embedding and the head runs on
s/cp tokens (:func:`local_seq`), except the attention core: its queries meet the keys of the whole
sequence, brought by ring attention (:func:`split_attention`: its FLOPs are 1/cp of the causal work, the
same on every rank). The K/V ring's exposed time is :func:`ring_times`; the ranks replicate the model like
data-parallel ranks and reduce gradients over dp x cp (:func:`grad_ranks`). Formulas:
:func:`dse.formulas.parallelism.context_parallel_kv_bytes`,
:func:`~dse.formulas.parallelism.context_parallel_attention_flops`,
:func:`~dse.formulas.parallelism.ring_attention_time`. docs/long-context.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.formulas import parallelism as _parallelism
from dse.formulas._array import where

if TYPE_CHECKING:
    from dse.estimate.aliases import Num


def _one(cp: Any) -> bool:
    """cp is the plain integer 1 (no context parallelism: every number stays as it was, integers included)."""
    return type(cp) is int and cp == 1


def local_seq(plan: Any) -> Num:
    """Tokens of a sequence on one context-parallel rank: s / cp (s itself at cp = 1)."""
    cp = getattr(plan, "cp", 1)
    return plan.seq_len if _one(cp) else plan.seq_len / cp


def grad_ranks(plan: Any) -> Num:
    """Ranks that hold the same weights and reduce their gradients: dp x cp (Megatron's data-parallel-with-cp group);
    twice that under DualPipe, whose ranks hold two stages each (stage i on ranks i and p-1-i)."""
    cp = getattr(plan, "cp", 1)
    d = plan.dp if _one(cp) else plan.dp * cp
    return 2 * d if getattr(plan, "schedule", "1f1b") == "dualpipe" else d


def split_attention(layer: dict[str, Any], model: Any, plan: Any, e: Num, P: Any = _parallelism) -> dict[str, Any]:
    """The layer table of one context-parallel rank: the attention row's FLOPs over the whole sequence's keys.

    ``layer`` was built for s/cp tokens, which counts the attention against the local keys only (1/cp^2 of the
    work); the row gets :func:`~dse.formulas.parallelism.context_parallel_attention_flops` instead, and the
    table's ``cp_kv`` the bytes of the rank's K and V (:func:`~dse.formulas.parallelism.context_parallel_kv_bytes`).
    """
    cp, t, s, b = plan.cp, plan.tp, plan.seq_len, plan.micro_batch
    a_loc = model.heads / t
    causal = model.architecture == "decoder"
    row = dict(layer["attention"])
    d_fwd = d_bwd = model.head_dim
    kv_dim = model.kv_heads * model.head_dim / t
    if model.mla:   # query/key d_qk, value d_v per head (dse.formulas.kernels.mla): K and V of every head travel
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        d_fwd, d_bwd = (qk + model.v_head_dim) / 2, (3 * qk + 2 * model.v_head_dim) / 5
        kv_dim = a_loc * (qk + model.v_head_dim) / 2
    f = P.context_parallel_attention_flops(s, b, a_loc, d_fwd, cp, causal)
    f_b = P.context_parallel_attention_flops(s, b, a_loc, d_bwd, cp, causal, backward=True)
    from dse.estimate.table_inputs import attention_shares  # (table_inputs imports this module)

    share, executed = attention_shares(model, plan, getattr(plan, "stack", "megatron"))
    if share is not None:   # sliding-window / chunked layers: the windowed work, balanced over the ranks
        row.update(flops=f * 2 * share, executed=f * 2 * executed, executed_backward=f_b * 2 * executed)
    else:
        row.update(flops=f, executed=f, executed_backward=f_b)
    if getattr(plan, "cp_comm", "p2p") == "a2a":   # Ulysses: Q, K, V and the output exchanged over the heads
        q_dim, v_dim = (a_loc * qk, a_loc * model.v_head_dim) if model.mla else (a_loc * model.head_dim, None)
        k_dim = q_dim if model.mla else model.kv_heads * model.head_dim / t
        v_dim = k_dim if v_dim is None else v_dim
        o_dim = a_loc * (model.v_head_dim if model.mla else model.head_dim)
        row["cp_a2a_qkv"] = P.ulysses_alltoall_bytes(s, b, q_dim + k_dim + v_dim, cp, e)
        row["cp_a2a_out"] = P.ulysses_alltoall_bytes(s, b, o_dim, cp, e)
    else:
        row["cp_kv"] = P.context_parallel_kv_bytes(s, b, kv_dim, cp, e)
    return {**layer, "attention": row}


def exchanged(tables: dict[str, Any]) -> bool:
    """The layer's attention exchanges data over the cp ranks: the K/V ring (``cp_kv``) or Ulysses (``cp_a2a_qkv``)."""
    row = tables["layer"].get("attention", {})
    return "cp_kv" in row or "cp_a2a_qkv" in row


def split_tables(layer: dict[str, Any], dense: dict[str, Any] | None, model: Any, plan: Any, e: Num
                 ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The layer tables (an MoE model's, and its dense layers' or None) with :func:`split_attention` where cp > 1."""
    if _one(getattr(plan, "cp", 1)) or "attention" not in layer:   # no cp, or math attention (a rule refuses cp)
        return layer, dense
    return split_attention(layer, model, plan, e), None if dense is None else split_attention(dense, model, plan, e)


def ring_times(tables: dict[str, Any], kernel_cost: Any, link: Any, plan: Any, C: Any, P: Any = _parallelism
               ) -> dict[str, Num]:
    """Exposed time of the K/V ring per layer and micro-batch: forward, backward and recompute.

    Forward: cp-1 steps of S_kv, each hidden behind 1/cp of the attention's forward (load-balanced: every step
    the same work); backward: cp-1 steps of 2 S_kv (K, V and dK, dV) behind 1/cp of its backward. Recompute
    (full or selective: both run the attention core again) repeats the forward ring.
    """
    from dse.estimate.kernel_table import kernel_time

    row = tables["layer"]["attention"]
    f, b = kernel_time(row, kernel_cost, C)
    cp, kv = plan.cp, row["cp_kv"]
    fwd = P.ring_attention_time(kv, cp, f / cp, link.bandwidth, link.latency)
    bwd = P.ring_attention_time(2 * kv, cp, b / cp, link.bandwidth, link.latency)
    return {"forward": fwd, "backward": bwd, "recompute": fwd if plan.recompute != "none" else 0.0,
            "kv_bytes": kv}


def a2a_times(tables: dict[str, Any], link: Any, plan: Any, P: Any = _parallelism) -> dict[str, Num]:
    """Time of Ulysses' all-to-alls per layer and micro-batch, all exposed (the attention needs its heads first):
    forward Q, K, V then the output; backward the output's gradient then dQ, dK, dV; recompute (full or selective:
    the attention core runs again, with its all-to-alls) the forward's again."""
    row = tables["layer"]["attention"]
    qkv = P.alltoall_time(row["cp_a2a_qkv"], plan.cp, link.bandwidth, link.latency)
    out = P.alltoall_time(row["cp_a2a_out"], plan.cp, link.bandwidth, link.latency)
    return {"forward": qkv + out, "backward": qkv + out, "recompute": qkv + out if plan.recompute != "none" else 0.0}


def add_ring(kt: dict[str, Num], ring: dict[str, Num]) -> dict[str, Num]:
    """The layer times of :func:`dse.estimate.kernel_table.kernel_times` with the ring's exposed time added (a copy)."""
    out = dict(kt)
    for gpu_key, layer_key, part in (("gpu_fwd", "layer_fwd", "forward"), ("gpu_bwd", "layer_bwd", "backward"),
                                     ("gpu_rec", "layer_rec", "recompute")):
        out[gpu_key] = kt[gpu_key] + ring[part]
        out[layer_key] = kt[layer_key] + ring[part]
    out["layer_total"] = out["layer_fwd"] + out["layer_bwd"] + out["layer_rec"]
    out["cp_fwd"], out["cp_bwd"], out["cp_rec"] = ring["forward"], ring["backward"], ring["recompute"]
    return out


def kv_buffers(tables: dict[str, Any]) -> Num:
    """Bytes of the ring's receive buffers while a layer's attention runs: 2 buffers of K, V and dK, dV (backward).

    Transformer Engine double-buffers the ring (the chunk in use and the one arriving); the backward's buffers
    carry the K/V and their gradients: 4 S_kv at the peak.
    """
    row = tables["layer"].get("attention", {})
    return 4 * row["cp_kv"] if "cp_kv" in row else 0.0


def ring_buffers(tables: dict[str, Any], plan: Any) -> Num:
    """:func:`kv_buffers` where there is a ring (cp > 1); none at cp = 1, also in an array plan that holds cp = 1.
    Ulysses (``cp_comm`` a2a): the all-to-all's receive buffer of one layer's Q, K, V instead."""
    row = tables["layer"].get("attention", {})
    return where(plan.cp > 1, row["cp_a2a_qkv"] if "cp_a2a_qkv" in row else kv_buffers(tables), 0.0)
