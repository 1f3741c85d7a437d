"""ZeRO-Infinity (Rajbhandari et al., SC'21, arXiv 2104.07857) Fig. 3 style: efficiency vs bandwidth per tensor class.

The paper's bandwidth-requirement analysis (Sec. 4.1): a tensor class that streams over a link
without overlap leaves the GPU computing a share ``ait x bw / (ait x bw + peak)`` of the time,
with arithmetic intensity ``ait`` = seq x bsz (parameters and gradients), seq x bsz / 4
(optimizer states) and 24 hd ci (activation checkpoints), at an achievable peak of 70 TFLOP/s.

(a) parameters and gradients, (b) optimizer states, for several tokens per GPU (bsz x seq);
(c) activation checkpoints for several hidden sizes (one checkpoint per block). Overlaid:
the paper's stated thresholds (Sec. 4.1 as transcribed in research note storage_offload.md §3.2)
and the note's recomputed checkpoints (§3.3: 50 % at 68 GB/s for params/grads at 1024 tokens,
90 % at 1.23 TB/s for optimizer states at 2048 tokens, 50 % at 1.42 / 0.36 GB/s for activation
checkpoints at hd 2048 / 8192); and, from ``dse.estimate``, what one RTX A5000 server gets when
it offloads GPT-2 4.0B to host memory and NVMe (the ``offload.required_bandwidth`` section).

    python examples/zero_infinity.py --out figures/ [--json]

Uses only ``dse.formulas.offload`` and ``dse.estimate``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

import dse
from dse.formulas import offload

PEAK = 70e12                                   # achievable FLOP/s per GPU in the paper's Fig. 3 (V100)
BANDWIDTH = np.logspace(8, 13.5, 221)          # 0.1 GB/s .. 3.2 TB/s
TOKENS = (1024, 2048, 4096, 8192)              # bsz x seq per GPU
HIDDEN = (2048, 8192, 32768)

# (class, bandwidth [B/s], efficiency, what it is): the paper's statements as transcribed in the research note §3.2
# (secondary sources; the paper text was not readable) and the note's recomputation of them (§3.3), from
# data/published/zero_infinity.yaml.
_PUB = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "published" / "zero_infinity.yaml").read_text())
PUBLISHED = [(key.split("_hd")[0], *e["value"], e["source"]) for key, e in _PUB["thresholds"]["values"].items()]
RECOMPUTED = [(key.split("_hd")[0], *e["value"], e["source"]) for key, e in _PUB["recomputed"]["values"].items()]
SERVER = ("smart-infinity-gpt2-4.0b", "plain-nvme-a5000")
SERVER_PLAN = dict(micro_batch=4, global_batch=4, seq_len=1024, recompute="full", attention="math", zero=3,
                   precision="fp16", offload_params="cpu", offload_optimizer="nvme")


def compute() -> dict:
    out = {"bandwidth": BANDWIDTH.tolist(), "peak_flops": PEAK, "curves": {}, "required": {}}
    for t in TOKENS:
        for cls in ("params_grads", "optimizer"):
            ait = offload.arithmetic_intensity(cls if cls == "optimizer" else "params", t, 1)
            out["curves"][f"{cls} {t} tokens"] = offload.offload_efficiency(ait, BANDWIDTH, PEAK).tolist()
            out["required"][f"{cls} {t} tokens"] = {
                "50%": offload.required_bandwidth(0.5, ait, PEAK), "90%": offload.required_bandwidth(0.9, ait, PEAK)}
    for hd in HIDDEN:
        ait = offload.arithmetic_intensity("activations", 1, 1, hidden=hd)
        out["curves"][f"activations hd {hd}"] = offload.offload_efficiency(ait, BANDWIDTH, PEAK).tolist()
        out["required"][f"activations hd {hd}"] = {
            "50%": offload.required_bandwidth(0.5, ait, PEAK), "90%": offload.required_bandwidth(0.9, ait, PEAK)}
    r = dse.estimate(*SERVER, **SERVER_PLAN)
    rb = r["offload"]["required_bandwidth"]
    out["server"] = {"model": SERVER[0], "hardware": SERVER[1],
                     "tokens_per_gpu": r["plan"]["micro_batch"] * r["plan"]["seq_len"],
                     "peak_flops": r["peak_flops_per_gpu"],
                     "classes": {k: {"available": v["available"], "efficiency": v["efficiency"],
                                     "for_50pct": v["for_50pct"], "for_90pct": v["for_90pct"]}
                                 for k, v in rb.items()}}
    out["checkpoints"] = []
    for cls, tokens, hd, bw, eff, _what in RECOMPUTED:
        if cls == "activations":
            ait = offload.arithmetic_intensity("activations", 1, 1, hidden=hd)
        else:
            ait = offload.arithmetic_intensity("params" if cls == "params_grads" else cls, tokens, 1)
        out["checkpoints"].append({"class": cls, "tokens": tokens, "hidden": hd, "note_bandwidth": bw,
                                   "note_efficiency": eff, "dse_bandwidth": offload.required_bandwidth(eff, ait, PEAK),
                                   "dse_efficiency_at_note_bandwidth": offload.offload_efficiency(ait, bw, PEAK)})
    return out


def report(data: dict) -> str:
    lines = [f"ZeRO-Infinity bandwidth requirements at {PEAK / 1e12:.0f} TFLOP/s per GPU (no overlap)",
             f"{'tensor class':<28}{'50 % needs':>14}{'90 % needs':>14}"]
    for k, v in data["required"].items():
        lines.append(f"{k:<28}{v['50%'] / 1e9:>10.2f} GB/s{v['90%'] / 1e9:>10.1f} GB/s")
    lines += ["", "Checkpoints: research note §3.3 vs dse.formulas.offload"]
    for c in data["checkpoints"]:
        what = f"{c['class']} " + (f"{c['tokens']} tokens" if c["tokens"] else f"hd {c['hidden']}")
        lines.append(f"{what:<28} note {c['note_bandwidth'] / 1e9:8.2f} GB/s for {100 * c['note_efficiency']:.0f} %; "
                     f"dse {c['dse_bandwidth'] / 1e9:8.2f} GB/s")
    lines += ["", "Published thresholds (the paper's text as transcribed in research note §3.2):"]
    lines += [f"  {what}" for *_, what in PUBLISHED]
    s = data["server"]
    lines += ["", f"dse.estimate: {s['model']} on {s['hardware']} ({s['tokens_per_gpu']} tokens per GPU, "
                  f"the GPU's {s['peak_flops'] / 1e12:.0f} TFLOP/s peak x its GEMM efficiency)"]
    for k, v in s["classes"].items():
        avail = "stays on the GPU" if v["available"] is None else (
            f"available {v['available'] / 1e9:6.2f} GB/s -> efficiency {100 * v['efficiency']:5.1f} %")
        lines.append(f"  {k:<24} needs {v['for_50pct'] / 1e9:8.2f} GB/s for 50 %; {avail}")
    return "\n".join(lines)


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bw = np.asarray(data["bandwidth"]) / 1e9
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2), sharey=True)
    panels = (("params_grads", "(a) parameters and gradients", [f"params_grads {t} tokens" for t in TOKENS]),
              ("optimizer", "(b) optimizer states", [f"optimizer {t} tokens" for t in TOKENS]),
              ("activations", "(c) activation checkpoints (ci = 1)", [f"activations hd {h}" for h in HIDDEN]))
    server_key = {"params_grads": "params_grads", "optimizer": "optimizer_states", "activations": None}
    for ax, (cls, title, keys) in zip(axes, panels):
        for k in keys:
            label = k.split(" ", 1)[1]
            if cls != "activations":
                label = label.replace("tokens", "tokens (bsz x seq)")
            ax.semilogx(bw, np.asarray(data["curves"][k]) * 100, label=label)
        first = True
        for pc, b, e, _ in PUBLISHED:
            if pc == cls:
                ax.plot(b / 1e9, e * 100, marker="*", markersize=14, color="black", linestyle="none",
                        label="paper's stated threshold" if first else None)
                first = False
        for c in data["checkpoints"]:
            if c["class"] == cls:
                ax.plot(c["note_bandwidth"] / 1e9, c["note_efficiency"] * 100, marker="o", markersize=9,
                        markerfacecolor="none", markeredgecolor="red", markeredgewidth=1.6, linestyle="none",
                        label="note §3.3 recomputed" if c is next(x for x in data["checkpoints"] if x["class"] == cls)
                        else None)
        sk = server_key[cls]
        if sk is not None:
            row = data["server"]["classes"][sk]
            if row["available"] is not None:
                tokens = data["server"]["tokens_per_gpu"]
                ax.plot(row["available"] / 1e9, row["efficiency"] * 100, marker="D", markersize=8, color="#8c564b",
                        linestyle="none", label=f"dse.estimate: A5000 NVMe server\n({tokens} tokens, its own peak)")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("bandwidth per GPU (GB/s, log scale)")
        ax.grid(alpha=0.3, which="both")
        ax.set_xlim(0.1, 3200)
        ax.legend(fontsize=7.5, loc="lower right" if cls == "activations" else "upper left")
    axes[0].set_ylabel("compute efficiency (%)")
    axes[0].set_ylim(0, 105)
    fig.suptitle(f"ZeRO-Infinity (SC'21) Fig. 3: efficiency vs bandwidth at {PEAK / 1e12:.0f} TFLOP/s per GPU, "
                 "no overlap (dse.formulas.offload)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."), help="directory for zero_infinity.png")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON instead of tables")
    args = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("examples need matplotlib: pip install 'dse[plot]'", file=sys.stderr)
        return 2
    data = compute()
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "zero_infinity.png"
    plot(data, png)
    print(json.dumps({"png": str(png), "model": data, "published": [p[:3] for p in PUBLISHED]}) if args.json else
          report(data) + f"\n\nwrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
