"""Compare the measured kernel profiles of ``dse measure --profile`` with dse's kernel times, per category.

For each ``kind: profile`` row (and its scenario's step time and peak allocated memory) of a measurement file
(``data/h200/hf_families.jsonl``, ``data/h200/gpt2_hf.jsonl``, ``data/h100_hf_training.jsonl``) this prints the
measured device time per kernel category (GEMM, element-wise, attention, copies) next to what dse's kernel table
for the same plan prices: every row of the layer table (times
the layers; the forward twice under full recomputation), the embedding and the head, each row at its kernel time
(:func:`dse.estimate.kernel_table.kernel_time`: GEMMs at their shape's efficiency, element-wise rows as bytes over
the GPU's copy rate plus the fixed time per kernel). Host time is left out on both sides: this is the GPU's side.
``-v`` lists dse's per-row times; ``--kernels N`` the profile's N largest kernels and aten ops.

Usage:
    python scripts/profile_compare.py data/h200/hf_families.jsonl [--hw dgx-h200] [--match pythia] [-v]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: dse's row kinds (and GEMM classes) as the profile's categories
_CATEGORY = {"gemm": "gemm", "flash": "attention", "elementwise": "elementwise"}


def row_times(model, plan, gpu) -> dict[str, tuple[str, float, float]]:
    """part:row -> (category, forward seconds per step, backward seconds per step) over all layers."""
    from dse.estimate.kernel_table import cost_of, kernel_tables, kernel_time
    from dse.formulas import compute as C
    from dse.formulas.precision import peak_flops, recipe_of

    r = recipe_of(plan)
    peak = peak_flops(gpu.peak_flops, r.gemm_dtype)
    hw = cost_of(gpu, peak, peak_flops(gpu.peak_flops, r.attention_dtype), peak_flops(gpu.peak_flops, r.head_dtype),
                 r.activations)
    tables = kernel_tables(model, plan, r)
    out = {}
    for part, count in (("layer", model.layers), ("embedding", 1), ("head", 1)):
        for name, row in tables[part].items():
            if not isinstance(row, dict) or row.get("kind") not in _CATEGORY:
                continue
            f, b = kernel_time(row, hw, C)
            rerun = part == "layer" and plan.recompute == "full" and "stopped" not in row
            out[f"{part}:{name}"] = (_CATEGORY[row["kind"]], float(f) * count * (2 if rerun else 1), float(b) * count)
    return out


def main(argv: list[str]) -> None:
    from dse.calibrate.measurements import plan_for, predict, read
    from dse.catalog import load_system

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--hw", default="dgx-h200")
    ap.add_argument("--match", default="", help="only rows whose name (model attn bB sS rc-R) contains this text")
    ap.add_argument("-v", action="store_true", help="dse's per-row times")
    ap.add_argument("--kernels", type=int, default=0, help="the profile's N largest kernels and ops")
    a = ap.parse_args(argv)
    system = load_system(a.hw)
    gpu = system.node.gpu
    base = {m.name: m for m in read(a.file)}
    for line in open(a.file):
        p = json.loads(line)
        if p.get("kind") != "profile":
            continue
        name = f"{p['model']} {p['attn']} b{p['b']} s{p['s']} rc-{p.get('recompute', 'none')}"
        if a.match not in name:
            continue
        m = base.get(name)
        if m is None:
            continue
        plan = plan_for(m, system)
        t, mem = predict(m, system, plan)
        rows = row_times(m.model, plan, gpu)
        dse = {c: sum(f + b for cat, f, b in rows.values() if cat == c) for c in ("gemm", "elementwise", "attention")}
        got = p["device_s_by_category"]
        print(f"{name}: time {m.time_s * 1e3:.1f} ms, dse {t * 1e3:.1f} ({t / m.time_s - 1:+.1%}); peak allocated "
              f"{m.peak_bytes / 2**30:.2f} GiB, dse {mem / 2**30:.2f} ({mem / m.peak_bytes - 1:+.1%})")
        for c in ("gemm", "elementwise", "attention", "memcpy"):
            meas, est = got.get(c, 0.0) * 1e3, dse.get(c, 0.0) * 1e3
            count = p["kernels_by_category"].get(c, 0)
            print(f"   {c:12s} measured {meas:8.2f} ms  dse {est:8.2f} ms  kernels {count}")
        if a.v:
            for key, (cat, f, b) in sorted(rows.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
                print(f"      {key:32s} {cat:12s} fwd {f * 1e3:8.3f} bwd {b * 1e3:8.3f} ms")
        for kind in ("kernels", "ops")[: 2 if a.kernels else 0]:
            for entry in p[kind][: a.kernels]:
                print(f"      {kind[:-1]} " + " ".join(f"{x * 1e3:8.3f}ms" if isinstance(x, float) else str(x)
                                                  for x in entry))


if __name__ == "__main__":
    main(sys.argv[1:])
