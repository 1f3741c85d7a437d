"""The Technique protocol: how a technique plugs into an estimate.

A technique (storage offload, activation offload, drive wear, economics) changes the
composed base estimate ``c`` (:func:`dse.estimate.base.compose`) of a GPU system (a chiplet
package has no techniques: :mod:`dse.estimate.backends`) in two halves, array-safe
(numeric plan and hardware fields may be numpy arrays; only strings and booleans branch):

1. ``apply_memory(c, model, system, plan, F)``: the memory per tier (``c["memory"]``) from the
   typed base terms (``c["terms"]``, :class:`~dse.estimate.terms.BaseTerms`) and the specs —
   no time. It returns a typed state (or None) that its ``apply_time`` receives; the state
   has a ``map`` method (a :mod:`dse.estimate.terms` dataclass) so that the search can keep
   only the points that fit. ``memory`` says what the tiers are after it: ``"exact"`` (final)
   or ``"floor"`` (no tier's total can grow smaller later: ``apply_time`` may refine them, the
   search checks memory again after time).
2. ``apply_time(c, state, model, system, plan, F)``: time, traffic and the technique's report
   section(s) (``sections``), after :func:`~dse.estimate.base.compose_time`.

Order. The estimate runs every active technique's memory half (registry order), then the base
time, then every time half (registry order). A technique's ``after`` names the techniques whose
results it reads (e.g. activation offload shares the PCIe link and the drives with the traffic
storage offload put there; drive wear sums the writes of both; economics prices the final
iteration): :func:`check_order` verifies the registry respects them. Shared quantities are
explicit, never keys one technique leaves for another: the drives a plan uses come from
:func:`dse.estimate.terms.drive_use`; drive writes are typed contributions in
``c["terms"].drive_writes``.

``violations(c, system, plan)`` returns the technique's constraints as
:class:`~dse.estimate.feasibility.Violation` records (needed vs available, arrays allowed);
:func:`dse.estimate.feasibility.check` gathers them with the base's. ``report`` maps each of the
technique's result sections to the ``"module:function(con, result)"`` that renders it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from dse.estimate.aliases import Formulas, Result
    from dse.estimate.feasibility import Violation
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

from dse.estimate import base


@runtime_checkable
class Technique(Protocol):
    """What :data:`dse.estimate.TECHNIQUES` holds (see the module docstring)."""

    # Read-only members (a class attribute of a technique provides each one).
    @property
    def name(self) -> str:
        """Registry name."""

    @property
    def sections(self) -> tuple[str, ...]:
        """Keys it adds to the result."""

    @property
    def after(self) -> tuple[str, ...]:
        """Techniques it reads the results of (run before it)."""

    @property
    def memory(self) -> str:
        """``"exact"`` or ``"floor"``: the memory tiers after ``apply_memory`` (``"unknown"``: only after time)."""

    @property
    def report(self) -> dict[str, str]:
        """Result section -> ``"module:function(con, result)"`` rendering it."""

    def active(self, plan: Plan) -> bool:
        """Whether this plan's string/bool fields make the technique change the estimate."""

    def apply_memory(self, c: Result, model: ModelSpec, system: SystemSpec, plan: Plan,
                     F: Formulas | None = None) -> Any:
        """Memory per tier (no time); returns the state ``apply_time`` receives."""

    def apply_time(self, c: Result, state: Any, model: ModelSpec, system: SystemSpec, plan: Plan,
                   F: Formulas | None = None) -> None:
        """Time, traffic and the report section(s), after the base time."""

    def violations(self, c: Result, system: SystemSpec, plan: Plan) -> list[Violation]:
        """The technique's constraints (:class:`~dse.estimate.feasibility.Violation`), array-safe."""


class TechniqueBase(abc.ABC):
    """Defaults for a :class:`Technique`: no constraints, no report, active for every plan, exact memory."""

    name = ""
    sections: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    memory = "exact"
    report: ClassVar[dict[str, str]] = {}

    def active(self, plan: Plan) -> bool:
        return True

    def apply_memory(self, c: Result, model: ModelSpec, system: SystemSpec, plan: Plan,
                     F: Formulas | None = None) -> Any:
        return None

    def violations(self, c: Result, system: SystemSpec, plan: Plan) -> list[Violation]:
        return []

    @abc.abstractmethod
    def apply_time(self, c: Result, state: Any, model: ModelSpec, system: SystemSpec, plan: Plan,
                   F: Formulas | None = None) -> None:
        """Time, traffic and the report section(s): every technique defines it (a class without it cannot be made)."""

    def apply(self, c: Result, model: ModelSpec, system: SystemSpec, plan: Plan, F: Formulas | None = None) -> None:
        """Both halves on a fully composed estimate (what ``dse estimate`` does for this technique)."""
        if self.active(plan):
            self.apply_time(c, self.apply_memory(c, model, system, plan, F), model, system, plan, F)

    def __repr__(self) -> str:
        return f"<technique {self.name}>"


class ModuleTechnique(TechniqueBase):
    """A technique written as a module with one ``apply(c, model, system, plan, F)`` (the old form).

    Its memory is known only after time (``memory = "unknown"``), so the search composes such
    points in full before it checks memory (same results, no pruning).
    """

    memory = "unknown"

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.name = module.__name__.rsplit(".", 1)[-1]

    def active(self, plan: Plan) -> bool:
        check = getattr(self.module, "active", None)
        return True if check is None else bool(check(plan))

    def apply_time(self, c: Result, state: Any, model: ModelSpec, system: SystemSpec, plan: Plan,
                   F: Formulas | None = None) -> None:
        self.module.apply(c, model, system, plan, F)

    def violations(self, c: Result, system: SystemSpec, plan: Plan) -> list[Violation]:
        """The module's ``violations(r, system, plan) -> list[str]`` (scalar results only), as records."""
        from dse.estimate.feasibility import Violation

        check = getattr(self.module, "violations", None)
        if check is None:
            return []
        return [Violation(self.name, None, 1, 0, (lambda s=s: s)) for s in check(c, system, plan)]  # type: ignore[misc]


def check_order(techniques: Iterable[Technique]) -> None:
    """Raise ValueError if a technique comes before one it names in ``after``."""
    seen: set[str] = set()
    names = {t.name for t in techniques}
    for t in techniques:
        missing = [a for a in t.after if a in names and a not in seen]
        if missing:
            raise ValueError(f"technique {t.name} must come after {', '.join(missing)}")
        seen.add(t.name)


def compose(model: ModelSpec, system: SystemSpec, plan: Plan, techniques: Sequence[Technique],
            F: Formulas | None = None) -> Result:
    """The base estimate with every active technique: memory halves, base time, time halves (registry order).

    What ``dse estimate`` computes; the search does the same in two steps with the points that do
    not fit in memory dropped in between (:mod:`dse.search.evaluate`).
    """
    c = base.compose_memory(model, system, plan, F)
    active = [t for t in techniques if t.active(plan)]
    states = [t.apply_memory(c, model, system, plan, F) for t in active]
    base.compose_time(c, model, system, plan, F)
    for t, state in zip(active, states):
        t.apply_time(c, state, model, system, plan, F)
    return c
