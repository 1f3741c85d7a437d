"""Hardware backends: what an estimate does that depends on the kind of hardware, picked once.

A hardware spec says what it is in its ``kind:`` field (:data:`dse.specs.hardware.HARDWARE_KINDS`):
``gpu-system`` (:class:`~dse.specs.hardware.SystemSpec`: nodes of GPUs, host, links, drives) or
``chiplet-package`` (:class:`~dse.specs.chiplet.ChipletPackageSpec`: a mesh of dies with SRAM,
NoP links and DRAM). :func:`backend` maps that kind to one :class:`Backend`, and everything
kind-specific goes through it: the estimate's numbers and verdict (:func:`dse.estimate.run`,
:mod:`dse.estimate.arrays`), the plan checks (:func:`dse.estimate.make_plan`) and rules, and
what the search needs beyond them (:mod:`dse.search.evaluate`).

Adding a hardware kind: a spec class with a ``kind`` field, its directory in
:data:`dse.catalog.KIND_DIRS` and :func:`dse.catalog.hardware_class`, and one class here
registered in :data:`BACKENDS`.

>>> from dse.catalog import load_hardware
>>> backend(load_hardware("dgx-a100-80gb")).kind, backend(load_hardware("chiplet-train-8x8")).kind
('gpu-system', 'chiplet-package')
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import dse.estimate as _gpu  # the GPU estimate (numbers, verdict): a package that imports this module
from dse.specs import rules as _rules
from dse.specs.hardware import CHIPLET_PACKAGE, GPU_SYSTEM, HARDWARE_KINDS

if TYPE_CHECKING:
    from dse.estimate.aliases import Hardware, Num, Result
    from dse.estimate.trace import Trace
    from dse.specs.chiplet import ChipletPackageSpec
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan
    from dse.specs.rules import Rule


class Backend(Protocol):
    """The per-kind operations of an estimate (array-safe where the plan's numeric fields are arrays)."""

    kind: str
    techniques: bool     # the technique modules of dse.estimate (offload, activation offload, economics) apply
    rules: tuple[Rule, ...]   # the plan-rule table of this kind (dse.specs.rules), read by check_plan and plan_rules

    def numbers(self, model: ModelSpec, system: Any, plan: Plan, *, trace: Trace | None = None
                ) -> tuple[Result, list[str]]:
        """Every number of the estimate without the verdict, and the violations found while composing."""

    def verdict(self, r: Result, system: Any, plan: Plan, extra: Iterable[str] = ()) -> tuple[bool, list[str], str]:
        """Feasibility, violated constraints and bottleneck sentence of one scalar result."""

    def check_plan(self, plan: Plan, model: ModelSpec, system: Hardware) -> None:
        """Raise :class:`~dse.errors.InputError` for a resolved plan that cannot run on this hardware at all."""

    def plan_rules(self, plan: Plan, model: ModelSpec, system: Hardware) -> dict[str, Num]:
        """:meth:`check_plan` as ``{rule: ok}``, array-safe (the search's exclusion masks)."""

    def limits(self, c: Result, system: Any) -> list[tuple[str, Num]]:
        """Limits of the hardware besides memory, as ``(reason, exceeded)`` (a bool or bool array) for the search."""


class _RuleTable:
    """The two faces of a backend's plan-rule table (:mod:`dse.specs.rules`)."""

    rules: tuple[Rule, ...] = ()

    def check_plan(self, plan: Plan, model: ModelSpec, system: Hardware) -> None:
        _rules.check(self.rules, plan, model, system)

    def plan_rules(self, plan: Plan, model: ModelSpec, system: Hardware) -> dict[str, Num]:
        return _rules.holds(self.rules, plan, model, system)


class GPUSystem(_RuleTable):
    """``kind: gpu-system``: :func:`dse.estimate.numbers` (base composition + techniques) and its verdict."""

    kind = GPU_SYSTEM
    techniques = True
    rules: tuple[Rule, ...] = _rules.GPU_SYSTEM_RULES

    def numbers(self, model: ModelSpec, system: SystemSpec, plan: Plan, *, trace: Trace | None = None
                ) -> tuple[Result, list[str]]:
        return _gpu.numbers(model, system, plan, trace=trace)

    def verdict(self, r: Result, system: SystemSpec, plan: Plan, extra: Iterable[str] = ()
                ) -> tuple[bool, list[str], str]:
        return _gpu.verdict(r, system, plan, extra)


    def limits(self, c: Result, system: SystemSpec) -> list[tuple[str, Num]]:
        from dse.estimate.feasibility import gpu_count_check

        v = gpu_count_check(c["gpus"], c["nodes"], system)
        return [(v.reason, v.violated)]


class ChipletPackage(_RuleTable):
    """``kind: chiplet-package``: :mod:`dse.estimate.chiplet` (no GPU techniques apply)."""

    kind = CHIPLET_PACKAGE
    techniques = False
    rules: tuple[Rule, ...] = _rules.CHIPLET_PACKAGE_RULES

    def numbers(self, model: ModelSpec, system: ChipletPackageSpec, plan: Plan, *, trace: Trace | None = None
                ) -> tuple[Result, list[str]]:
        from dse.estimate import chiplet

        return chiplet.numbers(model, system, plan, trace=trace), []

    def verdict(self, r: Result, system: ChipletPackageSpec, plan: Plan, extra: Iterable[str] = ()
                ) -> tuple[bool, list[str], str]:
        from dse.estimate import chiplet

        return chiplet.verdict(r, system, plan)


    def limits(self, c: Result, system: ChipletPackageSpec) -> list[tuple[str, Num]]:
        return []


BACKENDS: dict[str, Backend] = {b.kind: b for b in (GPUSystem(), ChipletPackage())}
assert tuple(BACKENDS) == HARDWARE_KINDS


def backend(system: Hardware) -> Backend:
    """The backend of a hardware spec, by its ``kind``."""
    return BACKENDS[system.kind]


def gpu_system(system: Hardware, what: str) -> SystemSpec:
    """``system`` if it is a GPU system; else the one-line input error saying that ``what`` (a command) needs one."""
    from dse.errors import InputError
    from dse.specs.hardware import SystemSpec

    if isinstance(system, SystemSpec):
        return system
    raise InputError(f"--hw {system.name}: {what} needs a GPU system (kind: {GPU_SYSTEM}); {system.name} is a "
                     f"{system.kind} (see `dse list hardware`)")
