"""Context parallelism (Megatron-LM ``--context-parallel-size``): the sequence split over ``cp`` GPUs.

Each of the cp ranks of a tensor-parallel group's ring holds s/cp tokens of every sequence (two chunks of
s/(2 cp), the load-balanced causal split), so every kernel of the layer, the embedding and the head runs on
s/cp tokens (:func:`local_seq`), except the attention core: its queries meet the keys of the whole
sequence, brought by one of the four communication types of ``plan.cp_comm`` (:func:`split_attention`: its
FLOPs are 1/cp of the causal work, the same on every rank): the K/V ring (p2p), Ulysses' all-to-alls (a2a), both
hierarchically (a2a+p2p: A = :func:`dse.specs.rules_cp.a2a_degree` ranks of all-to-all, a ring over the cp/A
groups) or an all-gather of the whole K/V (allgather). Their exposed time is :func:`times`, their bytes
:func:`traffic`, their buffers :func:`ring_buffers`; the ranks replicate the model like data-parallel ranks and
reduce gradients over dp x cp (:func:`grad_ranks`). Formulas: :mod:`dse.formulas.parallelism.context`.
docs/long-context.md.
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
    kind = getattr(plan, "cp_comm", "p2p")
    if share is not None:   # sliding-window / chunked layers: the windowed work (all-gather: its busiest rank)
        if kind == "allgather" and executed is share:
            executed = gathered_share(model, plan, P)
        row.update(flops=f * 2 * share, executed=f * 2 * executed, executed_backward=f_b * 2 * executed)
    else:
        row.update(flops=f, executed=f, executed_backward=f_b)
    if kind in ("a2a", "a2a+p2p"):   # Ulysses: Q, K, V and the output exchanged over the heads
        q_dim, v_dim = (a_loc * qk, a_loc * model.v_head_dim) if model.mla else (a_loc * model.head_dim, None)
        k_dim = q_dim if model.mla else model.kv_heads * model.head_dim / t
        v_dim = k_dim if v_dim is None else v_dim
        o_dim = a_loc * (model.v_head_dim if model.mla else model.head_dim)
        row["cp_a2a_qkv"] = P.ulysses_alltoall_bytes(s, b, q_dim + k_dim + v_dim, cp, e)
        row["cp_a2a_out"] = P.ulysses_alltoall_bytes(s, b, o_dim, cp, e)
    if kind in ("p2p", "a2a+p2p"):   # the ring's K/V (a2a+p2p: of s/R tokens and kv/(t A) heads, the same bytes)
        row["cp_kv"] = P.context_parallel_kv_bytes(s, b, kv_dim, cp, e)
    elif kind == "allgather":
        row["cp_gather"] = P.context_parallel_kv_bytes(s, b, kv_dim, cp, e)
    return {**layer, "attention": row}


def gathered_share(model: Any, plan: Any, P: Any = _parallelism) -> Num:
    """Share of s^2 per layer and head the busiest all-gather rank computes, times cp (the windowed layers'
    :func:`~dse.formulas.parallelism.context_parallel_window_pairs`; full layers 1/2 and chunked ones their mean,
    balanced), averaged over the layers: what sets a windowed model's attention time under ``cp_comm`` allgather."""
    from dse.formulas.transformer import attention_pairs

    n, s, cp = model.attention_layers, plan.seq_len, plan.cp
    total: Num = 0.5 * n["full"]
    if n["sliding"]:
        w = model.sliding_window
        total = total + n["sliding"] * (P.context_parallel_window_pairs(s, w, cp) * cp / (s * s) if w else 0.5)
    if n["chunked"]:
        c = model.attention_chunk
        total = total + n["chunked"] * (attention_pairs(s, chunk=c) / (s * s) if c else 0.5)
    return total / (n["full"] + n["sliding"] + n["chunked"])


def exchanged(tables: dict[str, Any]) -> bool:
    """The layer's attention exchanges data over the cp ranks: the K/V ring (``cp_kv``), Ulysses (``cp_a2a_qkv``)
    or the all-gather (``cp_gather``)."""
    row = tables["layer"].get("attention", {})
    return "cp_kv" in row or "cp_a2a_qkv" in row or "cp_gather" in row


def split_tables(layer: dict[str, Any], dense: dict[str, Any] | None, model: Any, plan: Any, e: Num
                 ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The layer tables (an MoE model's, and its dense layers' or None) with :func:`split_attention` where cp > 1."""
    if _one(getattr(plan, "cp", 1)) or "attention" not in layer:   # no cp, or math attention (a rule refuses cp)
        return layer, dense
    return split_attention(layer, model, plan, e), None if dense is None else split_attention(dense, model, plan, e)


def times(tables: dict[str, Any], kernel_cost: Any, lk: dict[str, Any], plan: Any, C: Any, P: Any = _parallelism
          ) -> dict[str, Num]:
    """Exposed time of the context-parallel exchange per layer and micro-batch: forward, backward and recompute
    (full or selective: both run the attention core again, with its exchange).

    p2p: cp-1 ring steps of S_kv forward, of 2 S_kv (K, V and dK, dV) backward, each hidden behind 1/cp of the
    attention's forward or backward (load-balanced: every step the same work). a2a: the all-to-alls of Q, K, V and
    of the output (backward: dO, then dQ, dK, dV), all exposed. a2a+p2p: both, the all-to-alls over the ``cp_a2a``
    link's A ranks, the ring over the ``cp_ring`` link's R = cp/A groups, each step behind 1/R of the attention.
    allgather: the K/V all-gather forward, again and the dK/dV reduce-scatter backward, all exposed.
    ``kernel_cost`` prices the attention row (only the rings read it).
    """
    row, kind, cp = tables["layer"]["attention"], getattr(plan, "cp_comm", "p2p"), plan.cp
    if kind == "allgather":
        link = lk["cp"]
        fwd = P.allgather_attention_time(row["cp_gather"], cp, link.bandwidth, path=link.path)
        bwd = P.allgather_attention_time(row["cp_gather"], cp, link.bandwidth, backward=True, path=link.path)
    elif kind == "a2a":
        link = lk["cp"]
        fwd = bwd = (P.alltoall_time(row["cp_a2a_qkv"], cp, link.bandwidth, path=link.path)
                     + P.alltoall_time(row["cp_a2a_out"], cp, link.bandwidth, path=link.path))
    else:
        from dse.estimate.kernel_cost import kernel_time

        f, b = kernel_time(row, kernel_cost, C)
        kv = row["cp_kv"]
        if kind == "p2p":
            link = lk["cp"]
            fwd = P.ring_attention_time(kv, cp, f / cp, link.bandwidth, path=link.path)
            bwd = P.ring_attention_time(2 * kv, cp, b / cp, link.bandwidth, path=link.path)
        else:   # a2a+p2p
            a2a, ring = lk["cp_a2a"], lk["cp_ring"]
            r = ring.ranks
            args = (a2a.ranks, r)
            fwd = P.hierarchical_attention_time(row["cp_a2a_qkv"], row["cp_a2a_out"], kv, *args, f / r, a2a.bandwidth,
                                                ring.bandwidth, a2a_path=a2a.path, ring_path=ring.path)
            bwd = P.hierarchical_attention_time(row["cp_a2a_qkv"], row["cp_a2a_out"], 2 * kv, *args, b / r,
                                                a2a.bandwidth, ring.bandwidth, a2a_path=a2a.path, ring_path=ring.path)
    return {"forward": fwd, "backward": bwd, "recompute": fwd if plan.recompute != "none" else 0.0}


def traffic(tables: dict[str, Any], lk: dict[str, Any], plan: Any, scale: Num) -> list[tuple[Num, Any]]:
    """Bytes one GPU sends per iteration for the context-parallel exchange, as (bytes, inside a node) per link:
    ``scale`` x per layer and micro-batch. The ring: cp-1 sends of S_kv forward (and recompute), of 2 S_kv
    backward; Ulysses: (A-1)/A of Q, K, V and the output forward (and recompute), of their gradients backward
    (the rest stays); a2a+p2p: both, each on its level's link (R = cp/A ring ranks); the all-gather: the ring's
    bytes, (cp-1) S_kv per all-gather or reduce-scatter (``scale``: micro-batches x layers of a stage)."""
    row = tables["layer"].get("attention", {})
    rec = 1 if plan.recompute != "none" else 0
    hier = "cp_a2a" in lk and getattr(plan, "cp_comm", "p2p") == "a2a+p2p"
    out = []
    if "cp_a2a_qkv" in row:
        link = lk["cp_a2a"] if hier else lk["cp"]
        a = link.ranks if hier else plan.cp
        out.append((scale * (2 + rec) * ((a - 1) / a * (row["cp_a2a_qkv"] + row["cp_a2a_out"])), link.inside))
    kv = row.get("cp_kv", row.get("cp_gather"))
    if kv is not None:
        link = lk["cp_ring"] if hier else lk["cp"]
        r = link.ranks if hier else plan.cp
        out.append((scale * (r - 1) * (3 + rec) * kv, link.inside))
    return out


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


def ring_buffers(tables: dict[str, Any], plan: Any, system: Any = None, P: Any = _parallelism) -> Num:
    """Receive buffers of the context-parallel exchange while a layer's attention runs; none at cp = 1 (also in an
    array plan that holds cp = 1). The ring: :func:`kv_buffers`; Ulysses (a2a): the all-to-all's receive buffer of
    one layer's Q, K, V; a2a+p2p: both, each where its level has more than one rank; allgather: the whole
    sequence's K, V and dK, dV (:func:`~dse.formulas.parallelism.allgather_buffer_bytes`)."""
    row = tables["layer"].get("attention", {})
    kind = getattr(plan, "cp_comm", "p2p")
    if kind == "allgather":
        held: Num = P.allgather_buffer_bytes(row["cp_gather"], plan.cp)
    elif kind == "a2a+p2p":
        from dse.specs.rules_cp import a2a_degree

        a = a2a_degree(plan, system)
        held = where(a > 1, row["cp_a2a_qkv"], 0.0) + where(plan.cp > a, kv_buffers(tables), 0.0)
    else:
        held = row["cp_a2a_qkv"] if "cp_a2a_qkv" in row else kv_buffers(tables)
    return where(plan.cp > 1, held, 0.0)
