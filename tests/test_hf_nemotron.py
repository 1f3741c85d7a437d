"""Nemotron-4 / Minitron read from config.json (dse.specs.hf.nemotron): what the reader sets, what it refuses, the
exact parameter count against Transformers itself (the published Minitron-4B-Base config and NemotronConfig's
defaults), the squared ReLU and LayerNorm1P rows, and a search over both eager stacks.

tests/fixtures/hf/Minitron-4B-Base/config.json is nvidia/Minitron-4B-Base's config.json written from memory: its
count, 4,190,509,056, is the model card's "4.2B" (and Transformers' own count of that config). The layer's bytes and
saved tensors against the aten trace of NemotronForCausalLM: test_stacks.py (pytorch_stack_trace_nemotron.json).
"""

from __future__ import annotations

import json

import pytest
from test_hf_families import (
    FIXTURES,
    counted_as_transformers_does,
    refused_in_one_line,
    spec,
    test_parameter_count_is_transformers_own as transformers_count,
)

from dse.catalog import load_model
from dse.cli import main
from dse.errors import InputError


def test_reader_sets_the_architecture():
    m = spec("Minitron-4B-Base")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.ffn_type, m.activation_kind,
            m.norm, m.norm_kind, m.bias, m.qkv_bias, m.mlp_bias, m.rotary_fraction, m.tied_embeddings,
            m.qkv_projection, m.softmax_dtype, m.vocab) == (
        32, 3072, 24, 8, 128, 9216, "relu2", "relu2", "layernorm", "layernorm1p", False, False, False, 0.5, False,
        "separate", "fp32", 256000)
    assert m.unmodelled == ()


def test_parameter_count_is_transformers_own():
    transformers_count("Minitron-4B-Base")


@pytest.mark.parametrize("extra, expected", [
    # NemotronConfig's defaults: Transformers 5.24 leaves num_key_value_heads None there and NemotronAttention then
    # fails (heads // None), so the default config is counted with it set to its meaning, every head (48)
    ({"num_key_value_heads": 48}, 17_642_041_344),
    ({"num_key_value_heads": 8, "attention_bias": True, "mlp_bias": True, "num_hidden_layers": 2,
      "tie_word_embeddings": True}, 2_353_156_096),
    ({"num_key_value_heads": 8, "mlp_bias": True, "num_hidden_layers": 2}, 3_925_991_424),
    ({"num_key_value_heads": 8, "attention_bias": True, "num_hidden_layers": 2, "head_dim": 64}, 3_837_870_080),
])
def test_the_configuration_class_defaults_and_biases_are_counted_as_transformers_does(extra, expected, tmp_path):
    counted_as_transformers_does("nemotron", "NemotronForCausalLM", extra, expected, tmp_path)


@pytest.mark.parametrize("key, value, message", [
    ("hidden_act", "gelu", "hidden_act 'gelu' is not supported for nemotron"),
    ("partial_rotary_factor", 1.5, "partial_rotary_factor 1.5 is not a share"),
    ("num_local_experts", 8, "num_local_experts: 8 is not modelled"),
])
def test_unmodelled_keys_are_refused_in_one_line(tmp_path, key, value, message):
    refused_in_one_line("Minitron-4B-Base", key, value, message, tmp_path)


def test_zero_centered_gamma_needs_a_layernorm_with_weights():
    with pytest.raises(InputError, match="zero_centered_gamma needs a LayerNorm with weights"):
        load_model("llama2-7b", [(["zero_centered_gamma"], True)])


def test_squared_relu_and_layernorm1p_rows():
    """relu2: relu and pow forward (2 kernels, 4 passes of T F), pow's gradient (pow, mul, mul) and
    threshold_backward (4 kernels, 10 passes), relu's output and the square kept; LayerNorm1P: LayerNorm with the
    (1 + w) add (2 kernels forward); Megatron's kernel table: the fused squared ReLU keeps its input and output, as
    GeLU (megatron/core/activations.py squared_relu, jit_fuser)."""
    from dse.estimate import kernel_table as KT, resolve
    from dse.formulas.precision import recipe_of

    path = str(FIXTURES / "Minitron-4B-Base" / "config.json")
    tok, f = 2048, 9216
    for stack, kernels, fwd, bwd, saved in (("pytorch", 2, 4, 10, 2), ("megatron", 1, 2, 3, 2)):
        m, _, p = resolve(path, "dgx-h100", None, (), stack=stack, dp=1, micro_batch=1, seq_len=tok)
        t = KT.kernel_tables(m, p, recipe_of(p))["layer"]
        act = t["activation"]
        assert act["bytes"] == fwd * 2 * tok * f and act["saved"] == saved * 2 * tok * f, stack
        assert act.get("kernels", 1) == kernels, stack
        if stack == "pytorch":
            assert act["bytes_backward"] == bwd * 2 * tok * f and t["norm1"]["kernels"] == 2


#: each family's fixture and the machine its estimate and search run on (Command-R 35B: 8 nodes, tp 8)
MACHINES = {"Minitron-4B-Base": ["--hw", "dgx-h100"], "c4ai-command-r-v01": ["--hw", "h100-cluster"],
            "c4ai-command-r7b-12-2024": ["--hw", "dgx-h100"]}


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_estimate_runs_with_the_pytorch_stack(name, capsys):
    """Nemotron's and Cohere's (tests/test_hf_cohere.py) fixtures."""
    plan = ["--tp", "8", "--dp", "8", "--recompute", "full"] if name == "c4ai-command-r-v01" else []
    code = main(["estimate", "--model", str(FIXTURES / name / "config.json"), "--stack", "pytorch", *MACHINES[name],
                 *plan])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "peak reserved" in out


@pytest.mark.parametrize("stack", ["pytorch", "compiled"])
@pytest.mark.parametrize("name", sorted(MACHINES))
def test_an_exhaustive_search_finds_plans_on_both_eager_stacks(tmp_path, name, stack):
    out = tmp_path / "r.json"
    gpus = "64" if name == "c4ai-command-r-v01" else "8"
    assert main(["search", "--model", str(FIXTURES / name / "config.json"), *MACHINES[name], "--gpus", gpus,
                 "-B", "256", "-s", "4096", "--engine", "exhaustive", "--top", "1", "-q", "--json", str(out),
                 "--set", f"plan.stack={stack}"]) == 0
    result = json.loads(out.read_text())
    assert result["feasible"] > 0 and result["best"]["metrics"]["time.iteration"] > 0


def test_megatron_arguments_round_trip_the_squared_relu_and_layernorm1p(dse, tmp_path):
    """--emit megatron writes --squared-relu and --apply-layernorm-1p (Megatron-Core's squared_relu and
    layernorm_zero_centered_gamma), and --from megatron reads them back: the same count and step time."""
    path = str(FIXTURES / "Minitron-4B-Base" / "config.json")
    script = tmp_path / "minitron.sh"
    r = dse("estimate", "--model", path, "--hw", "dgx-h100", "--emit", "megatron")
    assert r.code == 0 and "--squared-relu --apply-layernorm-1p" in r.out
    script.write_text(r.out)
    back = dse("estimate", "--from", "megatron", str(script), "--hw", "dgx-h100", "--json").json()
    same = dse("estimate", "--model", path, "--hw", "dgx-h100", "--json").json()
    assert back["model"]["params"] == same["model"]["params"] == 4_190_509_056
    assert back["time"]["iteration"] == same["time"]["iteration"]
