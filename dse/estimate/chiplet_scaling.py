"""Weak scaling on chiplet packages: grow the model and the die count together (``dse chiplet-scaling``).

From a base model on the package as given (e.g. Llama2-70B on 8 x 8 dies) to a target model
(e.g. Llama3.1-405B), with intermediate models interpolated between them, the die count grows in
proportion to the per-layer weight parameters, N_i = N_0 P_i / P_0 (note §2d: "hardware scaled
with P"), laid out as the most nearly square R x C mesh. The die itself (compute, SRAM, links)
and the DRAM rule of the package (per perimeter die-side, or per die) stay fixed, and the tokens
per micro-batch stay fixed, so a scheme scales weakly when its FLOP per NoP byte stays constant.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from dse.formulas import chiplet as _chiplet

SCHEMES = _chiplet.SCHEMES


def mesh_for(dies: float) -> tuple[int, int]:
    """The most nearly square R x C (R <= C) whose product is closest to ``dies``."""
    n = max(1, int(round(dies)))
    r = max(1, int(math.isqrt(n)))
    c = max(1, int(round(n / r)))
    return r, c


def interpolated_model(a: Any, b: Any, t: float) -> Any:
    """A model between ``a`` (t = 0) and ``b`` (t = 1): geometric in hidden size, FFN ratio and depth.

    Heads keep ``a``'s head dimension and KV-head count (the hidden size is rounded to a multiple
    of head_dim x kv_heads, so the grouped-query structure is kept); the FFN size is rounded to a
    multiple of 256.
    """
    if t <= 0:
        return a
    if t >= 1:
        return b
    hd, kv = a.head_dim, a.kv_heads
    step = hd * kv
    h = int(round(a.hidden * (b.hidden / a.hidden) ** t / step)) * step
    heads = h // hd
    ra, rb = a.ffn_hidden / a.hidden, b.ffn_hidden / b.hidden
    ffn = int(round(ra * (rb / ra) ** t * h / 256)) * 256
    layers = int(round(a.layers * (b.layers / a.layers) ** t))
    vocab = int(round(a.vocab * (b.vocab / a.vocab) ** t))
    return dataclasses.replace(a, name=f"interp-h{h}", hidden=h, heads=heads, kv_heads=kv, head_dim=hd,
                               ffn_hidden=ffn, layers=layers, vocab=vocab,
                               source=f"interpolated between {a.name} and {b.name} (t = {t:.2f})").resolved()


def layer_weight_params(model: Any) -> float:
    """Weight elements of one layer's GEMMs (the note's P)."""
    gemms = _chiplet.layer_gemms(model.hidden, model.heads, model.kv_heads, model.head_dim, model.ffn_hidden,
                                 model.ffn_type)
    return float(_chiplet.gemm_parameters(gemms))


def weak_scaling(base: Any, target: Any, package: Any, *, steps: int = 2, schemes: tuple[str, ...] = SCHEMES,
                 seq_len: int = 4096, micro_batch: int = 1, global_batch: int = 16, recompute: str = "full",
                 plan_extra: dict[str, Any] | None = None, square: bool = False) -> list[dict[str, Any]]:
    """One row per (point, scheme): the compute/NoP ratio, time per token, MFU, feasibility.

    ``base``/``target`` are resolved :class:`~dse.specs.model.ModelSpec`; ``package`` a
    :class:`~dse.specs.chiplet.ChipletPackageSpec` whose mesh is the base point's. ``square``
    lays every later point out as q x q (q = round(sqrt(N))), so that SUMMA can run everywhere.
    """
    from dse.errors import InputError
    from dse.estimate import chiplet as est
    from dse.specs.chiplet import check_chiplet_plan
    from dse.specs.plan import Plan

    p0 = layer_weight_params(base)
    rows = []
    for i in range(steps + 2):
        t = i / (steps + 1)
        model = interpolated_model(base, target, t)
        p = layer_weight_params(model)
        dies = package.dies * p / p0
        if i == 0:
            r, c = package.rows, package.cols
        elif square:
            r = c = max(1, int(round(dies ** 0.5)))
        else:
            r, c = mesh_for(dies)
        pkg = dataclasses.replace(package, rows=r, cols=c)
        for sch in schemes:
            row = {"model": model.name, "layer_params": p, "dies": r * c, "ideal_dies": dies, "mesh": f"{r}x{c}",
                   "scheme": sch}
            plan = Plan(micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len, recompute=recompute,
                        chiplet_scheme=sch, **(plan_extra or {})).resolved(model, pkg)
            try:
                check_chiplet_plan(plan, model, pkg)
            except InputError as exc:
                rows.append({**row, "ratio": None, "time_per_token": None, "mfu": None, "feasible": False,
                             "status": "n/a: needs a square mesh" if "square" in str(exc) else f"n/a: {exc}"})
                continue
            res = est.run(model, pkg, plan)
            if res["feasible"]:
                status = res["bottleneck"].split(":")[0].replace(" communication", "")
            else:
                status = "infeasible: " + ", ".join(v.split(":")[0] for v in res["violations"])
            rows.append({**row, "ratio": res["chiplet"]["compute_to_communication"],
                         "time_per_token": res["time"]["per_token"], "mfu": res["throughput"]["mfu"],
                         "time_per_token_layer": res["time"]["per_token"] / model.layers,
                         "energy_per_token_j": res["energy"]["per_token_j"], "feasible": res["feasible"],
                         "status": status, "schedule": res["chiplet"]["schedule"]})
    return rows
