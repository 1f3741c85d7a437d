"""Names of the types that cross the estimate's seams, for annotations (mypy is strict on ``dse.estimate``).

- :data:`Result`: an estimate's dictionary (what ``dse estimate --json`` prints) and the composition
  ``c`` it is built from (:func:`dse.estimate.base.compose`): sections of numbers, arrays and lists;
- :data:`FormulaModule`: one formulas module (``O``, ``NS``, ...) or its :class:`~dse.estimate.trace.Tracer`;
- :data:`Formulas`: ``F``, the formulas modules an estimate calls, by name (``"transformer"``, ...),
  or :class:`~dse.estimate.trace.Tracer` stand-ins that record each call (``--explain``); ``None``
  where the estimate takes the modules themselves;
- :data:`Hardware`: a hardware spec of either kind, a GPU system or a chiplet package
  (:mod:`dse.estimate.backends`);
- :data:`Num`: a number or a numpy array of them (numeric plan and hardware fields may be arrays);
- :data:`Section`: one group of named numbers (or arrays) of the composition (``c["time"]``, the memory of
  a tier, the terms of one step).

The spec classes are imported for the type checker only: importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from dse.estimate.trace import Tracer
    from dse.specs.chiplet import ChipletPackageSpec
    from dse.specs.hardware import SystemSpec

Num: TypeAlias = Any
Result: TypeAlias = dict[str, Any]
Section: TypeAlias = dict[str, Any]
FormulaModule: TypeAlias = "ModuleType | Tracer"
Formulas: TypeAlias = "Mapping[str, ModuleType | Tracer]"
Hardware: TypeAlias = "SystemSpec | ChipletPackageSpec"
