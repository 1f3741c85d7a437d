"""An imported framework config + the explicit ``dse`` flags -> resolved (model, system, plan) and a report.

Explicit flags win: a ``--tp``, ``--model`` or ``--set plan.X`` given beside ``--from`` replaces what the
config says, and the report's ``overridden`` list says so. What the config leaves to the launch is filled
the framework's way: the data-parallel size from the world size (torchrun's ``--nnodes`` x
``--nproc_per_node``, DeepSpeed's batch arithmetic) or, when the config does not hold it, from all the GPUs
of the hardware; the global batch as micro-batch x accumulation x dp when the config gives none.
"""

from __future__ import annotations

import importlib
from typing import Any

from dse.errors import InputError
from dse.frameworks.common import Imported, bad


def read(framework: str, source: str) -> Imported:
    """Read ``source`` (a file, or Megatron's arguments) with the reader of ``framework``."""
    from dse.frameworks import FRAMEWORKS

    if framework not in FRAMEWORKS:
        raise InputError(f"--from {framework!r}: expected one of {', '.join(FRAMEWORKS)}")
    return importlib.import_module(f"dse.frameworks.{framework}").read(source)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _overridden(imp: Imported, explicit: dict, overrides) -> list[str]:
    out = [f"{_flag(k)} {v} (the config's {imp.keys.get(k, k)}: {imp.plan[k]})"
           for k, v in explicit.items() if k in imp.plan and imp.plan[k] != v]
    if "dp" in explicit and "dp" not in imp.plan and imp.world_size is not None:
        out.append(f"--dp {explicit['dp']} (the config's {imp.world_key}: {imp.world_size} GPUs)")
    for item in overrides:
        if isinstance(item, str) and "=" in item:
            path, value = item.split("=", 1)
            head, _, name = path.strip().partition(".")
            if head in ("plan", "p") and name in imp.plan:
                out.append(f"--set {path.strip()}={value} (the config's {imp.keys.get(name, name)}: "
                           f"{imp.plan[name]})")
    return out


def _model(imp: Imported, model: Any, model_given: bool, overridden: list[str], notes: list[str]) -> Any:
    """The model reference to load: the config's, unless ``--model`` was given."""
    if imp.model is None:
        return model
    if model_given:
        overridden.append(f"--model {model} (the config's {', '.join(imp.model_keys)})")
        return model
    if not isinstance(imp.model, dict):
        return imp.model
    from dse.catalog import load_model
    from dse.specs import _schema
    from dse.specs.model import ModelSpec

    data = dict(imp.model)
    if data.get("vocab") is None:
        data["vocab"] = load_model(model).vocab
        notes.append(f"vocabulary {data['vocab']} from --model {model}")
    spec = _schema.build(ModelSpec, data, f"{imp.source}: model").resolved()
    name = catalog_match(spec)
    if name is not None:
        notes.append(f"the arguments describe the catalog's {name}: estimated as {name}")
        return name
    return spec


# the fields that fix a decoder's shapes, parameters and saved bytes under the megatron stack
ARCHITECTURE = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "ffn_type", "norm", "bias",
                "qkv_bias", "position", "position_embeddings", "tied_embeddings", "vocab", "max_seq_len", "dropout",
                "architecture", "layer_norms", "qk_norm", "experts", "experts_per_token", "expert_ffn",
                "shared_experts", "shared_expert_ffn", "dense_layers", "first_dense_layers", "moe_layer_step",
                "expert_groups", "expert_groups_per_token", "parallel_residual", "rotary_fraction",
                "decoder_layers", "relative_buckets")


def catalog_match(spec) -> str | None:
    """The catalog model with ``spec``'s architecture (:data:`ARCHITECTURE`), if there is one."""
    from dse.catalog import load_model, models_dir, names

    key = tuple(getattr(spec, f) for f in ARCHITECTURE)
    for name in names(models_dir()):
        if tuple(getattr(load_model(name), f) for f in ARCHITECTURE) == key:
            return name
    return None


def apply(imp: Imported, *, model: Any, model_given: bool, hw: Any, overrides=(), explicit: dict | None = None
          ) -> tuple[Any, Any, Any, dict]:
    """Resolve the imported config against the hardware: ``(model, system, plan, report)``.

    ``explicit``: the plan fields set by flags (they win); ``overrides``: the ``--set`` assignments.
    """
    from dse.estimate import load, make_plan
    from dse.specs.hardware import GPU_SYSTEM

    explicit = dict(explicit or {})
    notes = list(imp.notes)
    overridden = _overridden(imp, explicit, overrides)
    ref = _model(imp, model, model_given, overridden, notes)
    if imp.model is None or model_given:   # training choices the config makes for the --model (--set wins)
        overrides = [*(f"model.{f}={v}" for f, (v, _) in imp.model_set.items()), *overrides]
    m, s, data = load(ref, hw, None, overrides, **{**imp.plan, **explicit})
    for field, (value, key) in imp.expect.items():   # e.g. Megatron's --num-experts beside a --model
        have = getattr(m, field) or (0 if field == "experts" else None)
        if have != value:
            raise bad(imp.source, key, f"{value}, but model {m.name} has {field} {have}; estimate a model with "
                                       "them (--model), or leave the argument out")
    if s.kind != GPU_SYSTEM:
        raise InputError(f"--from {imp.framework}: {s.name} is a {s.kind}; framework configs describe GPU systems")
    _fill(imp, m, s, data, explicit, notes)
    try:
        plan = make_plan(m, s, data)
    except InputError as exc:
        raise InputError(f"{imp.source}: {exc}") from None
    report = {"framework": imp.framework, "source": imp.source,
              "plan": {k: imp.keys.get(k, "") for k in imp.plan if k not in explicit},
              "model": (m.name if imp.model is not None and not model_given else None),
              "ignored": list(imp.ignored), "notes": notes, "overridden": overridden}
    return m, s, plan, report


def _fill(imp: Imported, m, s, data: dict, explicit: dict, notes: list[str]) -> None:
    """The plan fields the config leaves to the launch (dp, global batch, virtual stages), as the framework
    fills them."""
    tp, pp = data.get("tp", 1), data.get("pp", 1)
    if imp.layers_per_virtual_stage and "virtual_stages" not in explicit:
        per = imp.layers_per_virtual_stage
        if m.layers % (pp * per):
            raise bad(imp.source, imp.keys["virtual_stages"], f"{per} layers per virtual stage do not divide "
                                                              f"{m.layers} layers over {pp} pipeline stages")
        data["virtual_stages"] = m.layers // (pp * per)
    if imp.pipeline_split and "pipeline_layout" not in explicit:   # Megatron's uneven split: its layout
        from dse.frameworks.megatron_layout import resolve

        resolve(imp, m, data)
    if data.get("sequence_parallel") and tp == 1 and "sequence_parallel" not in explicit:
        data["sequence_parallel"] = False
        notes.append("sequence parallelism needs tp > 1: off (as Megatron turns it off)")
    if "dp" not in data:
        cp = data.get("cp", imp.context_parallel)
        per = tp * pp * cp
        what = "tp x pp" + (" x cp" if cp > 1 else "")
        if imp.world_size is not None:
            if imp.world_size % per:
                raise bad(imp.source, imp.world_key, f"{imp.world_size} GPUs is not a multiple of {what} = {per}")
            data["dp"] = imp.world_size // per
        else:
            data["dp"] = max(1, s.gpus // per)
            notes.append(f"data-parallel size {data['dp']}: the {s.gpus} GPUs of {s.name} over {what} = {per} "
                         "(the config does not hold the world size)")
    if "global_batch" not in data and imp.accumulation is not None:
        data["global_batch"] = data.get("micro_batch", 1) * imp.accumulation * data["dp"]


def render(con, report: dict) -> None:
    """The import report, printed above the estimate."""
    con.print(f"[bold]from {report['framework']}[/]: {report['source']}"
              + (f" (model {report['model']})" if report["model"] else ""), markup=True, highlight=False)
    if report["overridden"]:
        con.print("explicit flags win: " + "; ".join(report["overridden"]), markup=False, highlight=False)
    for n in report["notes"]:
        con.print(f"note: {n}", markup=False, highlight=False)
    if report["ignored"]:
        con.print(f"ignored ({len(report['ignored'])}): " + ", ".join(grouped(report["ignored"])), markup=False,
                  highlight=False)


def grouped(names: list[str]) -> list[str]:
    """Dotted keys of one table written once: ``a.b.{c, d}`` (entries with a reason stay whole)."""
    groups: dict[str, list[str]] = {}
    for n in names:
        head, dot, leaf = n.rpartition(".")
        key = head if dot and " " not in n and not n.startswith("-") else n
        groups.setdefault(key, []).append(leaf if key == head else n)
    return [f"{k}.{{{', '.join(v)}}}" if len(v) > 1 else (v[0] if v[0] == k else f"{k}.{v[0]}")
            for k, v in groups.items()]
