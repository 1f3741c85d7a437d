"""``dse search`` end to end: tables, exports, plots, the re-run command, import hygiene."""

from __future__ import annotations

import csv
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPACE = ROOT / "examples" / "spaces" / "llama2-70b-parallelism.yaml"
PARETO = ROOT / "examples" / "spaces" / "cost-time-pareto.yaml"


def test_exhaustive_table_and_rerun_command(cli):
    rc, out, err = cli("search", "--space", SPACE, "--engine", "exhaustive", "--top", "3", "-q")
    assert rc == 0, err
    assert "Top 3 configurations" in out and "bottleneck" in out
    cmd = out.strip().splitlines()[-1]
    assert cmd.startswith("dse estimate --model llama2-70b --hw a100-cluster-800g")
    # the printed command reproduces the best configuration's iteration time exactly
    rc, js, _ = cli(*shlex.split(cmd)[1:], "--json")
    est = json.loads(js)
    rc, out2, _ = cli("search", "--space", SPACE, "--engine", "exhaustive", "--json", "-", "-q")
    res = json.loads(out2)
    assert est["time"]["iteration"] == pytest.approx(res["best"]["value"], rel=1e-12)
    assert est["feasible"]


def test_json_and_csv_exports_of_every_point(cli, tmp_path):
    j, c = tmp_path / "out.json", tmp_path / "out.csv"
    rc, out, err = cli("search", "--space", SPACE, "--engine", "exhaustive", "--json", j, "--csv", c, "-q")
    assert rc == 0, err
    res = json.loads(j.read_text())
    assert set(res["best"]) >= {"params", "value", "metrics"}
    assert res["points"] == 6720 and len(res["trials"]) == res["evaluated"]
    feasible = [t for t in res["trials"] if t["feasible"]]
    assert len(feasible) == res["feasible"]
    assert min(t["metrics"]["time.iteration"] for t in feasible) == pytest.approx(res["best"]["value"], rel=1e-12)
    assert sum(res["excluded"].values()) == res["points"] - res["feasible"]
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == res["evaluated"]
    assert {"plan.tp", "plan.pp", "gpus", "feasible", "status", "time.iteration", "cost.capital_usd"} <= set(rows[0])
    statuses = {r["status"] for r in rows}
    assert "feasible" in statuses and "gpu memory capacity" in statuses


def test_optuna_json_csv_and_pareto_plot(cli, tmp_path):
    j, c, png = tmp_path / "o.json", tmp_path / "o.csv", tmp_path / "front.png"
    rc, out, err = cli("search", "--space", PARETO, "--engine", "optuna", "--trials", "60", "--storage", "memory",
                       "--json", j, "--csv", c, "--plot", png, "-q")
    assert rc == 0, err
    assert "Pareto front" in out
    res = json.loads(j.read_text())
    assert res["pareto_front"] and "best" not in res
    assert sum(t["state"] == "COMPLETE" for t in res["trials"]) == 60
    assert all(len(p["values"]) == 2 and p["command"].startswith("dse estimate") for p in res["pareto_front"])
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == len(res["trials"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_convergence_plot_exhaustive(cli, tmp_path):
    png = tmp_path / "conv.png"
    rc, out, err = cli("search", "--space", SPACE, "--engine", "exhaustive", "--plot", png, "-q")
    assert rc == 0 and png.stat().st_size > 1000


def test_flags_cover_the_common_case(cli):
    rc, out, err = cli("search", "--model", "llama2-70b", "--hw", "a100-cluster-800g", "--gpus", "128",
                       "--objective", "cost_per_token", "--budget", "$3M", "--top", "2", "-q")
    assert rc == 0, err
    assert "exhaustive" in out and "USD per million tokens" in out
    assert "--dp" in out.strip().splitlines()[-1]


def test_progress_bar_shows_best_so_far(tmp_path):
    """The bar goes to stderr (rich); forced on with a terminal-like console."""
    bar = str(tmp_path / "bar")
    code = ("from rich.console import Console; import dse.search.output as o; "
            f"from dse.search import load_space; s = load_space({str(SPACE)!r}); "
            f"p = o.Progress(s, 'exhaustive'); p.__enter__(); p._bar.console.file = open({bar!r}, 'w'); "
            "p(10, 100, 37.2); p(100, 100, 37.2); p.__exit__(None, None, None)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    text = (tmp_path / "bar").read_text()
    assert "best iteration time: 37.2 s" in text and "100/100" in text


def test_estimate_imports_no_search_machinery():
    code = ("import sys; from dse.cli import main; "
            "rc = main(['estimate', '--model', 'gpt2-xl', '--hw', 'a100-cluster-800g', '--dp', '8', '--json']); "
            "bad = [m for m in ('optuna', 'scipy', 'matplotlib', 'dse.search', 'sqlalchemy') if m in sys.modules]; "
            "print('LOADED', bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "LOADED []" in out


def test_exhaustive_search_imports_neither_optuna_nor_matplotlib():
    code = ("import sys; from dse.cli import main; "
            f"rc = main(['search', '--space', {str(SPACE)!r}, '--engine', 'exhaustive', '-q']); "
            "print('LOADED', [m for m in ('optuna', 'scipy', 'matplotlib') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "LOADED []" in out


def test_plot_without_matplotlib_is_one_line(cli, monkeypatch, tmp_path):
    import builtins

    real = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    rc, out, err = cli("search", "--space", SPACE, "--engine", "exhaustive", "--plot", tmp_path / "x.png", "-q")
    assert rc == 2 and "pip install 'dse[plot]'" in err and err.count("\n") == 1 and out == ""


def test_json_and_csv_cannot_both_use_stdout(cli):
    rc, _, err = cli("search", "--space", SPACE, "--json", "-", "--csv", "-", "-q")
    assert rc == 2 and "only one of them" in err
