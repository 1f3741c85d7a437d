"""dse's GPU time per kernel category beside each measured profile's, for every profiled eager PyTorch row.

    PYTHONPATH=$PWD python scripts/device_by_category.py [--families] [SET ...]

SET: holdout (data/h200/vm2/dense_families.jsonl), repeat (vm2/repeat_families.jsonl), h200 (h200/hf_families.jsonl,
h200/gpt2_hf.jsonl), h100-vm (h100/gpt2_hf.jsonl); default all. Each ``kind: base`` row's plan is the suites' own
(dse.calibrate.measurements.plan_for on the suite's system); its ``kind: profile`` row gives the measured device
seconds per category (dse.measure.profile.category: gemm, attention, elementwise, memcpy).

dse's side is the kernel table priced row by row (dse.estimate.kernel_cost.kernel_time; a layer's rows x layers, full
recompute re-running the rows a non-reentrant checkpoint reaches again, plus the embedding and head tables): GEMM rows
are "gemm", flash rows "attention", every element-wise row "elementwise" -- the GPU's time before the max with the
host's. It includes what dse adds per kernel (gemm_overhead, kernel_overhead: 1.67 us in the kernel + ~2.2 us of idle
between kernels on the H200), which the profile's kernel sums do not; the profile's attention category also holds
cuDNN's small fmha_reduce_head kernels, and its element-wise one the flash backward's preprocessing, which dse prices
in element-wise rows. Columns: busy (profile device seconds / measured step), err (dse's time / measured - 1),
measured / dse milliseconds and their ratio per category, and the step's share the GPU was idle (1 - busy).
``--families``: the same summed per family and set, and the mean per-category gap (dse - measured) / step over the
GPU-bound rows (busy >= 0.8).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

CATS = ("gemm", "attention", "elementwise")
SETS = {"holdout": ("h200-vm", ("h200/vm2/dense_families.jsonl",)),
        "repeat": ("h200-vm", ("h200/vm2/repeat_families.jsonl",)),
        "h200": ("h200-vm", ("h200/hf_families.jsonl", "h200/gpt2_hf.jsonl")),
        "h100-vm": ("h100-vm", ("h100/gpt2_hf.jsonl",))}


def dse_by_category(m, system) -> dict[str, float]:
    """dse's GPU seconds per category for measurement ``m`` on ``system`` (its kernel table, priced row by row)."""
    from dse.calibrate.measurements import plan_for
    from dse.estimate.kernel_table import cost_of, kernel_tables, kernel_time
    from dse.formulas import compute as C
    from dse.formulas.precision import peak_flops, recipe_of

    plan = plan_for(m, system)
    r, gpu = recipe_of(plan), system.node.gpu
    hw = cost_of(gpu, peak_flops(gpu.peak_flops, r.gemm_dtype), peak_flops(gpu.peak_flops, r.attention_dtype),
                 peak_flops(gpu.peak_flops, r.head_dtype), r.activations)
    tables = kernel_tables(m.model, plan, r)
    out = dict.fromkeys(CATS, 0.0)
    for part, n in (("layer", m.model.layers), ("embedding", 1), ("head", 1)):
        for row in tables[part].values():
            if row["kind"] == "collective":
                continue
            f, b = kernel_time(row, hw, C)
            rerun = f if plan.recompute == "full" and part == "layer" and "stopped" not in row else 0.0
            cat = {"gemm": "gemm", "flash": "attention"}.get(row["kind"], "elementwise")
            out[cat] += float(n * (f + b + rerun))
    return out


def base_rows(sets: dict, tags, model_ref=None):
    """(tag, system, measurement, its profile row or None) for each ``kind: base`` row of ``sets`` (tag -> (system,
    files under data/)) named in ``tags``; ``model_ref``: as dse.calibrate.measurements.read takes it (default:
    h200_holdout.model_ref, the rows' config.json paths)."""
    from dse.calibrate.measurements import read
    from dse.catalog import data_dir, load_system
    from dse.validate import h200_holdout as H

    for tag in tags:
        system_name, files = sets[tag]
        system = load_system(system_name)
        for f in files:
            raw = [json.loads(line) for line in open(data_dir() / f) if line.strip()]
            for m in read(data_dir() / f, model_ref or H.model_ref):
                i = int(m.where.rsplit(":", 1)[1])          # the base row's line; its profile follows it
                yield tag, system, m, raw[i] if i < len(raw) and raw[i].get("kind") == "profile" else None


def rows(sets) -> list[dict]:
    """One record per profiled dense row of ``sets``: label, measured step and dse's time, per-category seconds."""
    from dse.calibrate.measurements import predict
    from dse.validate import h200_holdout as H

    out = []
    for tag, system, m, prof in base_rows(SETS, sets):
        if prof is None or getattr(m.model, "experts", 0):
            continue
        meas = {c: prof["device_s_by_category"].get(c, 0.0) for c in (*CATS, "memcpy")}
        out.append({"set": tag, "label": H.label(m), "family": H.label(m).split(" ")[0], "step": m.time_s,
                    "dse_time": predict(m, system)[0], "measured": meas, "dse": dse_by_category(m, system)})
    return out


def _line(name: str, step: float, pred: float, meas: dict, dse: dict) -> str:
    dev = sum(meas.values())
    cells = " | ".join(f"{meas[c] * 1e3:7.1f} {dse[c] * 1e3:7.1f} {dse[c] / meas[c] if meas[c] else 0:4.2f}"
                       for c in CATS)
    return (f"{name:46s} {dev / step:4.2f} {100 * (pred / step - 1):+6.1f} | {cells} | {meas['memcpy'] * 1e3:5.2f} "
            f"| {100 * (1 - dev / step):5.1f}")


def main(argv: list[str]) -> None:
    families = "--families" in argv
    sets = [a for a in argv if a != "--families"] or list(SETS)
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        sys.exit(f"device_by_category.py: unknown set {unknown[0]!r}; allowed: {', '.join(SETS)}")
    recs = rows(sets)
    head = " | ".join(f"{c[:11]:>11s} meas/dse/ratio" for c in CATS)
    print(f"{'row':46s} busy    err | {head} | memcpy | idle %")
    if not families:
        for r in recs:
            print(_line(f"{r['set']}: {r['label']}", r["step"], r["dse_time"], r["measured"], r["dse"]))
        return
    groups: dict = defaultdict(list)
    for r in recs:
        groups[(r["set"], r["family"])].append(r)
    for (tag, fam), rs in groups.items():
        meas = {c: sum(r["measured"][c] for r in rs) for c in (*CATS, "memcpy")}
        dse = {c: sum(r["dse"][c] for r in rs) for c in CATS}
        print(_line(f"{tag}: {fam} ({len(rs)} rows)", sum(r["step"] for r in rs), sum(r["dse_time"] for r in rs),
                    meas, dse))
    bound = [r for r in recs if sum(r["measured"].values()) >= 0.8 * r["step"]]
    if bound:
        gap = {c: 100 * sum((r["dse"][c] - r["measured"][c]) / r["step"] for r in bound) / len(bound) for c in CATS}
        gaps = " ".join(f"{c} {v:+.1f}" for c, v in gap.items())
        idle = 100 * sum(1 - sum(r["measured"].values()) / r["step"] for r in bound) / len(bound)
        err = 100 * sum(r["dse_time"] / r["step"] - 1 for r in bound) / len(bound)
        print(f"GPU-bound rows (busy >= 0.8): {len(bound)}; mean error {err:+.1f} %; mean (dse - measured) / step, "
              f"%: {gaps}; mean idle share of the step {idle:.1f} %")


if __name__ == "__main__":
    main(sys.argv[1:])
