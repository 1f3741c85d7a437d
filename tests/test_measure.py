"""``dse measure``: the harness runs end to end on the CPU (smoke mode) and its output feeds ``dse calibrate``."""

from __future__ import annotations

import json

import pytest
from _reference_host import reference_host_system

from dse.catalog import data_dir, load_system

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
    # The rows are eager PyTorch runs (stack pytorch by default). On the reference host the smoke model's (h = 64)
    # kernels take about the GPU's fixed time per kernel, as long as their launches: GEMM overhead and memory rate move
    # its predicted time, and calibrate fits them (the micro row's host block apart: its measured host speed, which
    # the next test checks, decides which side binds)
    plain = tmp_path / "smoke-reference-host.jsonl"
    plain.write_text("".join(json.dumps({k: v for k, v in x.items() if k != "host"}) + "\n" for x in rows))
    reference = reference_host_system(tmp_path, "dgx-h100")
    c = dse("calibrate", "--data", plain, "--hw", reference, "--params", "memory,gemm_overhead", "--folds", "2")
    assert c.code == 0 and "time MAPE" in c.out, c.err
    # Priced as the megatron stack (a row may name its stack) the model is host-bound too (its launch floor), so the
    # host's per-layer time is what a fit can see: the round trip works with layer_overhead.
    meg = tmp_path / "smoke-megatron.jsonl"
    meg.write_text("".join(json.dumps({**x, "stack": "megatron"} if x["kind"] == "base" else x) + "\n"
                           for x in map(json.loads, plain.read_text().splitlines())))
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


def test_the_micro_row_carries_the_hosts_dispatch_speed_and_calibrate_sets_the_host_from_it(dse, tmp_path):
    """dse measure times its own host (dse.measure.host: tiny ops back to back, Transformers' GPT2Block step plain
    and checkpointed); dse calibrate sets the host's dispatch_scale from it -- a ratio to the reference host's
    GPT2Block step, not a fit (a CPU-tensor measurement against the reference's CPU step,
    data/host_dispatch_cpu.json)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "smoke.jsonl"
    r = dse("measure", "--device", "cpu", "--smoke", "--out", out)
    assert r.code == 0, r.err
    host = json.loads(out.read_text().splitlines()[0])["host"]
    assert host["device"] == "cpu" and host["threads"] == 1
    assert 0 < host["aten_op_us"] < host["gpt2_block"]["forward_us"] < host["gpt2_block"]["step_us"]
    assert host["launch_us"] > 0 and host["gpt2_block"]["step_ops"] == 61      # the GPT2Block the scales are set on
    assert host["gpt2_block"]["checkpointed_step_us"] > host["gpt2_block"]["step_us"]
    from dse.calibrate.host import host_scales

    assert set(host_scales(host)) == {"dispatch_scale"} and host_scales(host)["dispatch_scale"] > 0   # no checkpointed
    # reference on CPU tensors. The calibration below reads a host 4x the reference's CPU step (a fixed number: the
    # smoke run's own speed varies with the machine, and decides whether the tiny model is host-bound)
    ref = json.loads((data_dir() / "host_dispatch_cpu.json").read_text())["gpt2_block"]["step_us"]
    host["gpt2_block"]["step_us"] = 4 * ref
    scale = host_scales(host)
    assert scale == {"dispatch_scale": pytest.approx(4.0)}
    meg = tmp_path / "smoke-megatron.jsonl"
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    meg.write_text("".join(json.dumps({**x, "stack": "megatron"} if x["kind"] == "base" else {**x, "host": host})
                           + "\n" for x in rows))
    yaml_out = tmp_path / "cal.yaml"
    c = dse("calibrate", "--data", meg, "--hw", "dgx-h100", "--params", "layer_overhead", "--folds", "0",
            "--out", yaml_out, "--json")
    assert c.code == 0, c.err
    res = json.loads(c.out)
    before = load_system("dgx-h100").node.host.dispatch_scale      # 4.17: transferred (dgx-h100-host.yaml)
    assert res["host"]["dispatch_scale"] == {"before": before, "measured": pytest.approx(scale["dispatch_scale"])}
    assert load_system(str(yaml_out)).node.host.dispatch_scale == pytest.approx(scale["dispatch_scale"], rel=1e-5)
    assert load_system(str(yaml_out)).node.host.dispatch_basis == "measured"     # the host's own micro row
    assert "measured by the host" in yaml_out.read_text()


def test_a_configuration_that_raises_is_skipped_with_its_reason(monkeypatch, capsys):
    """Transformers refuses some (model, attention) pairs (Gemma 2 and sdpa: a ValueError): one stderr line naming
    the configuration and the reason, and the run goes on; the profiler's per-cycle warning is not passed on."""
    torch = pytest.importorskip("torch")
    from dse.measure import command, gpt

    real = gpt.train_steps

    def refuse(cfg, attn, *args, **kw):
        if attn == "sdpa":
            raise ValueError("Gemma2ForCausalLM does not support sdpa\nsecond line")
        return real(cfg, attn, *args, **kw)

    monkeypatch.setattr(gpt, "train_steps", refuse)
    rows = list(command.base_rows(torch, "cpu", True, {"smoke-gpt": command.SMOKE_CONFIG}, [1], 32))
    assert {r["attn"] for r in rows} == {"eager"} and len(rows) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"dse measure: smoke-gpt sdpa b1 {rc}: skipped (ValueError: Gemma2ForCausalLM does not support "
                   f"sdpa)" for rc in ("none", "full")]


def test_the_profilers_cycle_warning_is_silenced():
    torch = pytest.importorskip("torch")
    import warnings

    from dse.measure.profile import profile_step

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        import torch.profiler.profiler as pp

        pp._WARNINGS_SHOWN.discard(next((w for w in list(getattr(pp, "_WARNINGS_SHOWN", ())) if "clears events" in w),
                                        None))
        x = torch.ones(4, requires_grad=True)
        profile_step(torch, lambda: (x * x).sum().backward(), "cpu")
    assert not [w for w in seen if "clears events" in str(w.message)]


def test_every_dropout_probability_of_a_config_is_zeroed(tmp_path):
    """StarCoder2's residual_dropout (0.1) ran in the held-out H200 rows: the harness zeroed only the names it knew."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from dse.measure.gpt import hf_gpt2

    cfg = json.loads(open("models/hf/bigcode/starcoder2-3b/config.json").read())
    cfg.update(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=128)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    model, _ = hf_gpt2({"hf_config": str(path)}, "eager", "none")
    assert model.config.residual_dropout == 0.0 and model.config.attention_dropout == 0.0
