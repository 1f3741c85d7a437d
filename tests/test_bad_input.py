"""Every bad input of issue 2 gets one line on stderr naming the problem, and exit status 2."""

from __future__ import annotations

import json

import pytest

GOOD_MODEL = "name: tiny\nlayers: 4\nhidden: 256\nheads: 8\nvocab: 1000\nmax_seq_len: 512\n"


def one_line_error(r, *needles):
    assert r.code == 2, (r.code, r.out, r.err)
    assert r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("dse: error"), r.err
    assert "Traceback" not in r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_missing_file(dse, tmp_path):
    one_line_error(dse("estimate", "--model", tmp_path / "nope.yaml"), "nope.yaml", "no such file")
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", tmp_path / "hw.yaml"), "hw.yaml", "no such file")


def test_yaml_syntax_error(dse, tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: x\nlayers: 2\nhidden: [1, 2\n")
    one_line_error(dse("estimate", "--model", p), "broken.yaml", "YAML syntax error", "line")


def test_unknown_field_suggests_nearest(dse, tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text(GOOD_MODEL.replace("hidden:", "hiden:"))
    one_line_error(dse("estimate", "--model", p), "unknown field 'hiden'", "did you mean 'hidden'")


def test_unknown_plan_field_in_set(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--set", "plan.tpp=2"),
                   "--set plan.tpp", "did you mean 'tp'")


def test_unparseable_unit(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g",
                       "--set", "hardware.node.gpu.hbm_capacity=80 GX"), "hbm_capacity", "unknown unit 'GX'", "GiB")


@pytest.mark.parametrize("override,needle", [
    ("hardware.node.gpu.hbm_capacity=0 GiB", "hbm_capacity: must be greater than 0"),
    ("hardware.node.network.bandwidth=-5 GB/s", "network.bandwidth: must be greater than 0"),
    ("hardware.node.gpus_per_node=0", "gpus_per_node: must be greater than 0"),
    ("model.layers=-1", "layers: must be greater than 0"),
    ("model.hidden=0", "hidden: must be greater than 0"),
])
def test_zero_or_negative_size_bandwidth_count(dse, override, needle):
    """The error names the --set flag that gave the value, not the catalog file it overrode."""
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--set", override), needle,
                   "--set " + override.split("=")[0] + ":")


def test_zero_count_flag(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--tp", "0"), "--tp")


def test_negative_size_in_file(dse, tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text(GOOD_MODEL.replace("layers: 4", "layers: -4"))
    one_line_error(dse("estimate", "--model", p), "m.yaml", "layers", "greater than 0")


def test_unknown_catalog_name_suggests(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xxl", "--hw", "a100-cluster-800g"), "unknown model 'gpt2-xxl'",
                   "gpt2-xl")
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster"), "unknown hardware system",
                   "a100-cluster-800g")


def test_tp_not_dividing_heads(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--tp", "2"),
                   "--tp 2", "25 attention heads")


def test_micro_batch_not_dividing_batch_per_replica(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--dp", "2",
                       "--global-batch", "10", "--micro-batch", "4"), "--micro-batch 4", "global batch / dp = 5")
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--dp", "4",
                       "--global-batch", "10"), "--global-batch 10", "--dp 4")


def test_pp_larger_than_layers(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--pp", "64"),
                   "--pp 64", "48 layers")


def test_unsupported_hf_model_type(dse, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24}))
    one_line_error(dse("estimate", "--model", p), "config.json", "unsupported model_type 'mamba'", "llama")


def test_bad_choice_flag(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--recompute", "bogus"),
                   "--recompute", "selective")


def test_set_path_must_name_a_spec(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--set", "foo.x=1"),
                   "model., hardware. or plan.")


def test_infeasible_is_not_an_error(dse):
    """A scenario that does not fit in memory is reported, with exit status 0."""
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--set",
            "hardware.node.gpu.hbm_capacity=8 GiB", "--json")
    assert r.code == 0
    out = r.json()
    assert out["feasible"] is False
    assert any("gpu memory" in v for v in out["violations"])


def test_wrong_hardware_kind(dse, tmp_path):
    """A hardware file whose kind: is not a hardware kind: one line naming the file, the field, the allowed values."""
    from dse import catalog

    src = (catalog.hw_dir("systems") / "dgx-a100-80gb.yaml").read_text()
    p = tmp_path / "hw.yaml"
    p.write_text(src.replace("kind: gpu-system", "kind: gpu-sytem"))
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", p), "hw.yaml", "kind: 'gpu-sytem'",
                   "allowed: gpu-system, chiplet-package", "did you mean 'gpu-system'")
    p.write_text(src.replace("kind: gpu-system", "kind: chiplet-package"))   # a kind, but not this file's fields
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", p), "hw.yaml", "unknown field",
                   "valid fields: name, kind, rows")


def test_gpu_only_command_on_a_chiplet_package(dse):
    """dse rok studies GPU memory: a chiplet package is one line naming the hardware and its kind (was a traceback)."""
    one_line_error(dse("rok", "--hw", "chiplet-train-8x8", "--micro-batches", "1,2"), "--hw chiplet-train-8x8",
                   "dse rok needs a GPU system", "chiplet-package")
