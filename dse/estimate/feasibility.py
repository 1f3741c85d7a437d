"""Feasibility: one function that says which constraints a scenario (or an array of them) violates.

Every constraint is a :class:`Violation` record (kind, tier, needed, available): the
scalar estimate keeps the ones that are violated and prints their messages
(``violations`` in the JSON, a list of strings, plus ``violation_details``, the
structured form); the vectorised search reads the same records as masks
(``needed > available``) and counts excluded points by :attr:`Violation.reason`.
The GPU estimate (:func:`dse.estimate.verdict`), the chiplet estimate
(:func:`dse.estimate.chiplet.verdict`) and the search (:mod:`dse.search.evaluate`)
all call :func:`check`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

Num = Any   # a float/int or a numpy array of them

# kind -> the name the search counts excluded points under ("{tier}" is replaced by the tier)
REASONS = {
    "memory": "{tier} memory capacity",
    "gpus": "more GPUs than the system has",
    "accelerator_dram": "accelerator DRAM: the transfer handler's buffers exceed the CSD's DRAM",
}


@dataclasses.dataclass(slots=True)
class Violation:
    """One constraint of a scenario: ``needed`` must not exceed ``available`` (numbers or arrays).

    ``kind`` says what is short ("memory", "gpus", "accelerator_dram", ...), ``tier`` which memory
    tier or device ("gpu", "host", "storage", "sram", "dram", "csd"; None when it does not apply).
    The message is written only when asked for (scalar results); arrays never build it.
    """

    kind: str
    tier: str | None
    needed: Num
    available: Num
    text: Callable[[], str] | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def violated(self) -> Num:
        """True where the constraint is violated (an array on arrays)."""
        return self.needed > self.available

    @property
    def message(self) -> str:
        """One line for people (the string of the estimate's ``violations`` list)."""
        if self.text is not None:
            return self.text()
        return f"{self.reason}: needs {self.needed}, has {self.available}"

    @property
    def reason(self) -> str:
        """The name the search counts points excluded by this constraint under."""
        return REASONS.get(self.kind, self.kind).format(tier=self.tier)

    def as_dict(self, message: str | None = None) -> dict[str, Any]:
        """The structured form of the estimate's ``violation_details`` entries (``message``: if already written)."""
        return {"kind": self.kind, "tier": self.tier, "needed": self.needed, "available": self.available,
                "message": self.message if message is None else message, "reason": self.reason}


def _memory_text(tier: str, mem: dict[str, Any], unit: str = "node") -> Callable[[], str]:
    def text() -> str:
        from dse.units import fmt

        return (f"{tier} memory: needs {fmt(mem['total'], 'bytes')} per {'GPU' if tier == 'gpu' else unit}, "
                f"has {fmt(mem['capacity'], 'bytes')}")
    return text


def memory_checks(memory: dict[str, Any],
                  describe: Callable[[str, dict[str, Any]], Callable[[], str] | None] | None = None) -> list[Violation]:
    """One memory constraint per tier of ``memory`` that has a capacity: total <= capacity.

    ``describe(tier, mem)`` may return the message function of a tier (the chiplet path's
    breakdowns); otherwise ``"<tier> memory: needs X per GPU|node, has Y"``.
    """
    out = []
    for tier, mem in memory.items():
        if not isinstance(mem, dict) or "capacity" not in mem:
            continue
        text = describe(tier, mem) if describe is not None else None
        out.append(Violation("memory", tier, mem["total"], mem["capacity"], text or _memory_text(tier, mem)))
    return out


def gpu_count_check(gpus: Num, nodes: Num, system: Any) -> Violation:
    """The plan's GPUs must not exceed the system's."""
    def text() -> str:
        return (f"the plan needs {gpus} GPUs ({int(nodes)} nodes of {system.node.gpus_per_node}); "
                f"{system.name} has {system.gpus} ({system.nodes} nodes)")
    return Violation("gpus", None, gpus, system.nodes * system.node.gpus_per_node, text)


def check(memory: dict[str, Any], system: Any, plan: Any, *, gpus: Num | None = None, nodes: Num | None = None,
          c: dict[str, Any] | None = None,
          techniques: Iterable[Any] = (), describe: Any = None) -> list[Violation]:
    """Every constraint of a scenario, violated or not (array-safe): filter with :func:`violated`.

    ``memory``: the memory tiers (``r["memory"]``); ``gpus``/``nodes``: the plan's GPU count and
    nodes (None for a chiplet package); ``c``: the composed dict the techniques read their
    constraints from (``technique.violations(c, system, plan)``); ``describe``: see
    :func:`memory_checks`.
    """
    if describe is None and getattr(getattr(system, "node", None), "gpus_per_host", None) is not None:
        describe = lambda tier, mem: _memory_text(tier, mem, "host")   # noqa: E731  (hosts smaller than a node)
    out = memory_checks(memory, describe)
    if gpus is not None:
        out.append(gpu_count_check(gpus, nodes, system))
    if c is not None:
        for t in techniques:
            out += t.violations(c, system, plan)
    return out


def violated(checks: Iterable[Violation]) -> list[Violation]:
    """The violated ones of scalar checks (a storage tier with nothing on it never is)."""
    return [v for v in checks if bool(v.violated) and not (v.kind == "memory" and not v.needed > 0)]
