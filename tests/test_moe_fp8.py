"""FP8 training of MoE and MLA models (docs/moe.md "FP8", docs/fp8.md): the expert GEMMs in FP8 with their casts,
the router and the all-to-alls in bf16, the expert weights' FP8 copies, and one expert priced as the dense layer."""

from __future__ import annotations

import pytest

from dse.cli import main
from dse.errors import InputError
from dse.estimate import resolve, run
from dse.estimate.kernel_table import cost_of, kernel_tables, kernel_time
from dse.formulas import compute, fp8, kernels as K
from dse.formulas.precision import peak_flops, recipe
from dse.formulas.transformer.moe import dropped_token_fraction
from tests.test_moe import _dense_and_one_expert, leaves

H100 = "dgx-h100"


@pytest.mark.parametrize("plan", [
    dict(tp=1, recompute="none", precision="fp8"),
    dict(tp=2, sequence_parallel=True, recompute="selective", precision="fp8", fp8_scaling="current"),
    dict(tp=2, pp=2, dp=2, zero=1, micro_batch=2, recompute="full", precision="fp8",
         fp8_param_gather=True),
])
def test_one_expert_top1_in_fp8_prices_as_the_dense_layer_in_fp8(plan):
    dense, moe = _dense_and_one_expert(**plan)
    d, m = dict(leaves(dense)), dict(leaves(moe))
    d.pop(".model.params"), m.pop(".model.params")
    assert m.pop(".time.ep_communication") == 0 and m.pop(".traffic.ep") == 0
    m = {k: v for k, v in m.items() if not k.startswith(".model.")}
    assert set(m) <= set(d) and ".fp8.cast_share" in m
    for k, v in m.items():
        assert v == pytest.approx(d[k], rel=1e-12, abs=1e-12), k


def _moe_layer(fp8_scaling=None, **kw):
    moe = dict(experts=8, experts_per_token=2, expert_ffn=1024, **kw)
    return K.layer_kernels(2048, 1, 512, 8, 8, 64, 1024, ffn_type="swiglu", norm="rmsnorm", position="rotary",
                           dropout=False, moe=moe, fp8=fp8_scaling)


def test_fp8_moe_rows_and_their_casts():
    """The expert and shared GEMMs in FP8, the router bf16; every routed copy's input and output gradient cast."""
    e, T, h, k, F, S = 2, 2048, 512, 2, 1024, 256
    bf16 = _moe_layer(shared_experts=1, shared_ffn=S)
    t = _moe_layer("delayed", shared_experts=1, shared_ffn=S)
    assert [n for n, row in t.items() if row.get("fp8")] == ["qkv", "out", "expert_fc1", "expert_fc2", "shared_fc1",
                                                            "shared_fc2"]
    assert "fp8" not in t["router"] and t["ep_dispatch" if "ep_dispatch" in t else "permute"] == bf16["permute"]
    # norm1 feeds qkv (LayerNormLinear: writes FP8); norm2 also feeds the router (a separate norm: bf16)
    assert t["norm1"]["bytes"] < bf16["norm1"]["bytes"] and t["norm2"] == bf16["norm2"]
    # Megatron's SwiGLU between the grouped GEMMs writes bf16: the bytes stay, fc2's saved input becomes 1 B
    assert t["expert_activation"]["bytes"] == bf16["expert_activation"]["bytes"]
    assert bf16["expert_activation"]["saved"] - t["expert_activation"]["saved"] == (e - 1) * T * k * F
    assert t["expert_fc1"]["saved"] == bf16["expert_fc1"]["saved"] / e
    assert t["shared_fc1"]["saved"] == T * h                 # its own FP8 copy of the normed input
    qkv_n, hd = 3 * h, h
    forward = (e + 2) * (T * hd + T * k * h + T * k * F + T * h + T * S)   # out, grouped fc1/fc2, shared fc1/fc2
    backward = (e + 2) * (T * qkv_n + T * h + T * k * 2 * F + T * k * h + T * 2 * S + T * h) + 2 * T * h
    assert t["fp8_cast"]["bytes"] == forward and t["fp8_cast"]["bytes_backward"] == backward
    assert (t["fp8_cast"]["kernels"], t["fp8_cast"]["kernels_backward"]) == (5, 7)


def test_fp8_cast_counts_the_routed_copies_not_the_busiest_expert():
    """The grouped GEMM's time follows the busiest expert; its casts run over all T k routed copies (padded: C T k)."""
    base = _moe_layer("current")
    skew = _moe_layer("current", imbalance=1.5)
    assert skew["expert_fc1"]["m"] == 1.5 * base["expert_fc1"]["m"]
    assert skew["fp8_cast"] == base["fp8_cast"]
    padded = _moe_layer("current", capacity=1.25, pad=True)
    extra = padded["fp8_cast"]["bytes"] - base["fp8_cast"]["bytes"]
    assert extra == pytest.approx(0.25 * 2048 * 2 * (512 + 1024) * fp8.cast_bytes(1, "current"))
    capped = _moe_layer("current", capacity=0.75)           # the copies over capacity are dropped before the experts
    kept = 1 - dropped_token_fraction(2048, 8, 2, 0.75)
    fewer = base["fp8_cast"]["bytes"] - capped["fp8_cast"]["bytes"]
    assert 0 < kept < 1 and fewer == pytest.approx((1 - kept) * 2048 * 2 * (512 + 1024) * fp8.cast_bytes(1, "current"))


def test_fp8_lowers_the_expert_gemm_time():
    m, s, plan = resolve("qwen3-30b-a3b", H100, precision="fp8", ep=8, dp=8)
    gpu = s.node.gpu
    f8 = kernel_tables(m, plan, recipe("fp8"))["layer"]
    b16 = kernel_tables(m, plan, recipe("bf16"))["layer"]
    hw8 = cost_of(gpu, peak_flops(gpu.peak_flops, "fp8"), peak_flops(gpu.peak_flops, "bf16"),
                  peak_flops(gpu.peak_flops, "bf16"), 2)
    hw16 = cost_of(gpu, peak_flops(gpu.peak_flops, "bf16"), peak_flops(gpu.peak_flops, "bf16"),
                   peak_flops(gpu.peak_flops, "bf16"), 2)
    for name in ("expert_fc1", "expert_fc2"):
        row = f8[name]
        f, b = kernel_time(row, hw8, compute)
        grouped = compute.gemm_time(row["m"], row["k"], row["n"], 1979e12, gpu.efficiency.gemm_fp8,
                                    gpu.efficiency.gemm_overhead, row["batch"], gpu.efficiency.gemm_fp8_depth)
        grouped += (row["launches"] - 1) * gpu.efficiency.gemm_overhead   # TE: one GEMM per local expert
        assert f == pytest.approx(grouped, rel=1e-9) and row["batch"] == 16 and b == pytest.approx(2 * f)
        assert f < 0.85 * kernel_time(b16[name], hw16, compute)[0]   # small experts: k = 768 or 2,048, far from 2x
    assert kernel_time(f8["router"], hw8, compute) == kernel_time(b16["router"], hw16, compute)


@pytest.mark.parametrize("ep", [1, 8])
def test_expert_weights_fp8_copies_in_memory(ep):
    """Mixtral: each GPU holds its E/ep experts' FP8 weight and transpose (2 B a weight) beside the bf16 ones."""
    kw = dict(precision="fp8", tp=1, dp=8, ep=ep, zero=1, micro_batch=1)
    m, s, plan = resolve("mixtral-8x7b", H100, **kw)
    r8 = run(m, s, plan)
    rb = run(*resolve("mixtral-8x7b", H100, **{**kw, "precision": "bf16"}))
    h, a, kv, d, E, F = m.hidden, m.heads, m.kv_heads, m.head_dim, m.experts, m.expert_ffn
    linear = h * (a + 2 * kv) * d + a * d * h + E / ep * 3 * h * F
    assert r8["memory"]["gpu"]["weights"] - rb["memory"]["gpu"]["weights"] == pytest.approx(m.layers * linear * 2)
    meta = r8["memory"]["gpu"]["buffers"] - rb["memory"]["gpu"]["buffers"]
    assert meta == pytest.approx(fp8.amax_bytes((2 + 2 * E / ep) * m.layers, "delayed"))


def test_fp8_param_gather_gathers_the_expert_weights_at_one_byte():
    kw = dict(precision="fp8", fp8_scaling="current", tp=1, dp=16, ep=8, zero=1, micro_batch=1)
    m, s, plan = resolve("mixtral-8x7b", "h100-cluster", **kw)
    plain = run(m, s, plan)
    gathered = run(*resolve("mixtral-8x7b", "h100-cluster", **kw, fp8_param_gather=True))
    assert gathered["traffic"]["dp"] < plain["traffic"]["dp"]
    # the bf16 weight is not kept: the weights are the FP8 copies alone (2 B a linear weight, as bf16's 2 B)
    bf16 = run(*resolve("mixtral-8x7b", "h100-cluster", **{**kw, "precision": "bf16", "fp8_scaling": "delayed"}))
    assert gathered["memory"]["gpu"]["weights"] == pytest.approx(bf16["memory"]["gpu"]["weights"])


def test_deepseek_v3_runs_in_fp8_with_its_mla_rows():
    m, s, plan = resolve("deepseek-v3", "h800-cluster", precision="fp8", pp=16, dp=8, ep=8, micro_batch=1)
    layer = kernel_tables(m, plan, recipe("fp8"))["layer"]
    rows = [n for n, row in layer.items() if row.get("fp8")]
    assert rows == ["q_down", "kv_down", "q_up", "kv_up", "out", "expert_fc1", "expert_fc2", "shared_fc1",
                    "shared_fc2"]
    assert "fp8" not in layer["attention"] and "fp8" not in layer["router"]
    bf16 = run(*resolve("deepseek-v3", "h800-cluster", precision="bf16", pp=16, dp=8, ep=8, micro_batch=1))
    r = run(m, s, plan)
    assert r["time"]["iteration"] < bf16["time"]["iteration"]
    assert r["flops"]["model_per_iteration"] == pytest.approx(bf16["flops"]["model_per_iteration"], rel=1e-12)


@pytest.mark.parametrize("argv, named", [
    (["--model", "mixtral-8x7b", "--hw", "dgx-a100-80gb", "--precision", "fp8"], "a100-sxm-80gb"),
    (["--model", "qwen3-30b-a3b", "--hw", H100, "--precision", "fp8", "--zero", "3"], "--zero 3"),
    (["--model", "qwen3-30b-a3b", "--hw", H100, "--precision", "fp8", "--stack", "pytorch"], "--stack pytorch"),
    (["--model", "deepseek-v3", "--hw", "h800-cluster", "--precision", "fp8", "--fp8-scaling", "blockwise"],
     "--fp8-scaling"),
])
def test_bad_fp8_moe_input_is_one_line(capsys, argv, named):
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err


def test_fp8_moe_no_longer_refused():
    m, s, plan = resolve("qwen3-30b-a3b", H100, precision="fp8", ep=8, dp=8)
    assert plan.precision == "fp8"
    with pytest.raises(InputError, match="finetune"):
        resolve("qwen3-30b-a3b", H100, precision="fp8", finetune="lora")
