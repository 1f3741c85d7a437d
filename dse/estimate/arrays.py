"""Array inputs for :func:`dse.estimate`: validate every distinct scenario, compose once over arrays.

``dse.estimate("llama2-7b", "dgx-a100-80gb", micro_batch=np.array([1, 2, 4]))`` runs
three scenarios in one call:

1. the array-valued plan fields (numpy arrays, lists or tuples of numbers) broadcast
   together to one shape ``S``; only numeric fields may be arrays (strings and booleans
   choose code paths, so they stay scalars: call once per choice);
2. each *distinct* combination of their values is validated exactly as a scalar call
   would be (schema ranges, :func:`~dse.specs.plan.check_plan` and the technique
   checks), so a bad value raises the same one-line :class:`~dse.errors.InputError`,
   naming the field and the value, with the scenario it came from;
3. the resolved plans are stacked back into one plan whose varying fields are arrays
   of shape ``S``, and the numbers are composed once (every formula broadcasts);
4. every numeric leaf of the result becomes an array of shape ``S``; the verdict
   (``feasible``, ``violations``, ``bottleneck``) is decided per distinct scenario with
   the scalar rules and returned as arrays too (bool, object lists, str).

Strings that describe the specs (names, choices) stay scalars.

Hardware fields may be arrays too, through ``overrides``: a list value for a numeric
``hardware.`` path (``("hardware.node.gpu.hbm_bandwidth", [1.5e12, 2e12, 3.35e12])``, or
``"hardware.node.gpu.hbm_bandwidth=[1.5 TB/s, 2 TB/s]"`` with units) broadcasts with the plan
arrays; each distinct hardware value is loaded and validated like a scalar ``--set``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from dse.errors import InputError
from dse.specs import _schema

if TYPE_CHECKING:
    import numpy as np

    from dse.estimate.aliases import Hardware, Result
    from dse.estimate.trace import Trace
    from dse.specs.model import ModelSpec

_PLAIN = (int, float, str, bool, type(None))   # scalars: never arrays (checked first, without hasattr)
_PLAIN_TYPES = frozenset(_PLAIN)
Shape = tuple[int, ...]
Assignments = list[tuple[list[str], Any]]     # --set assignments as (path, value)


def _is_array(value: object) -> bool:
    if type(value) in _PLAIN:
        return False
    if isinstance(value, (list, tuple)):
        return True
    return hasattr(value, "__array__") and getattr(value, "ndim", 0) > 0


def split_overrides(overrides: Iterable[Any]) -> tuple[Assignments, dict[str, list[Any]]]:
    """``overrides`` as (scalar overrides, {hardware path: list of values}): list values of ``hardware.`` paths.

    Model fields shape the code paths (heads, layers, FFN type), so they stay scalars: one call per model.
    """
    scalar: Assignments = []
    arrays: dict[str, list[Any]] = {}
    for item in overrides:
        path, value = _schema.parse_assignment(item) if isinstance(item, str) else item
        path = path.split(".") if isinstance(path, str) else list(path)
        if _is_array(value):
            if path[0] not in ("hardware", "hw"):
                raise InputError(f"--set {'.'.join(path)}: array values are allowed for hardware fields and "
                                 f"numeric plan fields only; call dse.estimate once per model")
            values = list(value.tolist() if hasattr(value, "tolist") else value)  # type: ignore[arg-type]
            if not values:
                raise InputError(f"--set {'.'.join(path)}: the array is empty")
            arrays[".".join(["hardware", *path[1:]])] = values
        else:
            scalar.append((path, value))
    return scalar, arrays


def has_arrays(plan_data: dict[str, Any]) -> bool:
    """Does any plan field hold an array (numpy array, list or tuple) rather than a scalar?"""
    if set(map(type, plan_data.values())) <= _PLAIN_TYPES:   # the common case, without a call per field
        return False
    return any(_is_array(v) for v in plan_data.values())


def _numeric_fields() -> set[str]:
    import typing

    from dse.specs import _schema
    from dse.specs.plan import Plan

    out: set[str] = set()
    for name in _schema.field_names(Plan):
        tp = typing.get_type_hints(Plan)[name]
        tp, _ = _schema._unwrap_optional(tp)
        if tp in (int, float):
            out.add(name)
    return out


def _arrays(plan_data: dict[str, Any]) -> tuple[dict[str, np.ndarray], Shape]:
    """The array-valued fields as numpy arrays, checked: numeric fields, numeric values, non-empty."""
    import numpy as np

    numeric = _numeric_fields()
    out: dict[str, np.ndarray] = {}
    for name, value in plan_data.items():
        if not _is_array(value):
            continue
        arr = np.asarray(value)
        if name not in numeric:
            raise InputError(f"plan.{name}: array values are allowed for numeric fields only (got "
                             f"{arr.tolist()!r}); call dse.estimate once per choice")
        if arr.size == 0:
            raise InputError(f"plan.{name}: the array is empty")
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
            raise InputError(f"plan.{name}: array values must be numbers, got {arr.tolist()!r}")
        out[name] = arr
    try:
        shape = np.broadcast_shapes(*(a.shape for a in out.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {a.shape}" for k, a in out.items())
        raise InputError(f"plan: the array inputs do not broadcast together: {shapes}") from None
    return out, shape


def _scenarios(arrays: dict[str, np.ndarray], shape: Shape
               ) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray]:
    """Distinct combinations of the array values: (list of {field: python scalar}, first index, inverse)."""
    import numpy as np

    names = list(arrays)
    codes: list[np.ndarray] = []
    uniques: list[np.ndarray] = []
    for name in names:
        u, inv = np.unique(np.broadcast_to(arrays[name], shape).reshape(-1), return_inverse=True)
        uniques.append(u)
        codes.append(inv.reshape(-1))
    rows, first, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_index=True, return_inverse=True)
    combos = [{n: uniques[j][row[j]].item() for j, n in enumerate(names)} for row in rows]
    return combos, first, inverse.reshape(-1)


def _element(obj: Any, i: int) -> Any:
    """The scalar result of scenario ``i`` (flat index) from a result whose numeric leaves have shape S."""
    if isinstance(obj, dict):
        return {k: _element(v, i) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_element(v, i) for v in obj]
    if hasattr(obj, "ndim") and hasattr(obj, "reshape"):
        return obj.reshape(-1)[i].item()
    return obj


def _broadcast(obj: Any, shape: Shape) -> Any:
    """Every numeric leaf (Python or numpy number, numpy bool array) as an array of ``shape``."""
    import numpy as np

    if isinstance(obj, dict):
        return {k: _broadcast(v, shape) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_broadcast(v, shape) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (int, float)) or isinstance(obj, (np.ndarray, np.generic)):
        arr = np.asarray(obj)
        if arr.dtype.kind in "biuf":
            return np.broadcast_to(arr, shape).copy()
    return obj


def _hardware_arrays(hw_arrays: dict[str, list[Any]], shape_of_plan: Shape) -> tuple[dict[str, np.ndarray], Shape]:
    """Hardware list values as arrays of value indices (the values may be strings with units), and the
    broadcast shape with the plan arrays' shape."""
    import numpy as np

    idx = {path: np.arange(len(values)) for path, values in hw_arrays.items()}
    try:
        shape = np.broadcast_shapes(shape_of_plan, *(a.shape for a in idx.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {a.shape}" for k, a in idx.items())
        raise InputError(f"the array inputs do not broadcast together: plan {shape_of_plan}, {shapes}") from None
    return idx, shape


def _get_path(obj: Any, path: list[str]) -> Any:
    for key in path:
        obj = getattr(obj, key)
    return obj


def _vector_system(systems: Sequence[Any], inverse: np.ndarray, shape: Shape) -> Any:
    """One spec tree whose leaves that differ between the validated ``systems`` are arrays of ``shape``."""
    import numpy as np

    first = systems[0]
    if not dataclasses.is_dataclass(first):
        values = list(systems)
        if any(v != values[0] for v in values[1:]):
            return np.asarray(values, dtype=float)[inverse].reshape(shape)
        return first
    changes = {}
    for f in dataclasses.fields(first):
        subs = [getattr(sy, f.name) for sy in systems]
        if any(sub != subs[0] for sub in subs[1:]):
            changes[f.name] = _vector_system(subs, inverse, shape)
    return dataclasses.replace(first, **changes) if changes else first  # type: ignore[type-var]


def estimate(model: ModelSpec, system: Hardware, plan_data: dict[str, Any], *, trace: Trace | None = None,
             hw_arrays: dict[str, list[Any]] | None = None,
             load_hw: Callable[[list[tuple[list[str], Any]]], Hardware] | None = None) -> Result:
    """The array estimate of resolved ``model`` and ``system`` for plan fields (and hardware fields) holding arrays.

    ``hw_arrays`` ({hardware path: values}) with ``load_hw(assignments)`` -> the validated system for one
    combination of hardware values.
    """
    import numpy as np

    from dse.estimate import make_plan
    from dse.estimate.backends import backend
    from dse.specs.plan import Plan

    hw_arrays = hw_arrays or {}
    arrays, shape = _arrays(plan_data) if has_arrays(plan_data) else ({}, ())
    hw_idx, shape = _hardware_arrays(hw_arrays, shape)
    keyed = {**arrays, **{f"@{p}": a for p, a in hw_idx.items()}}
    combos, first, inverse = _scenarios(keyed, shape)
    plans, systems = [], []
    for combo in combos:
        plan_combo = {k: v for k, v in combo.items() if not k.startswith("@")}
        hw_combo = [(p[1:].split(".")[1:], hw_arrays[p[1:]][v]) for p, v in combo.items() if p.startswith("@")]
        try:
            if not hw_combo:
                sys_j = system
            elif load_hw is None:
                raise TypeError("dse.estimate.arrays.estimate: hw_arrays needs load_hw")
            else:
                sys_j = load_hw(hw_combo)
            plans.append(make_plan(model, sys_j, {**plan_data, **plan_combo}))
            systems.append(sys_j)
        except InputError as exc:
            where = ", ".join(f"{k}={v!r}" for k, v in plan_combo.items())
            where = ", ".join(filter(None, [where] + [f"hardware.{'.'.join(p)}={v!r}" for p, v in hw_combo]))
            raise InputError(f"{exc} (array scenario {where})") from None
    fields = {}
    for f in dataclasses.fields(Plan):
        values = [getattr(p, f.name) for p in plans]
        if any(v != values[0] for v in values[1:]):
            fields[f.name] = np.asarray(values)[inverse].reshape(shape)
    vplan = dataclasses.replace(plans[0], **fields)
    system = _vector_system(systems, inverse, shape) if hw_arrays else system
    hw = backend(system)
    r0, extra = hw.numbers(model, system, vplan, trace=trace)
    r: Result = _broadcast(r0, shape)   # the same sections, every numeric leaf an array of the shape
    feasible = np.empty(len(combos), dtype=bool)
    violations = np.empty(len(combos), dtype=object)
    details = np.empty(len(combos), dtype=object)
    bottleneck = np.empty(len(combos), dtype=object)
    for j, (plan, i) in enumerate(zip(plans, first)):
        view = _element(r, int(i))
        feasible[j], violations[j], bottleneck[j] = hw.verdict(view, systems[j], plan, extra)
        details[j] = view["violation_details"]
    r["violation_details"] = details[inverse].reshape(shape)
    r["feasible"] = feasible[inverse].reshape(shape)
    r["violations"] = violations[inverse].reshape(shape)
    r["bottleneck"] = bottleneck[inverse].reshape(shape)
    return r
