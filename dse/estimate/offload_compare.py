"""One scenario under ZeRO-Infinity, SmartUpdate and SmartUpdate + compression, and over drive counts.

This is how a user decides whether computational storage pays: the same model, GPU and
plan with (1) the optimizer on a RAID0 of plain NVMe drives and the CPU (ZeRO-Infinity),
(2) the update on every drive's accelerator (Smart-Infinity's SmartUpdate with the
transfer handler), (3) the same with top-k gradient compression. The baseline can run on
another system (``baseline_hw``, e.g. the same box with plain drives) so that throughput
per dollar compares what one would buy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

DEFAULT_PLAN = dict(zero=3, offload_params="cpu", recompute="full")


def variant_plans(compression: float = 0.02) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("ZeRO-Infinity", dict(offload_optimizer="nvme", gradient_compression=1.0)),
        ("SmartUpdate", dict(offload_optimizer="csd", gradient_compression=1.0)),
        (f"SmartUpdate + top-k {compression:g}", dict(offload_optimizer="csd", gradient_compression=compression)),
    ]


def default_drive_counts(count: int) -> list[int]:
    """1, 2, 4, 6, 8, ... up to the hardware's drive count (and the count itself)."""
    out = [n for n in (1, 2, 4, 6, 8, 12, 16, 24, 32) if n < count]
    return out + [count]


def as_plain_drives(system: Any) -> Any:
    """The same system with plain drives in place of computational SSDs (priced without the accelerator).

    The default baseline of the comparison: what one would buy for ZeRO-Infinity. Speeds are
    unchanged (the baseline never uses the accelerator).
    """
    storage = system.node.storage
    if storage is None or storage.device.near_storage is None:
        return system
    device = dataclasses.replace(storage.device, near_storage=None)
    node = dataclasses.replace(system.node, storage=dataclasses.replace(storage, device=device))
    return dataclasses.replace(system, node=node)


def _summary(r: dict[str, Any]) -> dict[str, Any]:
    return {"time": r["time"], "traffic": r["traffic"], "tokens_per_s": r["throughput"]["tokens_per_s"],
            "cost": r["cost"], "energy": r["energy"], "bottleneck_link": r["offload"]["bottleneck_link"],
            "memory": r["memory"], "feasible": r["feasible"], "violations": r["violations"]}


def compare(model: Any, hw: Any, baseline_hw: Any = None, *, drives: int | None = None, compression: float = 0.02,
            scaling: list[int] | None = None, overrides: Any = (), **plan_fields: Any) -> dict[str, Any]:
    """Evaluate the three variants at ``drives`` and the scaling over ``scaling`` drive counts.

    ``model``/``hw``/``baseline_hw`` are catalog names, files or spec objects; ``plan_fields``
    are plan fields (``micro_batch=4, seq_len=1024, ...``) applied to every variant on top of
    ZeRO-3 with fp16 parameters in host DRAM and full recomputation. Returns a dict (the
    JSON of ``dse offload-compare``).
    """
    from dse.errors import InputError
    from dse.estimate import resolve, run
    from dse.estimate.backends import gpu_system

    base_fields = {**DEFAULT_PLAN, **{k: v for k, v in plan_fields.items() if v is not None}}
    variants = variant_plans(compression)
    specs = []
    for k, (label, fields) in enumerate(variants):
        where = baseline_hw if (k == 0 and baseline_hw is not None) else hw
        spec = resolve(model, where, None, overrides, **{**base_fields, **fields, "ssds": drives})
        if k == 0 and baseline_hw is None:
            spec = (spec[0], as_plain_drives(spec[1]), spec[2])
        specs.append((label, spec))
    m, hw_spec, _ = specs[1][1]
    system = gpu_system(hw_spec, "dse offload-compare")
    storage = system.node.storage
    assert storage is not None   # the variants offload to the drives: the plan rules require them
    count = drives if drives is not None else storage.count
    results = []
    params = None
    for label, (mm, ss, pp) in specs:
        r = run(mm, ss, pp)
        params = r["model"]["params"]
        results.append({"label": label, **_summary(r)})
    t0 = results[0]["time"]["iteration"]
    k0 = results[0]["cost"]["tokens_per_s_per_kusd"]
    for v in results:
        v["speedup"] = t0 / v["time"]["iteration"]
        v["per_dollar_vs_baseline"] = v["cost"]["tokens_per_s_per_kusd"] / k0

    counts = list(scaling) if scaling else default_drive_counts(count)
    if any(n < 1 for n in counts):
        raise InputError(f"--scaling {','.join(map(str, counts))}: drive counts must be at least 1")
    times: dict[str, list[float]] = {label: [] for label, _ in variants}
    for n in counts:
        for label, (mm, ss, pp) in specs:
            times[label].append(run(mm, ss, dataclasses.replace(pp, ssds=n))["time"]["iteration"])
    out = {"model": m.name, "params": params, "hw": system.name,
           "baseline_hw": specs[0][1][1].name, "drives": count, "compression": compression,
           "variants": results, "scaling": {"drives": counts, "labels": [label for label, _ in variants],
                                            "iteration": times}}
    return out

