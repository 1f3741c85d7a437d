"""``dse calibrate``: fit GPU efficiency to measured step times, cross-validate, write a --hw YAML that loads.

The numbers asserted here are the honest outcome of the fit on the shared H100 file (2026-11-27,
``stack: pytorch``), fitted on one half of its 16 configurations and predicting the other: on halves that each
hold both micro-batch sizes (the acceptance test below) the calibrated spec gives 3.1 % / 9.9 % against 4.2 % /
11.6 % for the shipped dgx-h100 (whose efficiencies come from micro-benchmarks and kernel profiles, not from these
cases). Fitted on the small micro-batches and tested on the large ones (where the shipped spec is within 2.5 %)
the fit is worse, 6.1 %: fitted where the host binds, the GPU's efficiencies do not extrapolate; over four random
halves the fit wins three (docs/calibration.md). What no GPU efficiency can fit is the host time of the
checkpointed GPT-2 medium at micro-batch 4 (-53 %): ``--params dispatch_scale`` does (test below).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from _reference_host import reference_host_system

from dse.calibrate import fit, measurements
from dse.catalog import data_dir, load_system

ROOT = Path(__file__).resolve().parents[1]
H100 = data_dir() / "h100_hf_training.jsonl"


def _held_out(train, test, system):
    r = fit.calibrate(train, system, folds=0)
    cal = fit.with_efficiency(system, {k: v["after"] for k, v in r["parameters"].items()})
    before = fit.mape([measurements.predict(m, system)[0] / m.time_s - 1 for m in test])
    after = fit.mape([measurements.predict(m, cal)[0] / m.time_s - 1 for m in test])
    return before, after


@pytest.mark.parametrize("half", [0, 1])
def test_fit_on_half_predicts_the_other_half_better(half):
    """Acceptance (issue 14): fitted on half of the H100 file, the calibrated spec beats the shipped one on the rest.

    Each half holds both micro-batch sizes (the file lists every configuration at a small and a large micro-batch, in
    pairs: one half takes the small one of even pairs and the large one of odd pairs). Splitting by micro-batch
    (every small one against every large one) asks the GPU's efficiencies fitted where the host binds to extrapolate
    to where it does not: since the checkpoint's early stop is priced, the shipped spec's 2.5 % on the large
    micro-batches beats that fit (6.1 %; every half-file fit sits at a parameter's bound, docs/calibration.md).
    """
    system = load_system("dgx-h100")
    ms = measurements.read(H100)
    a = [m for i, m in enumerate(ms) if i % 4 in (0, 3)]
    b = [m for i, m in enumerate(ms) if i % 4 in (1, 2)]
    train, test = (a, b) if half == 0 else (b, a)
    before, after = _held_out(train, test, system)
    assert before < 0.2                  # the shipped spec: measured efficiencies
    if before < 0.02:                    # already within 2 %: the fit on eight points lands within 2.5 %
        assert after < 0.025, (before, after)
    else:
        assert after < 0.9 * before, (before, after)
    assert after < 0.15, after


def _synthetic_csv(path, truth):
    """Generic-format rows whose times are dse's own predictions under known efficiency values."""
    system = fit.with_efficiency(load_system("dgx-h100"), truth)
    rows = []
    for mb in (1, 2, 4, 8):
        for attention in ("flash", "math"):
            for recompute in ("none", "full"):
                row = {"model": "gpt2-medium", "micro_batch": mb, "global_batch": mb, "dp": 1, "seq_len": 1024,
                       "attention": attention, "recompute": recompute, "set": "model.dropout=0"}
                m = measurements.generic_row({**row, "time_s": 1.0}, "synthetic")
                rows.append({**row, "time_s": measurements.predict(m, system)[0]})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_generic_csv_recovers_known_parameters(tmp_path):
    truth = {"memory": 0.3, "gemm_overhead": 20e-6, "gemm": 0.6}
    _synthetic_csv(tmp_path / "m.csv", truth)
    r = fit.calibrate(measurements.read(tmp_path / "m.csv"), load_system("dgx-h100"),
                      ("gemm", "memory", "gemm_overhead"),
                      folds=4)
    for k, v in truth.items():
        assert r["parameters"][k]["after"] == pytest.approx(v, rel=1e-3)
    assert r["mape_fit"] < 1e-4 and r["cross_validation"]["mape"] < 1e-3 and r["mape_before"] > 0.1


def test_cli_writes_a_yaml_that_hw_accepts(dse, tmp_path):
    out = tmp_path / "h100-cal.yaml"
    r = dse("calibrate", "--data", H100, "--hw", "dgx-h100", "--params", "memory,gemm_overhead", "--folds", "3",
            "--out", out, "--json")
    assert r.code == 0, r.err
    res = json.loads(r.out)
    assert res["points"] == 16 and res["cross_validation"]["folds"] == 3
    assert res["mape_fit"] < res["mape_before"] and res["cross_validation"]["mape"] < res["mape_before"]
    assert res["memory"]["points"] == 16 and res["memory"]["mape"] == pytest.approx(0.0097, abs=0.001)
    eff = load_system(str(out)).node.gpu.efficiency
    for k, p in res["parameters"].items():
        assert getattr(eff, k) == pytest.approx(p["after"], rel=1e-5)
    assert (eff.gemm, eff.gemm_depth, eff.gemm_unaligned) == (0.807, 97, 0.1225)   # not fitted: the source spec's
    e = dse("estimate", "-m", "gpt2-medium", "--hw", out, "--dp", "1", "-b", "4", "-s", "1024", "--json")
    assert e.code == 0, e.err
    assert json.loads(e.out)["hardware"]["name"] == "h100-cal"
    text = dse("calibrate", "--data", H100, "--hw", "dgx-h100", "--params", "memory", "--folds", "0")
    assert text.code == 0 and "time MAPE: 5.6 % uncalibrated" in text.out


def _one_line_exit_2(r, *words):
    assert r.code == 2 and r.err.count("\n") == 1 and "Traceback" not in r.err, r.err
    for w in words:
        assert w in r.err, r.err


def test_refusals_are_one_line(dse, tmp_path):
    rows = [json.loads(x) for x in H100.read_text().splitlines()][1:4]      # three base rows
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(json.dumps(x) for x in rows) + "\n")
    _one_line_exit_2(dse("calibrate", "--data", few, "--hw", "dgx-h100"), "3 measured times", "need at least 6")
    gpu_bound = tmp_path / "gpu-bound.jsonl"    # micro-batch 8 and 16: every step GPU-bound, the host hidden
    gpu_bound.write_text("".join(x + "\n" for x in H100.read_text().splitlines()
                                 if json.loads(x).get("kind") != "base" or json.loads(x)["b"] >= 8))
    _one_line_exit_2(dse("calibrate", "--data", gpu_bound, "--hw", "dgx-h100", "--params", "memory,layer_overhead"),
                     "layer_overhead", "not identifiable")
    same = tmp_path / "same.csv"
    same.write_text("model,micro_batch,dp,time_s\n" + "gpt2-medium,4,1,0.05\n" * 6)
    _one_line_exit_2(dse("calibrate", "--data", same, "--hw", "dgx-h100", "--params", "gemm,memory"),
                     "rank-deficient")
    _one_line_exit_2(dse("calibrate", "--data", H100, "--hw", "dgx-h100", "--params", "gemm,memroy"),
                     "'memroy'", "did you mean 'memory'")
    _one_line_exit_2(dse("calibrate", "--data", H100, "--hw", "dgx-h100", "--folds", "1"), "--folds 1")
    seven = tmp_path / "seven.jsonl"
    seven.write_text("\n".join(H100.read_text().splitlines()[1:8]) + "\n")
    _one_line_exit_2(dse("calibrate", "--data", seven, "--hw", "dgx-h100", "--folds", "2"), "--folds 2", "use fewer")
    _one_line_exit_2(dse("calibrate", "--data", tmp_path / "nope.csv", "--hw", "dgx-h100"), "no such file")
    bad = tmp_path / "bad.csv"
    bad.write_text("model,micro_batch,time_s,colour\ngpt2-medium,4,0.05,red\n")
    _one_line_exit_2(dse("calibrate", "--data", bad, "--hw", "dgx-h100"), "unknown field 'colour'")
    _one_line_exit_2(dse("calibrate", "--data", H100, "--hw", "chiplet-train-8x8"), "chiplet")


def test_estimate_imports_neither_scipy_nor_torch():
    code = ("import sys; from dse.cli import main; "
            "rc = main(['estimate', '--model', 'gpt2-xl', '--hw', 'dgx-h100', '--json']); "
            "print('LOADED', [m for m in ('scipy', 'torch', 'dse.calibrate', 'dse.measure') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "LOADED []" in out


def test_host_dispatch_scale_is_fitted_from_a_grid_start_and_written_to_the_host(dse, tmp_path):
    """From the reference host (scale 1) the launch floor hides behind GPU time (every H100 step GPU-bound except
    one), so the fit starts from the best of a grid; it lands at 3.8 +- 0.2, near the 4.17 that dgx-h100's host
    carries (transferred from the measured H100 VM); the calibrated YAML carries the fitted scale and loads as --hw."""
    out = tmp_path / "h100-host.yaml"
    r = dse("calibrate", "--data", H100, "--hw", reference_host_system(tmp_path, "dgx-h100"), "--params",
            "dispatch_scale", "--folds", "0", "--out", out, "--json")
    assert r.code == 0, r.err
    res = json.loads(r.out)
    p = res["parameters"]["dispatch_scale"]
    assert p["before"] == 1.0 and 3.3 < p["after"] < 4.3 and res["mape_fit"] < res["mape_before"]
    system = load_system(str(out))
    assert system.node.host.dispatch_scale == pytest.approx(p["after"], rel=1e-5)
    assert system.node.gpu.efficiency == load_system("dgx-h100").node.gpu.efficiency     # the GPU untouched
    assert "dispatch_scale: 1 -> " in out.read_text()
    assert system.node.host.dispatch_basis == "calibrated"       # fitted to these step times
    shipped = dse("calibrate", "--data", H100, "--hw", "dgx-h100", "--params", "dispatch_scale", "--folds", "0",
                  "--json")
    q = json.loads(shipped.out)["parameters"]["dispatch_scale"]
    assert q["before"] == 4.17 and q["after"] == pytest.approx(p["after"], rel=0.02)


def test_host_speed_fitted_from_step_times_is_the_one_the_host_measured():
    """Out of sample for the host model: fitted to the 31 H200 step times of four Transformers families (Qwen2,
    Pythia, Gemma 3, Llama 3.1; data/h200/hf_families.jsonl) with the reference host (dgx-h200), the host's launch
    speed comes out at what the VM that ran them measured with its own GPT2Block step (firecracker-xeon-vm 4.58,
    data/h200/host_dispatch_cuda.json): the per-launch and per-layer-pass host prices carry across families."""
    ms = measurements.read(data_dir() / "h200" / "hf_families.jsonl")
    vm = load_system("h200-vm").node.host.dispatch_scale
    reference = load_system("dgx-h200", overrides=[(["node", "host", "dispatch_scale"], 1.0)])
    r = fit.calibrate(ms, reference, ("dispatch_scale",), folds=0)
    p = r["parameters"]["dispatch_scale"]
    assert p["before"] == 1.0 and abs(p["after"] - vm) < 2 * p["sigma"] and abs(p["after"] / vm - 1) < 0.1
    assert r["mape_fit"] < 0.5 * r["mape_before"]
