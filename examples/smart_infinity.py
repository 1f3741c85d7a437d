"""Smart-Infinity (Jang et al., HPCA'24, arXiv 2403.06664), Figs. 3(b), 9 and 11 style, from dse's public API.

(a) per-phase time (forward / backward + gradient offload / update) of BASE (ZeRO-Infinity on a
    RAID0 of the SmartSSDs' NVMe drives), SU (SmartUpdate), SU+O (with the transfer handler) and
    SU+O+C (plus 2 % top-k compression) for GPT-2 and BERT at 4 and 8 B parameters on 6 and 10
    drives, with the paper's bars (Fig. 9) overlaid;
(b) speedup over BASE against the number of drives, A5000 and A100, with the published points
    (Fig. 9: 6 and 10 drives; Fig. 11(b) and the abstract: 2.11x on the A100 with 10 drives);
(c) BASE's own scaling with the drive count against Fig. 3(b) (RAID0 saturates after ~4 drives).

    python examples/smart_infinity.py --out figures/        # writes figures/smart_infinity.png
    python examples/smart_infinity.py --out figures/ --json # the numbers as JSON

Uses only ``dse.estimate`` (with an array of drive counts: one call per curve). The published
values (``data/published/smart_infinity.yaml``) are read from the paper's figures (research note
docs/reference/storage_offload.md §2, whose [F] readings carry ~0.3 % of full-scale reading error).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

import dse

# Every published run: one GPU, batch 4, sequence 1024, full activation checkpointing, ZeRO-3, fp16 with
# fp32 gradients, fp16 parameters in host memory, optimizer sub-groups of 4e7 (Sec. VII-A, released scripts).
PLAN = dict(micro_batch=4, global_batch=4, seq_len=1024, recompute="full", attention="math", zero=3,
            precision="fp16", grad_dtype="fp32", offload_params="cpu", sub_group_size=4e7)
VARIANTS = {
    "BASE": dict(offload_optimizer="nvme"),
    "SU": dict(offload_optimizer="csd", transfer_overlap=False),
    "SU+O": dict(offload_optimizer="csd", transfer_overlap=True),
    "SU+O+C": dict(offload_optimizer="csd", transfer_overlap=True, gradient_compression=0.02),
}
MODELS = {"GPT-2 4.0B": "smart-infinity-gpt2-4.0b", "GPT-2 8.4B": "smart-infinity-gpt2-8.4b",
          "BERT 4.0B": "smart-infinity-bert-4.0b", "BERT 8.3B": "smart-infinity-bert-8.3b"}
DRIVES = (6, 10)

# Published: Smart-Infinity Fig. 9 (A5000), (forward, backward + offload, update, total) in s; None where only the
# total was read. Speedups over BASE from the plotted line. data/published/smart_infinity.yaml (each table with its
# source; research note docs/reference/storage_offload.md §2.2), the numbers `dse validate smart-infinity` checks.
PUBLISHED = yaml.safe_load((Path(__file__).resolve().parents[1] / "data/published/smart_infinity.yaml").read_text())
LABELS = {name.removeprefix("smart-infinity-"): label for label, name in MODELS.items()}
FIG9 = {(LABELS[m], n): v for m, by_n in PUBLISHED["fig9_segments"]["values"].items() for n, v in by_n.items()}
FIG9_SPEEDUP = {("GPT-2 4.0B", n): v for n, v in PUBLISHED["fig9_speedup"]["values"]["gpt2-4.0b"].items()}
_A100 = PUBLISHED["fig11_a100"]["values"]     # GPT-2 4.0B, 10 drives; 2.11x printed in the abstract
FIG11_A100_SPEEDUP = {"SU+O": _A100["BASE"] / _A100["SU+O"],
                      "SU+O+C": PUBLISHED["fig11_a100_speedup"]["values"]["SU+O+C"]}
FIG3B = PUBLISHED["fig3b_raid_speedup"]["values"]   # BASE over one drive (model not stated; 4.0B assumed)

def phases(model: str, variant: str, drives, hw: str = "smart-infinity-a5000") -> dict:
    """dse's forward / backward' / update / iteration times [s], one entry per drive count (arrays)."""
    r = dse.estimate(model, hw, **PLAN, **VARIANTS[variant], ssds=np.asarray(drives))
    t = r["time"]
    return {"forward": t["phase_forward"], "backward": t["phase_backward"], "update": t["phase_update"],
            "iteration": t["iteration"], "feasible": r["feasible"]}


def compute() -> dict:
    breakdown = {}
    for label, model in MODELS.items():
        for v in VARIANTS:
            p = phases(model, v, DRIVES)
            for j, n in enumerate(DRIVES):
                breakdown.setdefault(f"{label}|{n}", {})[v] = [float(p[k][j]) for k in
                                                              ("forward", "backward", "update", "iteration")]
    drives = np.arange(1, 11)
    sweep = {}
    for hw, tag in (("smart-infinity-a5000", "A5000"), ("smart-infinity-a100", "A100")):
        base = phases(MODELS["GPT-2 4.0B"], "BASE", drives, hw)["iteration"]
        for v in ("SU", "SU+O", "SU+O+C"):
            sweep[f"{tag} {v}"] = (base / phases(MODELS["GPT-2 4.0B"], v, drives, hw)["iteration"]).tolist()
        sweep[f"{tag} BASE over 1 drive"] = (base[0] / base).tolist()
    return {"drives": drives.tolist(), "breakdown": breakdown, "speedup": sweep}


def published() -> dict:
    return {"fig9": {f"{m}|{n}": v for (m, n), v in FIG9.items()},
            "fig9_speedup": {f"{m}|{n}": v for (m, n), v in FIG9_SPEEDUP.items()},
            "fig11_a100_speedup_10_drives": FIG11_A100_SPEEDUP, "fig3b": FIG3B}


def report(data: dict) -> str:
    lines = ["Smart-Infinity Fig. 9: seconds per iteration, model (published)",
             f"{'model':<11}{'N':>3}  {'variant':<7}{'forward':>15}{'backward+off':>17}{'update':>17}{'total':>17}"]
    for key, variants in data["breakdown"].items():
        m, n = key.split("|")
        for v, vals in variants.items():
            pub = FIG9[(m, int(n))][v]
            cells = "".join(f"{x:>8.2f} ({'  -  ' if y is None else f'{y:5.2f}'})" for x, y in zip(vals, pub))
            lines.append(f"{m:<11}{n:>3}  {v:<7}{cells}")
    lines.append("")
    lines.append("Speedup over BASE at the same drive count (GPT-2 4.0B), dse; the published points follow")
    lines.append("drives  " + "".join(f"{n:>7}" for n in data["drives"]))
    for key, vals in data["speedup"].items():
        row = f"{key:<22}" + "".join(f"{x:7.2f}" for x in vals)
        lines.append(row)
    pubs = []
    for (m, n), vals in FIG9_SPEEDUP.items():
        pubs.append(f"Fig. 9 {m} {n} drives: SU {vals[0]}, SU+O {vals[1]}, SU+O+C {vals[2]}")
    pubs.append(f"Fig. 11(b) A100 10 drives: SU+O {FIG11_A100_SPEEDUP['SU+O']:.2f}, "
                f"SU+O+C {FIG11_A100_SPEEDUP['SU+O+C']}")
    pubs.append("Fig. 3(b) BASE over 1 drive: " + ", ".join(f"{n}: {v}" for n, v in FIG3B.items()))
    lines += ["published: " + p for p in pubs]
    return "\n".join(lines)


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(15, 10))
    grid = fig.add_gridspec(2, 2, height_ratios=(1.15, 1), hspace=0.42, wspace=0.22)
    ax = fig.add_subplot(grid[0, :])
    colors = ("#4C72B0", "#DD8452", "#55A868")
    names = ("forward", "backward + gradient offload", "update + optimizer-state I/O")
    width, gap = 0.8, 1.2
    x = 0.0
    ticks, labels, group_mid = [], [], []
    for key, variants in data["breakdown"].items():
        m, n = key.split("|")
        start = x
        for v, vals in variants.items():
            bottom = 0.0
            for k in range(3):
                ax.bar(x, vals[k], width, bottom=bottom, color=colors[k], label=names[k] if x == 0 else None)
                bottom += vals[k]
            pub = FIG9[(m, int(n))][v]
            if pub[0] is not None:
                b2 = 0.0
                for k in range(3):
                    ax.bar(x, pub[k], width * 0.55, bottom=b2, fill=False, edgecolor="black", linewidth=0.9,
                           label="published segments (Fig. 9)" if (x == 0 and k == 0) else None)
                    b2 += pub[k]
            ax.plot(x, pub[3], marker="D", color="black", markersize=5, linestyle="none",
                    label="published total (Fig. 9)" if x == 0 else None)
            ticks.append(x)
            labels.append({"BASE": "B", "SU": "SU", "SU+O": "+O", "SU+O+C": "+C"}[v])
            x += 1.0
        group_mid.append(((start + x - 1) / 2, f"{m}\n{n} drives"))
        x += gap
    ax.set_xticks(ticks, labels, fontsize=8)
    for mid, text in group_mid:
        ax.annotate(text, (mid, 0), xytext=(0, -26), textcoords="offset points", ha="center", va="top",
                    xycoords=("data", "axes fraction"), fontsize=9)
    ax.set_ylabel("time per iteration (s)")
    ax.set_title("(a) Per-phase time, A5000, batch 4: BASE = ZeRO-Infinity (RAID0 NVMe), SU = SmartUpdate, "
                 "+O = transfer handler, +C = 2 % top-k", fontsize=10)
    top = max(max(vals[3] for vals in variants.values()) for variants in data["breakdown"].values())
    ax.set_ylim(0, top * 1.2)
    ax.legend(loc="upper center", fontsize=8, ncol=5, frameon=False)
    ax.set_xlim(-0.8, x - gap + 0.2)

    drives = np.asarray(data["drives"])
    ax = fig.add_subplot(grid[1, 0])
    styles = {"SU": ("#8172B2", "--"), "SU+O": ("#C44E52", "-"), "SU+O+C": ("#2ca02c", "-")}
    for v, (c, ls) in styles.items():
        ax.plot(drives, data["speedup"][f"A5000 {v}"], color=c, linestyle=ls, marker="o", markersize=3,
                label=f"A5000 {v} (dse)")
        for j, n in enumerate(DRIVES):
            ax.plot(n, FIG9_SPEEDUP[("GPT-2 4.0B", n)][list(styles).index(v)], marker="*", color=c, markersize=13,
                    markeredgecolor="black", linestyle="none", label=f"A5000 {v} (Fig. 9)" if j == 0 else None)
    ax.plot(drives, data["speedup"]["A100 SU+O+C"], color="black", linestyle=":", marker="s", markersize=3,
            label="A100 SU+O+C (dse)")
    ax.plot(10, FIG11_A100_SPEEDUP["SU+O+C"], marker="P", color="black", markersize=12, linestyle="none",
            label="A100 SU+O+C (Fig. 11b: 2.11x)")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("computational storage drives N")
    ax.set_ylabel("speedup over BASE with N drives (x)")
    ax.set_title("(b) Speedup vs drive count, GPT-2 4.0B", fontsize=10)
    ax.set_xticks(drives)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.grid(alpha=0.3)

    ax = fig.add_subplot(grid[1, 1])
    ax.plot(drives, data["speedup"]["A5000 BASE over 1 drive"], marker="o", color="#4C72B0",
            label="BASE (RAID0), dse")
    ax.plot(list(FIG3B), list(FIG3B.values()), marker="*", markersize=12, markeredgecolor="black", color="#DD8452",
            linestyle="none", label="published (Fig. 3b)")
    ax.set_xlabel("NVMe drives in the RAID0 array")
    ax.set_ylabel("speedup over one drive (x)")
    ax.set_title("(c) BASE scaling: the shared PCIe uplink saturates", fontsize=10)
    ax.set_xticks(drives)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.suptitle("Smart-Infinity (HPCA'24) reproduced with dse", fontsize=12)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."), help="directory for smart_infinity.png")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON instead of tables")
    args = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("examples need matplotlib: pip install 'dse[plot]'", file=sys.stderr)
        return 2
    data = compute()
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "smart_infinity.png"
    plot(data, png)
    print(json.dumps({"png": str(png), "model": data, "published": published()}) if args.json else
          report(data) + f"\n\nwrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
