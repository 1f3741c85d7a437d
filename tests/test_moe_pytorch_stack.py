"""Transformers' MoE block on the pytorch stack: the grouped_mm path's kernels (stacks/pytorch.yaml moe_* rows,
traced by scripts/trace_moe_block.py) and the experts' grouped GEMMs at the GPU's measured torch._grouped_mm rate."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dse.catalog import load_model, load_system
from dse.estimate import make_plan
from dse.estimate.kernel_table import cost_of, kernel_tables, kernel_time
from dse.formulas import compute as C
from dse.formulas.precision import peak_flops, recipe_of
from dse.specs.stack import load as load_stack

ROOT = Path(__file__).resolve().parents[1]
TRACE = json.loads((ROOT / "tests/fixtures/pytorch_moe_trace.json").read_text())
#: the loss the trace adds after the block (y.float().sum(); its backward) and the GEMMs the table prices as GEMMs
NOT_BLOCK = {"forward": Counter({"_to_copy": 1, "sum": 1, "mm": 1, "_grouped_mm": 2}),
             "backward": Counter({"ones_like": 1, "_to_copy": 1, "mm": 2, "_grouped_mm": 4})}
#: kernels a traced op launches on CUDA beyond one (the H200 profiles, data/h200/vm2/moe_families.jsonl: cub's
#: radix sort of int64 keys is a histogram, an exclusive sum and 8 onesweep passes, with the values' iota; topk a
#: gatherTopK and a bitonic sort; histc a zero fill and its kernel; an accumulating index_put arange, div, remainder,
#: a 2-pass radix sort and indexing_backward_kernel; the out-of-place scatter a copy and the scatter; empty_like none)
CUDA_KERNELS = {"sort": 11, "topk": 2, "histc": 2, "index_put": 8, "scatter": 2, "empty_like": 0}


def _kernels(ops: list, phase: str) -> int:
    names = Counter(op[0] for op in ops) - NOT_BLOCK[phase]
    return sum(CUDA_KERNELS.get(name, 1) * n for name, n in names.items())


@pytest.mark.parametrize("family", ["olmoe", "granitemoe"])
@pytest.mark.parametrize("ckpt", ["none", "full"])
def test_stack_rows_launch_the_traced_kernels(family, ckpt):
    """The moe_routing, moe_permute, expert_glu and moe_unpermute rows launch what Transformers 5.24's grouped_mm
    path runs (forward 30, backward 42 kernels), OLMoE and Granite-MoE alike. Under checkpointing the backward runs
    the forward again with its 3 GEMMs, less the last two kernels (the inverse permutation's gather and the sum
    over k): the non-reentrant checkpoint stops once the gather has packed its indices (torch/utils/checkpoint.py
    early stop); dse stops only the residual add there (dse.formulas.kernels.early_stop: the unpermute row keeps
    the expert outputs), 2 kernels and 3 T k h + T h bytes a layer more in the recomputation than traced."""
    ops = load_stack("pytorch").ops("rmsnorm", "silu_glu")
    rows = [ops["moe_routing"], ops["moe_permute"], ops["expert_glu"], ops["moe_unpermute"]]
    fwd, bwd = (sum(r[p]["kernels"] for r in rows) for p in ("forward", "backward"))
    run = TRACE["runs"][f"{family}-plain-{ckpt}"]
    assert (fwd, bwd) == (30, 42)
    assert _kernels(run["forward"], "forward") == fwd
    recomputed = _kernels(run["backward"], "backward") - bwd
    assert recomputed == (fwd + 3 - 2 if ckpt == "full" else 0)   # the recomputed forward, its GEMMs, early stop


def test_sentinel_masks_are_transformers_5_17s():
    """Transformers 5.17's unconditional sentinel masks (what data/h200/vm2 ran): 5 ops forward (ge, clamp_,
    masked_fill_, two masked_fill), 3 masked_fill backward beyond 5.24's path, which the stack does not price."""
    plain, masked = TRACE["runs"]["olmoe-plain-none"], TRACE["runs"]["olmoe-sentinel-none"]
    extra = {p: Counter(op[0] for op in masked[p]) - Counter(op[0] for op in plain[p]) for p in plain}
    assert extra["forward"] == Counter({"ge": 1, "clamp_": 1, "masked_fill_": 1, "masked_fill": 2})
    assert extra["backward"] == Counter({"masked_fill": 3})


def test_grouped_rate_is_the_measured_one():
    """At a measured point the priced grouped GEMM runs at the rate dse measure timed (data/h200/micro.jsonl)."""
    micro = json.loads((ROOT / "data/h200/micro.jsonl").read_text().splitlines()[0])["expert_gemm_tflops"]
    rates = load_system("h200-vm").node.gpu.efficiency.gemm_grouped
    for name, (h, f, e) in {"qwen3-30b-a3b": (2048, 768, 16), "deepseek-v3": (7168, 2048, 8)}.items():
        for rows in (256, 1024, 4096):
            for gemm, (k, n) in (("fc1", (h, 2 * f)), ("fc2", (f, h))):
                t = C.grouped_gemm_time(rows, k, n, e, 989.5e12, rates)
                assert 2 * rows * k * n * e / t / 1e12 == pytest.approx(micro[name][str(rows)][gemm]["grouped"],
                                                                        rel=2e-3)


def _layer(model: str, system: str, stack: str):
    sys_ = load_system(system)
    spec = load_model(model)
    plan = make_plan(spec, sys_, {"micro_batch": 2, "global_batch": 2, "seq_len": 1024,
                                              "precision": "bf16-pure", "stack": stack})
    r = recipe_of(plan)
    gpu = sys_.node.gpu
    peak = peak_flops(gpu.peak_flops, r.gemm_dtype)
    return kernel_tables(spec, plan, r)["layer"], cost_of(gpu, peak, peak, peak, r.activations)


def test_only_transformers_experts_are_grouped():
    """Under the pytorch stack the expert GEMMs are one grouped_mm kernel each, priced at the H200's grouped rate
    (OLMoE: 256 rows per expert, about 0.4 of peak); on the megatron stack they stay Megatron's rows; on a GPU
    without measured grouped rates (H100) they keep the batched dense price."""
    model = str(ROOT / "data/h200/configs/OLMoE-1B-7B-0924/config.json")
    torch_layer, h200 = _layer(model, "h200-vm", "pytorch")
    row = torch_layer["expert_fc1"]
    assert row.get("grouped_mm") and row["m"] == 2048 * 8 / 64
    f, b = kernel_time(row, h200, C)
    assert 2 * row["m"] * row["k"] * row["n"] * row["batch"] / f / 989.5e12 == pytest.approx(0.415, rel=1e-3)
    assert b == 2 * f
    mega, _ = _layer(model, "h200-vm", "megatron")
    assert "grouped_mm" not in mega["expert_fc1"] and "kernels" not in mega["permute"]
    h100_layer, h100 = _layer(model, "h100-vm", "pytorch")
    assert h100.grouped is None
    f100, _ = kernel_time(h100_layer["expert_fc1"], h100, C)
    assert f100 == kernel_time({k: v for k, v in h100_layer["expert_fc1"].items() if k != "grouped_mm"}, h100, C)[0]


def test_routed_sizes():
    """The moe rows' sizes: routed copies T k h, their ids and weights T k, the router's scores T E; their saved
    bytes stay the fused rows' (memory unchanged)."""
    model = str(ROOT / "data/h200/configs/OLMoE-1B-7B-0924/config.json")
    torch_layer, _ = _layer(model, "h200-vm", "pytorch")
    mega, _ = _layer(model, "h200-vm", "megatron")
    t, k, h = 2048, 8, 2048
    gather = torch_layer["permute"]
    assert gather["kernels"] == 18 and gather["bytes"] >= 2 * 2 * t * k * h
    for name in ("routing", "permute", "unpermute"):
        assert torch_layer[name]["saved"] == mega[name]["saved"]
