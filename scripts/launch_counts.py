"""Kernel launches per training step: the profiles' exact counts against the launches dse's host floor prices.

For each ``kind: profile`` row of the measurement files (``dse measure --impl hf --profile``: every CUDA kernel,
memcpy and memset of one forward + backward step, ``kernels_by_category``) this prints the measured count next to
what the pytorch stack's kernel tables launch for the same plan (:func:`dse.formulas.kernels.table_launches`):
the layer's forward and backward launches times the layers (the forward's again under full recompute, as the host
floor prices it: :func:`dse.estimate.passes.layer_host_times`), plus the embedding's and the head's (loss included).
Per family and recompute mode: measured, dse, ratio; ``-v`` every row.

Usage:
    PYTHONPATH=$PWD python scripts/launch_counts.py [-v] [--match TEXT] [FILE ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FILES = (("h200/hf_families.jsonl", "h200-hf"), ("h200/gpt2_hf.jsonl", "h200-hf"),
         ("h200/vm2/dense_families.jsonl", "h200-holdout"), ("h200/vm2/repeat_families.jsonl", "h200-holdout"),
         ("h100/gpt2_hf.jsonl", "h100"))


def dse_launches(m, system) -> dict:
    """{layer_f, layer_b, layer_r, ends, total, gemm}: the launches dse prices for measurement ``m``'s step (``gemm``:
    those of its GEMM rows: q_proj, k_proj and v_proj, gate_proj and up_proj each its own GEMM where Transformers runs
    them apart, :func:`dse.formulas.kernels.separate_linears`)."""
    from dse.calibrate.measurements import plan_for
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.kernels import table_launches
    from dse.formulas.precision import recipe_of

    plan = plan_for(m, system)
    tables = kernel_tables(m.model, plan, recipe_of(plan))
    f, b = table_launches(tables["layer"], None, 1, 1)     # one GPU: no collectives
    rec = f if plan.recompute == "full" else 0
    ends = sum(sum(table_launches(tables[p], None, 1, 1)) for p in ("embedding", "head"))
    n = m.model.layers

    def gemms(part: str) -> tuple[int, int]:
        return table_launches({k: r for k, r in tables[part].items() if r["kind"] == "gemm"}, None, 1, 1)
    gf, gb = gemms("layer")
    g_ends = sum(sum(gemms(p)) for p in ("embedding", "head"))
    # a mean layer may price a row on a share of the layers (NoPE: rotary_share): whole launches over the model
    return {"layer_f": f, "layer_b": b, "layer_r": rec, "ends": ends, "total": round(n * (f + b + rec) + ends),
            "gemm": round(n * (gf + gb + (gf if rec else 0)) + g_ends)}


def measured(p: dict) -> tuple[int, int, int]:
    """(every kernel, memcpy and memset; the kernels alone; the GEMMs): cuBLAS and cuDNN issue memsets of their own
    inside one operator's call (the count grows with the micro-batch at equal ops: Qwen2-0.5B b2 221, b8 303)."""
    n = p["kernels_by_category"]
    return sum(n.values()), sum(v for k, v in n.items() if k != "memcpy"), n.get("gemm", 0)


def rows(files=FILES):
    """(family, attn, b, recompute, file tag, measured, dse dict) for every profiled dense row."""
    from dse.calibrate.measurements import read
    from dse.catalog import data_dir, load_system
    from dse.validate import h200_holdout

    system = load_system("h200-vm")
    for f, tag in files:
        path = data_dir() / f
        base = {m.name: m for m in read(path, h200_holdout.model_ref)}
        for line in open(path):
            p = json.loads(line)
            if p.get("kind") != "profile":
                continue
            name = f"{p['model']} {p['attn']} b{p['b']} s{p['s']} rc-{p.get('recompute', 'none')}"
            m = base.get(name)
            if m is None or getattr(m.model, "experts", 0):
                continue
            fam = Path(p["model"]).parent.name if p["model"].endswith(".json") else p["model"]
            yield fam, p["attn"], int(p["b"]), p.get("recompute", "none"), tag, measured(p), dse_launches(m, system)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--match", default="")
    a = ap.parse_args(argv)
    groups: dict = defaultdict(list)
    for fam, attn, b, rc, tag, meas, d in rows():
        if a.match not in f"{fam} {attn}":
            continue
        groups[(fam, attn, rc)].append((meas[0], meas[1], d["total"]))
        if a.v:
            print(f"{tag:12s} {fam:28s} {attn:5s} b{b:<2d} {rc:4s} measured {meas[0]:6d} ({meas[1]:6d} without "
                  f"memcpy/memset) dse {d['total']:6d} ({d['total'] / meas[0]:.3f}, {d['total'] / meas[1]:.3f})  layer "
                  f"f/b/r {d['layer_f']}/{d['layer_b']}/{d['layer_r']} ends {d['ends']}; without GEMMs measured "
                  f"{meas[1] - meas[2]} dse {d['total'] - d['gemm']} "
                  f"({(d['total'] - d['gemm']) / (meas[1] - meas[2]):.3f})")
    print(f"{'family':24s} {'attn':5s} {'rc':4s} {'measured':>16s} {'no memcpy/set':>16s} {'dse':>6s} {'ratio':>6s} "
          f"{'ratio2':>6s}")
    for (fam, attn, rc), v in sorted(groups.items()):
        ms, ks, ds = ("/".join(map(str, sorted({r[i] for r in v}))) for i in range(3))
        ratio, ratio2 = (sum(r[2] / r[i] for r in v) / len(v) for i in (0, 1))
        print(f"{fam[:24]:24s} {attn:5s} {rc:4s} {ms:>16s} {ks:>16s} {ds:>6s} {ratio:6.3f} {ratio2:6.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
