"""Space files and flags: values, ranges, units, and one-line errors (exit 2) for bad input."""

from __future__ import annotations

import textwrap

import pytest

from dse.errors import InputError
from dse.search.space import from_dict

BASE = {"model": "llama2-70b", "hardware": "a100-cluster-800g"}


def space(**kw):
    return from_dict({**BASE, **kw}, "test.yaml")


def test_lists_ranges_and_powers_of_two():
    s = space(parameters={"plan.tp": [1, 2, 4, 8], "plan.pp": {"min": 1, "max": 80, "log2": True},
                          "plan.micro_batch": {"min": 1, "max": 5}, "plan.zero": {"min": 0, "max": 3, "step": 2},
                          "plan.recompute": ["none", "full"], "gpus": 64})
    vals = {p.path: p.values for p in s.params}
    assert vals["plan.pp"] == (1, 2, 4, 8, 16, 32, 64)
    assert vals["plan.micro_batch"] == (1, 2, 3, 4, 5)
    assert vals["plan.zero"] == (0, 2)
    assert vals["gpus"] == (64,)
    assert s.size == 4 * 7 * 5 * 2 * 2 * 1
    kinds = {p.path: (p.kind, p.group) for p in s.params}
    assert kinds["plan.recompute"] == ("str", True) and kinds["plan.tp"] == ("int", False)


def test_units_num_and_catalog_names():
    s = space(parameters={"hardware.node.network.bandwidth": {"min": "200 Gb/s", "max": "800 Gb/s", "num": 4},
                          "hardware.node.gpu_link.bandwidth": ["150 GB/s", "300 GB/s"],
                          "hardware.node.gpu": ["a100-sxm-80gb", "h100-sxm-80gb"]})
    p = {p.path: p for p in s.params}
    assert p["hardware.node.network.bandwidth"].values == pytest.approx((25e9, 50e9, 75e9, 100e9))
    assert p["hardware.node.gpu_link.bandwidth"].values == (150e9, 300e9)
    assert p["hardware.node.gpu"].kind == "ref" and p["hardware.node.gpu"].group


def test_continuous_float_range_is_optuna_only():
    s = space(parameters={"hardware.node.network.efficiency": {"min": 0.5, "max": 1.0}})
    p = s.params[0]
    assert not p.discrete and (p.low, p.high) == (0.5, 1.0)
    from dse.search.runner import choose_engine

    assert choose_engine(s, "auto")[0] == "optuna"
    with pytest.raises(InputError, match="needs a discrete space"):
        choose_engine(s, "exhaustive")


def test_model_and_hardware_lists_become_choices():
    s = from_dict({"model": ["gpt2-xl", "llama2-70b"], "hardware": "a100-cluster-800g",
                   "parameters": {"plan.tp": [1]}}, "x.yaml")
    assert s.model == "gpt2-xl" and s.param("model").values == ("gpt2-xl", "llama2-70b")


@pytest.mark.parametrize("data, message", [
    ({"parameters": {}}, "empty space"),
    ({"parameters": {"plan.tp": []}}, "empty list of values"),
    ({"parameters": {"plan.pp": {"min": 8, "max": 2}}}, "min > max"),
    ({"parameters": {"plan.tpp": [1, 2]}}, "did you mean 'tp'"),
    ({"parameters": {"plan.tp": [0, 1]}}, "must be greater than 0"),
    ({"parameters": {"plan.recompute": ["none", "sometimes"]}}, "not one of none, selective, full"),
    ({"parameters": {"hardware.node.gpu": ["a100-sxm-80gb", "b300"]}}, "unknown gpu component 'b300'"),
    ({"parameters": {"plan.tp": {"min": 1, "maxx": 8}}}, "unknown key 'maxx'"),
    ({"parameters": {"plan.tp": [1]}, "objectives": ["speed"]}, "unknown objective 'speed'"),
    ({"parameters": {"plan.tp": [1]}, "constraints": {"budgett": 5}}, "unknown constraint 'budgett'"),
    ({"parameters": {"gpus": 8, "plan.dp": [1, 2]}}, "either gpus"),
    ({"parameters": {"plan.tp": [1]}, "enigne": "auto"}, "unknown key 'enigne'"),
    ({"parameters": {"tp": [1]}}, "must be model, hardware, gpus or a dotted path"),
    ({"parameters": {"plan.recompute": {"min": 1, "max": 2}}}, "needs a numeric field"),
])
def test_bad_space_is_one_input_error(data, message):
    with pytest.raises(InputError, match=message):
        s = space(**data)
        if any(p.kind == "ref" for p in s.params):   # catalog names are checked when specs are built
            from dse.search.runner import search

            search(s, engine="exhaustive")


def _write(tmp_path, text):
    f = tmp_path / "space.yaml"
    f.write_text(textwrap.dedent(text))
    return f


@pytest.mark.parametrize("text, message", [
    ("model: llama2-70b\nhardware: [a100-cluster-800g\n", "YAML syntax error at line"),
    ("- just\n- a list\n", "expected a mapping"),
    ("model: llama2-70b\nhardware: a100-cluster-800g\nparameters: {}\n", "empty space"),
    ("model: llama2-70b\nhardware: a100-cluster-800g\nparameters: {plan.pp: {min: 9, max: 3}}\n", "min > max"),
    ("model: llama2-70b\nhardware: a100-cluster-800g\nparameters: {plan.tensor: [1]}\n", "unknown field 'tensor'"),
    ("model: llama2-70b\nhardware: a100-cluster-800g\nparameters: {plan.tp: [1]}\nobjectives: [fastest]\n",
     "unknown objective 'fastest'"),
])
def test_cli_bad_space_file_exits_2_with_one_line(tmp_path, cli, text, message):
    rc, out, err = cli("search", "--space", _write(tmp_path, text), "-q")
    assert rc == 2
    assert err.startswith("dse: error: ") and err.count("\n") == 1 and message in err
    assert "Traceback" not in err + out


def test_cli_missing_space_file(cli, tmp_path):
    rc, _, err = cli("search", "--space", tmp_path / "nope.yaml")
    assert rc == 2 and "no such file" in err and err.count("\n") == 1


def test_cli_unknown_objective_flag(cli):
    rc, _, err = cli("search", "--model", "llama2-70b", "--hw", "a100-cluster-800g", "--gpus", "64",
                     "--objective", "fast", "-q")
    assert rc == 2 and "unknown objective 'fast'" in err and err.count("\n") == 1


def test_cli_unknown_parameter_flag(cli):
    rc, _, err = cli("search", "--model", "llama2-70b", "--hw", "a100-cluster-800g", "--param", "plan.zer=[0,1]", "-q")
    assert rc == 2 and "did you mean 'zero'" in err and err.count("\n") == 1


def test_cli_needs_space_or_model_and_hw(cli):
    rc, _, err = cli("search", "-q")
    assert rc == 2 and "--space FILE, or --model and --hw" in err


@pytest.mark.parametrize("url, message", [
    ("postgresql://dse@127.0.0.1:1/none", "cannot open the study storage"),
    ("sqlite:////no/such/dir/x.db", "does not exist"),
    ("journal:/no/such/dir/x.log", "does not exist"),
])
def test_cli_unreachable_storage_exits_2(cli, url, message):
    rc, out, err = cli("search", "--model", "llama2-70b", "--hw", "a100-cluster-800g", "--gpus", "64",
                       "--engine", "optuna", "--trials", "5", "--storage", url, "-q")
    assert rc == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_objective_the_space_cannot_produce_is_a_clear_error(cli):
    rc, _, err = cli("search", "--model", "llama2-70b", "--hw", "a100-cluster-800g", "--gpus", "64",
                     "--objective", "ssd_lifetime", "--engine", "exhaustive", "-q")
    assert rc == 2 and err.count("\n") == 1
    assert "endurance.lifetime_years" in err and "activation" in err


def test_min_ssd_lifetime_constraint_without_ssds_is_a_clear_error(cli):
    rc, _, err = cli("search", "--model", "llama2-70b", "--hw", "a100-cluster-800g", "--gpus", "64",
                     "--min-ssd-lifetime", "3 years", "--engine", "exhaustive", "-q")
    assert rc == 2 and "endurance.lifetime_years" in err and err.count("\n") == 1


def test_constraint_units():
    s = space(parameters={"plan.tp": [1]},
              constraints={"budget": "$5M", "power_cap": "500 kW", "min_ssd_lifetime": "3 years",
                                                       "throughput.mfu": {"min": 0.4}})
    c = {c.name: c for c in s.constraints}
    assert c["budget"].bound == 5e6 and c["power_cap"].bound == 5e5
    assert c["min_ssd_lifetime"].bound == pytest.approx(3.0) and c["min_ssd_lifetime"].sense == "min"
    assert c["throughput.mfu min"].bound == 0.4
