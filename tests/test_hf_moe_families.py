"""The MoE decoders read from config.json by dse.specs.hf.moe_decoders (OLMoE, Granite-MoE, PhiMoE, GLM-4.5): what
each reader sets, what it refuses, the exact parameter count against Transformers itself (the published configs and each
configuration class's defaults), and a search over both eager stacks.

Exact counts without Transformers: test_hf_config.py (REFERENCE); the attention of OLMoE and GLM-4.5 against the
aten traces of their layers (dense MLP): test_stacks.py (pytorch_stack_trace_olmoe.json, _phimoe.json, _glm4_moe.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_hf_families import (
    refused_in_one_line,
    spec,
    test_parameter_count_is_transformers_own as transformers_count,
)

from dse.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
FAMILIES = ("OLMoE-1B-7B-0924", "granite-3.0-1b-a400m-base", "granite-3.0-3b-a800m-base", "Phi-3.5-MoE-instruct",
            "GLM-4.5-Air", "GLM-4.5")
#: model_type -> Transformers' causal-LM class: the configuration class's defaults counted as they are
DEFAULTS = {"olmoe": "OlmoeForCausalLM", "granitemoe": "GraniteMoeForCausalLM", "phimoe": "PhimoeForCausalLM",
            "glm4_moe": "Glm4MoeForCausalLM"}


def test_readers_set_the_architecture():
    o = spec("OLMoE-1B-7B-0924")
    assert (o.experts, o.experts_per_token, o.expert_ffn, o.shared_experts, o.moe_layers, o.qk_norm, o.qk_norm_full,
            o.norm_kind, o.tied_embeddings, o.bias, o.qkv_bias) == (64, 8, 1024, 0, 16, True, True, "rmsnorm", False,
                                                                    False, False)
    g = spec("granite-3.0-3b-a800m-base")
    assert (g.experts, g.experts_per_token, g.expert_ffn, g.moe_layers, g.embedding_scale, g.residual_scale,
            g.logit_scale, g.tied_embeddings, g.kv_heads) == (40, 8, 512, 32, True, True, True, True, 8)
    air = spec("GLM-4.5-Air")
    assert (air.experts, air.experts_per_token, air.expert_ffn, air.shared_experts, air.shared_expert_ffn,
            air.first_dense_layers, air.moe_layers, air.ffn_hidden, air.head_dim, air.qkv_bias, air.bias,
            air.qk_norm, air.rotary_fraction, air.mtp_layers, air.expert_groups) == (
        128, 8, 1408, 1, 1408, 1, 45, 10944, 128, True, False, False, 0.5, 1, None)
    p = spec("Phi-3.5-MoE-instruct")
    assert (p.experts, p.experts_per_token, p.expert_ffn, p.norm, p.bias, p.qkv_bias, p.mlp_bias, p.head_bias,
            p.sliding_window, p.kv_heads, p.layer_param_tensors) == (16, 2, 6400, "layernorm", True, True, False, True,
                                                                     131072, 8, 7 + 4 + 2 * 2)
    assert len(p.unmodelled) == 1 and "input_jitter_noise 0.01 is not modelled" in p.unmodelled[0]
    big = spec("GLM-4.5")
    assert (big.experts, big.first_dense_layers, big.moe_layers, big.qk_norm, big.layers) == (160, 3, 89, True, 92)


@pytest.mark.parametrize("name", FAMILIES)
def test_parameter_count_is_transformers_own(name):
    """Transformers 5.24 builds the model class on the meta device (tests/fixtures/hf/count_with_transformers.py)."""
    transformers_count(name)


@pytest.mark.parametrize("mt", sorted(DEFAULTS))
def test_the_configuration_class_defaults_are_read_as_transformers_fills_them_in(mt, tmp_path):
    """A config of nothing but its model_type: dse's defaults are the configuration class's (olmoe 13,361,612,800,
    granitemoe 37,039,116,288, phimoe 41,872,793,600, glm4_moe 103,481,200,640 with its head_dim 4096 // 96 = 42)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(FIXTURES))
    from count_with_transformers import dse_count, hf_count

    cfg = {"model_type": mt, "architectures": [DEFAULTS[mt]]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    expected = {"olmoe": 13_361_612_800, "granitemoe": 37_039_116_288, "phimoe": 41_872_793_600,
                "glm4_moe": 103_481_200_640}[mt]
    assert dse_count(str(path)) == hf_count(cfg, DEFAULTS[mt]) == expected


@pytest.mark.parametrize("name, key, value, message", [
    ("OLMoE-1B-7B-0924", "clip_qkv", 8.0, "clip_qkv 8.0 is not modelled for olmoe"),
    ("OLMoE-1B-7B-0924", "attention_bias", True, "attention_bias true is not modelled for olmoe"),
    ("OLMoE-1B-7B-0924", "head_dim", 64, "head_dim 64 is not modelled for olmoe"),
    ("OLMoE-1B-7B-0924", "hidden_act", "gelu", "hidden_act 'gelu' is not supported for olmoe"),
    ("granite-3.0-1b-a400m-base", "attention_bias", True, "attention_bias true is not modelled for granitemoe"),
    ("GLM-4.5-Air", "hidden_act", "gelu", "hidden_act 'gelu' is not supported for glm4_moe"),
    ("Phi-3.5-MoE-instruct", "num_experts_per_tok", 4, "num_experts_per_tok 4 is not modelled for phimoe"),
    ("GLM-4.5-Air", "first_k_dense_replace", 46, "mtp_layers with a dense last layer"),
    ("GLM-4.5-Air", "num_experts_per_tok", 200, r"experts_per_token \(200\) exceeds experts \(128\)"),
    ("GLM-4.5-Air", "partial_rotary_factor", 1.5, "partial_rotary_factor 1.5 is not a share"),
    ("OLMoE-1B-7B-0924", "kv_lora_rank", 512, "kv_lora_rank: 512 is not modelled"),
])
def test_unmodelled_keys_are_refused_in_one_line(tmp_path, name, key, value, message):
    refused_in_one_line(name, key, value, message, tmp_path)


@pytest.mark.parametrize("name", FAMILIES)
def test_estimate_runs_with_the_pytorch_stack(name, capsys):
    # GLM's MTP depth is Megatron-Core's: Transformers builds none (tests/test_mtp.py: the eager stacks refuse it)
    mtp = ["--set", "model.mtp_layers=0"] if name.startswith("GLM") else []
    code = main(["estimate", "--model", str(FIXTURES / name / "config.json"), "--stack", "pytorch", "--hw",
                 "h100-cluster", "--tp", "8", "--dp", "8", "--ep", "8", "--recompute", "full", *mtp])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "peak reserved" in out


@pytest.mark.parametrize("stack", ["pytorch", "compiled"])
@pytest.mark.parametrize("name", ["OLMoE-1B-7B-0924", "granite-3.0-3b-a800m-base", "Phi-3.5-MoE-instruct",
                                  "GLM-4.5-Air"])
def test_an_exhaustive_search_finds_plans_on_both_eager_stacks(tmp_path, name, stack):
    out = tmp_path / "r.json"
    big = name in ("GLM-4.5-Air", "Phi-3.5-MoE-instruct")
    gpus = ["--hw", "h100-cluster", "--gpus", "64", "--param", "plan.ep=[1,8]"] if big else [
        "--hw", "dgx-h100", "--gpus", "8"]
    assert main(["search", "--model", str(FIXTURES / name / "config.json"), *gpus, "-B", "256", "-s", "4096",
                 "--engine", "exhaustive", "--top", "1", "-q", "--json", str(out), "--set", f"plan.stack={stack}",
                 *(["--set", "model.mtp_layers=0"] if name.startswith("GLM") else [])]) == 0
    result = json.loads(out.read_text())
    assert result["feasible"] > 0 and result["best"]["metrics"]["time.iteration"] > 0


def test_phimoe_biases_are_the_attention_s_only():
    """PhiMoE's attention_bias puts biases on q, k, v and o (LlamaAttention), none on its router or experts: the MoE
    layer's parameters are the attention's with those (a + 2 kv) d + h biases, and the pytorch stack's backward sums
    them (``attn_bias_grads``), not an MLP's (``bias_grads``)."""
    from dse.estimate import kernel_table as KT, resolve
    from dse.estimate.parameters import layer_counts
    from dse.formulas.precision import recipe_of

    path = str(FIXTURES / "Phi-3.5-MoE-instruct" / "config.json")
    m, _, p = resolve(path, "dgx-h100", None, (), stack="pytorch", dp=1, micro_batch=1, seq_len=1024)
    without = resolve(path, "dgx-h100", None, ("model.bias=false", "model.qkv_bias=false"), stack="pytorch", dp=1,
                      micro_batch=1, seq_len=1024)[0]
    h, d = 4096, 128
    assert layer_counts(m)["moe"] - layer_counts(without)["moe"] == (32 + 2 * 8) * d + h
    layer = KT.kernel_tables(m, p, recipe_of(p))["layer"]
    assert "attn_bias_grads" in layer and "bias_grads" not in layer
    assert layer["attn_bias_grads"]["kernels_backward"] == 4
