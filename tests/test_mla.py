"""Multi-head latent attention (DeepSeek-V2/V3): parameters exact against Transformers, the kernel rows, the
estimate's FLOPs, the config.json readers, bad input, and the DeepSeek-V3 validation case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse import catalog
from dse.cli import main
from dse.errors import InputError
from dse.estimate import estimate
from dse.estimate.parameters import model_parameters
from dse.formulas import kernels as K, transformer as T
from dse.specs.hf import from_hf_config

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
# Transformers 5.24.0 DeepseekV3ForCausalLM / DeepseekV2ForCausalLM built from the fixtures on the meta device
# (tests/fixtures/hf/count_with_transformers.py; quantization_config dropped): unique parameters' numel.
HF_META = {"DeepSeek-V3": 671_026_404_352, "DeepSeek-V2-Lite": 15_706_484_224}
V3 = dict(h=7168, a=128, q=1536, kv=512, nope=128, rope=64, v=128, F=18432, Fe=2048, E=256, k=8, V=129280, L=61)


def _write(cfg: dict) -> str:
    import tempfile

    d = Path(tempfile.mkdtemp())
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d / "config.json")


# ------------------------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize("name", sorted(HF_META))
def test_fixture_counts_equal_transformers_meta_device(name):
    total, _ = model_parameters(catalog.load_model(str(FIXTURES / name / "config.json")))
    assert total == HF_META[name]


def test_deepseek_v3_catalog_total_and_active_against_the_formula():
    m = catalog.load_model("deepseek-v3")
    total, active = model_parameters(m)
    assert (total, active) == (671_026_404_352, 37_552_282_624)     # "671B total, 37B activated" (§1)
    c = V3
    h = c["h"]
    attn = (h * c["q"] + c["q"] + c["q"] * c["a"] * (c["nope"] + c["rope"]) + h * (c["kv"] + c["rope"]) + c["kv"]
            + c["kv"] * c["a"] * (c["nope"] + c["v"]) + c["a"] * c["v"] * h)
    norms = 2 * h
    dense = attn + 3 * h * c["F"] + norms
    moe = attn + c["E"] * h + c["E"] * 3 * h * c["Fe"] + 3 * h * c["Fe"] + norms    # router, routed, 1 shared
    moe_active = attn + c["E"] * h + c["k"] * 3 * h * c["Fe"] + 3 * h * c["Fe"] + norms
    ends = 2 * c["V"] * h + h                                                       # untied embedding, head, final norm
    assert total == ends + 3 * dense + 58 * moe
    assert active == ends + 3 * dense + 58 * moe_active
    assert catalog.load_model(str(FIXTURES / "DeepSeek-V3" / "config.json")).mtp_layers == m.mtp_layers == 1


def test_small_configs_equal_transformers():
    tr = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    base = dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=64, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
                n_shared_experts=2, first_k_dense_replace=1, kv_lora_rank=32, qk_nope_head_dim=16,
                qk_rope_head_dim=8, v_head_dim=24, vocab_size=1000, n_group=1, topk_group=1)
    for mt, arch, q in (("deepseek_v3", "DeepseekV3ForCausalLM", 48), ("deepseek_v2", "DeepseekV2ForCausalLM", None),
                        ("deepseek_v3", "DeepseekV3ForCausalLM", None)):
        cfg = {**base, "q_lora_rank": q}
        config = tr.AutoConfig.for_model(mt, **cfg)
        with torch.device("meta"):
            model = getattr(tr, arch)(config)
        ref = sum({id(p): p.numel() for p in model.parameters()}.values())
        assert model_parameters(catalog.load_model(_write({**cfg, "model_type": mt})))[0] == ref, (mt, q)


def test_replicated_part_is_the_down_projections_and_latent_norms():
    m = catalog.load_model("deepseek-v3")
    one, two = (estimate(m, "h800-cluster", tp=t, pp=16, dp=8, micro_batch=1)["model"] for t in (1, 2))
    assert one["params"] == two["params"]
    rep = T.mla_attention_parameters_replicated(7168, 1536, 512, 64)
    assert rep == 7168 * 1536 + 1536 + 7168 * 576 + 512


# ------------------------------------------------------------------------------------------------ kernel rows


def test_mla_rows_flops_equal_twice_the_projection_parameters():
    s, b, h, a = 4096, 1, 7168, 128
    t = K.mla_attention_kernels(s, b, h, a, 1536, 512, 128, 64, 128)
    gemm = sum(r["flops"] for r in t.values() if r["kind"] == "gemm")
    weights = T.mla_attention_parameters(h, a, 1536, 512, 128, 64, 128) - 1536 - 512   # less the two norms
    assert gemm == 2 * s * b * weights
    # attention: QK^T over d_qk = 192, PV over d_v = 128, causal half
    assert t["attention"]["flops"] == 2 * s * s * b * a * (192 + 128) / 2
    assert t["attention"]["executed_backward"] == pytest.approx(2 * s * s * b * a * (3 * 192 + 2 * 128) / 2)
    # tensor parallelism: the model FLOPs split over t ranks; the duplicated down projections run whole per rank
    t2 = K.mla_attention_kernels(s, b, h, a, 1536, 512, 128, 64, 128, tp=2)
    assert 2 * K.forward_flops(t2) == pytest.approx(K.forward_flops(t))
    assert (t2["q_down"]["m"], t2["q_down"]["n"], t2["q_up"]["n"]) == (s, 1536, a / 2 * 192)


def test_mla_saved_bytes_tensor_by_tensor():
    s, b, h, a, e = 2048, 2, 1024, 8, 2
    q, kv, nope, rope, v = 256, 128, 32, 16, 48
    t = K.mla_attention_kernels(s, b, h, a, q, kv, nope, rope, v)
    tok = s * b
    expect = (e * tok * h                              # the down projections' input, once
              + (e * q + 4) * tok + (e * kv + 4) * tok    # the latent norms: input and fp32 rstd
              + e * tok * (q + kv)                     # the up projections' inputs
              + e * tok * a * (2 * (nope + rope) + v) + 4 * tok * a     # Q, K, V and the log-sum-exp
              + e * tok * a * v)                       # the out-projection's input O
    assert K.saved_bytes(t) == expect
    sel = K.mla_attention_kernels(s, b, h, a, q, kv, nope, rope, v, recompute="selective")
    assert K.saved_bytes(t) - K.saved_bytes(sel) == 4 * tok * a


def test_plain_query_projection_and_equal_dims_match_standard_attention():
    """q_lora 0 (V2-Lite) is a column-parallel h x a d_qk GEMM; with d_v = d_qk the flash row is the standard one."""
    s, b, h, a, d = 1024, 1, 512, 8, 64
    t = K.mla_attention_kernels(s, b, h, a, 0, 128, d - 16, 16, d)
    assert "q_down" not in t and t["q_proj"]["n"] == a * d and t["q_proj"]["split"] == "column"
    std = K.layer_kernels(s, b, h, a, a, d, 4 * h, position="rotary", dropout=False)["attention"]
    for key in ("flops", "executed", "executed_backward"):
        assert t["attention"][key] == pytest.approx(std[key])


def test_estimate_model_flops_count_mla_and_the_active_experts():
    r = estimate("deepseek-v3", "h800-cluster", pp=16, dp=128, ep=64, zero=1, micro_batch=1, global_batch=15360,
                 recompute="none")
    c, s = V3, 4096
    h, a = c["h"], c["a"]
    attn_w = T.mla_attention_parameters(h, a, c["q"], c["kv"], c["nope"], c["rope"], c["v"]) - c["q"] - c["kv"]
    per_tok_attn = 2 * attn_w + 2 * s * a * (192 + 128) / 2                     # causal
    dense_mlp, moe_mlp = 2 * 3 * h * c["F"], 2 * (c["E"] * h + (c["k"] + 1) * 3 * h * c["Fe"])
    per_token = c["L"] * per_tok_attn + 3 * dense_mlp + 58 * moe_mlp + 2 * h * c["V"]
    # the MTP depth (mtp_layers 1), as Megatron-LM's num_floating_point_operations counts it: one more MoE layer,
    # eh_proj (2h x h) and a second logit GEMM (the norms are element-wise: no model FLOPs in dse)
    mtp = per_tok_attn + moe_mlp + 2 * 2 * h * h + 2 * h * c["V"]
    assert r["flops"]["model_per_iteration"] == pytest.approx(3 * 15360 * s * (per_token + mtp), rel=1e-9)
    assert not r["feasible"]        # DeepSeek's memory savings (FP8 activations, partial recompute) not modelled
    assert not any("mtp_layers" in w for w in r["warnings"])     # priced now (tests/test_mtp.py)


def test_context_parallel_mla_keeps_the_attention_work_and_lowers_activations():
    kw = dict(pp=16, dp=8, ep=8, micro_batch=1, recompute="none", overrides=["model.seq_len=8192"])
    one = estimate("deepseek-v3", "h800-cluster", **kw)
    two = estimate("deepseek-v3", "h800-cluster", cp=2, **kw)
    assert two["flops"]["model_per_iteration"] == pytest.approx(one["flops"]["model_per_iteration"], rel=1e-12)
    assert two["memory"]["gpu"]["activations"] < one["memory"]["gpu"]["activations"]


# ------------------------------------------------------------------------------------------------ readers


def test_reader_maps_deepseek_v3():
    f = from_hf_config(json.loads((FIXTURES / "DeepSeek-V3" / "config.json").read_text()), "v3")
    assert (f["q_lora_rank"], f["kv_lora_rank"], f["qk_nope_head_dim"], f["qk_rope_head_dim"], f["v_head_dim"]) == (
        1536, 512, 128, 64, 128)
    assert (f["experts"], f["experts_per_token"], f["shared_experts"], f["expert_ffn"], f["first_dense_layers"],
            f["expert_groups"], f["expert_groups_per_token"], f["mtp_layers"]) == (256, 8, 1, 2048, 3, 8, 4, 1)
    lite = from_hf_config(json.loads((FIXTURES / "DeepSeek-V2-Lite" / "config.json").read_text()), "lite")
    assert (lite["q_lora_rank"], lite["shared_experts"], "expert_groups" in lite) == (0, 2, False)


@pytest.mark.parametrize("change, message", [
    ({"moe_layer_freq": 2}, "moe_layer_freq 2 is not modelled"),
    ({"attention_bias": True}, "attention_bias true is not modelled"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
])
def test_reader_refuses_what_it_does_not_model(change, message):
    cfg = json.loads((FIXTURES / "DeepSeek-V3" / "config.json").read_text())
    with pytest.raises(InputError, match=message):
        from_hf_config({**cfg, **change}, "c.json")


def test_reader_defaults_are_the_configuration_classes():
    """Missing keys take DeepseekV3Config's defaults (q_lora_rank 1536); a null q_lora_rank is no query latent."""
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61}
    assert model_parameters(catalog.load_model(_write(cfg))) == model_parameters(catalog.load_model("deepseek-v3"))
    assert from_hf_config({**cfg, "q_lora_rank": None}, "c.json")["q_lora_rank"] == 0


def test_other_families_still_refuse_latent_attention():
    with pytest.raises(InputError, match="kv_lora_rank"):
        from_hf_config(dict(model_type="llama", hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                            intermediate_size=128, vocab_size=100, kv_lora_rank=16), "c.json")


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("sets, message", [
    (["model.kv_lora_rank=0"], "kv_lora_rank"),
    (["model.kv_lora_rank=-4"], "kv_lora_rank"),
    (["model.qk_rope_head_dim=63"], "qk_rope_head_dim (63) must be even"),
    (["model.v_head_dim=0"], "v_head_dim"),
    (["model.q_lora_rank=-1"], "q_lora_rank"),
    (["model.bias=true"], "bias True is not modelled with multi-head latent attention"),
    (["model.kv_heads=8"], "kv_heads 8 is not modelled with multi-head latent attention"),
    (["model.dense_layers=[60]"], "mtp_layers with a dense last layer"),     # multi-token prediction (test_mtp.py)
    (["model.mtp_layers=-1"], "mtp_layers"),
])
def test_bad_mla_fields_are_one_line_errors(capsys, sets, message):
    argv = ["estimate", "--model", "deepseek-v3", "--hw", "h800-cluster", "--pp", "16", "--dp", "8"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_mla_fields_without_kv_lora_rank_are_an_error(capsys):
    assert main(["estimate", "--model", "llama2-7b", "--hw", "dgx-h100", "--set", "model.q_lora_rank=64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "q_lora_rank is a multi-head latent attention field" in err[0]


@pytest.mark.parametrize("flags, named", [
    (["--stack", "pytorch"], "--stack pytorch"),
    (["--attention", "math"], "--attention math"),
])
def test_plans_mla_is_not_modelled_with_are_refused(capsys, flags, named):
    argv = ["estimate", "--model", "deepseek-v3", "--hw", "h800-cluster", "--pp", "16", "--dp", "8", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and "multi-head latent attention" in err[0]


# ------------------------------------------------------------------------------------------------ validation


def test_deepseek_v3_validation_case():
    from dse.validate import run_suite
    from dse.validate.deepseek_v3 import gpu_hours_per_trillion

    suite = run_suite("deepseek-v3")
    (case,) = suite.cases
    assert case.reference == 180_000 and case.tolerance == 0.5
    assert 180_000 < case.value < 270_000      # within the 50 % tolerance: DualPipe, FP8 and the MTP depth priced
    assert case.accepted and not case.expected_miss and "DualPipe" in case.name
    assert gpu_hours_per_trillion(3600.0, 1, 10**12) == 1.0


def test_emit_megatron_writes_the_latent_attention_arguments(capsys):
    argv = ["estimate", "--model", "deepseek-v3", "--hw", "h800-cluster", "--pp", "16", "--dp", "128", "--ep", "64",
            "--zero", "1", "--emit", "megatron"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert ("--multi-latent-attention --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 "
            "--q-lora-rank 1536 --mtp-num-layers 1") in out
    assert "--kv-channels" not in out
