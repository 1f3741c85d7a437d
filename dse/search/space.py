"""Search spaces: the hardware and plan choices to try, from a YAML file or from flags.

A space names a model and a hardware system (each one name or a list of names),
fixed overrides, and *parameters*. A parameter is any dotted path that
``dse estimate --set`` accepts (``model.*``, ``hardware.*``, ``plan.*``), plus
``model`` / ``hardware`` (catalog choices) and ``gpus`` (total GPUs: the plan's
``dp`` becomes ``gpus / (tp x pp)``). New plan options and hardware fields are
searchable as soon as the spec classes have them; nothing here lists fields.

Values are given as

- a list ``[1, 2, 4]`` or a single value;
- a range ``{min: 1, max: 64, step: 1}`` (ints step 1 by default);
- powers of two ``{min: 1, max: 64, log2: true}``;
- ``{min: 0.1, max: 0.9, num: 9}`` (evenly spaced floats);
- ``{min: 0.1, max: 0.9}`` for a float: continuous (optuna only; add ``log: true``
  to sample it on a log scale).

Readable units work wherever the field has one (``[400 Gb/s, 800 Gb/s]``,
``{min: 100 GB/s, max: 900 GB/s, num: 5}``). Every value is validated against
its field (type, unit, allowed range or choices) when the space is read; bad
input raises :class:`~dse.errors.InputError` naming the file and the parameter.

Example (``examples/spaces/``)::

    name: llama2-70b-parallelism
    model: llama2-70b
    hardware: a100-cluster-800g
    fixed: {plan.global_batch: 1024, plan.seq_len: 4096}
    parameters:
      gpus: 256
      plan.tp: [1, 2, 4, 8]
      plan.pp: {min: 1, max: 64, log2: true}
      plan.recompute: [none, selective, full]
    objectives: [time]
    constraints: {budget: $10M}
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field

from dse import units
from dse.errors import InputError, suggest
from dse.search.objectives import parse_constraints, parse_objectives

TOP_KEYS = ("name", "description", "model", "hardware", "fixed", "parameters", "objectives", "constraints",
            "engine", "trials", "seed", "top")
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


@dataclass
class Space:
    name: str
    source: str                    # file path or "flags"
    model: str
    hardware: str
    fixed: list = field(default_factory=list)          # [(dotted path, value)]
    params: list = field(default_factory=list)         # [Param]
    objectives: list = field(default_factory=list)     # [Objective]
    constraints: list = field(default_factory=list)    # [Constraint]
    defaults: dict = field(default_factory=dict)       # engine, trials, seed, top from the file
    description: str = ""

    @property
    def discrete(self) -> bool:
        return all(p.discrete for p in self.params)

    @property
    def size(self) -> int:
        """Points in the full grid (before invalid combinations are excluded)."""
        return math.prod(len(p) for p in self.params) if self.discrete else 0

    def param(self, path: str) -> Param | None:
        return next((p for p in self.params if p.path == path), None)

    def digest(self) -> str:
        """Short hash of everything that defines the search (studies check it when resumed)."""
        data = {"model": self.model, "hardware": self.hardware, "fixed": [(p, repr(v)) for p, v in self.fixed],
                "params": [(p.path, [repr(v) for v in p.values] if p.values is not None else [p.low, p.high, p.log])
                           for p in self.params],
                "objectives": [(o.metric, o.direction) for o in self.objectives],
                "constraints": [(c.metric, c.sense, c.bound) for c in self.constraints]}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


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


def _convert(path: str, value, tp, meta, where: str):
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
        n = int(math.floor((hi - lo) / step + 1e-9)) + 1
        vals = [lo + i * step for i in range(n)]
        if kind == "int":
            if any(abs(v - round(v)) > 1e-9 for v in vals):
                raise InputError(f"{where}: {path}: an integer range needs integer min and step")
            vals = [int(round(v)) for v in vals]
        return vals, None
    return None, (lo, hi, bool(spec.get("log")))


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
            _check_spec(path, v, where)
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
            _convert(path, v, tp, meta, where)
        if log and lo <= 0:
            raise InputError(f"{where}: {path}: log range needs min > 0")
        return Param(path, None, kind, low=lo, high=hi, log=log, group=group, unit=meta.get("unit"))
    if not raw:
        raise InputError(f"{where}: {path}: empty list of values")
    vals = [_convert(path, v, tp, meta, where) for v in raw]
    vals = tuple(dict.fromkeys(vals))       # keep order, drop repeats
    if kind in ("bool", "str", "ref"):
        group = True
    return Param(path, vals, kind, group=group, unit=meta.get("unit"))


def _check_spec(kind: str, ref: str, where: str, overrides=()) -> None:
    """Load a model or hardware system once so that a bad name or file fails now, in one line."""
    from dse.catalog import load_model
    from dse.search.evaluate import load_hardware

    try:
        (load_model if kind == "model" else load_hardware)(ref, list(overrides))
    except InputError as exc:
        raise InputError(f"{where}: {kind}: {exc}") from None


# ----------------------------------------------------------------------------- the space


def from_dict(data: dict, source: str, *, model: str | None = None, hardware: str | None = None) -> Space:
    """Build a :class:`Space` from a parsed YAML mapping. ``source`` names the file in errors."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping with parameters, objectives, ... at the top level")
    unknown = [k for k in data if k not in TOP_KEYS]
    if unknown:
        raise InputError(f"{source}: unknown key '{unknown[0]}'{suggest(unknown[0], TOP_KEYS)}; "
                         f"a space file takes {', '.join(TOP_KEYS)}")
    params: list[Param] = []
    model_v = model or data.get("model")
    hw_v = hardware or data.get("hardware")
    if not model_v:
        raise InputError(f"{source}: missing 'model' (a catalog name, a file, or a list of them)")
    if not hw_v:
        raise InputError(f"{source}: missing 'hardware' (a system catalog name, a file, or a list of them)")
    for key, v in (("model", model_v), ("hardware", hw_v)):
        if isinstance(v, (list, dict)):
            params.append(parse_param(key, v, source))
        elif not isinstance(v, str):
            raise InputError(f"{source}: {key}: expected a catalog name or a list of names, got {v!r}")
        else:
            _check_spec(key, v, source)
    hw_refs = [p.values for p in params if p.path == "hardware"]
    hw_classes = hardware_classes(hw_refs[0] if hw_refs else [hw_v])
    fixed_raw = data.get("fixed") or {}
    if not isinstance(fixed_raw, dict):
        raise InputError(f"{source}: fixed: expected a mapping of dotted.path: value")
    fixed = []
    for path, value in fixed_raw.items():
        path = normalise_path(str(path), f"{source}: fixed")
        if path in SPECIAL:
            raise InputError(f"{source}: fixed: {path} belongs at the top level (model, hardware) or in parameters (gpus)")
        tp, meta = field_info(path, f"{source}: fixed", hw_classes)
        fixed.append((path, _convert(path, value, tp, meta, f"{source}: fixed")))
    raw = data.get("parameters")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(f"{source}: parameters: expected a mapping of dotted.path: values")
    for path, spec in raw.items():
        p = parse_param(str(path), spec, f"{source}: parameters", hw_classes)
        if p.path in ("model", "hardware"):
            raise InputError(f"{source}: parameters: give {p.path} choices at the top level ({p.path}: [a, b])")
        if any(q.path == p.path for q in params):
            raise InputError(f"{source}: parameters: {p.path} is given twice")
        if any(f == p.path for f, _ in fixed):
            raise InputError(f"{source}: parameters: {p.path} is also in fixed; keep one")
        params.append(p)
    paths = {p.path for p in params} | {f for f, _ in fixed}
    if "gpus" in paths and "plan.dp" in paths:
        raise InputError(f"{source}: give either gpus (dp = gpus / (tp x pp)) or plan.dp, not both")
    if not params:
        raise InputError(f"{source}: empty space: no parameters to search (add a parameters: mapping)")
    objectives = parse_objectives(data.get("objectives", ["time"]), source)
    constraints = parse_constraints(data.get("constraints") or {}, source)
    defaults = {}
    for key, kind in (("engine", str), ("trials", int), ("seed", int), ("top", int)):
        if key in data:
            v = data[key]
            if not isinstance(v, kind) or isinstance(v, bool):
                raise InputError(f"{source}: {key}: expected {'a name' if kind is str else 'an integer'}, got {v!r}")
            defaults[key] = v
    if "engine" in defaults and defaults["engine"] not in ("optuna", "exhaustive", "auto"):
        raise InputError(f"{source}: engine: {defaults['engine']!r} is not one of optuna, exhaustive, auto")
    name = data.get("name") or (source.rsplit("/", 1)[-1].rsplit(".", 1)[0] if source != "flags" else "search")
    base = {p.path: p.values[0] for p in params if p.path in ("model", "hardware")}
    return Space(name=str(name), source=source, model=base.get("model", model_v), hardware=base.get("hardware", hw_v),
                 fixed=fixed, params=params, objectives=objectives, constraints=constraints, defaults=defaults,
                 description=str(data.get("description") or ""))


def load(path: str, **kw) -> Space:
    """Read a space file (YAML)."""
    from dse.catalog import read_yaml

    return from_dict(read_yaml(path, "search space"), str(path), **kw)
