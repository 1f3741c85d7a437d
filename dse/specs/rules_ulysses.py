"""The plan rule of DeepSpeed-Ulysses context parallelism (``plan.cp_comm`` a2a: docs/long-context.md), part of
:data:`dse.specs.rules.CONTEXT_RULES`: each TP rank's query and key/value heads split evenly over the cp ranks."""

from __future__ import annotations

from dse.formulas._array import maximum
from dse.specs.rule import Rule


def _heads_ok(p, m):
    """Each TP rank's query and key/value heads divisible by cp (array-safe in tp and cp)."""
    return ((m.heads // p.tp) % p.cp == 0) & (maximum(m.kv_heads // p.tp, 1) % p.cp == 0)


ULYSSES_RULES = (
    Rule("Ulysses cp needs the heads divisible by tp x cp", ("cp_comm", "cp", "tp", "model.heads", "model.kv_heads"),
         when=lambda p, m, s: p.cp_comm == "a2a", ok=lambda p, m, s: (p.cp == 1) | _heads_ok(p, m),
         message=lambda p, m, s: f"--cp {p.cp} with plan.cp_comm a2a (Ulysses) splits each TP rank's "
                                 f"{m.heads // p.tp} query and {max(m.kv_heads // p.tp, 1)} key/value heads over the "
                                 "cp ranks: both must be divisible by cp (Transformer Engine's a2a asserts it; no K/V "
                                 "head replication); allowed: plan.cp_comm p2p, or a cp that divides them"),
)
