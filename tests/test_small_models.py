"""The small causal LMs users train on one GPU, by name: OPT 125m to 6.7b (OPT-350m's projected embeddings and
post-LN layers), GPT-Neo 125m / 1.3B / 2.7B (alternating global and 256-token local attention, eager attention only)
and distilgpt2 (models/hf/SOURCE.md says where each value comes from).

Their parameter counts against Transformers' own are in tests/test_hub_configs.py (every shipped config); the
GPT-Neo layer against its CPU op trace in tests/test_stacks.py and tests/test_hf_families.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse import catalog
from dse.cli import main
from dse.errors import InputError
from dse.estimate.parameters import model_parameters

ROOT = Path(__file__).resolve().parents[1]
NEW = {"opt-125m": "facebook", "opt-350m": "facebook", "opt-1.3b": "facebook", "opt-2.7b": "facebook",
       "opt-6.7b": "facebook", "gpt-neo-125m": "EleutherAI", "gpt-neo-1.3B": "EleutherAI",
       "gpt-neo-2.7B": "EleutherAI", "distilgpt2": "distilbert"}


def config(name: str) -> dict:
    return json.loads((ROOT / "models" / "hf" / NEW[name] / name / "config.json").read_text())


@pytest.mark.parametrize("name", sorted(NEW))
def test_each_name_loads_and_estimates_on_an_h100_node(name, capsys):
    spec = catalog.load_model(name)
    assert spec.source == f"Hugging Face config models/hf/{NEW[name]}/{name}/config.json"
    code = main(["estimate", "--model", name, "--stack", "pytorch", "--hw", "dgx-h100", "-b", "4", "-s", "1024",
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["model"]["params"] == int(model_parameters(spec)[0])


def test_opt_350m_projects_a_narrower_embedding_and_has_no_final_norm():
    """OPT-350m: word_embed_proj_dim 512 under hidden 1,024 (project_in, project_out and a 512-wide tied head),
    do_layer_norm_before false: OPTDecoder builds no final LayerNorm. Its count: 331,196,416 (Transformers'), 24,690,688
    fewer than a 1,024-wide embedding and head with a final norm would give."""
    m = catalog.load_model("opt-350m")
    assert (m.embedding_dim, m.final_norm, m.hidden, m.tied_embeddings) == (512, False, 1024, True)
    assert model_parameters(m)[0] == 331_196_416
    assert catalog.load_model("opt-125m").embedding_dim is None and catalog.load_model("opt-125m").final_norm


def test_opt_350m_prices_its_two_projection_gemms_and_a_512_wide_head():
    from dse.estimate import kernel_table as KT, resolve
    from dse.formulas.precision import recipe_of

    m, _, p = resolve("opt-350m", "dgx-h100", None, (), micro_batch=4, seq_len=1024, stack="pytorch", dp=1)
    t = KT.kernel_tables(m, p, recipe_of(p))
    tok = 4 * 1024
    assert (t["embedding"]["project_in"]["k"], t["embedding"]["project_in"]["n"]) == (512, 1024)
    assert (t["head"]["project_out"]["k"], t["head"]["project_out"]["n"]) == (1024, 512)
    assert t["head"]["lm_head"]["k"] == 512 and t["head"]["lm_head"]["flops"] == 2 * tok * 512 * 50272
    # the FLOPs the estimate counts for the ends: both projections and the narrower head
    assert t["sums"]["flops_head"] == 2 * tok * 512 * 50272 + 2 * 2 * tok * 512 * 1024


def test_gpt_neo_alternates_global_and_local_layers_and_runs_eager_attention(capsys):
    m = catalog.load_model("gpt-neo-1.3B")
    assert m.layer_types == ("full_attention", "sliding_attention") * 12 and m.sliding_window == 256
    assert (m.qkv_bias, m.bias, m.tied_embeddings, m.position, m.softmax_dtype) == (
        False, True, True, "learned", "fp32_scores")
    assert m.layer_param_tensors == 13       # ln_1, q, k, v, out_proj (+ bias), ln_2, c_fc, c_proj (+ biases)
    code = main(["estimate", "--model", "gpt-neo-125m", "--stack", "pytorch", "--hw", "dgx-h100", "-b", "4",
                 "-s", "1024", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["plan"]["attention"] == "math"
    assert any("fp32" in w and "GPT-Neo" in w for w in data["warnings"])


def test_gpt_neo_local_layers_count_their_window_and_execute_the_whole_matrix():
    """The model's FLOPs count 256 keys a query on the local layers; eager attention's score GEMM computes every one
    of the s x s scores (torch.where masks them after)."""
    from dse.estimate import kernel_table as KT, resolve
    from dse.estimate.table_inputs import attention_shares
    from dse.formulas.precision import recipe_of
    from dse.formulas.transformer import attention_share

    m, _, p = resolve("gpt-neo-125m", "dgx-h100", None, (), micro_batch=1, seq_len=2048, stack="pytorch", dp=1)
    share, _ = attention_shares(m, p, "pytorch")
    assert share == attention_share(2048, 6, 6, window=256) < 0.5
    score = KT.kernel_tables(m, p, recipe_of(p))["layer"]["score"]
    assert (p.attention, score["m"], score["n"]) == ("math", 2048, 2048)


def test_a_measurement_row_of_opt_350m_checks_its_params_with_the_projections():
    from dse.calibrate.measurements import hf_model

    model, note = hf_model({"model": "opt-350m", "params": 331_196_416}, "rows.jsonl:1")
    assert (model.embedding_dim, note) == (512, "")
    with pytest.raises(InputError, match="does not match"):
        hf_model({"model": "opt-350m", "params": 331_196_417}, "rows.jsonl:1")


BAD = [
    ("opt-350m", "word_embed_proj_dim", 0, "word_embed_proj_dim"),
    ("opt-350m", "word_embed_proj_dim", "wide", "word_embed_proj_dim"),
    ("opt-350m", "do_layer_norm_before", "no", "do_layer_norm_before"),
    ("gpt-neo-125m", "attention_types", [[["global", "sliding"], 6]], "attention_types entry"),
    ("gpt-neo-125m", "attention_types", [[["global", "local"], 5]], "attention_types gives 10 layers"),
    ("gpt-neo-125m", "attention_types", "global", "attention_types = 'global'"),
    ("gpt-neo-125m", "window_size", 0, "window_size"),
    ("gpt-neo-125m", "num_layers", 1.5, "num_layers"),
    ("gpt-neo-125m", "attention_dropout", 1.5, "attention_dropout"),
]


@pytest.mark.parametrize("name, key, value, message", BAD)
def test_bad_values_of_the_new_fields_are_one_line_errors(name, key, value, message, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config(name), key: value}))
    with pytest.raises(InputError, match=message):
        catalog.load_model(str(path))
    code = main(["estimate", "--model", str(path), "--hw", "dgx-h100"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and key.split("_")[0] in err
