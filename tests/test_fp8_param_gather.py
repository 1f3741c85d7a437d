"""FP8 weights without a bf16 copy (Megatron ``--fp8-param-gather``) and the published Megatron-Bridge FP8 rows."""

from __future__ import annotations

import dataclasses

import pytest

from dse.catalog import load_model, load_system
from dse.errors import InputError
from dse.estimate import fp8 as fp8_terms, run
from dse.formulas import fp8
from dse.frameworks import megatron
from dse.specs.plan import Plan
from dse.validate import run_suite

GiB = 2 ** 30


def _pair(model="llama3-70b", system="h100-cluster", **fields):
    base = dict(precision="fp8", fp8_scaling="current", zero=1, tp=4, pp=8, dp=2, seq_len=8192, micro_batch=1,
                global_batch=128, sequence_parallel=True)
    base.update(fields)
    m, s = load_model(model), load_system(system)
    off = run(m, s, Plan(**base))
    on = run(m, s, Plan(**base, fp8_param_gather=True))
    return m, Plan(**base).resolved(m), off, on


def test_the_bf16_copy_of_the_linear_weights_is_not_kept():
    """Weights drop by exactly e = 2 B per linear weight of the fullest stage; nothing else in memory moves."""
    m, plan, off, on = _pair()
    l_stage = m.layers / plan.pp
    linear = l_stage * fp8_terms.linear_params_gpu(m, plan)
    assert off["memory"]["gpu"]["weights"] - on["memory"]["gpu"]["weights"] == pytest.approx(2 * linear, rel=1e-12)
    for key in ("gradients", "optimizer", "activations", "buffers"):
        assert on["memory"]["gpu"][key] == off["memory"]["gpu"][key], key


def test_the_distributed_optimizer_gathers_one_byte_per_linear_weight():
    """ZeRO-1's weight all-gather moves 1 B instead of 2 B per linear weight: the dp traffic falls by half the
    linear weights' share (the gradients' reduce-scatter is unchanged)."""
    m, plan, off, on = _pair(dp=8, tp=8, pp=8, cp=2, virtual_stages=8, schedule="interleaved", global_batch=512,
                             model="llama3.1-405b", overlap_grad_reduce=True)
    assert on["time"]["dp_communication"] < off["time"]["dp_communication"]
    assert on["traffic"]["dp"] <= off["traffic"]["dp"]
    # the 405B H100 recipe fits only without the bf16 copy (the recipe ran on 80 GB GPUs)
    assert off["memory"]["gpu"]["total"] > off["memory"]["gpu"]["capacity"]
    assert on["memory"]["gpu"]["total"] < on["memory"]["gpu"]["capacity"]


def test_the_weight_cast_reads_the_fp32_shard_then_builds_the_transposes():
    lin, d = 1e9, 8
    assert fp8.param_gather_cast_bytes(lin, d) == pytest.approx(lin / d * 5 + 2 * lin)
    assert fp8.param_gather_cast_bytes(lin, d, "current") == pytest.approx(lin / d * 9 + 2 * lin)
    assert fp8.param_gather_cast_bytes(lin, d) < fp8.weight_cast_bytes(lin)   # 2.625 lin against 4 lin bytes


@pytest.mark.parametrize("fields, words", [
    (dict(precision="bf16", zero=1), "--precision bf16"),
    (dict(precision="fp8", zero=0), "--zero 0"),
])
def test_param_gather_needs_fp8_and_the_distributed_optimizer(fields, words):
    from dse.estimate import estimate

    with pytest.raises(InputError) as e:
        estimate("llama3-8b", "dgx-h100", **fields, fp8_param_gather=True)
    assert "fp8_param_gather" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


def test_megatron_arguments_round_trip_fp8():
    imp = megatron.read("--bf16 --fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather "
                        "--tensor-model-parallel-size 2")
    assert imp.plan["precision"] == "fp8" and imp.plan["fp8_scaling"] == "current" and imp.plan["fp8_param_gather"]
    block = megatron.read("--bf16 --fp8-format e4m3 --fp8-recipe mxfp8")
    assert block.plan["fp8_scaling"] == "current" and not block.plan.get("fp8_param_gather")
    assert any("mxfp8" in x for x in block.ignored) and any("e4m3" in x for x in block.ignored)
    with pytest.raises(InputError, match="--fp8-recipe"):
        megatron.read("--bf16 --fp8-format hybrid --fp8-recipe nvfp4")
    m, s = load_model("llama3-8b"), load_system("dgx-h100")
    plan = dataclasses.replace(Plan(precision="fp8", fp8_scaling="current", fp8_param_gather=True, zero=1), dp=8)
    text, _ = megatron.emit(m, s, plan.resolved(m))
    assert "--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather" in text


def test_megatron_bridge_suite():
    """Eight published FP8 rows of dense Llama on DGX H100, B200 and GB200 NVL72, nothing fitted to them: each
    within 15 %, MAPE 6.2 % (2026-11-26; 5.4 % before the two GB200 rows) against the 10 % target; the H100 rows
    within 7 %, the B200 and GB200 rows optimistic (both carry the H100's efficiencies, an assumption their specs
    state)."""
    r = run_suite("megatron-bridge")
    dense = [c for c in r.cases if c.quantity == "dense"]
    assert r.stats["cases"] == 10 and len(dense) == 8 and all(c.within for c in dense)
    assert r.stats["by_quantity"]["dense"]["mape"] <= 0.07, r.stats
    h100 = [c for c in dense if c.name.startswith("H100")]
    b200 = [c for c in dense if c.name.startswith("B200")]
    gb200 = [c for c in dense if c.name.startswith("GB200")]
    assert len(h100) == 4 and all(abs(c.error) <= 0.07 for c in h100)
    assert len(b200) == 2 and all(c.error > 0 for c in b200)
    assert len(gb200) == 2 and all(c.error > 0 for c in gb200)


def test_megatron_bridge_moe_row_is_host_bound_on_the_h100_host():
    """GPT-OSS-120B (BF16, 64 H100s, EP 8): on dgx-h100-host's transferred launch price (4.17x the reference) the
    layer is host-bound and the estimate 8 % slower than the published rate (NVIDIA's recipe graph-captures the
    router and dispatcher, which the launch price does not take off); at the reference host it was 50 % too fast
    (+78 % before Megatron-Core's per-expert GEMMs, sort, expert bias, GLU clamp and unfused YaRN RoPE were
    priced). It fails if it leaves its 25 % tolerance either way."""
    r = run_suite("megatron-bridge")
    (moe,) = [c for c in r.cases if c.quantity == "moe" and "GPT-OSS" in c.name]
    assert not moe.expected_miss and -0.25 < moe.error < 0, moe.error
    assert r.passed


def test_megatron_bridge_fp8_moe_row_shows_the_small_expert_pattern():
    """Qwen3-30B-A3B in FP8 (16 H100s, EP 16; 26.06: 8,826 tokens/s/GPU), small experts (2,048 x 768, 128 of them,
    top 8) with their per-expert FP8 casts: host-bound like GPT-OSS, 17 % slower than published (+42 % at the
    reference host). It fails if it leaves its tolerance."""
    r = run_suite("megatron-bridge")
    (moe,) = [c for c in r.cases if c.quantity == "moe" and "Qwen3" in c.name]
    assert not moe.expected_miss and -0.25 < moe.error < 0, moe.error
    assert moe.reference == 8826
