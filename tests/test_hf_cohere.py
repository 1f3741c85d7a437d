"""Cohere's Command-R read from config.json (dse.specs.hf.cohere): what the reader sets, what it refuses, the exact
parameter count against Transformers itself (the published c4ai-command-r-v01 config and CohereConfig's defaults), the
rows of its fp32 LayerNorm without bias and its fp32 rotary, and a search over both eager stacks.

tests/fixtures/hf/c4ai-command-r-v01/config.json is CohereForAI/c4ai-command-r-v01's config.json written from memory:
its count, 34,980,831,232, is the model card's "35 billion" (and Transformers' own count of that config). The layer's
bytes and saved tensors against the aten trace of CohereForCausalLM: test_stacks.py (pytorch_stack_trace_cohere.json).
"""

from __future__ import annotations

import json

import pytest
from test_hf_families import FIXTURES, config, spec, test_parameter_count_is_transformers_own as transformers_count

from dse.catalog import load_model
from dse.cli import main
from dse.errors import InputError

NAME = "c4ai-command-r-v01"


def test_reader_sets_the_architecture():
    m = spec(NAME)
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.ffn_type, m.norm, m.norm_kind,
            m.norm_params, m.norm_bias, m.layer_norms, m.parallel_residual, m.bias, m.qkv_bias, m.rotary_upcast,
            m.rotary_fp32, m.logit_scale, m.tied_embeddings, m.vocab) == (
        40, 8192, 64, 64, 128, 22528, "swiglu", "layernorm", "fp32_layernorm", "weight", False, 1, True, False, False,
        True, False, True, True, 256000)
    assert m.layer_param_tensors == 7 + 1 and m.unmodelled == ()


def test_parameter_count_is_transformers_own():
    transformers_count(NAME)


@pytest.mark.parametrize("extra, expected", [
    ({}, 34_980_831_232),      # CohereConfig's defaults are Command-R v01's
    ({"attention_bias": True, "num_hidden_layers": 2, "num_key_value_heads": 8, "tie_word_embeddings": False},
     5_603_651_584),
])
def test_the_configuration_class_defaults_and_biases_are_counted_as_transformers_does(extra, expected, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(FIXTURES))
    from count_with_transformers import dse_count, hf_count

    cfg = {"model_type": "cohere", "architectures": ["CohereForCausalLM"], **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert dse_count(str(path)) == hf_count(cfg, "CohereForCausalLM") == expected


@pytest.mark.parametrize("key, value, message", [
    ("use_qk_norm", True, "use_qk_norm true is not modelled for cohere"),
    ("hidden_act", "gelu", "hidden_act 'gelu' is not supported for cohere"),
    ("num_experts", 8, "num_experts: 8 is not modelled"),
])
def test_unmodelled_keys_are_refused_in_one_line(tmp_path, key, value, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config(NAME), key: value}))
    with pytest.raises(InputError, match=message) as err:
        load_model(str(path))
    assert "\n" not in str(err.value)
    assert main(["estimate", "--model", str(path), "--hw", "dgx-h100"]) == 2


@pytest.mark.parametrize("field, value, message", [
    ("norm_bias", False, "norm_bias false needs a LayerNorm with a weight"),
    ("rotary_upcast", True, "rotary_upcast needs position rotary and rotary_fp32 false"),
])
def test_the_new_fields_are_checked(field, value, message):
    with pytest.raises(InputError, match=message):
        load_model("llama2-7b" if field == "norm_bias" else "gpt2-medium", [([field], value)])


def test_fp32_layernorm_and_rotary_upcast_rows():
    """CohereLayerNorm: 12 kernels forward, 24 backward, 3 fp32 h-sized tensors and the rsqrt saved; its rotary: 4
    kernels more each way than the bf16 rotary (the casts of q and k); the logits times logit_scale: one pass."""
    from dse.estimate import kernel_table as KT, resolve
    from dse.formulas.precision import recipe_of

    tok, h = 2048, 8192
    m, _, p = resolve(str(FIXTURES / NAME / "config.json"), "h100-cluster", None, (), stack="pytorch", tp=8, dp=1,
                      micro_batch=1, seq_len=tok)
    tables = KT.kernel_tables(m, p, recipe_of(p))
    t = tables["layer"]
    assert (t["norm1"]["kernels"], t["norm1"]["kernels_backward"]) == (12, 24) and "norm2" not in t
    assert t["norm1"]["saved"] == 3 * 4 * tok * h + 4 * tok
    assert (t["rotary_upcast"]["kernels"], t["rotary_upcast"]["kernels_backward"]) == (4, 4)
    assert "rotary_fp32" not in t and tables["head"]["logit_scale"]["kernels"] == 1


def test_estimate_runs_with_the_pytorch_stack(capsys):
    code = main(["estimate", "--model", str(FIXTURES / NAME / "config.json"), "--stack", "pytorch", "--hw",
                 "h100-cluster", "--tp", "8", "--dp", "8", "--recompute", "full"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "peak reserved" in out


@pytest.mark.parametrize("stack", ["pytorch", "compiled"])
def test_an_exhaustive_search_finds_plans_on_both_eager_stacks(tmp_path, stack):
    out = tmp_path / "r.json"
    assert main(["search", "--model", str(FIXTURES / NAME / "config.json"), "--hw", "h100-cluster", "--gpus", "64",
                 "-B", "256", "-s", "4096", "--engine", "exhaustive", "--top", "1", "-q", "--json", str(out),
                 "--set", f"plan.stack={stack}"]) == 0
    result = json.loads(out.read_text())
    assert result["feasible"] > 0 and result["best"]["metrics"]["time.iteration"] > 0
