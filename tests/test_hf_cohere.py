"""Cohere's Command-R read from config.json (dse.specs.hf.cohere): what the reader sets, what it refuses, the exact
parameter count against Transformers itself (the published c4ai-command-r-v01 config and CohereConfig's defaults), the
rows of its fp32 LayerNorm without bias and its fp32 rotary (its estimate and a search over both eager stacks:
tests/test_hf_nemotron.py).

tests/fixtures/hf/c4ai-command-r-v01/config.json is CohereForAI/c4ai-command-r-v01's config.json written from memory:
its count, 34,980,831,232, is the model card's "35 billion" (and Transformers' own count of that config). The layer's
bytes and saved tensors against the aten trace of CohereForCausalLM: test_stacks.py (pytorch_stack_trace_cohere.json).
"""

from __future__ import annotations

import pytest
from test_hf_families import (
    FIXTURES,
    counted_as_transformers_does,
    refused_in_one_line,
    spec,
    test_parameter_count_is_transformers_own as transformers_count,
)

from dse.catalog import load_model
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
    counted_as_transformers_does("cohere", "CohereForCausalLM", extra, expected, tmp_path)


@pytest.mark.parametrize("key, value, message", [
    ("use_qk_norm", True, "use_qk_norm true is not modelled for cohere"),
    ("hidden_act", "gelu", "hidden_act 'gelu' is not supported for cohere"),
    ("num_experts", 8, "num_experts: 8 is not modelled"),
])
def test_unmodelled_keys_are_refused_in_one_line(tmp_path, key, value, message):
    refused_in_one_line(NAME, key, value, message, tmp_path)


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


R7B = "c4ai-command-r7b-12-2024"


def test_cohere2_reads_its_sliding_layers_and_its_nope_layers():
    """Command R7B (fixture from memory; 8,028,033,024 as Transformers builds it, the card's "7B"): every fourth layer
    full attention without rotary positions (Cohere2Attention applies the rotary only with a sliding window:
    ``nope_layers`` 8, the rotary kernels priced on the 24 sliding layers), the others over a 4,096-token window."""
    m = spec(R7B)
    assert (m.attention_layers, m.sliding_window, m.head_dim, m.kv_heads, m.norm_kind, m.rotary_upcast,
            m.parallel_residual, m.logit_scale, m.nope_layers) == ({"full": 8, "sliding": 24, "chunked": 0}, 4096,
                                                                   128, 8, "fp32_layernorm", True, True, True, 8)
    assert m.unmodelled == ()
    transformers_count(R7B)


@pytest.mark.parametrize("extra, expected", [
    ({}, 34_980_831_232),      # Cohere2Config's sizes are CohereConfig's
    # the config's head_dim wins over hidden_size / heads (Cohere2Config sets the latter, then the key)
    ({"attention_bias": True, "num_hidden_layers": 6, "num_key_value_heads": 8, "tie_word_embeddings": False,
      "head_dim": 64, "sliding_window_pattern": 3}, 7_969_314_816),
])
def test_cohere2_defaults_are_counted_as_transformers_does(extra, expected, tmp_path):
    counted_as_transformers_does("cohere2", "Cohere2ForCausalLM", extra, expected, tmp_path)
