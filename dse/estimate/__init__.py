"""One training scenario -> one estimate (time, memory per tier, traffic, bottleneck).

:func:`estimate` accepts catalog names, file paths or spec objects; :func:`run`
takes resolved specs and is the fast in-process path (tens of microseconds).
Both return the dictionary that ``dse estimate --json`` prints.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from dse.catalog import load_hardware, load_model
from dse.estimate import activation_offload, arrays, economics, feasibility, offload, paged, wear
from dse.estimate.allocator import allocator_memory
from dse.estimate.backends import backend
from dse.estimate.defaults import filled as filled_defaults, input_warnings
from dse.estimate.result import Estimate
from dse.estimate.technique import Technique, compose
from dse.specs import _schema
from dse.specs.plan import Plan, folded

if TYPE_CHECKING:
    from dse.estimate.aliases import Formulas, Hardware, Result
    from dse.estimate.trace import Trace
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec

TIME_PARTS = {
    "compute": "GEMMs, attention and element-wise kernels",
    "recompute": "activation recomputation",
    "tp_communication": "tensor-parallel all-reduces",
    "cp_communication": "the context-parallel exchange (K/V ring, all-to-alls or all-gather)",
    "pp_communication": "pipeline point-to-point transfers",
    "dp_communication": "data-parallel gradient reduction",
    "bubble": "the pipeline bubble",
    "optimizer": "the optimizer step",
    "overhead": "host-side launch overhead (the GPU waits for the CPU)",
    "io_exposed": "storage and host I/O that compute does not hide",
}


# The techniques, in the order they apply (dse/estimate/technique.py states the protocol:
# memory half, time half, violations, report; ``after`` says whose results each one reads).
# A new technique is one module with a ``TECHNIQUE`` object and one entry here.
TECHNIQUES: list[Technique] = [offload.TECHNIQUE, activation_offload.TECHNIQUE, paged.TECHNIQUE, wear.TECHNIQUE,
                               economics.TECHNIQUE]

# Deprecated (use TECHNIQUES): the modules of the first two techniques. Setting it to other module
# names (e.g. in a test) replaces those two by the listed modules; a module without a ``TECHNIQUE``
# object is wrapped in a ModuleTechnique (one ``apply(c, model, system, plan, F)``, no pruning).
TECHNIQUE_MODULES: list[str] = ["dse.estimate.offload", "dse.estimate.activation_offload"]
_DEFAULT_MODULES = tuple(TECHNIQUE_MODULES)
_LOADED: dict[tuple[str, ...], list[Technique]] = {}


def techniques() -> list[Technique]:
    """The technique objects in application order (:data:`TECHNIQUES`, or the modules of TECHNIQUE_MODULES)."""
    key = tuple(TECHNIQUE_MODULES)
    if key == _DEFAULT_MODULES:
        return list(TECHNIQUES)
    listed = _LOADED.get(key)
    if listed is None:
        import importlib

        from dse.estimate.technique import ModuleTechnique

        mods = [importlib.import_module(name) for name in key]
        listed = _LOADED[key] = [getattr(m, "TECHNIQUE", None) or ModuleTechnique(m) for m in mods]
    return listed + [t for t in TECHNIQUES if t.name in ("drive_wear", "economics")]


_HEADS = {"compute": "Compute-bound", "recompute": "Recompute-bound", "bubble": "Pipeline-bubble-bound",
          "optimizer": "Optimizer-bound", "overhead": "Host-bound", "io_exposed": "I/O-bound"}


def bottleneck(r: Result, host: Any = None) -> str:
    """One sentence naming the largest share of the iteration time (``host``: the system's host spec, whose launch
    speed's basis the sentence names where the host binds or nearly does)."""
    t = r["time"]
    total = t["iteration"]
    first = second = (-1.0, "")   # the two largest (time, part), in one pass (as sorting them would rank them)
    for k in TIME_PARTS:
        x = (t.get(k, 0.0), k)
        if x > first:
            first, second = x, first
        elif x > second:
            second = x
    (v1, k1), (v2, k2) = first, second
    head = _HEADS.get(k1, "Communication-bound")
    out = (f"{head}: {TIME_PARTS[k1]} take {100 * v1 / total:.0f}% of the iteration; "
           f"next is {TIME_PARTS[k2]} ({100 * v2 / total:.0f}%).")
    load = float(t.get("host_load", 0.0))
    if load >= 1.0:
        out += (" A layer pass waits for the host (its launches take up to {:.1f}x the GPU's time): the estimate "
                "rests on the host's speed" + _host_basis(host) + _HOST_HINT).format(load)
    elif load >= HOST_LOAD_NOTE:
        out += (f" The host issues a layer pass's kernels in {100 * load:.0f}% of its GPU time: a host "
                f"{1 / load:.1f}x slower makes that pass host-bound" + _host_basis(host) + _HOST_HINT)
    return out


def _host_basis(host: Any) -> str:
    """Where the host's launch speed comes from, for the bottleneck sentence ("" for a measured or calibrated one)."""
    basis = getattr(host, "dispatch_basis", None)
    scale = getattr(host, "dispatch_scale", 1.0)
    if basis in (None, "unmeasured"):   # a scale other than 1 on such a host: stated by the user (--set, a file)
        basis = "unmeasured" if host is not None and scale == 1.0 else None
    if basis == "transferred":
        return (f"; {host.name}'s is transferred from a measured host of its CPU generation "
                f"({host.dispatch_scale:g}x the reference), not measured on it")
    if basis == "unmeasured":
        return f"; {host.name}'s is not measured: the reference host's, optimistic if it is slower"
    return ""


#: host_load (time.host_load) from which the bottleneck sentence says the host is close to binding: within a
#: factor 2, less than hosts differ (the two measured VMs take 4.2-4.6x the reference host's time per launch:
#: hwspecs/hosts/firecracker-xeon-vm*.yaml), and where the h200-hf rows show a pass's host-bound stretches (its
#: small kernels) already adding time that max(GPU, host) does not count
HOST_LOAD_NOTE = 0.5
_HOST_HINT = " (measure it: dse measure, then dse calibrate --params dispatch_scale)."


def run(model: ModelSpec, system: Hardware, plan: Plan, *, trace: Trace | None = None) -> Result:
    """Estimate one scenario from resolved specs. ``trace`` (a :class:`~dse.estimate.trace.Trace`) records formulas.

    A plan built by hand with fields left to their defaults (``Plan(tp=2, ...)``: dp, ZeRO, sequence length, the
    gradients' dtype unset) is resolved here as :func:`make_plan` resolves it (not checked: :func:`make_plan` checks a
    plan's fields against the model and system)."""
    hw = backend(system)
    if plan.zero is None or plan.dp is None or plan.grad_dtype is None or plan.seq_len is None:
        plan = plan.resolved(model, system)
    r, extra = hw.numbers(model, system, plan, trace=trace)
    r["feasible"], r["violations"], r["bottleneck"] = hw.verdict(r, system, plan, extra)
    return r


# keys of the composed dict that are not result sections (terms, and numbers the result holds elsewhere)
_NOT_SECTIONS = frozenset(("terms", "params", "params_trainable", "params_active", "gpus", "nodes", "hosts",
                           "micro_batches", "layers_per_stage", "params_per_gpu", "peak_flops", "extra_violations",
                           "params_mtp"))


def numbers(model: ModelSpec, system: SystemSpec, plan: Plan, *, trace: Trace | None = None
            ) -> tuple[Result, list[str]]:
    """Every number of a GPU-system estimate (array-safe), without the verdict.

    Returns the result dict (all sections except ``feasible``, ``violations``,
    ``bottleneck``) and the violations the technique modules appended while composing.
    """
    F: Formulas | None = None
    if trace is not None:
        from dse.estimate.trace import Tracer
        from dse.formulas import (
            activation_offload,
            compute,
            cost,
            kernels,
            memory,
            near_storage,
            offload,
            optimizer,
            parallelism,
            transformer,
        )

        F = {m.__name__.rsplit(".", 1)[-1]: Tracer(m, trace)
             for m in (transformer, memory, parallelism, compute, kernels, cost, offload, near_storage,
                       activation_offload, optimizer)}
    c = compose(model, system, plan, techniques(), F)
    r = {"model": {"name": model.name, "params": c["params"], "params_trainable": c["params_trainable"],
                   "layers": model.layers, "hidden": model.hidden,
                   "heads": model.heads, "kv_heads": model.kv_heads, "ffn_hidden": model.ffn_hidden,
                   "vocab": model.vocab}}
    if model.experts:   # an MoE model: what a token uses, and its experts
        r["model"].update(active_params=c["params_active"], experts=model.experts,
                          experts_per_token=model.experts_per_token, moe_layers=model.moe_layers)
        if plan.expert_capacity is not None:   # a capacity factor: the routed copies its experts drop
            r["model"]["dropped_tokens"] = _dropped(model, plan)
    if "params_mtp" in c:   # multi-token prediction: its depths and their own parameters (dse.estimate.mtp)
        r["model"].update(mtp_layers=model.mtp_layers, mtp_params=c["params_mtp"])
    r["parallelism"] = {"gpus": c["gpus"], "nodes": c["nodes"], "micro_batches": c["micro_batches"],
                        "layers_per_stage": c["layers_per_stage"], "params_per_gpu": c["params_per_gpu"]}
    r["peak_flops_per_gpu"] = c["peak_flops"]
    for k in ("flops", "activation_bytes_per_layer", "memory", "traffic", "time", "throughput"):
        r[k] = c[k]
    r["allocator"] = allocator_memory(c, model, system, plan)   # allocated and reserved, as PyTorch reports them
    for k, v in c.items():  # sections added by techniques (cost, energy, activation_offload, ...)
        if k not in r and k not in _NOT_SECTIONS:
            r[k] = v
    r["hardware"] = {"name": system.name, "gpu": system.node.gpu.name, "gpus_per_node": system.node.gpus_per_node,
                     "nodes": system.nodes}
    if system.node.gpus_per_host is not None:   # hosts smaller than the node (GB200 NVL72: one Grace per 2 GPUs)
        r["parallelism"]["hosts"] = c["hosts"]
        r["hardware"]["gpus_per_host"] = system.node.gpus_per_host
    r["plan"] = vars(plan).copy()   # plan fields are scalars: a shallow copy is the whole plan
    for key in ("target_len", "pipeline_layout", "kv_cache"):   # shown only where set
        if r["plan"].get(key) is None:
            r["plan"].pop(key, None)
    if not folded(plan):       # expert TP equal to tp (the default): reported only where it may differ
        r["plan"].pop("etp", None)
    return r, list(c.get("extra_violations", []))


def _dropped(model: ModelSpec, plan: Plan) -> Any:
    """:func:`dse.formulas.transformer.dropped_token_fraction` of the tokens a GPU's router sees per micro-batch."""
    from dse.estimate.context import local_seq
    from dse.formulas.transformer import dropped_token_fraction

    tokens = local_seq(plan) * plan.micro_batch / (plan.tp if plan.sequence_parallel else 1)
    k: Any = model.experts_per_token           # set on an MoE model, and the capacity on this plan
    capacity: Any = plan.expert_capacity
    out = dropped_token_fraction(tokens, model.experts, k, capacity, model.expert_imbalance)
    return float(out) if getattr(out, "ndim", 0) == 0 else out     # an array of capacities: one per scenario


def verdict(r: Result, system: SystemSpec, plan: Plan, extra: Iterable[str] = ()) -> tuple[bool, list[str], str]:
    """Feasibility, the violated constraints and the bottleneck sentence of one scalar result.

    The constraints are :func:`dse.estimate.feasibility.check`'s (memory per tier, GPUs, each
    active technique's); their structured form is set as ``r["violation_details"]``.
    """
    checks = feasibility.check(r["memory"], system, plan, gpus=r["parallelism"]["gpus"],
                               nodes=r["parallelism"]["nodes"], c=r,
                               techniques=[t for t in techniques() if t.active(plan)])
    bad = feasibility.violated(checks)
    host = getattr(getattr(system, "node", None), "host", None)   # a chiplet package has none
    if not bad and not extra:      # feasible: the common case
        r["violation_details"] = []
        return True, [], bottleneck(r, host)
    messages = [v.message for v in bad]
    r["violation_details"] = [v.as_dict(msg) for v, msg in zip(bad, messages)] + [
        {"kind": "other", "tier": None, "needed": None, "available": None, "message": x, "reason": x} for x in extra]
    violations = messages + list(extra)
    text = bottleneck(r, host) if not violations else "Infeasible: " + "; ".join(violations) + "."
    return not violations, violations, text


def resolve(model: Any, hardware: Any, plan: Any = None, overrides: Any = (), **plan_fields: Any
            ) -> tuple[ModelSpec, Hardware, Plan]:
    """Load and check specs: names/paths/objects in, resolved (model, system, plan) out."""
    model, system, plan_data = load(model, hardware, plan, overrides, **plan_fields)
    return model, system, make_plan(model, system, plan_data)


def load(model: Any, hardware: Any, plan: Any = None, overrides: Any = (), **plan_fields: Any
         ) -> tuple[ModelSpec, Hardware, dict[str, Any]]:
    """Load the model and hardware specs and merge the plan's fields (before they are validated).

    Returns ``(model, system, plan_data)``: resolved specs and a dict of plan fields with the
    ``plan.*`` overrides applied, ready for :func:`make_plan`.
    """
    groups: dict[str, list[tuple[list[str], Any]]] = {"model": [], "hardware": [], "plan": []}
    for item in overrides:
        path, value = _schema.parse_assignment(item) if isinstance(item, str) else item
        head = {"hw": "hardware", "m": "model", "p": "plan"}.get(path[0], path[0])
        if head not in groups:
            from dse.errors import InputError, suggest

            raise InputError(f"--set {'.'.join(path)}: the path must start with model., hardware. or plan."
                             f"{suggest(path[0], groups)}")
        groups[head].append((list(path[1:]), value))
    model = load_model(model, groups["model"])
    system = load_hardware(hardware, groups["hardware"])
    if plan is None:
        plan_data = dict(plan_fields)
    elif isinstance(plan, Plan):
        plan_data = {**{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}, **plan_fields}
    else:
        plan_data = {**dict(plan), **plan_fields}
    plan_data = {k: v for k, v in plan_data.items() if v is not None}
    for path, value in groups["plan"]:
        _schema.set_path(plan_data, path, value, Plan, "--set plan")
    return model, system, plan_data


# memo of make_plan: (model id, system id, ((field, value)...), (type of each value...)) -> (model, system, plan)
_PLANS: dict[tuple[Any, ...], tuple[ModelSpec, Hardware, Plan]] = {}


def make_plan(model: ModelSpec, system: Hardware, plan_data: dict[str, Any]) -> Plan:
    """Validate plan fields (a dict of scalars) against the model and system: the resolved :class:`Plan`.

    The same fields on the same model and system objects (catalog specs are loaded once) are validated
    once: the resolved plan is frozen, so a repeated call returns it. The key holds each value's type
    (``True``, ``1`` and ``1.0`` are equal in Python, not as plan fields); invalid fields raise every time.
    """
    key = (id(model), id(system), tuple(plan_data.items()), tuple(map(type, plan_data.values())))
    try:
        hit, memo = _PLANS.get(key), True
    except TypeError:            # an unhashable value (a list, a dict): checked afresh (and rejected)
        hit, memo = None, False
    if hit is not None and hit[0] is model and hit[1] is system:
        return hit[2]
    plan = Plan.resolved_from(_schema.arguments(Plan, plan_data, "plan: "), model, system)
    backend(system).check_plan(plan, model, system)
    if memo:
        if len(_PLANS) >= 512:   # bounded
            _PLANS.clear()
        _PLANS[key] = (model, system, plan)
    return plan


def estimate(model: Any, hardware: Any, plan: Any = None, *, overrides: Any = (), trace: Trace | None = None,
             **plan_fields: Any) -> Result:
    """Estimate one training scenario.

    ``model`` and ``hardware`` are catalog names, spec files or spec objects;
    ``plan`` a :class:`~dse.specs.plan.Plan`, a dict, or keyword fields
    (``tp=2, micro_batch=4, ...``); ``overrides`` are ``"model.hidden=4096"``-style
    assignments. Returns the same dictionary as ``dse estimate --json``; a scalar call adds ``defaults``: the plan
    fields the call left unset that shape the answer, and ``warnings``: what the model has that the estimate
    prices approximately (:mod:`dse.estimate.defaults`). The dictionary is an
    :class:`~dse.estimate.result.Estimate`, which Jupyter renders as tables.

    Numeric plan fields may be numpy arrays (or lists), and so may hardware fields given as
    overrides (``overrides=[("hardware.node.gpu.hbm_bandwidth", [1.5e12, 3e12])]``): the arrays
    broadcast together, every distinct scenario is validated by the same rules as a scalar call,
    the numbers are composed once over the arrays, and every numeric leaf of the result is an
    array of the broadcast shape (see :mod:`dse.estimate.arrays`).

    >>> import numpy as np
    >>> r = estimate("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=np.array([1, 2, 4]))
    >>> r["memory"]["gpu"]["activations"].shape, bool(np.all(np.diff(r["memory"]["gpu"]["activations"]) > 0))
    ((3,), True)
    """
    overrides, hw_arrays = arrays.split_overrides(overrides) if overrides else ([], {})
    m, s, data = load(model, hardware, plan, overrides, **plan_fields)
    if hw_arrays:
        def load_hw(assignments: Iterable[tuple[Sequence[str], Any]]) -> Hardware:
            return load(m, hardware, None, [*overrides, *((["hardware", *p], v) for p, v in assignments)])[1]

        return Estimate(arrays.estimate(m, s, data, trace=trace, hw_arrays=hw_arrays, load_hw=load_hw))
    if arrays.has_arrays(data):
        return Estimate(arrays.estimate(m, s, data, trace=trace))
    p = make_plan(m, s, data)
    r = Estimate(run(m, s, p, trace=trace))
    r["defaults"] = filled_defaults(m, s, p, data)
    r["warnings"] = input_warnings(m, p, s)
    return r


class _CallableModule(types.ModuleType):
    """``dse.estimate(...)`` calls :func:`estimate`; ``dse.estimate`` is still this package."""

    __call__ = staticmethod(estimate)


sys.modules[__name__].__class__ = _CallableModule
