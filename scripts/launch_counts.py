"""Kernel launches per training step: the profiles' exact counts against the launches dse's host floor prices.

For each ``kind: profile`` row of the measurement files (``dse measure --impl hf --profile``: every CUDA kernel,
memcpy and memset of one forward + backward step, ``kernels_by_category``) this prints the measured count next to
what the pytorch stack's kernel tables launch for the same plan (:func:`dse.formulas.kernels.table_launches`):
the layer's forward and backward launches times the layers (the forward's again under full recompute, as the host
floor prices it: :func:`dse.estimate.passes.layer_host_times`), plus the embedding's and the head's (loss included).

The profiles' memcpy category is split by what it is: ``Memset (Device)`` -- the memsets cuBLAS and PyTorch's
reductions issue inside a GEMM or reduction call, which dse prices per GEMM call (stacks/pytorch.yaml
``gemm_memsets``: :func:`dse.formulas.kernels.library_memsets`) beside the launches -- and the DtoD copies, RMSNorm's
``pow(1)`` in its backward (a same-dtype contiguous ``copy_``: cudaMemcpyAsync), one per RMSNorm-kind module a step,
which dse prices as one of the norm row's kernels (so they count with the kernels here); the DtoH / HtoD copies (the
loss read back: 0-2 a step) are left out of both. Per family and recompute mode: every kernel, memcpy and memset
measured against dse's launches and memsets (ratio), the kernels and DtoD copies against dse's launches (ratio2),
the memsets measured and dse's; ``-v`` every row.

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
    from dse.estimate.kernel_table import kernel_tables, stack_spec
    from dse.formulas.kernels import gemm_launches, table_launches
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
    lf, lb, lr = gemm_launches(tables["layer"])
    calls = n * (lf + lb + (lr if rec else 0)) + sum(sum(gemm_launches(tables[p])[:2]) for p in ("embedding", "head"))
    # a mean layer may price a row on a share of the layers (NoPE: rotary_share): whole launches over the model
    return {"layer_f": f, "layer_b": b, "layer_r": rec, "ends": ends, "total": round(n * (f + b + rec) + ends),
            "gemm": round(n * (gf + gb + (gf if rec else 0)) + g_ends),
            "memsets": round(stack_spec(plan.stack).gemm_memsets * calls)}


#: the norms whose backward copies their fp32 input once (pow(2)'s gradient: ``self.pow(1)``, a DtoD memcpy)
POW_NORMS = ("rmsnorm", "gemma_rmsnorm", "fp32_rmsnorm", "fp32_layernorm")


def pow_copies(model) -> int:
    """DtoD copies a step of ``model``'s RMSNorm-kind modules: one per module -- the layers' norms and QK-norms (two
    modules, q_norm and k_norm) and the final norm. Source: torch's pow_backward computes ``grad * exponent *
    self.pow(exponent - 1)`` (tools/autograd/derivatives.yaml), aten/src/ATen/native/Pow.cpp copies the base for an
    exponent of 1 (``out.copy_(base)``), and a contiguous copy between tensors of one dtype is cudaMemcpyAsync
    (aten/src/ATen/native/cuda/Copy.cu); the CPU trace shows it as ``pow`` over the fp32 (T, h) input in each RMSNorm's
    backward (tests/fixtures/pytorch_stack_trace_llama.json)."""
    if model.norm_kind not in POW_NORMS:
        return 0
    return model.layers * (model.layer_norms + 2 * bool(model.qk_norm)) + int(bool(model.final_norm))


def measured(p: dict) -> tuple[int, int, int, int, int]:
    """(every kernel, memcpy and memset; the kernels alone; the GEMMs; the memsets; the DtoD copies). cuBLAS and
    PyTorch's reductions issue memsets of their own inside one operator's call (the count grows with the micro-batch
    at equal ops: Qwen2-0.5B b2 171, b8 253); the profile lists them by name (``Memset (Device)``, ``Memcpy DtoD``)."""
    n = p["kernels_by_category"]
    named = {name: c for _t, name, c in p["kernels"]}
    return (sum(n.values()), sum(v for k, v in n.items() if k != "memcpy"), n.get("gemm", 0),
            named.get("Memset (Device)", 0), named.get("Memcpy DtoD (Device -> Device)", 0))


def rows(files=FILES):
    """(family, attn, b, recompute, file tag, measured, dse dict) for every profiled dense row (dse's ``copies``:
    :func:`pow_copies`)."""
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
            d = {**dse_launches(m, system), "copies": pow_copies(m.model)}
            yield fam, p["attn"], int(p["b"]), p.get("recompute", "none"), tag, measured(p), d


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--match", default="")
    a = ap.parse_args(argv)
    groups: dict = defaultdict(list)
    for fam, attn, b, rc, tag, meas, d in rows():
        if a.match not in f"{fam} {attn}":
            continue
        every, kernels, gemm, memsets, copies = meas
        priced = d["total"] + d["memsets"]
        groups[(fam, attn, rc)].append((every, priced, kernels + copies, d["total"], memsets, d["memsets"]))
        if a.v:
            print(f"{tag:12s} {fam:28s} {attn:5s} b{b:<2d} {rc:4s} measured {every:6d} dse {priced:6d} "
                  f"({priced / every:.3f}); kernels + DtoD {kernels + copies:6d} dse {d['total']:6d} "
                  f"({d['total'] / (kernels + copies):.3f}); memsets {memsets:4d} dse {d['memsets']:4d}; "
                  f"DtoD {copies:3d} norms {d['copies']:3d}; "
                  f"layer f/b/r {d['layer_f']}/{d['layer_b']}/{d['layer_r']} ends {d['ends']}; "
                  f"without GEMMs measured {kernels - gemm} dse {d['total'] - d['gemm']} "
                  f"({(d['total'] - d['gemm']) / (kernels - gemm):.3f})")
    print(f"{'family':24s} {'attn':5s} {'rc':4s} {'measured':>16s} {'dse':>6s} {'ratio':>6s} {'kernels+DtoD':>16s} "
          f"{'dse':>6s} {'ratio2':>6s} {'memsets':>12s} {'dse':>5s}")
    for (fam, attn, rc), v in sorted(groups.items()):
        ms, ds, ks, dk, mm, dm = ("/".join(map(str, sorted({r[i] for r in v}))) for i in range(6))
        ratio, ratio2 = (sum(r[j] / r[i] for r in v) / len(v) for i, j in ((0, 1), (2, 3)))
        print(f"{fam[:24]:24s} {attn:5s} {rc:4s} {ms:>16s} {ds:>6s} {ratio:6.3f} {ks:>16s} {dk:>6s} {ratio2:6.3f} "
              f"{mm:>12s} {dm:>5s}")


if __name__ == "__main__":
    main(sys.argv[1:])
