"""Hecaton (Huang et al., arXiv 2407.05784) weak scaling: model and chiplet count grow together.

From Llama-2-70B on 8 x 8 dies to Llama-3.1-405B, with models interpolated between them
(geometric in hidden size, FFN ratio, depth and vocabulary; 128-wide heads, 8 KV heads) and the
die count grown in proportion to the per-layer weight parameters (the research note's "hardware
scaled with P", docs/reference/chiplet.md §2d): for each even square mesh q x q (SUMMA needs a square;
an odd q would leave Megatron's ring without a nearest-neighbour cycle) the model whose per-layer
parameters are q^2/64 times Llama-2-70B's, ending at Llama-3.1-405B on 16 x 16 (238 dies ideal).
The die (compute, SRAM, links) stays that of ``chiplet-train-8x8``; the HBM stacks on the package
edge grow with the model's parameters so its training state fits.

(a) compute-to-communication ratio (GEMM FLOP per NoP byte per die, one layer, forward +
    backward) for Megatron 1D tensor parallelism, SUMMA 2D (Optimus) and the 2D weight-stationary
    all-gather / reduce-scatter scheme (dse's reconstruction of Hecaton's method); the research
    note's worked check (its own conventions, ``dse.formulas.chiplet.worked_check_ratio``) overlaid;
(b) time per token of one training iteration from ``dse.estimate``;
(c) the 2D scheme's speedup over Megatron 1D against the paper's headline numbers
    (4.98x on Llama-2-70B in v1, 5.29x on Llama-3.1-405B in v2, abstracts; their hardware is not
    known, so these are reference points, not a target the stand-in package was tuned to).

    python examples/hecaton.py --out figures/ [--json]

Uses only ``dse.estimate`` (model and package changes are ``overrides``) and ``dse.formulas``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import yaml

import dse
from dse.formulas import chiplet, transformer

BASE = dict(hidden=8192, ffn=28672, layers=80, vocab=32000)        # Llama-2-70B
TARGET = dict(hidden=16384, ffn=53248, layers=126, vocab=128256)   # Llama-3.1-405B
MESHES = (8, 10, 12, 14, 16)          # q x q dies; even q, so that Megatron's ring is a nearest-neighbour cycle
SCHEMES = {"megatron-1d": "Megatron 1D TP", "summa-2d": "SUMMA 2D (Optimus)",
           "hecaton-2d": "2D weight-stationary AG/RS"}
PLAN = dict(micro_batch=1, global_batch=16, seq_len=4096, recompute="full")
HEAD_DIM, KV_HEADS = 128, 8
# The abstracts' speedups and the research note's worked table (docs/reference/chiplet.md §2d), with their sources in
# data/published/chiplet.yaml (the numbers `dse validate chiplet` checks).
PUBLISHED = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "published" / "chiplet.yaml").read_text())
PUBLISHED_SPEEDUP = {"Llama-2-70B (v1)": (0.0, PUBLISHED["hecaton_headline"]["values"]["time"]),
                     "Llama-3.1-405B (v2)": (1.0, PUBLISHED["hecaton_v2_headline"]["values"]["time"])}
_WORKED = PUBLISHED["worked_ratio"]["values"]
NOTE_WORKED = {(scheme, n): _WORKED[model][n][k] for model, n in (("Llama2-70B", 64), ("Llama3.1-405B", 239))
               for k, scheme in enumerate(("megatron-1d", "hecaton-2d"))}


def shape(t: float) -> dict:
    """The model at fraction ``t`` of the way from Llama-2-70B to Llama-3.1-405B."""
    step = HEAD_DIM * KV_HEADS
    h = int(round(BASE["hidden"] * (TARGET["hidden"] / BASE["hidden"]) ** t / step)) * step
    ra, rb = BASE["ffn"] / BASE["hidden"], TARGET["ffn"] / TARGET["hidden"]
    ffn = int(round(ra * (rb / ra) ** t * h / 256)) * 256
    layers = int(round(BASE["layers"] * (TARGET["layers"] / BASE["layers"]) ** t))
    vocab = int(round(BASE["vocab"] * (TARGET["vocab"] / BASE["vocab"]) ** t))
    return dict(hidden=h, heads=h // HEAD_DIM, ffn=ffn, layers=layers, vocab=vocab)


def layer_params(m: dict) -> int:
    return chiplet.gemm_parameters(chiplet.layer_gemms(m["hidden"], m["heads"], KV_HEADS, HEAD_DIM, m["ffn"]))


def params(m: dict) -> float:
    return transformer.parameter_count(m["layers"], m["hidden"], m["heads"], KV_HEADS, HEAD_DIM, m["ffn"], m["vocab"],
                                       ffn_type="swiglu", norm="rmsnorm", bias=False, tied=False)


def model_for(dies: int) -> tuple[float, dict]:
    """The interpolated model whose per-layer parameters are closest to dies/64 times Llama-2-70B's."""
    p0 = layer_params(shape(0.0))
    candidates = [(t, shape(t)) for t in np.linspace(0.0, 1.0, 401)]
    return min(candidates, key=lambda c: abs(64 * layer_params(c[1]) / p0 - dies))


def compute() -> dict:
    m0 = shape(0.0)
    rows = []
    for q in MESHES:
        t, m = (1.0, shape(1.0)) if q == MESHES[-1] else model_for(q * q)   # end exactly at Llama-3.1-405B
        ideal = 64 * layer_params(m) / layer_params(m0)
        stacks_per_side = math.ceil(2 * params(m) / params(m0) * 32 / (4 * q))   # 2 per die-side at 8 x 8
        overrides = [f"model.name=llama-h{m['hidden']}-l{m['layers']}", f"model.hidden={m['hidden']}",
                     f"model.heads={m['heads']}", f"model.ffn_hidden={m['ffn']}", f"model.layers={m['layers']}",
                     f"model.vocab={m['vocab']}", f"hardware.rows={q}", f"hardware.cols={q}",
                     f"hardware.dram.per_attach={stacks_per_side}"]
        row = {"t": float(t), "model": f"h{m['hidden']} L{m['layers']}", "params": params(m),
               "layer_params": layer_params(m),
               "ideal_dies": ideal, "dies": q * q, "mesh": f"{q}x{q}", "stacks_per_side": stacks_per_side}
        for scheme in SCHEMES:
            r = dse.estimate("llama2-70b", "chiplet-train-8x8", overrides=overrides, chiplet_scheme=scheme, **PLAN)
            row[scheme] = {"ratio": r["chiplet"]["compute_to_communication"], "time_per_token": r["time"]["per_token"],
                           "mfu": r["throughput"]["mfu"], "feasible": r["feasible"],
                           "violations": [v.split(":")[0] for v in r["violations"]]}
        rows.append(row)
    worked = {f"{s} {n}": chiplet.worked_check_ratio(s, layer_params(shape(0.0 if n == 64 else 1.0)),
                                                     shape(0.0 if n == 64 else 1.0)["hidden"],
                                                     shape(0.0 if n == 64 else 1.0)["ffn"], 8, n)
              for s, n in NOTE_WORKED}
    return {"rows": rows, "note_worked_check_dse": worked}


def report(data: dict) -> str:
    lines = ["Weak scaling on chiplets (die fixed; dies ~ per-layer parameters; 4096-token micro-batches)",
             f"{'model':<14}{'params':>9}{'mesh':>7}  " + "".join(f"{s:>28}" for s in SCHEMES),
             f"{'':<14}{'':>9}{'':>7}  " + "".join(f"{'FLOP/NoP B  us/token  fits':>28}" for _ in SCHEMES)]
    for row in data["rows"]:
        cells = "".join(f"{row[s]['ratio']:>11.1f}{1e6 * row[s]['time_per_token']:>10.1f}"
                        f"{'  yes' if row[s]['feasible'] else '   no':>7}" for s in SCHEMES)
        lines.append(f"{row['model']:<14}{row['params'] / 1e9:>8.1f}B{row['mesh']:>7}  {cells}")
    first, last = data["rows"][0], data["rows"][-1]
    lines += ["", "ratio last / first: " + ", ".join(
        f"{s} {last[s]['ratio'] / first[s]['ratio']:.2f}" for s in SCHEMES)]
    lines.append("2D over 1D speedup (time per token): " + ", ".join(
        f"{row['model']} {row['megatron-1d']['time_per_token'] / row['hecaton-2d']['time_per_token']:.2f}x"
        for row in data["rows"]))
    lines.append("published (abstracts): " + ", ".join(f"{k} {v[1]}x" for k, v in PUBLISHED_SPEEDUP.items()))
    lines.append("research note worked check (its conventions): " + ", ".join(
        f"{s} N={n}: {v}" for (s, n), v in NOTE_WORKED.items()))
    return "\n".join(lines)


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    dies = np.array([r["dies"] for r in rows])
    colors = {"megatron-1d": "#C44E52", "summa-2d": "#8172B2", "hecaton-2d": "#2ca02c"}
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2))
    for scheme, label in SCHEMES.items():
        ratio = [r[scheme]["ratio"] for r in rows]
        tpt = [1e6 * r[scheme]["time_per_token"] for r in rows]
        fits = [r[scheme]["feasible"] for r in rows]
        for ax, ys in ((axes[0], ratio), (axes[1], tpt)):
            ax.plot(dies, ys, color=colors[scheme], label=label)
            ax.scatter(dies[fits], np.asarray(ys)[fits], color=colors[scheme], zorder=3)
            ax.scatter(dies[~np.asarray(fits)], np.asarray(ys)[~np.asarray(fits)], facecolor="white",
                       edgecolor=colors[scheme], zorder=3)
    for (scheme, n), v in NOTE_WORKED.items():
        axes[0].plot(n, v, marker="*", markersize=13, color=colors[scheme], markeredgecolor="black", linestyle="none",
                     label=(f"research note §2d worked check, {'1D' if '1d' in scheme else '2D'} "
                            "(its approximate volumes)") if n == 64 else None)
    axes[0].set_ylabel("compute / communication (FLOP per NoP byte per die)")
    axes[0].set_title("(a) compute-to-communication ratio, one layer", fontsize=10)
    axes[1].set_ylabel("time per token (µs)")
    axes[1].set_title("(b) time per token, one training iteration", fontsize=10)
    axes[1].set_ylim(0, None)
    for ax in axes[:2]:
        ax.set_xlabel("dies N (model grows with N)")
        ax.grid(alpha=0.3)
        ax.set_xticks(dies, [f"{n}\n{r['model']}" for n, r in zip(dies, rows)], fontsize=7.5)
    axes[0].set_ylim(0, 1.75 * max(r["hecaton-2d"]["ratio"] for r in rows))
    axes[0].legend(fontsize=7.5, loc="upper right")
    axes[1].plot([], [], marker="o", linestyle="none", markerfacecolor="white", markeredgecolor="grey",
                 label="hollow: does not fit (SRAM)")
    axes[1].legend(fontsize=7.5, loc="upper left")
    speed = [r["megatron-1d"]["time_per_token"] / r["hecaton-2d"]["time_per_token"] for r in rows]
    summa = [r["summa-2d"]["time_per_token"] / r["hecaton-2d"]["time_per_token"] for r in rows]
    ax = axes[2]
    ax.plot(dies, speed, marker="o", color="#2ca02c", label="2D weight-stationary over Megatron 1D (dse)")
    ax.plot(dies, summa, marker=".", color="#bbbbbb", linestyle=":", linewidth=1,
            label="2D weight-stationary over SUMMA (dse; not the published comparison)")
    for label, (t, v) in PUBLISHED_SPEEDUP.items():
        n = dies[0] if t == 0.0 else dies[-1]
        ax.plot(n, v, marker="*", markersize=15, color="black", linestyle="none")
        ax.annotate(f"Hecaton {label}: {v}x", (n, v), textcoords="offset points", xytext=(6 if t == 0 else -6, 6),
                    ha="left" if t == 0 else "right", fontsize=8)
    ax.plot([], [], marker="*", markersize=12, color="black", linestyle="none",
            label="published over Megatron TP (abstracts; hardware unknown)")
    ax.annotate(f"like for like (over Megatron TP): dse {speed[0]:.2f}x vs published "
                f"{PUBLISHED_SPEEDUP['Llama-2-70B (v1)'][1]}x\non Llama-2-70B -- a documented miss "
                "(dse validate chiplet -v)", (dies[0], speed[0]), textcoords="offset points", xytext=(8, -30),
                fontsize=7.5, color="#2ca02c")
    ax.set_xlabel("dies N (model grows with N)")
    ax.set_ylabel("speedup in time per token (x)")
    ax.set_title("(c) speedup of the 2D scheme", fontsize=10)
    ax.set_xticks(dies, [str(n) for n in dies])
    ax.set_ylim(0, 6.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower right")
    fig.suptitle("Hecaton-style weak scaling on chiplet packages: Llama-2-70B on 8x8 dies -> Llama-3.1-405B "
                 "(chiplet-train-8x8 dies, 4096-token micro-batches, full recompute)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."), help="directory for hecaton.png")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON instead of tables")
    args = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("examples need matplotlib: pip install 'dse[plot]'", file=sys.stderr)
        return 2
    data = compute()
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "hecaton.png"
    plot(data, png)
    pub = {"speedup_over_megatron": {k: v[1] for k, v in PUBLISHED_SPEEDUP.items()},
           "note_worked_check": {f"{s} {n}": v for (s, n), v in NOTE_WORKED.items()}}
    print(json.dumps({"png": str(png), "model": data, "published": pub}) if args.json else
          report(data) + f"\n\nwrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
