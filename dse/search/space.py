"""Search spaces: the hardware and plan choices to try, from a YAML file or from flags.

A space names a model and a hardware system (each one name or a list of names),
fixed overrides, and *parameters*. A parameter is any dotted path that
``dse estimate --set`` accepts (``model.*``, ``hardware.*``, ``plan.*``), plus
``model`` / ``hardware`` (catalog choices) and ``gpus`` (total GPUs: the plan's
``dp`` becomes ``gpus / (tp x pp x cp)``). New plan options and hardware fields are
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

import hashlib
import json
import math
from dataclasses import dataclass, field

from dse.errors import InputError, suggest
from dse.search.objectives import parse_constraints, parse_objectives
from dse.search.params import (
    SPECIAL,
    Param,
    check_spec,
    convert_value,
    field_info,
    hardware_classes,
    normalise_path,
    parse_param,
)

TOP_KEYS = ("name", "description", "model", "hardware", "fixed", "parameters", "objectives", "constraints",
            "engine", "trials", "seed", "top")


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
            check_spec(key, v, source)
    hw_refs = [p.values for p in params if p.path == "hardware"]
    hw_classes = hardware_classes(hw_refs[0] if hw_refs else [hw_v])
    fixed_raw = data.get("fixed") or {}
    if not isinstance(fixed_raw, dict):
        raise InputError(f"{source}: fixed: expected a mapping of dotted.path: value")
    fixed = []
    for path, value in fixed_raw.items():
        path = normalise_path(str(path), f"{source}: fixed")
        if path in SPECIAL:
            raise InputError(f"{source}: fixed: {path} belongs at the top level (model, hardware) "
                             "or in parameters (gpus)")
        tp, meta = field_info(path, f"{source}: fixed", hw_classes)
        fixed.append((path, convert_value(path, value, tp, meta, f"{source}: fixed")))
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
        raise InputError(f"{source}: give either gpus (dp = gpus / (tp x pp x cp)) or plan.dp, not both")
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
