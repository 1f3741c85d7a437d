"""No silent misreads (issue 18): a config.json key that changes the architecture and is not modelled is an error
naming the file and the key, or a visible warning (printed, and in ``--json`` ``warnings``), never silence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dse
from dse.catalog import load_model
from dse.cli import main
from dse.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def config(tmp_path, name: str, **changes) -> str:
    cfg = json.loads((FIXTURES / name / "config.json").read_text())
    cfg.update(changes)
    path = tmp_path / name / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return str(path)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_mixtral_relabelled_as_mistral_is_an_error_naming_file_and_key(tmp_path, capsys):
    path = config(tmp_path, "Mixtral-8x7B-v0.1", model_type="mistral")
    code, out, err = run(capsys, "estimate", "--model", path, "--hw", "dgx-h100")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dse: error: ")
    assert path in lines[0] and "num_local_experts" in lines[0] and "not modelled: mixture-of-experts" in lines[0]


@pytest.mark.parametrize("key, value, what", [
    ("num_experts", 64, "mixture-of-experts"),                 # Qwen2-MoE, OLMoE
    ("moe_intermediate_size", 1408, "mixture-of-experts"),
    ("kv_lora_rank", 512, "multi-head latent attention"),      # DeepSeek-V2/V3
    ("add_cross_attention", True, "cross-attention"),
    ("is_encoder_decoder", True, "an encoder-decoder model"),
    ("num_nextn_predict_layers", 2, "multi-token prediction layers"),
])
def test_other_unmodelled_architectures_are_errors(tmp_path, key, value, what):
    with pytest.raises(InputError, match=f"{key}: .* is not modelled: {what}"):
        load_model(config(tmp_path, "Llama-3.1-8B", **{key: value}))


def test_off_values_of_those_keys_are_dense(tmp_path):
    spec = load_model(config(tmp_path, "Llama-3.1-8B", num_experts=1, add_cross_attention=False, kv_lora_rank=None))
    assert spec.ffn_hidden == 14336


def test_unknown_activation_is_an_error_not_gelu(tmp_path):
    with pytest.raises(InputError, match="activation_function 'quick_gelu' is not modelled"):
        load_model(config(tmp_path, "gpt2", activation_function="quick_gelu"))
    with pytest.raises(InputError, match="hidden_act 'relu' is not supported for bert"):
        load_model(config(tmp_path, "bert-large-uncased", hidden_act="relu"))


def test_a_sliding_window_shorter_than_the_sequence_is_priced_not_a_warning():
    path = str(FIXTURES / "Mistral-7B-v0.1" / "config.json")              # sliding_window 4096
    assert dse.estimate(path, "dgx-h100", tp=8)["warnings"] == []
    r = dse.estimate(path, "dgx-h100", tp=8, seq_len=8192)
    full = dse.estimate(path, "dgx-h100", tp=8, seq_len=8192, overrides=["model.sliding_window=8192"])
    assert r["warnings"] == [] and r["flops"]["model_per_iteration"] < full["flops"]["model_per_iteration"]


def test_qwen2_window_applies_only_when_used(tmp_path):
    path = str(FIXTURES / "Qwen2-7B" / "config.json")                     # use_sliding_window false
    assert load_model(path).sliding_window is None
    on = load_model(config(tmp_path, "Qwen2-7B", use_sliding_window=True, sliding_window=2048))
    assert on.sliding_window == 2048 and on.attention_layers["sliding"] == 0   # layers >= max_window_layers (28)
    some = load_model(config(tmp_path, "Qwen2-7B", use_sliding_window=True, sliding_window=2048, max_window_layers=20))
    assert some.attention_layers == {"full": 20, "sliding": 8, "chunked": 0}


@pytest.mark.parametrize("changes, words", [
    ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, "quantization_config (gptq) is not modelled"),
    ({"use_parallel_residual": True}, "use_parallel_residual: true is not modelled"),
])
def test_approximately_priced_details_are_warnings_with_the_file(tmp_path, changes, words):
    path = config(tmp_path, "Llama-3.1-8B", **changes)
    w = dse.estimate(path, "dgx-h100", tp=8)["warnings"]
    assert len(w) == 1 and w[0].startswith(path) and words in w[0]


def test_bert_relative_positions_are_a_warning(tmp_path):
    path = config(tmp_path, "bert-large-uncased", position_embedding_type="relative_key")
    assert "position_embedding_type 'relative_key' is not modelled" in load_model(path).unmodelled[0]


def test_the_shipped_fixtures_read_without_warnings():
    for name in ("gpt2", "Llama-2-70b-hf", "Llama-3.1-8B", "Mistral-7B-v0.1", "Mistral-Nemo-Base-2407", "Qwen2-7B",
                 "Qwen2-0.5B", "opt-13b", "bert-large-uncased", "Phi-3-mini-4k-instruct", "Phi-3-medium-4k-instruct",
                 "pythia-1.4b", "gpt-neox-20b", "falcon-7b", "falcon-40b"):
        assert load_model(str(FIXTURES / name / "config.json")).unmodelled == (), name
