"""One parameter of a search space: the spec field a dotted path names, and its values parsed and checked.

A parameter is ``model`` / ``hardware`` (catalog choices), ``gpus``, or any dotted path that
``dse estimate --set`` accepts; its values are a list, a range or a continuous float range (the
syntax is in :mod:`dse.search.space`). Each value is converted and validated like the spec field it
sets (type, unit, allowed range or choices); bad input raises :class:`~dse.errors.InputError`
naming the file and the parameter. :mod:`dse.search.space` builds a whole space from these.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from dse import units
from dse.errors import InputError, suggest

RANGE_KEYS = ("values", "min", "max", "step", "log2", "num", "log", "group")
HEADS = {"model": "model", "m": "model", "hardware": "hardware", "hw": "hardware", "plan": "plan", "p": "plan"}
SPECIAL = ("model", "hardware", "gpus")


@dataclass
class Param:
    """One searched choice. ``values`` is the discrete list (None for a continuous float range)."""

    path: str                      # "plan.tp", "hardware.node.gpu", "model", "hardware", "gpus"
    values: tuple | None
    kind: str                      # "int", "float", "bool", "str", "ref" (catalog component), "spec" (model/system)
    low: float | None = None       # continuous range (values is None)
    high: float | None = None
    log: bool = False
    group: bool = False            # evaluated by Python-level grouping instead of numpy arrays
    unit: str | None = None        # dse.units kind of the field (for printing), e.g. "bytes/s"

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float")

    @property
    def discrete(self) -> bool:
        return self.values is not None

    def __len__(self) -> int:
        return len(self.values) if self.values is not None else 0


# ----------------------------------------------------------------------------- field lookup


def normalise_path(path: str, where: str) -> str:
    """``hw.node.gpu`` -> ``hardware.node.gpu``; checks the head."""
    if not isinstance(path, str) or not path.strip():
        raise InputError(f"{where}: a parameter name must be a dotted path such as plan.tp, got {path!r}")
    parts = [p for p in path.strip().split(".") if p]
    if len(parts) == 1 and parts[0] in SPECIAL:
        return parts[0]
    head = HEADS.get(parts[0])
    if head is None or len(parts) < 2:
        raise InputError(f"{where}: parameter '{path}' must be model, hardware, gpus or a dotted path starting with "
                         f"model., hardware. or plan.{suggest(parts[0], ['model', 'hardware', 'plan', 'gpus'])}")
    return ".".join([head] + parts[1:])


def field_info(path: str, where: str, hardware_classes=None):
    """(type, metadata) of the spec field a dotted path names; unknown fields raise with the nearest name.

    ``hardware.*`` paths are looked up in the hardware's spec class: a GPU system
    (:class:`~dse.specs.hardware.SystemSpec`) or a chiplet package; with several
    hardware choices a path valid for any of them is accepted.
    """
    import typing

    from dse.specs import _schema
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

    head, *rest = path.split(".")
    classes = {"model": [ModelSpec], "hardware": list(hardware_classes or [SystemSpec]), "plan": [Plan]}[head]
    error = None
    for cls in classes:
        try:
            _schema.set_path({}, rest, None, cls, f"{where}: parameter {head}")   # raises with "did you mean"
        except InputError as exc:
            error = error or exc
            continue
        tp, meta = cls, {}
        for key in rest:
            tp, _ = _schema._unwrap_optional(tp)
            if dataclasses.is_dataclass(tp):
                f, tp = _schema._fields(tp)[key]
                meta = f.metadata
            else:  # dict[str, X]
                tp = typing.get_args(tp)[1]
        tp, _ = _schema._unwrap_optional(tp)
        return tp, meta
    raise error


def hardware_classes(refs) -> list:
    """Spec classes of the hardware choices (GPU system or chiplet package)."""
    from dse.catalog import hardware_class, kind_of

    out = []
    for ref in refs:
        cls = hardware_class(kind_of(ref))
        if cls not in out:
            out.append(cls)
    return out


def _kind(tp) -> str:
    if dataclasses.is_dataclass(tp):
        return "ref"
    return {int: "int", float: "float", bool: "bool", str: "str"}.get(tp, "other")


# ----------------------------------------------------------------------------- values


def convert_value(path: str, value, tp, meta, where: str):
    """One value of a parameter, converted and checked like a spec field."""
    from dse.specs import _schema

    if dataclasses.is_dataclass(tp):
        from dse import catalog

        if not isinstance(value, str):
            raise InputError(f"{where}: {path} takes catalog names (e.g. a100-sxm-80gb), got {value!r}")
        sub = catalog.COMPONENT_DIRS.get(tp)
        if sub is None:
            raise InputError(f"{where}: {path} is not a catalog component; set its sub-fields instead")
        try:
            catalog._catalog_file(catalog.hw_dir(sub), value, f"{sub.rstrip('s')} component")
        except InputError as exc:
            raise InputError(f"{where}: {path}: {exc}") from None
        return value
    return _schema._convert(value, tp, dict(meta), f"{where}: {path}")


def _range_values(path: str, spec: dict, tp, meta, where: str):
    """Discrete values (tuple) or a continuous range (low, high, log) from a range mapping."""
    unknown = [k for k in spec if k not in RANGE_KEYS]
    if unknown:
        raise InputError(f"{where}: {path}: unknown key '{unknown[0]}'{suggest(unknown[0], RANGE_KEYS)}; "
                         f"a range takes {', '.join(RANGE_KEYS)}")
    if "values" in spec:
        extra = [k for k in spec if k not in ("values", "group")]
        if extra:
            raise InputError(f"{where}: {path}: 'values' cannot be combined with '{extra[0]}'")
        vals = spec["values"]
        return vals if isinstance(vals, list) else [vals], None
    if "min" not in spec or "max" not in spec:
        raise InputError(f"{where}: {path}: a range needs both min and max (or give a list of values)")
    kind = _kind(tp)
    if kind not in ("int", "float"):
        raise InputError(f"{where}: {path}: a min/max range needs a numeric field; {path} takes "
                         f"{'catalog names' if kind == 'ref' else kind + ' values'}: give a list")
    unit = meta.get("unit") or "count"
    lo = units.parse(spec["min"], unit, f"{where}: {path}.min")
    hi = units.parse(spec["max"], unit, f"{where}: {path}.max")
    if lo > hi:
        raise InputError(f"{where}: {path}: range with min > max ({spec['min']} > {spec['max']})")
    if spec.get("log2"):
        if lo <= 0:
            raise InputError(f"{where}: {path}: log2 range needs min > 0, got {spec['min']}")
        k0, k1 = math.ceil(math.log2(lo) - 1e-12), math.floor(math.log2(hi) + 1e-12)
        vals = [2 ** k for k in range(k0, k1 + 1)]
        if kind == "int":
            vals = [int(v) for v in vals if v >= 1]
        if not vals:
            raise InputError(f"{where}: {path}: no power of two lies between {spec['min']} and {spec['max']}")
        return vals, None
    if "num" in spec:
        num = spec["num"]
        if not isinstance(num, int) or isinstance(num, bool) or num < 1:
            raise InputError(f"{where}: {path}.num: expected a positive integer, got {num!r}")
        _check_count(num, where, path)
        if num == 1:
            return [lo], None
        if spec.get("log"):
            if lo <= 0:
                raise InputError(f"{where}: {path}: log range needs min > 0")
            vals = [lo * (hi / lo) ** (i / (num - 1)) for i in range(num)]
        else:
            vals = [lo + (hi - lo) * i / (num - 1) for i in range(num)]
        if kind == "int":
            vals = sorted({int(round(v)) for v in vals})
        return vals, None
    if "step" in spec or kind == "int":
        step = units.parse(spec.get("step", 1), unit, f"{where}: {path}.step")
        if not step > 0:
            raise InputError(f"{where}: {path}.step: must be greater than 0, got {spec.get('step')!r}")
        n = (hi - lo) / step + 1
        _check_count(n, where, path)
        n = int(math.floor((hi - lo) / step + 1e-9)) + 1
        vals = [lo + i * step for i in range(n)]
        if kind == "int":
            if any(abs(v - round(v)) > 1e-9 for v in vals):
                raise InputError(f"{where}: {path}: an integer range needs integer min and step")
            vals = [int(round(v)) for v in vals]
        return vals, None
    return None, (lo, hi, bool(spec.get("log")))


#: The most values one parameter's range lists (a million points of one axis: past it a range is a mistake, and
#: its list alone would fill the memory; a log2 range or a num has as many values as it says).
MAX_VALUES = 1_000_000


def _check_count(n: float, where: str, path: str) -> None:
    """A range's number of values, at most :data:`MAX_VALUES` (checked before the list is built)."""
    if not n <= MAX_VALUES:
        raise InputError(f"{where}: {path}: the range has {n:.3g} values, more than {MAX_VALUES:,}; give a larger "
                         "step, num: N or log2: true")


def parse_param(path: str, spec, where: str, hw_classes=None) -> Param:
    """One parameter from its YAML value (see the module docstring)."""
    path = normalise_path(path, where)
    group = False
    if isinstance(spec, dict):
        group = spec.get("group", False)
        if not isinstance(group, bool):
            raise InputError(f"{where}: {path}.group: expected true or false, got {group!r}")
    if path in ("model", "hardware"):
        vals = spec.get("values") if isinstance(spec, dict) else spec
        vals = vals if isinstance(vals, list) else [vals]
        if not vals:
            raise InputError(f"{where}: {path}: empty list of choices")
        bad = [v for v in vals if not isinstance(v, str) or not v]
        if bad:
            raise InputError(f"{where}: {path}: expected catalog names or files, got {bad[0]!r}")
        for v in vals:
            check_spec(path, v, where)
        return Param(path, tuple(dict.fromkeys(vals)), "spec", group=True)
    if path == "gpus":
        tp, meta = int, {"gt": 0}
    else:
        tp, meta = field_info(path, where, hw_classes)
        if _kind(tp) == "other":
            raise InputError(f"{where}: parameter {path} is a {getattr(tp, '__name__', tp)} field; "
                             f"name one of its numeric, string or boolean sub-fields")
    if isinstance(spec, dict):
        raw, cont = _range_values(path, spec, tp, meta, where)
    elif isinstance(spec, list):
        raw, cont = spec, None
    else:
        raw, cont = [spec], None
    kind = _kind(tp)
    if path.startswith("model."):   # a model is resolved (head_dim, ffn_hidden, ...) per value: Python level
        group = True
    if cont is not None:
        lo, hi, log = cont
        for v in (lo, hi):
            convert_value(path, v, tp, meta, where)
        if log and lo <= 0:
            raise InputError(f"{where}: {path}: log range needs min > 0")
        return Param(path, None, kind, low=lo, high=hi, log=log, group=group, unit=meta.get("unit"))
    if not raw:
        raise InputError(f"{where}: {path}: empty list of values")
    vals = [convert_value(path, v, tp, meta, where) for v in raw]
    vals = tuple(dict.fromkeys(vals))       # keep order, drop repeats
    if kind in ("bool", "str", "ref"):
        group = True
    return Param(path, vals, kind, group=group, unit=meta.get("unit"))


def check_spec(kind: str, ref: str, where: str, overrides=()) -> None:
    """Load a model or hardware system once so that a bad name or file fails now, in one line."""
    from dse.catalog import load_model
    from dse.search.evaluate import load_hardware

    try:
        (load_model if kind == "model" else load_hardware)(ref, list(overrides))
    except InputError as exc:
        raise InputError(f"{where}: {kind}: {exc}") from None
