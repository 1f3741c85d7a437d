"""Regression tests for the defect classes scripts/fuzz_cli.py found: each bad input is one line on stderr naming the
file, field or flag and what is allowed, exit status 2 -- never a traceback, never a silently wrong number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "data" / "h100_hf_training.jsonl"
SPACE = ("name: fz\nmodel: gpt2-small\nhardware: dgx-h100\nfixed:\n  plan.global_batch: 16\n  plan.seq_len: 512\n"
         "parameters:\n  gpus: 8\n  plan.tp: [1, 2]\n  plan.micro_batch: [1, 2]\nobjectives: [time]\n")


def one_line_error(r, *needles):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dse: error"), r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def base_rows() -> list[dict]:
    return [r for r in map(json.loads, H100.read_text().splitlines()) if r.get("kind") == "base"]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ----------------------------------------------------------------------------- calibrate: the measurement reader
@pytest.mark.parametrize("key,value,needle", [
    ("step_s", float("inf"), "must be a finite number > 0"),     # accepted before: a fit to an infinite time
    ("peak_bytes", float("inf"), "must be a finite number > 0"),
    ("step_s", True, "is not a number"),                         # a boolean was read as 1 s
    ("b", 1.5, "must be a whole number"),                        # truncated to 1 before
    ("s", 1.5, "must be a whole number"),
    ("b", float("inf"), "must be a finite number"),              # OverflowError before
    ("params", "x", "is not a number"),                          # ValueError before
    ("params", float("nan"), "must be a finite number"),
    ("attn", [], "allowed: sdpa, eager"),                        # TypeError (unhashable) before
    ("recompute", {}, "allowed: none, full"),
    ("model", None, "expected a catalog name"),
])
def test_calibrate_row_values(dse, tmp_path, key, value, needle):
    rows = [{**r, key: value} for r in base_rows()]
    one_line_error(dse("calibrate", "--data", write_rows(tmp_path / "d.jsonl", rows), "--hw", "dgx-h100",
                       "--params", "memory", "--folds", "0"), "d.jsonl:", key, needle)


@pytest.mark.parametrize("config,needle", [
    ({"layers": 2, "hidden": 64, "heads": 4}, "config: missing field 'vocab'"),
    ({"layers": 2.5, "hidden": 64, "heads": 4, "vocab": 100}, "layers = 2.5 must be a whole number"),
    ([1, 2], "expected a mapping"),
])
def test_calibrate_row_config(dse, tmp_path, config, needle):
    rows = [{**r, "config": config} for r in base_rows()]
    one_line_error(dse("calibrate", "--data", write_rows(tmp_path / "d.jsonl", rows), "--hw", "dgx-h100",
                       "--params", "memory", "--folds", "0"), "d.jsonl:", needle)


def test_calibrate_plan_error_names_the_row(dse, tmp_path):
    """A generic row whose plan does not run on the system: the error says which row (it said only "plan:")."""
    data = tmp_path / "g.csv"
    data.write_text("model,time_s,micro_batch,global_batch,seq_len\n"
                    + "".join(f"gpt2-small,{0.1 * (i + 1)},1,1,512\n" for i in range(6)))   # dp fills the node: 8
    one_line_error(dse("calibrate", "--data", data, "--hw", "dgx-h100", "--params", "memory", "--folds", "0"),
                   "g.csv:2: plan: --global-batch 1 is not divisible by --dp 8")


# ----------------------------------------------------------------------------- spec files and sizes
@pytest.mark.parametrize("name", ["m.yaml", "config.json"])
def test_a_spec_file_that_is_not_text(dse, tmp_path, name):
    p = tmp_path / name
    p.write_bytes(b"\xff\xfe\x00garbage")
    one_line_error(dse("estimate", "--model", p, "--hw", "dgx-h100"), name, "not a text file")


def test_a_json_model_path_that_is_a_directory(dse, tmp_path):
    d = tmp_path / "config.json"
    d.mkdir()
    one_line_error(dse("estimate", "--model", d, "--hw", "dgx-h100"), "config.json", "directory")


@pytest.mark.parametrize("assignment", ["model.layers=1e30", "model.hidden=99999999999999999999",
                                        "plan.micro_batch=1e20", "hardware.nodes=1e17"])
def test_integers_beyond_float_precision(dse, assignment):
    """OverflowError (layers) before, or silently inexact counts: at most 2**53."""
    field = assignment.split("=")[0]
    one_line_error(dse("estimate", "--model", "llama2-7b", "--hw", "dgx-h100", "--set", assignment),
                   field.split(".")[-1] + ":", "too large", "2**53")


def test_a_layer_count_beyond_any_model(dse):
    """``attention_layers`` built a tuple of one entry per layer (MemoryError at 2**53 layers): the count is bounded
    (MAX_LAYERS) and counted, not listed."""
    from dse.catalog import load_model
    from dse.specs.model import MAX_LAYERS

    m = load_model("llama2-7b", [(["layers"], MAX_LAYERS)])
    assert m.attention_layers == {"full": MAX_LAYERS, "sliding": 0, "chunked": 0}
    one_line_error(dse("estimate", "--model", "llama2-7b", "--hw", "dgx-h100", "--set", "model.layers=4000000"),
                   "layers: must be at most 1000000")


# ----------------------------------------------------------------------------- search
@pytest.fixture
def space(tmp_path) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(SPACE)
    return p


@pytest.mark.parametrize("args,needles", [
    (["--engine", "optuna", "--trials", "2", "--seed", "-1"], ("--seed -1", "between 0 and 4294967295")),
    (["--engine", "optuna", "--trials", "2", "--seed", str(2 ** 32)], ("--seed 4294967296",)),
    (["--param", "plan.micro_batch={min: 1, max: 1e30}"], ("plan.micro_batch", "more than 1,000,000")),  # OOM before
    (["--param", "plan.micro_batch={min: 1, max: 4, num: 10000000}"], ("plan.micro_batch", "more than")),
    (["--budget", "-5"], ("--budget:", "greater than 0")),                       # named the space file before
    (["--power-cap", "abc"], ("--power-cap:", "cannot parse")),
    (["--min-ssd-lifetime", "0 years"], ("--min-ssd-lifetime:",)),
])
def test_search_flags(dse, space, args, needles):
    one_line_error(dse("search", "-q", "--space", space, *args), *needles)


def test_search_plot_format_is_checked_before_the_search(dse, space, tmp_path):
    """matplotlib's ValueError after the whole search before."""
    pytest.importorskip("matplotlib")
    one_line_error(dse("search", "-q", "--space", space, "--plot", tmp_path / "r.out"), "--plot", ".out",
                   "allowed:", "png")


@pytest.mark.parametrize("bound", [".nan", ".inf", "true"])
def test_search_metric_constraint_bound_is_a_finite_number(dse, tmp_path, bound):
    p = tmp_path / "s.yaml"
    p.write_text(SPACE + f"constraints:\n  memory.gpu.total: {{max: {bound}}}\n")
    one_line_error(dse("search", "-q", "--space", p), "s.yaml", "constraints.memory.gpu.total.max",
                   "expected a finite number")


# ----------------------------------------------------------------------------- quantities and components
@pytest.mark.parametrize("where,text,needle", [
    ("model", "attn_softcap: .nan", "attn_softcap: nan is not a finite"),     # a float field with no range: NaN ran
    ("model", "attn_softcap: .inf", "attn_softcap: inf is not a finite"),
    ("set", "hardware.node.gpu.hbm_capacity=1e400 B", "hbm_capacity: '1e400 B' is not a finite bytes quantity"),
    ("set", "hardware.node.network.bandwidth=1e999 GB/s", "is not a finite bytes/s quantity"),
])
def test_quantities_are_finite(dse, tmp_path, where, text, needle):
    if where == "model":
        p = tmp_path / "m.yaml"
        p.write_text("name: t\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 100\nmax_seq_len: 128\n" + text + "\n")
        r = dse("estimate", "--model", p, "--hw", "dgx-h100")
    else:
        r = dse("estimate", "--model", "gpt2-small", "--hw", "dgx-h100", "--set", text)
    one_line_error(r, needle)


def test_an_unknown_component_names_its_field(dse, tmp_path):
    p = tmp_path / "hw.yaml"
    p.write_text("name: x\nkind: gpu-system\nnodes: 1\nnode:\n  gpu: h100-sxm-80gb\n  gpus_per_node: 8\n"
                 "  gpu_link: nvlink4\n  host_link: pcie5-x16\n  network: bogus\n")
    one_line_error(dse("estimate", "--model", "gpt2-small", "--hw", p), "hw.yaml: node.network: unknown link "
                   "component 'bogus'")


@pytest.mark.parametrize("fixture,key,value", [
    ("Qwen1.5-MoE-A2.7B", "num_hidden_layers", 10 ** 12),     # hung: a count of MoE layers one by one
    ("gemma-2-9b", "num_hidden_layers", 10 ** 9),             # a list of 10**9 layer types
    ("gpt2", "n_layer", 2.5),
    ("t5-base", "num_layers", 0),
])
def test_a_config_layer_count_beyond_any_model(dse, tmp_path, fixture, key, value):
    cfg = json.loads((ROOT / "tests" / "fixtures" / "hf" / fixture / "config.json").read_text())
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**cfg, key: value}))
    one_line_error(dse("estimate", "--model", p, "--hw", "dgx-h100"), "config.json", key,
                   "whole number of layers from 1 to 1,000,000")


def test_moe_layer_count_is_closed_form_and_agrees_with_the_count():
    from dse.formulas.transformer.moe import moe_layer_count

    def by_layer(layers, first, step, dense):
        return sum(1 for i in range(first, layers) if (i + 1) % step == 0 and i not in set(dense))

    for layers in range(0, 30):
        for first in range(0, 32, 3):
            for step in (1, 2, 3):
                for dense in ((), (0, 5, 29), (2, 2, 40)):
                    assert moe_layer_count(layers, first, step, dense) == by_layer(layers, first, step, dense)
    assert moe_layer_count(10 ** 12, 3) == 10 ** 12 - 3


# ----------------------------------------------------------------------------- config.json value types
@pytest.mark.parametrize("fixture,path,value,needle", [
    ("Llama-2-70b-hf", ("hidden_size",), "x", "hidden_size: expected a whole number >= 1"),      # TypeError
    ("Llama-2-70b-hf", ("num_attention_heads",), 0, "num_attention_heads: expected a whole number >= 1"),  # ZeroDiv
    ("Qwen2-0.5B", ("attention_dropout",), "x", "attention_dropout: expected a probability"),   # ValueError
    ("gpt2", ("resid_pdrop",), 1.5, "resid_pdrop: expected a probability"),
    ("gpt2", ("embd_pdrop",), "x", "embd_pdrop: expected a probability"),                     # ValueError
    ("starcoder2-3b", ("embedding_dropout",), -0.1, "embedding_dropout: expected a probability"),
    ("Qwen3-30B-A3B", ("mlp_only_layers",), 0.5, "mlp_only_layers: expected a list"),           # TypeError
    ("DeepSeek-V3", ("first_k_dense_replace",), float("inf"), "first_k_dense_replace: expected a whole number"),  # ran
    ("bloom-560m", ("model_type",), ["bloom"], "model_type: expected a name"),                  # unhashable
    ("t5-base", ("architectures",), True, "architectures: expected a list of names"),
    ("gemma-3-27b-pt", ("text_config", "num_hidden_layers"), [1], "text_config.num_hidden_layers: expected a whole"),
    ("DeepSeek-V3", ("rope_scaling", "factor"), float("nan"), "rope_scaling.factor: expected a finite number"),
    ("falcon-7b", ("alibi",), "x", "alibi: expected true or false"),                           # "x" was true
    ("gpt-j-6b", ("rotary_dim",), [64], "rotary_dim: expected a whole number >= 0"),
])
def test_config_json_value_types(dse, tmp_path, fixture, path, value, needle):
    cfg = json.loads((ROOT / "tests" / "fixtures" / "hf" / fixture / "config.json").read_text())
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    one_line_error(dse("estimate", "--model", p, "--hw", "dgx-h100"), "config.json: " + needle)
