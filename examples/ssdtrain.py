"""SSDTrain (Wu et al., arXiv 2408.10013 / DAC'25): the recompute-offload-keep trade-off and the SSD bandwidth it needs.

SSDTrain's own set-up (research note docs/reference/activation_offload.md §1.5, §2.1): two A100 PCIe
GPUs with tensor parallelism 2, seven Optane P5800X drives in per-GPU RAID0 arrays of 4 and 3
(``ssdtrain-a100-optane``), sequences of 1,024 tokens, fp16, FlashAttention-2, and the drivers'
models: GPT (and Llama) at hidden 8192 x 4 layers, 12288 x 3 and 16384 x 2, heads = hidden / 128.

(a) the ROK curve: GPU activation memory against time per token for keep (everything in GPU
    memory), selective and full recomputation, and offload to the SSDs (SSDTrain's adaptive
    rule), across micro-batch sizes 1 ... 32, GPT 12288 x 3; hollow points do not fit in 80 GB;
(b) per layer, the write and read bandwidth one GPU needs for the I/O to hide behind compute
    (strict per-layer condition) against what its drive array gives, for every model shape at
    micro-batch 16;
(c) the activation-peak reduction against the papers' "up to 47 %" (arXiv, GPT/BERT/T5) and
    45 % (DAC'25, Llama/BERT/T5), with the time offload adds over keeping everything on the GPU.
    "Activation peak" as SSDTrain logs it: the activations dse holds plus one layer's backward
    working set (``dse.formulas.transformer.backward_working_bytes``), which offload cannot shrink.

    python examples/ssdtrain.py --out figures/ [--json]

Uses only ``dse.estimate`` (models are catalog models with ``overrides``) and ``dse.formulas``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

import dse
from dse.formulas import transformer

HW = "ssdtrain-a100-optane"
PLAN = dict(tp=2, pp=1, dp=1, seq_len=1024, precision="fp16", attention="flash")
SHAPES = ((8192, 4), (12288, 3), (16384, 2))
MICRO_BATCHES = np.array([1, 2, 4, 8, 16, 32])
STRATEGIES = {"keep": dict(recompute="none", offload_activations="none"),
              "selective recompute": dict(recompute="selective", offload_activations="none"),
              "full recompute": dict(recompute="full", offload_activations="none"),
              "offload to SSD": dict(recompute="none", offload_activations="ssd")}
# The papers' activation-peak reductions, with their sources: data/published/ssdtrain.yaml (what `dse validate ssdtrain`
# checks).
_CLAIMS = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "published" / "ssdtrain.yaml").read_text())
PUBLISHED = {"arXiv: up to 47 % (GPT, BERT, T5)": _CLAIMS["claims"]["values"]["peak_reduction_arxiv"]["value"],
             "DAC'25: 45 % (Llama, BERT, T5)": _CLAIMS["claims"]["values"]["peak_reduction_dac"]["value"]}


def model(family: str, hidden: int, layers: int) -> tuple[str, list[str], dict]:
    """Catalog model, overrides and shape of the drivers' model (heads = hidden / 128)."""
    heads = hidden // 128
    common = [f"model.name=ssdtrain-{family}-{hidden}x{layers}", f"model.hidden={hidden}", f"model.heads={heads}",
              f"model.layers={layers}"]
    if family == "gpt":   # Megatron GPT: LayerNorm, GeLU, learned positions, dropout 0.1; GPT-2 vocabulary, padded
        return "gpt2-xl", common + ["model.vocab=50432"], dict(h=hidden, ffn=4 * hidden, ffn_type="gelu")
    ffn = int(4 * hidden * 2 / 3 / 64) * 64   # Llama: SwiGLU with Megatron's default FFN size, 8 KV heads
    return "llama2-7b", common + ["model.kv_heads=8", f"model.ffn_hidden={ffn}", "model.max_seq_len=1024"], \
        dict(h=hidden, ffn=ffn, ffn_type="swiglu")


def working_set(shape: dict, b):
    return transformer.backward_working_bytes(1024, b, shape["h"], shape["ffn"], tp=2, ffn_type=shape["ffn_type"])


def compute() -> dict:
    name, overrides, shape = model("gpt", 12288, 3)
    rok = {}
    for label, fields in STRATEGIES.items():
        r = dse.estimate(name, HW, overrides=overrides, micro_batch=MICRO_BATCHES, **PLAN, **fields)
        tokens = MICRO_BATCHES * 1024
        rok[label] = {"activations": r["memory"]["gpu"]["activations"].tolist(),
                      "gpu_total": r["memory"]["gpu"]["total"].tolist(),
                      "time_per_token": (r["time"]["iteration"] / tokens).tolist(),
                      "fits": r["feasible"].tolist()}
        if label == "offload to SSD":
            rok[label]["layers_offloaded"] = r["activation_offload"]["layers_offloaded"].tolist()
    configs = []
    for family in ("gpt", "llama"):
        for h, layers in SHAPES:
            name, overrides, shape = model(family, h, layers)
            keep = dse.estimate(name, HW, overrides=overrides, micro_batch=16, **PLAN, **STRATEGIES["keep"])
            # the layers SSDTrain's own (write-only) rule offloads, as the papers ran it; dse's `auto` would keep
            # the layers whose reads cannot hide in backward (h8192: reads need 24 GB/s, the path gives 21.6)
            probe = dse.estimate(name, HW, overrides=overrides, micro_batch=16, **PLAN, **STRATEGIES["offload to SSD"])
            k_paper = int(probe["activation_offload"]["layers_by_ssdtrain_rule"])
            off = dse.estimate(name, HW, overrides=overrides, micro_batch=16, **PLAN,
                               **{**STRATEGIES["offload to SSD"], "offload_layers": k_paper})
            ao = off["activation_offload"]
            w = working_set(shape, 16)
            configs.append({
                "model": f"{family.upper() if family == 'gpt' else 'Llama'} {h}x{layers}",
                "write_required": ao["write_bandwidth_required_per_layer"],
                "read_required": ao["read_bandwidth_required_per_layer"],
                "write_available": ao["write_bandwidth_available"], "read_available": ao["read_bandwidth_available"],
                "layers_offloaded": ao["layers_offloaded"], "layers": layers,
                "reduction": 1 - (off["memory"]["gpu"]["activations"] + w) / (keep["memory"]["gpu"]["activations"] + w),
                "reduction_held": 1 - off["memory"]["gpu"]["activations"] / keep["memory"]["gpu"]["activations"],
                "time_overhead": off["time"]["iteration"] / keep["time"]["iteration"] - 1})
    return {"micro_batches": MICRO_BATCHES.tolist(), "rok": rok, "configs": configs}


def report(data: dict) -> str:
    lines = ["(a) ROK, GPT 12288 x 3 on 2x A100 PCIe (TP 2): GPU activation memory [GB] / time per token [us]"
             " (* = does not fit)",
             f"{'strategy':<22}" + "".join(f"{'b=' + str(b):>16}" for b in data["micro_batches"])]
    for label, row in data["rok"].items():
        cells = "".join(f"{a / 1e9:7.1f} /{1e6 * t:5.1f}{'' if ok else '*':1}  " for a, t, ok in
                        zip(row["activations"], row["time_per_token"], row["fits"]))
        lines.append(f"{label:<22}{cells}")
    lines += ["", "(b)+(c) micro-batch 16, per GPU: bandwidth per layer needed vs available [GB/s]; reduction; time",
              f"{'model':<16}{'write need':>11}{'have':>7}{'read need':>11}{'have':>7}{'offloaded':>11}"
              f"{'peak -':>9}{'held -':>9}{'time +':>9}"]
    for c in data["configs"]:
        lines.append(f"{c['model']:<16}{c['write_required'] / 1e9:>11.1f}{c['write_available'] / 1e9:>7.1f}"
                     f"{c['read_required'] / 1e9:>11.1f}{c['read_available'] / 1e9:>7.1f}"
                     f"{int(c['layers_offloaded']):>6} of {c['layers']}{100 * c['reduction']:>8.1f}%"
                     f"{100 * c['reduction_held']:>8.1f}%{100 * c['time_overhead']:>8.1f}%")
    lines.append("published: " + "; ".join(f"{k}" for k in PUBLISHED) + "; throughput loss 'negligible'")
    return "\n".join(lines)


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.4), gridspec_kw={"width_ratios": (1.2, 1.1, 1)})
    ax = axes[0]
    colors = dict(zip(STRATEGIES, ("#4C72B0", "#DD8452", "#C44E52", "#2ca02c")))
    for label, row in data["rok"].items():
        x = np.asarray(row["activations"]) / 1e9
        y = np.asarray(row["time_per_token"]) * 1e6
        fits = np.asarray(row["fits"])
        ax.plot(x, y, color=colors[label], label=label + (" (= keep: flash attention)" if "selective" in label else ""),
                linestyle="--" if "selective" in label else "-", linewidth=3.5 if label == "keep" else 1.5,
                alpha=0.6 if label == "keep" else 1.0)
        ax.scatter(x[fits], y[fits], color=colors[label], zorder=3)
        ax.scatter(x[~fits], y[~fits], facecolor="white", edgecolor=colors[label], zorder=3)
        for b, xi, yi in zip(data["micro_batches"], x, y):
            if label in ("keep", "offload to SSD"):
                ax.annotate(f"b={b}", (xi, yi), textcoords="offset points", xytext=(4, 3), fontsize=7,
                            color=colors[label])
    ax.scatter([], [], facecolor="white", edgecolor="grey", label="hollow: does not fit in 80 GB")
    ax.set_xscale("log")
    ax.set_xlabel("GPU activation memory per GPU (GB, log scale)")
    ax.set_ylabel("time per token (µs)")
    ax.set_title("(a) recompute-offload-keep, GPT 12288x3, micro-batch 1 ... 32", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)

    ax = axes[1]
    cfg = data["configs"]
    xs = np.arange(len(cfg))
    ax.bar(xs - 0.2, [c["write_required"] / 1e9 for c in cfg], 0.38, color="#C44E52", label="write needed per layer")
    ax.bar(xs + 0.2, [c["read_required"] / 1e9 for c in cfg], 0.38, color="#4C72B0", label="read needed per layer")
    ax.axhline(cfg[0]["write_available"] / 1e9, color="#C44E52", linestyle="--",
               label=f"write available ({cfg[0]['write_available'] / 1e9:.1f} GB/s)")
    ax.axhline(cfg[0]["read_available"] / 1e9, color="#4C72B0", linestyle="--",
               label=f"read available ({cfg[0]['read_available'] / 1e9:.1f} GB/s)")
    ax.set_xticks(xs, [c["model"].replace(" ", "\n") for c in cfg], fontsize=8)
    ax.set_ylabel("bandwidth per GPU (GB/s)")
    ax.set_title("(b) SSD bandwidth per layer: needed vs the GPU's 3-drive array (b = 16)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)

    ax = axes[2]
    ax.bar(xs - 0.2, [100 * c["reduction"] for c in cfg], 0.38, color="#2ca02c",
           label="dse: activation peak (+ working set)")
    ax.bar(xs + 0.2, [100 * c["reduction_held"] for c in cfg], 0.38, color="#98df8a",
           label="dse: held activations only")
    for (label, v), ls in zip(PUBLISHED.items(), ("-", ":")):
        ax.axhline(100 * v, color="black", linestyle=ls, label=label)
    for xi, c in zip(xs, cfg):
        ax.text(xi, 63, f"time\n+{100 * c['time_overhead']:.1f}%", ha="center", va="bottom", fontsize=7.5)
    ax.set_xticks(xs, [c["model"].replace(" ", "\n") for c in cfg], fontsize=8)
    ax.set_ylabel("activation peak reduction by offload (%)")
    ax.set_ylim(0, 112)
    ax.set_title("(c) memory saved vs the papers (b = 16; time: offload over keep)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper right")
    fig.suptitle("SSDTrain reproduced with dse: 2x A100 PCIe (TP 2), 7 Optane P5800X (RAID0 4 + 3), seq 1024, fp16",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."), help="directory for ssdtrain.png")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON instead of tables")
    args = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("examples need matplotlib: pip install 'dse[plot]'", file=sys.stderr)
        return 2
    data = compute()
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "ssdtrain.png"
    plot(data, png)
    print(json.dumps({"png": str(png), "model": data, "published": PUBLISHED}) if args.json else
          report(data) + f"\n\nwrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
