"""Achieved rates of eager PyTorch's slow element-wise kernels, from measured profiles: the provenance of the GPU
efficiencies ``memory_strided`` and ``softmax_rate`` (hwspecs/gpus/h200-sxm-141gb.yaml, h100-sxm-80gb.yaml).

Reads the ``kind: profile`` rows of ``dse measure --profile`` (``data/h200/gpt2_hf.jsonl``: Transformers' GPT-2 in
eager attention, no recomputation) and divides each kernel's measured device time by the work it must do:

- ``strided``: PyTorch's TensorIterator runs an element-wise op with 16-byte vector accesses only when every operand
  is contiguous (aten/src/ATen/native/cuda/CUDALoops.cuh, ``can_vectorize_up_to``); a transposed or broadcast
  operand takes the generic ``elementwise_kernel<128, 4>`` path, and ``torch.cat`` of strided views the generic
  ``CatArrayBatchedCopy``. In GPT-2's eager attention these are the ``.contiguous()`` clones around the batched
  matmuls (q, k, v and the merged heads forward, three gradients backward: 7 per layer, each a read and a write
  of a (T, h) tensor), the broadcast add of the causal mask over the (b, a, s, s) scores (a read and a write of the
  scores; the one other such add per step, the position embedding's, is a (T, h) one), and the cat of the q, k, v
  gradients (a read and a write of (T, 3h)). Rate: bytes / time.
  Two rates (``strided``: the clones and the cat, whose operands are read and written in different orders --
  uncoalesced on one side; ``unvectorized``: the mask add, whose operands share one order, the mask broadcast), for
  the GPU fields ``memory_strided`` and ``memory_unvectorized``. The second also prices the dtype-converting copies
  (``unrolled_elementwise_kernel``), the broadcast products of RMSNorm and rotary positions and the slices of the
  Llama-family stacks, none of them in GPT-2: checked out of sample on data/h200/hf_families.jsonl
  (tests/test_unvectorized.py).
- ``softmax``: ``softmax_warp_forward`` / ``softmax_warp_backward`` over rows of s <= 1,024 elements: one warp per
  row, an exp, a max and a sum per element, run at a rate of elements per second that does not depend on the
  dtype (the fp32 softmax of Llama-family eager attention runs at the same element rate: printed from
  ``data/h200/hf_families.jsonl``), so it is instruction-bound, not bytes-bound, on Hopper.

And the GPU's fixed time per element-wise kernel (``kernel_overhead``), in two measured parts:

- ``intercept``: inside the kernel. The same kernel (same name, same number of calls) in two profiles of one model
  at micro-batches b1 < b2 = r b1 moves r times the bytes, so its per-call time t = t0 + c b gives
  t0 = (r t(b1) - t(b2)) / (r - 1); the median over every such element-wise kernel of the five families' pairs.
- ``gap``: between kernels. In a step where the GPU is busy >= 95 % of the time (the host is ahead), the step's
  time not covered by any kernel, per kernel launched: (step - device time) / kernels; the median over those steps.

The H100's ``kernel_overhead`` (hwspecs/gpus/h100-sxm-80gb.yaml) is the H200's intercept (the same GH100 die and
clocks; the H100 profiles have no two micro-batches of one model) plus the gap measured in the H100's own profiles
(``h100_gap_us``: data/h100/gpt2_hf.jsonl and the shared data/h100_hf_training.jsonl).

Usage:  python scripts/kernel_rates.py [data/h200/gpt2_hf.jsonl]   (prints JSON: per configuration and the median)
"""

from __future__ import annotations

import json
import statistics
import sys

DIMS = {"gpt2-medium": (24, 1024, 16), "gpt2-xl": (48, 1600, 25)}   # layers, hidden, heads
FAMILIES = {"Llama-3.1-8B": (32, 32), "Qwen2-0.5B": (24, 14)}         # layers, heads (fp32 softmax)


def _kernel(prof: dict, *marks: str) -> tuple[float, int]:
    """(seconds, calls) summed over the kernels whose name contains every mark."""
    t = n = 0
    for sec, name, calls in prof["kernels"]:
        if all(m in name for m in marks):
            t, n = t + sec, n + calls
    return t, n


def gpt2_rates(rows: list[dict]) -> list[dict]:
    out = []
    for p in rows:
        if p.get("kind") != "profile" or p["attn"] != "eager" or p["recompute"] != "none" or p["model"] not in DIMS:
            continue
        layers, h, a = DIMS[p["model"]]
        tok, scores = p["b"] * p["s"], p["b"] * a * p["s"] ** 2
        clone, n_clone = _kernel(p, "elementwise_kernel<128, 4", "direct_copy_kernel_cuda")
        add, n_add = _kernel(p, "elementwise_kernel<128, 4", "CUDAFunctor_add")
        cat, n_cat = _kernel(p, "CatArrayBatchedCopy<")
        fwd, _ = _kernel(p, "softmax_warp_forward")
        bwd, _ = _kernel(p, "softmax_warp_backward")
        r = {"model": p["model"], "b": p["b"], "clones_per_layer": n_clone / layers,
             "strided_clone_GBps": n_clone * 2 * tok * h * 2 / clone / 1e9,
             "strided_mask_add_GBps": (layers * 2 * scores * 2 + (n_add - layers) * 3 * tok * h * 2) / add / 1e9,
             "strided_cat_GBps": n_cat * 2 * 3 * tok * h * 2 / cat / 1e9,
             "softmax_forward_Gelem_s": layers * scores / fwd / 1e9,
             "softmax_backward_Gelem_s": layers * scores / bwd / 1e9}
        out.append(r)
    return out


def family_rates(rows: list[dict]) -> list[dict]:
    out = []
    for p in rows:
        name = p.get("model", "").split("/")[-2] if "/" in p.get("model", "") else ""
        if p.get("kind") != "profile" or p["attn"] != "eager" or p["recompute"] != "none" or name not in FAMILIES:
            continue
        layers, a = FAMILIES[name]
        scores = p["b"] * a * p["s"] ** 2
        fwd, _ = _kernel(p, "softmax_warp_forward<float")
        bwd, _ = _kernel(p, "softmax_warp_backward<float")
        out.append({"model": name, "b": p["b"], "softmax_forward_Gelem_s": layers * scores / fwd / 1e9,
                    "softmax_backward_Gelem_s": layers * scores / bwd / 1e9})
    return out


PAIRS = (("Qwen2-0.5B", 2, 8), ("pythia-1.4b", 2, 8), ("gemma-3-1b-pt", 2, 8), ("gpt2-medium", 4, 16),
         ("gpt2-xl", 4, 16))
ELEMENTWISE = ("elementwise", "reduce_kernel", "layer_norm", "softmax", "Cat")


def _short(model: str) -> str:
    return model.split("/")[-2] if "/" in model else model


def kernel_intercepts(rows: list[dict]) -> list[float]:
    """Per-call fixed time (s) of each element-wise kernel seen at two micro-batches of one model (see above)."""
    prof = {(_short(r["model"]), r["attn"], r["recompute"], r["b"]): r for r in rows if r.get("kind") == "profile"}
    out = []
    for model, b1, b2 in PAIRS:
        r = b2 / b1
        for attn in ("sdpa", "eager"):
            for rc in ("none", "full"):
                p1, p2 = prof.get((model, attn, rc, b1)), prof.get((model, attn, rc, b2))
                if p1 is None or p2 is None:
                    continue
                k1 = {n: (t, c) for t, n, c in p1["kernels"]}
                k2 = {n: (t, c) for t, n, c in p2["kernels"]}
                for n, (t1, c1) in k1.items():
                    if n in k2 and k2[n][1] == c1 and c1 >= 20 and any(m in n for m in ELEMENTWISE):
                        out.append((r * t1 / c1 - k2[n][0] / c1) / (r - 1))
    return out


def kernel_gaps(rows: list[dict], busy_min: float = 0.95) -> list[float]:
    """GPU idle time per launched kernel (s) in the steps the GPU is busy >= ``busy_min`` of the time."""
    base = {(r["model"], r["attn"], r["b"], r["recompute"]): r for r in rows if r.get("kind") == "base"}
    out = []
    for p in rows:
        if p.get("kind") != "profile":
            continue
        step = base[(p["model"], p["attn"], p["b"], p.get("recompute", "none"))]["step_s"]   # shared file: no field
        dev, kernels = sum(p["device_s_by_category"].values()), sum(p["kernels_by_category"].values())
        if busy_min <= dev / step <= 1.0:
            out.append((step - dev) / kernels)
    return out


def h100_rows(data: str = "data") -> list[dict]:
    """The H100's base and profile rows: this project's H100 run and the shared file (one H100 SXM each)."""
    rows = [json.loads(x) for x in open(f"{data}/h100/gpt2_hf.jsonl")]
    shared = [json.loads(x) for x in open(f"{data}/h100_hf_training.jsonl")]
    return rows + [r for r in shared if r.get("kind") in ("base", "profile")]


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "data/h200/gpt2_hf.jsonl"
    rows = [json.loads(x) for x in open(path)]
    per = gpt2_rates(rows)
    strided = [r[k] for r in per for k in ("strided_clone_GBps", "strided_cat_GBps")]
    fam = family_rates([json.loads(x) for x in open(path.replace("gpt2_hf", "hf_families"))])
    summary = {"strided_GBps_median": statistics.median(strided),
               "unvectorized_GBps_median": statistics.median(r["strided_mask_add_GBps"] for r in per),
               "softmax_forward_Gelem_s_median": statistics.median(r["softmax_forward_Gelem_s"] for r in per),
               "softmax_backward_Gelem_s_median": statistics.median(r["softmax_backward_Gelem_s"] for r in per)}
    both = rows + [json.loads(x) for x in open(path.replace("gpt2_hf", "hf_families"))]
    t0, gap = statistics.median(kernel_intercepts(both)), statistics.median(kernel_gaps(both))
    summary.update(kernel_intercept_us=t0 * 1e6, kernel_gap_us=gap * 1e6, kernel_overhead_us=(t0 + gap) * 1e6)
    h100 = statistics.median(kernel_gaps(h100_rows()))
    summary.update(h100_gap_us=h100 * 1e6, h100_kernel_overhead_us=(t0 + h100) * 1e6)
    print(json.dumps({"gpt2": per, "fp32_softmax_families": fam, "median": summary}, indent=1))


if __name__ == "__main__":
    main()
