"""Measured training scenarios read from a file, and what ``dse`` predicts for each.

Two formats are accepted (one row per scenario):

- **dse measure / shared H100 format** (JSONL, ``data/h100_hf_training.jsonl``): rows with a
  ``kind`` field; ``kind: base`` rows are scenarios (``model``, ``attn`` sdpa|eager, ``b``,
  ``s``, ``recompute`` none|full, ``step_s`` = forward + backward, ``peak_bytes`` =
  ``torch.cuda.max_memory_allocated``), other kinds are ignored. Weights and gradients in bf16,
  no fp32 master copy (plan ``precision: bf16-pure``) and no optimizer step in the timing, one
  GPU, dropout 0 -- unless the row says what dropout ran (``dropout``: the probability on the layers' branch
  outputs; ``attention_dropout``, ``embedding_dropout``: whether it ran on the attention probabilities and the
  embedding output too, default false; fields added after a run, data/README.md). An optional
  ``config`` object (layers, hidden, heads, vocab, n_positions) describes a model that is not
  in the catalog; without it ``model`` is a catalog name and a ``params`` count that differs
  from the catalog's by whole rows of the position table sets that table's size.
- **generic** (CSV with a header, or JSONL without ``kind``): ``model`` (catalog name or file),
  ``time_s`` (measured seconds per iteration), optional ``peak_bytes``, any plan field
  (``tp``, ``pp``, ``dp``, ``micro_batch``, ``global_batch``, ``seq_len``, ``recompute``,
  ``attention``, ``zero``, ``precision``, ``grad_dtype``, ...), ``optimizer_step`` (true:
  the time and memory include the optimizer step and its states; default true) and ``set``
  (``;``-separated ``model.X=V`` / ``plan.X=V`` overrides).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.errors import InputError

#: Columns of the generic format besides the plan fields.
GENERIC_COLUMNS = ("model", "time_s", "peak_bytes", "optimizer_step", "set", "name")
_HF_ATTENTION = {"sdpa": "flash", "eager": "math"}
_TRUE = {"1", "true", "yes", "y"}
_FALSE = {"0", "false", "no", "n", ""}


@dataclass(frozen=True)
class Measurement:
    """One measured scenario: resolved specs, the measured numbers and what they include."""

    name: str
    model: Any                     # ModelSpec (resolved)
    plan_data: dict                # plan fields; resolved against a system by :func:`plan_for`
    time_s: float | None           # measured seconds (iteration, or forward+backward without optimizer_step)
    peak_bytes: float | None       # measured peak allocated bytes per GPU
    optimizer_step: bool           # the measurement includes the optimizer step and its states
    note: str = ""                 # how the scenario was mapped onto dse's plan
    where: str = ""                # file:row it was read from


def read(path: str | Path, model_ref: Callable[[str], str] | None = None) -> list[Measurement]:
    """Every measured scenario of a CSV or JSONL file (format detected per file).

    ``model_ref``: maps a ``kind: base`` row's ``model`` to the catalog name or file to load (a row written by
    ``dse measure`` names the config.json it ran, relative to where it ran); default: as written.
    """
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise InputError(f"--data {path}: no such file") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise InputError(f"--data {path}: cannot read ({exc.__class__.__name__})") from None
    if p.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    else:
        rows = []
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}:{i}: not a JSON object ({exc.msg})") from None
    out = []
    for i, row in enumerate(rows, 1):
        where = f"{path}:{i + (1 if p.suffix.lower() == '.csv' else 0)}"
        if not isinstance(row, dict):
            raise InputError(f"{where}: not a JSON object")
        if "kind" in row:
            if row["kind"] == "base" and not row.get("offload_host"):
                out.append(hf_row(row, where, model_ref))
        else:
            out.append(generic_row(row, where))
    if not out:
        raise InputError(f"--data {path}: no measured scenario (expected 'kind: base' rows or rows with "
                         f"model and time_s)")
    return out


def _number(row: dict, key: str, where: str, required: bool = True) -> float | None:
    """``row[key]`` as a finite number > 0 (None where absent and not ``required``)."""
    v = row.get(key)
    if v is None or v == "":
        if required:
            raise InputError(f"{where}: missing field '{key}'")
        return None
    try:
        x = None if isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        x = None
    if x is None:
        raise InputError(f"{where}: {key} = {v!r} is not a number")
    if not 0 < x < math.inf:
        raise InputError(f"{where}: {key} = {v!r} must be a finite number > 0")
    return x


def _count(row: dict, key: str, where: str, required: bool = True) -> int | None:
    """``row[key]`` as a whole number > 0 (a count: sequences, tokens, parameters)."""
    x = _number(row, key, where, required)
    if x is None:
        return None
    if x != int(x):
        raise InputError(f"{where}: {key} = {row[key]!r} must be a whole number > 0")
    return int(x)


def _choice(row: dict, key: str, where: str, allowed, default: Any = None) -> Any:
    """``row[key]`` (``default`` where absent), one of ``allowed``."""
    v = row.get(key, default)
    if not isinstance(v, str) or v not in allowed:
        raise InputError(f"{where}: {key} = {v!r}; allowed: {', '.join(allowed)}")
    return v


def _dropout(row: dict, where: str) -> list[tuple[list[str], Any]]:
    """The model overrides for the dropout a ``kind: base`` row ran: none (0) unless the row gives ``dropout``; then
    on the branch outputs, and on the attention probabilities and the embedding only where the row says so."""
    p = 0.0 if row.get("dropout") in (None, "", 0) else (_number(row, "dropout", where) or 0.0)
    if not 0.0 <= p < 1.0:
        raise InputError(f"{where}: dropout = {p!r}; expected a probability in [0, 1)")
    return [(["dropout"], p), *(([k], _bool(row.get(k, False), k, where))
                                for k in ("attention_dropout", "embedding_dropout"))]


def hf_model(row: dict, where: str, model_ref: Callable[[str], str] | None = None):
    """The model of a ``kind: base`` row (catalog name, or its ``config``), its dropout (:func:`_dropout`; 0 unless
    the row says), position table as measured."""
    from dse.catalog import load_model
    from dse.estimate.parameters import model_parameters

    cfg = row.get("config")
    name = row.get("model", "")
    if not isinstance(name, str) or not (name or cfg):
        raise InputError(f"{where}: model = {name!r}; expected a catalog name or a model file (or a config)")
    if model_ref is not None and not cfg:
        name = model_ref(name)
    if cfg:
        if not isinstance(cfg, dict):
            raise InputError(f"{where}: config = {cfg!r}; expected a mapping of layers, hidden, heads, vocab")
        at = f"{where}: config"
        dims = [([k], _count(cfg, k, at)) for k in ("layers", "hidden", "heads", "vocab")]
        ov = [(["name"], name or "measured"), *dims,
              (["max_seq_len"], _count(cfg, "n_positions", at, required=False) or _count(row, "s", where)),
              *_dropout(row, where)]
        return load_model("gpt2-small", ov), "model from the row's config"
    model = load_model(name, _dropout(row, where))
    note = ""
    params = row.get("params")
    if params and model.position == "learned":
        m = model

        def count(spec):   # dse's own count: every family's parameters as Transformers builds them
            return int(model_parameters(spec)[0])
        extra = (_count(row, "params", where) or 0) - count(m)
        if extra and extra % m.hidden == 0 and m.position_embeddings + extra // m.hidden > 0:
            rows = m.position_embeddings + extra // m.hidden
            model = load_model(name, [*_dropout(row, where), (["position_embeddings"], rows)])
            note = f"position table {rows} rows (from params {int(row['params']):,})"
        elif extra:
            raise InputError(f"{where}: params {int(row['params']):,} does not match the catalog's {name} "
                             f"({count(m):,}); give the row a config")
    return model, note


from dse.specs.stack import STACKS  # noqa: E402


def hf_row(row: dict, where: str, model_ref: Callable[[str], str] | None = None) -> Measurement:
    """A ``kind: base`` row of the dse measure / shared H100 format."""
    attn = _choice(row, "attn", where, tuple(_HF_ATTENTION))
    recompute = _choice(row, "recompute", where, ("none", "full"), "none")
    b, s = _count(row, "b", where) or 0, _count(row, "s", where) or 0
    model, note = hf_model(row, where, model_ref)
    # the format's runs are eager PyTorch modules (Transformers, dse measure)
    stack = _choice(row, "stack", where, STACKS, "pytorch")
    plan = {"tp": 1, "pp": 1, "dp": 1, "zero": 0, "micro_batch": b, "global_batch": b, "seq_len": s,
            "recompute": recompute, "attention": _HF_ATTENTION[attn], "precision": "bf16-pure", "grad_dtype": "half",
            "stack": stack}
    if "use_cache" in row:     # Transformers' use_cache as measured (dse measure --impl hf: off)
        plan["kv_cache"] = _bool(row["use_cache"], "use_cache", where)
    name = f"{row.get('model')} {attn} b{b} s{s} rc-{recompute}"
    return Measurement(name=name, model=model, plan_data=plan, time_s=_number(row, "step_s", where),
                       peak_bytes=_number(row, "peak_bytes", where, required=False), optimizer_step=False, note=note,
                       where=where)


def _bool(v, key: str, where: str) -> bool:
    if isinstance(v, bool):
        return v
    t = str(v).strip().lower()
    if t in _TRUE or t in _FALSE:
        return t in _TRUE
    raise InputError(f"{where}: {key} = {v!r}; allowed: true, false")


def generic_row(row: dict, where: str) -> Measurement:
    """A row of the generic format (see the module docstring)."""
    from dse.catalog import load_model
    from dse.specs import _schema
    from dse.specs.plan import Plan

    if not row.get("model"):
        raise InputError(f"{where}: missing field 'model' (a catalog name or file)")
    plan_fields = set(_schema.field_names(Plan))
    unknown = [k for k in row if k not in plan_fields and k not in GENERIC_COLUMNS and row[k] not in (None, "")]
    if unknown:
        raise InputError(f"{where}: unknown field '{unknown[0]}'; allowed: {', '.join(GENERIC_COLUMNS)} "
                         f"and the plan fields (dse show, README)")
    model_ov, plan = [], {}
    for item in filter(None, (x.strip() for x in str(row.get("set") or "").split(";"))):
        path, value = _schema.parse_assignment(item)
        if path[0] == "model":
            model_ov.append((path[1:], value))
        elif path[0] == "plan":
            plan[path[1]] = value
        else:
            raise InputError(f"{where}: set {item!r}: the path must start with model. or plan.")
    for k in plan_fields & set(row):
        if row[k] not in (None, ""):
            plan[k] = row[k]
    plan = {k: _schema.parse_assignment(f"x={v}")[1] if isinstance(v, str) else v for k, v in plan.items()}
    model = load_model(str(row["model"]), model_ov)
    return Measurement(name=str(row.get("name") or f"{row['model']} row {where.rsplit(':', 1)[-1]}"), model=model,
                       plan_data=plan, time_s=_number(row, "time_s", where),
                       peak_bytes=_number(row, "peak_bytes", where, required=False),
                       optimizer_step=_bool(row.get("optimizer_step", True), "optimizer_step", where), where=where)


def plan_for(m: Measurement, system):
    """The measurement's plan, validated and resolved on ``system`` (an invalid one: an error naming the row)."""
    from dse.estimate import make_plan

    try:
        return make_plan(m.model, system, dict(m.plan_data))
    except InputError as exc:
        raise InputError(f"{m.where or m.name}: {exc}") from None


def predict(m: Measurement, system, plan=None) -> tuple[float, float]:
    """(time, peak allocated bytes) that ``dse`` predicts for what the measurement covers.

    Time: the iteration, less the optimizer step when the measurement has none (one GPU:
    nothing else is excluded; data-parallel communication of a multi-GPU run stays in, as
    DDP reduces gradients inside backward). Memory: the GPU total less ``reserved`` (the CUDA
    context and allocator slack that ``max_memory_allocated`` does not count), less the
    optimizer states when the measurement allocated none.
    """
    from dse.estimate import run

    r = run(m.model, system, plan if plan is not None else plan_for(m, system))
    t, mem = r["time"], r["memory"]["gpu"]
    time = t["iteration"] - (0.0 if m.optimizer_step else t["optimizer"])
    alloc = mem["total"] - system.node.gpu.reserved - (0.0 if m.optimizer_step else mem["optimizer"])
    return float(time), float(alloc)
