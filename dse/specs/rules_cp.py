"""The plan rules of context parallelism's communication types (``plan.cp_comm``, Megatron ``--cp-comm-type``:
docs/long-context.md), part of :data:`dse.specs.rules.CONTEXT_RULES`: what Transformer Engine's
``attn_forward_func_with_cp`` and its a2a all-to-all assert, and the hierarchical a2a+p2p's two levels.

:func:`a2a_degree` is the a2a level's ranks A of a plan (the estimate's too): cp for a2a, ``cp_a2a`` (default: the
cp ranks in one node) for a2a+p2p, 1 for p2p and allgather.
"""

from __future__ import annotations

import math
from typing import Any

from dse.formulas._array import maximum, where
from dse.specs.hardware import GPU_SYSTEM
from dse.specs.rule import Rule


def _gcd(a: Any, b: Any) -> Any:
    """gcd of two integers or integer-valued arrays."""
    if isinstance(a, int) and isinstance(b, int):
        return math.gcd(a, b)
    import numpy as np

    return np.gcd(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64))


def default_a2a(cp: Any, tp: Any, gpus_per_node: Any) -> Any:
    """The a2a level of a2a+p2p when ``cp_a2a`` is unset: gcd(cp, G // tp), the cp ranks that share a node (G GPUs
    per node; TE: "a2a ... (e.g., via NVLink), then ... p2p between sub-groups (e.g., via IBLink)")."""
    return _gcd(cp, maximum(gpus_per_node // tp, 1))


def a2a_degree(plan: Any, system: Any = None) -> Any:
    """Ranks of the all-to-all level A: cp (a2a), the resolved plan's ``cp_a2a`` (a2a+p2p; unresolved:
    :func:`default_a2a`), else 1."""
    kind = plan.cp_comm
    if kind == "a2a":
        return plan.cp
    if kind != "a2a+p2p":
        return 1
    if plan.cp_a2a is not None:
        return plan.cp_a2a
    g = system.node.gpus_per_node if system is not None and system.kind == GPU_SYSTEM else 1
    return default_a2a(plan.cp, plan.tp, g)


def _heads_ok(p, m, a):
    """Each TP rank's query and key/value heads divisible by a (array-safe in tp and a)."""
    return ((m.heads // p.tp) % a == 0) & (maximum(m.kv_heads // p.tp, 1) % a == 0)


def _windowed(m) -> bool:
    """The model has sliding-window or chunked-attention layers."""
    n = m.attention_layers
    return bool((n["sliding"] and m.sliding_window) or (n["chunked"] and m.attention_chunk))


def _local_below(p, m):
    """Some local layer's window (or chunk) is shorter than the sequence: it masks (array-safe in seq_len)."""
    n, s = m.attention_layers, p.seq_len
    out: Any = False
    if n["sliding"] and m.sliding_window:
        out = out | (m.sliding_window < s)
    if n["chunked"] and m.attention_chunk:
        out = out | (m.attention_chunk < s)
    return out


def _local_text(m) -> str:
    n = m.attention_layers
    parts = [f"{n['sliding']} sliding-window layers (window {m.sliding_window})" * bool(n["sliding"]),
             f"{n['chunked']} chunked-attention layers (chunk {m.attention_chunk})" * bool(n["chunked"])]
    return " and ".join(x for x in parts if x)


def _heads_message(p, m, s) -> str:
    a = a2a_degree(p, s)
    what = (f"--cp {p.cp} with --cp-comm a2a (Ulysses)" if p.cp_comm == "a2a" else
            f"--cp-comm a2a+p2p with an a2a level of {a} ranks (--cp-a2a)")
    return (f"{what} splits each TP rank's {m.heads // p.tp} query and {max(m.kv_heads // p.tp, 1)} key/value heads "
            f"over {a} ranks: both must be divisible by {a} (Transformer Engine's a2a asserts it; no K/V head "
            "replication); allowed: --cp-comm p2p or allgather, or a cp (a2a+p2p: --cp-a2a) that divides them")


CP_COMM_RULES = (
    Rule("cp_a2a is the a2a level of cp_comm a2a+p2p", ("cp_a2a", "cp_comm"),
         when=lambda p, m, s: p.cp_a2a is not None and p.cp_comm != "a2a+p2p",
         ok=lambda p, m, s: 0 * p.cp_a2a != 0,
         message=lambda p, m, s: f"--cp-a2a {p.cp_a2a} sets the a2a level of --cp-comm a2a+p2p (Megatron "
                                 f"--hierarchical-context-parallel-sizes), got --cp-comm {p.cp_comm}; allowed: "
                                 "--cp-comm a2a+p2p, or no --cp-a2a"),
    Rule("cp_a2a does not divide cp", ("cp_a2a", "cp", "cp_comm"),
         when=lambda p, m, s: p.cp_a2a is not None and p.cp_comm == "a2a+p2p",
         ok=lambda p, m, s: p.cp % p.cp_a2a == 0,
         message=lambda p, m, s: f"--cp-a2a {p.cp_a2a} must divide --cp {p.cp} (the a2a+p2p levels multiply to cp: "
                                 "Megatron asserts prod(--hierarchical-context-parallel-sizes) == "
                                 "--context-parallel-size)"),
    Rule("Ulysses cp needs the heads divisible by tp x cp", ("cp_comm", "cp", "cp_a2a", "tp", "model.heads",
                                                            "model.kv_heads"),
         when=lambda p, m, s: p.cp_comm in ("a2a", "a2a+p2p"),
         ok=lambda p, m, s: (p.cp == 1) | _heads_ok(p, m, a2a_degree(p, s)), message=_heads_message),
    Rule("the K/V ring does not run sliding-window attention", ("cp_comm", "cp", "seq_len", "model.sliding_window",
                                                                 "model.attention_chunk"),
         when=lambda p, m, s: p.cp_comm in ("p2p", "a2a+p2p") and _windowed(m),
         ok=lambda p, m, s: where(_local_below(p, m), p.cp == 1, True),
         message=lambda p, m, s: f"--cp {p.cp} with --cp-comm {p.cp_comm}: the model's {_local_text(m)} are shorter "
                                 f"than seq_len {p.seq_len}, and Transformer Engine's context parallelism runs a "
                                 "window only with cp_comm_type a2a or all_gather (attn_forward_func_with_cp asserts "
                                 "it); allowed: --cp-comm a2a or allgather, or --cp 1"),
    Rule("attention sinks need cp_comm a2a", ("cp_comm", "cp", "model.attention_sinks"),
         when=lambda p, m, s: bool(m.attention_sinks) and p.cp_comm != "a2a", ok=lambda p, m, s: p.cp == 1,
         message=lambda p, m, s: f"--cp {p.cp} with --cp-comm {p.cp_comm}: the model's attention sinks (a learned "
                                 "softmax offset, TE softmax_type learnable) run under context parallelism only with "
                                 "cp_comm_type a2a (attn_forward_func_with_cp asserts it); allowed: --cp-comm a2a, or "
                                 "--cp 1"),
)
