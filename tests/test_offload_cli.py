"""`dse estimate` offload flags, `dse offload-compare`, and bad input (one line, exit 2)."""

import json
import subprocess
import sys

import pytest

from dse.cli import main

BASE = ["estimate", "--model", "smart-infinity-gpt2-4.0b", "--hw", "smart-infinity-a5000", "-b", "4",
        "--recompute", "full", "--zero", "3", "--precision", "fp16", "--offload-params", "cpu"]


def run_cli(capsys, args):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, needle", [
    (["estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--zero", "3", "--offload-optimizer", "nvme"],
     "has no storage drives"),
    (["estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--zero", "3", "--offload-params", "nvme"],
     "has no storage drives"),
    (["estimate", "--model", "gpt2-xl", "--hw", "plain-nvme-a5000", "--zero", "3", "--offload-optimizer", "csd"],
     "no near-storage compute"),
    (BASE + ["--offload-optimizer", "csd", "--gradient-compression", "0"], "gradient_compression"),
    (BASE + ["--offload-optimizer", "csd", "--gradient-compression", "1.5"], "gradient_compression"),
    (BASE + ["--offload-optimizer", "csd", "--gradient-compression", "-0.1"], "gradient_compression"),
    (BASE + ["--offload-optimizer", "nvme", "--gradient-compression", "0.02"], "needs --offload-optimizer csd"),
    (BASE + ["--offload-optimizer", "nvme", "--ssds", "0"], "ssds"),
    (BASE + ["--offload-optimizer", "nvme", "--ssds", "-2"], "ssds"),
    (["estimate", "--model", "gpt2-xl", "--hw", "smart-infinity-a5000", "--zero", "2", "--offload-optimizer", "nvme"],
     "needs --zero 3"),
    (["estimate", "--model", "gpt2-xl", "--hw", "smart-infinity-a5000", "--zero", "0", "--offload-optimizer", "cpu"],
     "needs --zero 1, 2 or 3"),
    (["estimate", "--model", "gpt2-xl", "--hw", "smart-infinity-a5000", "--zero", "2", "--offload-params", "cpu"],
     "needs --zero 3"),
    (BASE + ["--offload-optimizer", "disk"], "--offload-optimizer"),
    (BASE + ["--optimizer", "lamb"], "--optimizer"),
    (BASE + ["--offload-optimizer", "csd", "--exchange-dtype", "bf16"], "--exchange-dtype"),
    (BASE + ["--offload-optimizer", "nvme", "--set", "plan.sub_group_size=0"], "sub_group_size"),
    (["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "--hw", "plain-nvme-a5000"], "no near-storage compute"),
    (["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "--compression", "0"], "gradient_compression"),
    (["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "--ssds", "0"], "ssds"),
    (["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "--scaling", "1,x"], "--scaling"),
    (["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "--scaling", "0,2"], "--scaling"),
    (["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "--baseline-hw", "a100-cluster-800g"],
     "has no storage drives"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, needle):
    code, out, err = run_cli(capsys, args)
    assert code == 2
    assert err.startswith("dse: error") and err.count("\n") == 1, err
    assert needle in err
    assert "Traceback" not in err


def test_estimate_json_has_phases_links_bottleneck_memory_and_cost(capsys):
    code, out, err = run_cli(capsys, BASE + ["--offload-optimizer", "csd", "--gradient-compression", "0.02",
                                             "--ssds", "6", "--json"])
    assert code == 0, err
    r = json.loads(out)
    for k in ("phase_forward", "phase_backward", "phase_update", "io_exposed", "iteration"):
        assert r["time"][k] > 0
    for k in ("gpu_host", "host_switch", "switch_drives", "csd_internal"):
        assert r["traffic"][k] > 0
    assert r["offload"]["drives"] == 6 and r["offload"]["bottleneck_link"]
    assert r["memory"]["storage"]["optimizer"] > 0 and r["cost"]["storage_usd"] == pytest.approx(6 * 2400)
    assert r["plan"]["gradient_compression"] == 0.02 and r["plan"]["ssds"] == 6


def test_estimate_console_shows_phases_links_and_bottleneck(capsys):
    code, out, err = run_cli(capsys, BASE + ["--offload-optimizer", "nvme", "--optimizer", "adagrad"])
    assert code == 0, err
    for needle in ("update", "backward", "Links per iteration", "bottleneck link", "uplink",
                   "Bandwidth each tensor class needs", "storage / host I/O"):
        assert needle in out, needle


def test_estimate_reports_drive_wear_of_storage_offload(capsys):
    """The audit's command: ZeRO-Infinity on 6 SmartSSDs has an endurance section (JSON) and a lifetime line."""
    args = ["estimate", "--model", "smart-infinity-gpt2-8.4b", "--hw", "smart-infinity-a5000", "-b", "4",
            "--recompute", "full", "--zero", "3", "--precision", "fp16", "--offload-params", "cpu",
            "--offload-optimizer", "nvme", "--ssds", "6"]
    code, out, err = run_cli(capsys, args + ["--json"])
    assert code == 0, err
    en = json.loads(out)["endurance"]
    assert en["bytes_written_per_iteration_per_drive"] > 0 and 0 < en["lifetime_years"] < 1
    code, out, err = run_cli(capsys, args)
    assert code == 0, err
    assert "drive writes per iteration" in out and "drive lifetime" in out and f"{en['lifetime_years']:.2f}" in out
    code, out, err = run_cli(capsys, BASE + ["--offload-optimizer", "cpu", "--json"])
    assert code == 0 and "endurance" not in json.loads(out)                # nothing written to drives


def test_explain_lists_offload_formulas(capsys):
    code, out, err = run_cli(capsys, BASE + ["--offload-optimizer", "csd", "--explain", "--json"])
    assert code == 0, err
    terms = {row["term"] for row in json.loads(out)["explain"]}
    assert {"near_storage.update_time", "offload.backward_phase_time", "offload.placement"} <= terms


def test_offload_compare_json(capsys):
    code, out, err = run_cli(capsys, ["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "-b", "4",
                                      "--precision", "fp16", "--baseline-hw", "plain-nvme-a5000", "--scaling", "1,4,10",
                                      "--json"])
    assert code == 0, err
    r = json.loads(out)
    base, su, comp = r["variants"]
    assert base["speedup"] == 1 and su["speedup"] > 1 and comp["speedup"] > su["speedup"]
    P = r["params"]
    assert base["traffic"]["host_switch"] == pytest.approx(32 * P)
    assert su["traffic"]["host_switch"] == pytest.approx(8 * P)
    assert comp["traffic"]["host_switch"] == pytest.approx(4.08 * P)
    assert base["cost"]["capital_usd"] < su["cost"]["capital_usd"]
    assert su["per_dollar_vs_baseline"] == pytest.approx(
        su["cost"]["tokens_per_s_per_kusd"] / base["cost"]["tokens_per_s_per_kusd"])
    assert r["scaling"]["drives"] == [1, 4, 10]
    times = r["scaling"]["iteration"]
    assert times["SmartUpdate"][0] > times["ZeRO-Infinity"][0]        # one drive: SmartUpdate is slower
    assert times["SmartUpdate"][2] < times["ZeRO-Infinity"][2]


def test_offload_compare_console(capsys):
    code, out, err = run_cli(capsys, ["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "-b", "4"])
    assert code == 0, err
    for needle in ("One iteration", "speedup over baseline", "shared uplink bytes", "tokens/s per k$",
                   "Scaling with the number of drives"):
        assert needle in out, needle


def test_offload_compare_plot(capsys, tmp_path):
    path = tmp_path / "scaling.png"
    code, out, err = run_cli(capsys, ["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "--plot", str(path),
                                      "--scaling", "1,2,4"])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert code == 2 and "pip install 'dse[plot]'" in err
    else:
        assert code == 0, err
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_offload_compare_plot_without_matplotlib(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib -> ImportError
    code, out, err = run_cli(capsys, ["offload-compare", "--model", "smart-infinity-gpt2-4.0b",
                                      "--plot", str(tmp_path / "x.png"), "--scaling", "1"])
    assert code == 2 and err == "dse: error: --plot needs matplotlib: pip install 'dse[plot]'\n"


def test_estimate_with_offload_stays_light():
    """`dse estimate` with offload imports neither numpy nor plotting/search libraries."""
    code = ("import sys; from dse.cli import main; "
            "main(['estimate','--model','smart-infinity-gpt2-4.0b','--hw','smart-infinity-a5000','--zero','3',"
            "'--offload-optimizer','csd','--offload-params','cpu','--json']); "
            "bad = [m for m in ('matplotlib', 'scipy', 'optuna', 'numpy') if m in sys.modules]; "
            "sys.stderr.write(repr(bad))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr.strip() == "[]"


def test_estimate_without_offload_imports_no_offload_formulas():
    """A plan that offloads nothing imports neither the offload formulas nor heavy packages (a faster cold start)."""
    lazy = ("dse.formulas.offload", "dse.formulas.near_storage", "dse.formulas.activation_offload",
            "dse.estimate.offload_time")
    code = ("import sys; from dse.cli import main; main(['estimate', '--json']); "
            f"bad = [m for m in sys.modules if m in {lazy!r} "
            "or m.split('.')[0] in ('optuna', 'scipy', 'matplotlib', 'torch', 'numpy')]; sys.stderr.write(repr(bad))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr.strip() == "[]"


def test_offload_compare_default_baseline_is_priced_as_plain_drives(capsys):
    """Without --baseline-hw the baseline is the same box with plain drives: $400 each, not a SmartSSD's $2,400."""
    code, out, err = run_cli(capsys, ["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "-b", "4", "--json"])
    assert code == 0, err
    base, su, _ = json.loads(out)["variants"]
    assert base["cost"]["storage_usd"] == pytest.approx(10 * 400)
    assert su["cost"]["storage_usd"] == pytest.approx(10 * 2400)
