"""Eager PyTorch's non-vectorized element-wise kernels in the Llama family, and CUDA's softmax-backward product.

The pytorch stack (stacks/pytorch.yaml) names the passes of each row that PyTorch's TensorIterator cannot vectorize:
``unvectorized`` (operands in one memory order but a broadcast or sliced operand, or a dtype-converting copy) and
``strided`` (operands in different orders: transposing copies). scripts/trace_paths.py classifies every op of a real
Transformers step on the CPU as CUDA would launch it (tests/fixtures/pytorch_paths_trace.json); the stack's passes
must be those. The rates come from GPT-2's profiles (scripts/kernel_rates.py) and are checked here, out of sample,
on the Llama-family profiles of data/h200/hf_families.jsonl.
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from dse.catalog import load_model, load_system
from dse.estimate.kernel_table import cost_of, kernel_tables, kernel_time
from dse.formulas import compute as C
from dse.formulas.precision import recipe_of
from dse.specs.plan import Plan

FIXTURE = "tests/fixtures/pytorch_paths_trace.json"


@cache
def _trace() -> dict:
    with open(FIXTURE) as f:
        return json.load(f)


def _layer(name: str, attn: str) -> dict:
    m = load_model(f"tests/fixtures/hf/{name}/config.json")
    plan = Plan(tp=1, pp=1, dp=1, seq_len=64, micro_batch=2, global_batch=2, zero=0,
                attention={"eager": "math", "sdpa": "flash"}[attn], stack="pytorch").resolved(m)
    return kernel_tables(m, plan, recipe_of(plan))["layer"]


def _passes(name: str, attn: str, part: str, side: str) -> tuple[float, int]:
    """(the stack's passes of ``part`` over one layer's elements, the trace's), for side "" or "_backward"."""
    layer = _layer(name, attn)
    dse = sum(r.get(f"{part}_passes{side}", r.get(part + side, 0)) for r in layer.values() if isinstance(r, dict)) / 2
    phase = _trace()["runs"][f"{name} {attn}"]["backward" if side else "forward"]
    return dse, sum(v[2] for k, v in phase.items() if k.startswith(part + ":"))


@pytest.mark.parametrize("part", ["unvectorized", "strided"])
@pytest.mark.parametrize("side", ["", "_backward"])
def test_llama_family_eager_layer_names_exactly_the_traced_non_vectorized_passes(part, side):
    """Qwen2 (RMSNorm, rotary, grouped-query eager attention in fp32): every pass of every kernel the trace puts on
    the unvectorized or strided path, and no other, at b 2, s 64 (bf16: 2 bytes a pass-element)."""
    dse, traced = _passes("Qwen2-0.5B", "eager", part, side)
    assert traced > 0 and dse == traced


def test_gemma3_and_gpt2_layers_match_the_trace():
    """Gemma 3's (1 + w) RMSNorm and QK-norm: the unvectorized backward exactly, the forward within 3 % (its QK-norm
    on the transposed q mixes orders in three products the stack counts as unvectorized); GPT-2: exactly, its
    gradients' cat apart (CatArrayBatchedCopy, a class of its own in the trace)."""
    dse, traced = _passes("gemma-3-1b-pt", "eager", "unvectorized", "_backward")
    assert dse == traced
    for part in ("unvectorized", "strided"):
        dse, traced = _passes("gemma-3-1b-pt", "eager", part, "")
        assert dse == pytest.approx(traced, rel=0.03)
    assert _passes("gpt2", "eager", "unvectorized", "") == (2 * 12 * 64 * 64 * 2, 2 * 12 * 64 * 64 * 2)  # mask add
    assert _passes("gpt2", "eager", "strided", "")[0] == _passes("gpt2", "eager", "strided", "")[1]
    qkv = 3 * 2 * 64 * 768
    dse, traced = _passes("gpt2", "eager", "strided", "_backward")
    assert dse == traced + 2 * qkv


def test_sdpa_rotary_backward_is_left_vectorized_where_the_trace_transposes():
    """Known gap, left out: with SDPA the rotary backward's two sums and two slice copies read the attention's
    gradients in the projection's order (strided); the shared rotary row prices them as under eager attention."""
    dse, traced = _passes("Qwen2-0.5B", "sdpa", "strided", "_backward")
    assert dse < traced


def _unrolled(profile: dict) -> float:
    return sum(t for t, name, _ in profile["kernels"] if "unrolled_elementwise_kernel<at::native::direct_copy" in name)


FAMILIES = {"Qwen2-0.5B": (24, 896, 14, 151936), "Llama-3.1-8B": (32, 4096, 32, 128256)}   # L, h, heads, V


@cache
def _profiles() -> list[dict]:
    with open("data/h200/hf_families.jsonl") as f:
        rows = [json.loads(x) for x in f]
    return [p for p in rows if p.get("kind") == "profile" and p["attn"] == "eager" and p["recompute"] == "none"
            and p["model"].split("/")[-2] in FAMILIES]


def test_unvectorized_rate_prices_the_fp32_upcasts_of_the_llama_family_out_of_sample():
    """The bf16 -> fp32 copies (unrolled_elementwise_kernel: the scores' two a layer, the RMSNorms' four and the
    final norm's two, logits.float() once) at memory_unvectorized -- measured on GPT-2's broadcast mask add, which
    has no dtype conversion -- per element at 2 bytes a pass: within 15 % of their measured device time in every
    eager Qwen2 / Llama profile on the H200."""
    gpu = load_system("dgx-h200").node.gpu
    rate = gpu.hbm_bandwidth * gpu.efficiency.memory_unvectorized
    assert len(_profiles()) == 4
    for p in _profiles():
        layers, h, a, vocab = FAMILIES[p["model"].split("/")[-2]]
        tok = p["b"] * p["s"]
        elements = layers * (2 * p["b"] * a * p["s"] ** 2 + 4 * tok * h) + 2 * tok * h + tok * vocab
        assert elements * 2 * 2 / rate == pytest.approx(_unrolled(p), rel=0.15), p["model"]


def _op(profile: dict, name: str) -> float:
    return sum(t for t, _, op, _ in profile["ops"] if op == name)


def test_cuda_softmax_backward_is_a_product_kernel_and_the_warp_kernel():
    """aten/src/ATen/native/cuda/SoftMax.cu: ``Tensor tmp = grad * output;`` before the warp kernel. In the profiles
    aten::_softmax_backward_data's device time is the warp kernel's plus one vectorized product over the scores
    (read, read, write at the copy rate, within 15 %); the stack's math rows price it (one kernel, 3 passes)."""
    with open("data/h100/gpt2_hf.jsonl") as f:
        gpt2 = [p for p in map(json.loads, f) if p.get("kind") == "profile" and p["attn"] == "eager"
                and p["recompute"] == "none"]
    cases = [(p, "dgx-h100", 24, 16, 2) for p in gpt2] + [
        (p, "dgx-h200", *FAMILIES[p["model"].split("/")[-2]][0:3:2], 4) for p in _profiles()]
    seen = 0
    for p, system, layers, heads, width in cases:     # width: the softmax's dtype (GPT-2 bf16, the family fp32)
        gpu = load_system(system).node.gpu
        warp = sum(t for t, n, _ in p["kernels"] if "softmax_warp_backward" in n)
        extra = _op(p, "aten::_softmax_backward_data") - warp
        scores = p["b"] * heads * p["s"] ** 2
        assert extra == pytest.approx(layers * 3 * width * scores / (gpu.hbm_bandwidth * gpu.efficiency.memory),
                                      rel=0.15), (system, p["model"], p["b"])
        seen += 1
    assert seen == 5
    layer = _layer("gpt2", "eager")
    assert layer["softmax"]["kernels_backward"] == 7
    assert layer["softmax"]["bytes_backward"] - layer["softmax"]["softmax_backward"] >= 3 * 2 * 2 * 12 * 64 * 64


def test_unvectorized_passes_cost_per_element_whatever_the_dtype():
    """An fp32 pass on the non-vectorized path costs what a bf16 one does (element-bound): the row's
    ``unvectorized_passes`` (at the activation's width) go at the slow rate, its true bytes leave the plain one."""
    gpu = load_system("dgx-h200").node.gpu
    hw = cost_of(gpu, 989.5e12)
    base = {"kind": "elementwise", "bytes": 8e8, "bytes_backward": 8e8, "kernels": 1, "kernels_backward": 1}
    plain, _ = kernel_time(base, hw, C)
    f, _ = kernel_time({**base, "unvectorized": 8e8, "unvectorized_passes": 4e8}, hw, C)
    slow, fast = gpu.hbm_bandwidth * gpu.efficiency.memory_unvectorized, gpu.hbm_bandwidth * gpu.efficiency.memory
    assert f - plain == pytest.approx(4e8 / slow - 8e8 / fast)
    g, _ = kernel_time({**base, "unvectorized": 4e8}, hw, C)       # without passes: its bytes
    assert g - plain == pytest.approx(4e8 / slow - 4e8 / fast)
    a100 = cost_of(load_system("dgx-a100-80gb").node.gpu, 312e12)   # no slow rates: unchanged
    assert kernel_time({**base, "unvectorized": 8e8}, a100, C) == kernel_time(base, a100, C)
