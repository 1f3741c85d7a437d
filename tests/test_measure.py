"""``dse measure``: the harness runs end to end on the CPU (smoke mode) and its output feeds ``dse calibrate``."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.torch


def test_smoke_mode_round_trips_through_calibrate(dse, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "smoke.jsonl"
    r = dse("measure", "--device", "cpu", "--smoke", "--out", out)
    assert r.code == 0, r.err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0]["kind"] == "micro" and rows[0]["gemm_tflops"] and rows[0]["adamw_fused_fp32_step_s"]
    base = [x for x in rows if x["kind"] == "base"]
    assert len(base) == 8
    assert {(x["attn"], x["recompute"], x["b"]) for x in base} == {(a, c, b) for a in ("sdpa", "eager")
                                                                  for c in ("none", "full") for b in (1, 2)}
    for x in base:   # the fields of the shared H100 file, same meaning
        assert x["step_s"] == pytest.approx(x["fwd_s"] + x["bwd_s"]) and x["step_s"] > 0
        assert x["params"] == 136960   # 2 layers x 12h^2+13h, (512 + 64) x 64 embeddings, final norm 2h (h = 64)
    from dse.calibrate.measurements import read

    ms = read(out)
    assert len(ms) == 8 and {m.model.hidden for m in ms} == {64}
    # The rows are eager PyTorch runs (stack pytorch by default). The smoke model (h = 64) is host-bound under that
    # stack's per-kernel dispatch floor, so no GPU efficiency changes its predicted time: calibrate refuses.
    c = dse("calibrate", "--data", out, "--hw", "dgx-h100", "--params", "memory,gemm_overhead", "--folds", "2")
    assert c.code == 2 and "not identifiable" in c.err and c.err.count("\n") == 1
    # Priced as the megatron stack (a row may name its stack) the model is host-bound too (its launch floor), so the
    # host's per-layer time is what a fit can see: the round trip works with layer_overhead.
    meg = tmp_path / "smoke-megatron.jsonl"
    meg.write_text("".join(json.dumps({**x, "stack": "megatron"} if x["kind"] == "base" else x) + "\n" for x in rows))
    c = dse("calibrate", "--data", meg, "--hw", "dgx-h100", "--params", "layer_overhead", "--folds", "2",
            "--out", tmp_path / "cal.yaml", "--json")
    assert c.code == 0, c.err
    assert json.loads(c.out)["points"] == 8


def test_without_cuda_one_line(dse):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible")
    r = dse("measure", "--out", "/dev/null")
    assert r.code == 2 and "no CUDA GPU" in r.err and r.err.count("\n") == 1
    r = dse("measure", "--device", "cpu")
    assert r.code == 2 and "--smoke" in r.err


def test_smoke_hf_impl_profiles_and_moe_micro(dse, tmp_path):
    """--impl hf times Transformers' GPT2LMHeadModel; --profile adds a kernel/op summary after each configuration;
    --moe adds the expert-GEMM and permutation rates to the micro row."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "hf.jsonl"
    r = dse("measure", "--device", "cpu", "--smoke", "--impl", "hf", "--profile", "--moe", "--out", out)
    assert r.code == 0, r.err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    micro = rows[0]
    assert micro["kind"] == "micro"
    rates = micro["expert_gemm_tflops"]["smoke-moe"]["16"]
    assert set(rates) == {"fc1", "fc2"} and all(rates[g][k] > 0 for g in rates for k in ("fwd", "dgrad", "wgrad",
                                                                                           "dense"))
    assert micro["moe_permute"]["smoke-moe"]["permute_GBps"] > 0
    kinds = [x["kind"] for x in rows[1:]]
    assert kinds == ["base", "profile"] * 8          # each configuration's profile right after it
    for base, prof in zip(rows[1::2], rows[2::2]):
        assert base["impl"] == "hf" and base["params"] == 136960   # Transformers' GPT-2: the same count as torch's
        assert (prof["model"], prof["attn"], prof["b"], prof["recompute"]) == (base["model"], base["attn"], base["b"],
                                                                                base["recompute"])
        names = [op[2] for op in prof["ops"]]
        assert "aten::mm" in names or "aten::addmm" in names     # the GEMMs of the step were recorded
        if base["attn"] == "eager":
            assert "aten::softmax" in names or "aten::_softmax" in names
    r = dse("measure", "--device", "cpu", "--smoke", "--no-micro", "--out", tmp_path / "nomicro.jsonl")
    assert r.code == 0 and "micro-benchmarks" not in r.out
    assert all(json.loads(x)["kind"] == "base" for x in (tmp_path / "nomicro.jsonl").read_text().splitlines())


def test_config_json_models_need_the_hf_impl():
    from dse.errors import InputError
    from dse.measure.command import _configs

    path = "tests/fixtures/hf/Qwen2-0.5B/config.json"
    assert _configs(path, False, "hf") == {path: {"hf_config": path, "n_positions": 131072}}
    with pytest.raises(InputError, match="--impl hf"):
        _configs(path, False, "torch")
    with pytest.raises(InputError, match="llama3-8b is neither"):
        _configs("llama3-8b", False, "torch")


def test_bad_impl_one_line(dse):
    pytest.importorskip("torch")
    r = dse("measure", "--device", "cpu", "--smoke", "--impl", "jax", "--out", "/dev/null")
    assert r.code == 2 and "--impl" in r.err and "torch, hf" in r.err and r.err.count("\n") == 1
