"""Scalar-or-array helpers so every formula broadcasts over numpy arrays.

Python floats take the builtin path (fast, no numpy import); anything else goes
through numpy. Formulas use these instead of ``max``/``min``/``if`` on values.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any, Union, cast

if TYPE_CHECKING:
    import numpy

_SCALAR = (int, float)

#: A number or a numpy array of numbers: what every formula accepts and returns (arrays broadcast).
#: A forward reference, so that annotating with it never imports numpy.
Num = Union[int, float, "numpy.ndarray"]


def _np() -> Any:
    np = sys.modules.get("numpy")
    if np is None:  # pragma: no cover - only when called with array-likes before numpy is imported
        import numpy as np
    return np


def maximum(a: Num, b: Num) -> Num:
    if type(a) in _SCALAR and type(b) in _SCALAR:
        return a if a >= b else b
    return cast(Num, _np().maximum(a, b))


def minimum(a: Num, b: Num) -> Num:
    if type(a) in _SCALAR and type(b) in _SCALAR:
        return a if a <= b else b
    return cast(Num, _np().minimum(a, b))


def where(cond: Any, a: Num, b: Num) -> Num:
    """``a if cond else b``, element-wise when ``cond`` is an array (a numpy bool array or a Python bool)."""
    if type(cond) is bool:
        return a if cond else b
    return cast(Num, _np().where(cond, a, b))


def ceil(a: Num) -> Num:
    if type(a) in _SCALAR:
        return float(math.ceil(a))
    return cast(Num, _np().ceil(a))


def floor(a: Num) -> Num:
    if type(a) in _SCALAR:
        return float(math.floor(a))
    return cast(Num, _np().floor(a))


def clip(a: Num, lo: Num, hi: Num) -> Num:
    return minimum(maximum(a, lo), hi)


def is_scalar(*xs: object) -> bool:
    return all(type(x) in _SCALAR for x in xs)
