"""CLI on chiplet packages: estimate, list/show, chiplet-scaling, validate; bad input is one line and exit 2."""

import importlib.util
import json

import pytest

from dse.cli import main

EST = ["estimate", "-m", "llama2-70b", "--hw", "chiplet-train-8x8"]


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def bad(capsys, *argv):
    rc, out, err = run(capsys, *argv)
    assert rc == 2, (out, err)
    assert err.startswith("dse: error") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def test_estimate_table_and_json(capsys):
    rc, out, _ = run(capsys, *EST, "--chiplet-scheme", "megatron-1d", "--mesh", "8x8", "-B", "4")
    assert rc == 0
    assert "megatron-1d" in out and "8x8 mesh" in out and "bottleneck" in out and "SRAM / die" in out
    rc, out, _ = run(capsys, *EST, "--json")
    d = json.loads(out)
    assert d["kind"] == "chiplet" and d["energy"]["components"] and d["cost"]["package_usd"] > 0
    assert d["plan"]["chiplet_scheme"] == "hecaton-2d" and d["plan"]["chiplet_mesh"] == "8x8"


def test_explain(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    rc, out, _ = run(capsys, *EST, "--explain")
    assert rc == 0 and "chiplet.layer_nop" in out


def test_infeasible_is_reported_not_an_error(capsys):
    rc, out, _ = run(capsys, "estimate", "-m", "llama2-70b", "--hw", "chiplet-simba-6x6")
    assert rc == 0 and "infeasible" in out and "SRAM" in out


def test_mesh_die_count_mismatch(capsys):
    err = bad(capsys, *EST, "--mesh", "4x8")
    assert "--mesh 4x8 has 32 dies" in err and "64" in err


def test_mesh_malformed(capsys):
    assert "ROWSxCOLS" in bad(capsys, *EST, "--mesh", "eight")


def test_sram_too_small_for_any_tile(capsys):
    err = bad(capsys, *EST, "--set", "hardware.die.sram=64KiB")
    assert "die.sram" in err and "too small for any tile" in err


@pytest.mark.parametrize("value", ["0", "-5GB/s"])
def test_non_positive_link_bandwidth(capsys, value):
    err = bad(capsys, *EST, "--set", f"hardware.nop.link_bandwidth={value}")
    assert "nop.link_bandwidth" in err and "greater than 0" in err


def test_unknown_process_node(capsys):
    err = bad(capsys, *EST, "--set", "hardware.die.node=6")
    assert "unknown process node '6'" in err and "7" in err


def test_summa_needs_a_square_mesh(capsys):
    assert "square" in bad(capsys, *EST, "--chiplet-scheme", "summa-2d", "--mesh", "4x16")


def test_unknown_scheme(capsys):
    bad(capsys, *EST, "--chiplet-scheme", "ring-3d")


@pytest.mark.parametrize("flag",
                         [["--tp", "8"], ["--pp", "2"], ["--dp", "2"], ["--zero", "1"], ["--attention", "math"]])
def test_gpu_flags_do_not_apply(capsys, flag):
    bad(capsys, *EST, *flag)


def test_minibatch_must_divide(capsys):
    assert "chiplet_minibatch" in bad(capsys, *EST, "-B", "16", "--set", "plan.chiplet_minibatch=3")


def test_chiplet_flags_on_a_gpu_system(capsys):
    err = bad(capsys, "estimate", "-m", "gpt2-xl", "--hw", "a100-cluster-800g", "--chiplet-scheme", "megatron-1d")
    assert "chiplet packages only" in err
    bad(capsys, "estimate", "-m", "gpt2-xl", "--hw", "a100-cluster-800g", "--mesh", "8x8")


def test_gpu_estimate_unchanged(capsys):
    rc, out, _ = run(capsys, "estimate", "-m", "gpt2-xl", "--hw", "a100-cluster-800g", "--dp", "8", "--json")
    assert rc == 0 and "cost" in json.loads(out) and json.loads(out)["parallelism"]["gpus"] == 8


def test_list_and_show_hardware(capsys):
    rc, out, _ = run(capsys, "list", "hardware")
    assert rc == 0 and "chiplet-train-8x8" in out and "chiplet-simba-6x6" in out and "a100-cluster-800g" in out
    rc, out, _ = run(capsys, "show", "hardware", "chiplet-train-8x8", "--json")
    d = json.loads(out)
    assert d["kind"] == "chiplet-package" and d["rows"] == 8 and d["die"]["sram"] == 192 * 2**20
    rc, out, _ = run(capsys, "show", "hardware", "chiplet-train-8x8", "--set", "hardware.rows=4", "--json")
    assert json.loads(out)["rows"] == 4
    rc, out, _ = run(capsys, "show", "hardware", "chiplet-simba-6x6")
    assert rc == 0 and "nop.link_bandwidth" in out


def test_unknown_package_suggests(capsys):
    err = bad(capsys, "show", "hardware", "chiplet-train-8x9")
    assert "chiplet-train-8x8" in err


def test_chiplet_scaling_table_and_json(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    rc, out, _ = run(capsys, "chiplet-scaling", "--steps", "1")
    assert rc == 0 and "llama3.1-405b" in out and "hecaton-2d" in out and "15x16" in out
    rc, out, _ = run(capsys, "chiplet-scaling", "--steps", "0", "--json", "--scheme", "hecaton-2d",
                     "--scheme", "megatron-1d")
    rows = json.loads(out)
    assert [r["scheme"] for r in rows] == ["hecaton-2d", "megatron-1d"] * 2
    assert rows[2]["ratio"] / rows[0]["ratio"] > 0.9 and rows[3]["ratio"] / rows[1]["ratio"] < 0.55


def test_chiplet_scaling_bad_input(capsys):
    bad(capsys, "chiplet-scaling", "--scheme", "ring-3d")
    assert "not a chiplet package" in bad(capsys, "chiplet-scaling", "--hw", "a100-cluster-800g")
    bad(capsys, "chiplet-scaling", "--to", "gpt2-xl")


def test_chiplet_scaling_plot(capsys, tmp_path):
    path = tmp_path / "ws.png"
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib" in bad(capsys, "chiplet-scaling", "--steps", "0", "--plot", str(path))
    else:
        rc, out, _ = run(capsys, "chiplet-scaling", "--steps", "0", "--plot", str(path))
        assert rc == 0 and path.stat().st_size > 1000


def test_validate_chiplet_suite(capsys):
    rc, out, _ = run(capsys, "validate", "chiplet", "--json")
    assert rc == 1                                        # strict: its one documented expected miss is a miss
    (suite,) = json.loads(out)
    assert suite["accepted"] and not suite["passed"]
    rc, _, _ = run(capsys, "validate", "chiplet", "--allow-expected-misses")
    assert rc == 0
    names = {c["name"]: c for c in suite["cases"]}
    assert names["7 nm, 100 mm^2: known-good-die cost"]["passed"]
    assert sum(c["expected_miss"] != "" for c in suite["cases"]) == 1


def test_estimate_does_not_import_heavy_modules():
    import subprocess
    import sys

    code = ("import sys; from dse.cli import main; "
            "main(['estimate','-m','llama2-70b','--hw','chiplet-train-8x8','--json']);"
            "bad=[m for m in ('optuna','scipy','matplotlib') if m in sys.modules]; sys.stderr.write(repr(bad))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stderr.strip().endswith("[]")


def test_storage_offload_flags_are_errors_on_a_package(dse):
    for flags in (["--offload-optimizer", "nvme"], ["--ssds", "2"], ["--gradient-compression", "0.1"]):
        r = dse("estimate", "-m", "llama2-70b", "--hw", "chiplet-train-8x8", *flags)
        assert r.code == 2 and "does not apply to a chiplet package" in r.err and len(r.err.strip().splitlines()) == 1
