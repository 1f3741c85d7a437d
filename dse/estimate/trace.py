"""Record every formula call of one estimate, for ``dse estimate --explain``.

:class:`Tracer` wraps a formulas module; calling a function through it records
the function, its inputs and its value. The normal path uses the modules
directly, so tracing costs nothing unless asked for.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any


def formula_line(fn: Callable[..., Any]) -> str:
    """The ``Formula:`` line of a formula's docstring (its equation), with its ``Source:`` in parentheses."""
    from dse.formulas._docstring import formula_line as line

    return line(fn)


class Trace:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.context: str = ""

    def record(self, module: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               value: Any) -> None:
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):  # pragma: no cover
            params = []
        inputs = dict(zip(params, args))
        inputs.update(kwargs)
        self.rows.append({"term": f"{module}.{fn.__name__}", "context": self.context,
                          "formula": formula_line(fn), "inputs": inputs, "value": value})


class Tracer:
    """A stand-in for a formulas module that records each call in a :class:`Trace`."""

    def __init__(self, module: ModuleType, trace: Trace) -> None:
        self._module = module
        self._trace = trace
        self._name = module.__name__.rsplit(".", 1)[-1]

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._module, name)
        if not callable(fn):
            return fn

        def call(*args: Any, **kwargs: Any) -> Any:
            value = fn(*args, **kwargs)
            self._trace.record(self._name, fn, args, kwargs, value)
            return value

        return call


def composition_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    """How the estimate combines the formulas' values into its headline numbers, as --explain rows.

    The sums and ratios that :mod:`dse.estimate.base` (and the technique modules, which add to them) compute
    from the traced formulas: the iteration time from its components, the communication from its parts,
    throughput and MFU, and the GPU memory total. Rows whose keys a result lacks (chiplet packages) are skipped.
    """
    rows: list[dict[str, Any]] = []

    def add(term: str, formula: str, inputs: dict[str, Any], value: Any) -> None:
        rows.append({"term": term, "context": "composition", "formula": formula, "inputs": inputs, "value": value})

    t = r.get("time", {})
    parts = ("compute", "recompute", "communication", "bubble", "optimizer", "overhead", "io_exposed")
    if all(k in t for k in parts + ("iteration",)):
        add("time.iteration", "compute + recompute + communication + bubble + optimizer + overhead + io_exposed "
            "(dse/estimate/base.py: pipeline of m micro-batches + exposed data-parallel + embedding sync + "
            "optimizer step; techniques add exposed I/O)", {k: t[k] for k in parts}, t["iteration"])
    comm = ("tp_communication", "cp_communication", "pp_communication", "dp_communication", "embedding_sync")
    if all(k in t for k in comm + ("communication",)):
        add("time.communication", "tp + cp K/V ring + pp point-to-point + exposed data-parallel + tied-embedding sync",
            {k: t[k] for k in comm}, t["communication"])
    th, fl, par = r.get("throughput", {}), r.get("flops", {}), r.get("parallelism", {})
    plan = r.get("plan", {})
    if "tokens_per_s" in th and "global_batch" in plan and "seq_len" in plan:
        add("throughput.tokens_per_s", "global_batch x seq_len / time.iteration",
            {"global_batch": plan["global_batch"], "seq_len": plan["seq_len"], "iteration": t.get("iteration")},
            th["tokens_per_s"])
    if "mfu" in th and "model_per_iteration" in fl and "gpus" in par and "peak_flops_per_gpu" in r:
        add("throughput.mfu", "flops.model_per_iteration / (time.iteration x GPUs x peak FLOP/s per GPU) "
            "(Chowdhery et al. 2022, PaLM, App. B)",
            {"model_flops": fl["model_per_iteration"], "iteration": t.get("iteration"), "gpus": par["gpus"],
             "peak": r["peak_flops_per_gpu"]}, th["mfu"])
    gpu = r.get("memory", {}).get("gpu", {})
    classes = ("weights", "gradients", "optimizer", "activations", "buffers")
    if all(k in gpu for k in classes + ("total",)):
        add("memory.gpu.total", "weights + gradients + optimizer + activations + buffers (per GPU, fullest stage)",
            {k: gpu[k] for k in classes}, gpu["total"])
    return rows
