"""A memo of the parts of a scalar estimate that depend on one spec and a few plan integers only.

Parameter counts (:func:`dse.estimate.base.parameters`: the model and tp, pp, virtual stages) and link
bandwidths (:func:`dse.estimate.base.links`: the system and tp, dp): the search and the validation suites
meet the same model, system and degrees again and again. A key holds the part's name, the spec's id, the
integers and every formula the part calls, so that a replaced formula (a test, the reference page's
perturbation) is never served a stale value; a hit must be for the same spec object. Numpy values and
traced formulas are never kept (the callers check :func:`ints` and the formula modules).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dse.estimate.aliases import Section

# key (part, spec id, integers, formulas called) -> (spec, value)
_PARTS: dict[tuple[Any, ...], tuple[object, Section]] = {}


def ints(*xs: object) -> bool:
    """Are these plan fields Python ints (not arrays, not numpy scalars whose results keep their type)?"""
    return set(map(type, xs)) == {int}


def remembered(key: tuple[Any, ...], spec: object, make: Callable[[], Section]) -> Section:
    """The dict ``make()`` returns, kept under ``key`` for ``spec``: shared, so read it, do not change it."""
    hit = _PARTS.get(key)
    if hit is None or hit[0] is not spec:
        if len(_PARTS) >= 512:   # bounded
            _PARTS.clear()
        hit = _PARTS[key] = (spec, make())
    return hit[1]
