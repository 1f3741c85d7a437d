"""The recompute-offload-keep (ROK) comparison behind ``dse rok``.

For one model and system, across micro-batch sizes, four ways to hold activations:
keep them in GPU memory, selective recompute, full (layer-wise) recompute, and offload
(SSDTrain, adaptive rule unless ``offload_layers`` is given; or PyTorch's saved-tensor hooks with
``activation_offload_mechanism="hooks"``, every layer, to host memory). Each row is a full estimate.
Then what the freed memory buys: the largest micro-batch of the list that fits per
strategy and its throughput, and the fewest pipeline stages that fit with the resulting
bubble (SSDTrain arXiv 2408.10013: "bigger micro-batch, fewer pipeline bubbles").
"""

from __future__ import annotations

from typing import Any

from dse.errors import InputError

STRATEGIES = ("keep", "selective", "full", "offload")


def _fields(strategy: str, target: str, only: dict[str, Any]) -> dict[str, Any]:
    """Plan fields of one strategy; ``only`` (offload_layers, activation_io_path, activation_offload_mechanism)
    applies to the offload rows only."""
    if strategy == "offload":
        return {"recompute": "none", "offload_activations": target, **only}
    return {"recompute": "none" if strategy == "keep" else strategy, "offload_activations": "none"}


def _row(strategy: str, b: int, r: dict[str, Any]) -> dict[str, Any]:
    gpu = r["memory"]["gpu"]
    ao = r.get("activation_offload", {})
    return {"strategy": strategy, "micro_batch": b, "gpu_activations": gpu["activations"], "gpu_total": gpu["total"],
            "gpu_capacity": gpu["capacity"], "fits": bool(gpu["total"] <= gpu["capacity"]),
            "feasible": r["feasible"], "iteration_s": r["time"]["iteration"],
            "tokens_per_s": r["throughput"]["tokens_per_s"], "mfu": r["throughput"]["mfu"],
            "exposed_io_s": r["time"]["io_exposed"], "recompute_s": r["time"]["recompute"],
            "layers_offloaded": ao.get("layers_offloaded", 0), "bubble_s": r["time"]["bubble"],
            "global_batch": r["plan"]["global_batch"]}


def compare(model: Any, hardware: Any, micro_batches: list[int], *, overrides: Any = (), target: str | None = None,
            stages: list[int] | None = None, **plan_fields: Any) -> dict[str, Any]:
    """ROK table over ``micro_batches`` and the stage scan over ``stages`` (None: powers of two that fit)."""
    from dse.estimate import resolve, run
    from dse.estimate.backends import gpu_system

    if not micro_batches:
        raise InputError("--micro-batches: give at least one micro-batch size, e.g. 4,8,16,32")
    only = {k: plan_fields.pop(k) for k in ("offload_layers", "activation_io_path", "activation_offload_mechanism")
            if plan_fields.get(k) is not None}
    m0, hw0, p0 = resolve(model, hardware, None, overrides, **plan_fields)
    s0 = gpu_system(hw0, "dse rok")
    hooks = only.get("activation_offload_mechanism") == "hooks"
    if target is None:   # saved-tensor hooks copy to pinned host memory only
        target = "ssd" if s0.node.storage is not None and not hooks else "host"
    rows = []
    for b in micro_batches:
        for strategy in STRATEGIES:
            fields = {**plan_fields, **_fields(strategy, target, only), "micro_batch": b}
            m, s, p = resolve(m0, s0, None, overrides, **fields)
            rows.append(_row(strategy, b, run(m, s, p)))
    best = []
    keep_best = None
    for strategy in STRATEGIES:
        fit = [r for r in rows if r["strategy"] == strategy and r["feasible"]]
        top = max(fit, key=lambda r: r["micro_batch"]) if fit else None
        entry: dict[str, Any] = {"strategy": strategy, "micro_batch": top["micro_batch"] if top else None,
                 "tokens_per_s": top["tokens_per_s"] if top else None}
        if strategy == "keep":
            keep_best = entry["tokens_per_s"]
        best.append(entry)
    for entry in best:
        entry["speedup_vs_keep"] = entry["tokens_per_s"] / keep_best if entry["tokens_per_s"] and keep_best else None
    out = {"model": m0.name, "hardware": s0.name, "target": target,
           "mechanism": only.get("activation_offload_mechanism", "forwarding"), "rows": rows, "best": best}
    out.update(_stage_scan(m0, s0, overrides, target, stages, min(micro_batches), {**plan_fields, "dp": p0.dp}, only))
    return out


def _stage_scan(model: Any, system: Any, overrides: Any, target: str, stages: list[int] | None, b: int,
                plan_fields: dict[str, Any], only: dict[str, Any]) -> dict[str, Any]:
    """Fewest pipeline stages (from ``stages``) that fit per strategy, at micro-batch ``b`` and a fixed global batch."""
    from dse.estimate import resolve, run

    tp, dp = plan_fields.get("tp", 1), plan_fields["dp"]
    if stages is None:
        most = max(1, min(model.layers, system.gpus // (tp * dp)))
        stages = [p for p in (1, 2, 4, 8, 16, 32, 64) if p <= most]
    stages = sorted(set(stages))
    if len(stages) < 2:
        return {}
    gb = plan_fields.get("global_batch") or b * dp * 4 * max(stages)
    scan = []
    for strategy in STRATEGIES:
        found: dict[str, Any] = {"strategy": strategy, "pp": None}
        for pp in stages:
            fields = {**plan_fields, **_fields(strategy, target, only), "micro_batch": b, "pp": pp, "dp": dp,
                      "global_batch": gb}
            m, s, p = resolve(model, system, None, overrides, **fields)
            r = run(m, s, p)
            if r["feasible"]:
                t = r["time"]
                found = {"strategy": strategy, "pp": pp, "iteration_s": t["iteration"],
                         "bubble_fraction": t["bubble"] / t["iteration"],
                         "tokens_per_s": r["throughput"]["tokens_per_s"]}
                break
        scan.append(found)
    return {"stages": scan, "stages_micro_batch": b, "stages_global_batch": gb}

