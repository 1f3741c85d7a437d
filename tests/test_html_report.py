"""``--html FILE`` pages (dse estimate, dse search), opened in headless Chromium; optuna studies as optuna sees them.

The browser tests drive Debian's ``chromium`` over the DevTools protocol (tests/_chromium.py): the page loads with
no console error, no uncaught exception and no request beyond the file itself; it holds one SVG point per
configuration drawn; hovering a point (a real mouse event) shows a tooltip listing that configuration's fields.
They skip, saying why, where chromium is not installed (scripts/test.sh installs it with apt-get when it can).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import _chromium
import pytest
import yaml

from dse.report.html import _CLASSES, _TIME
from dse.search.output import fmt_param, short
from dse.units import fmt

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = _chromium.find()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian package 'chromium'; scripts/test.sh installs it with "
                             "apt-get when run as root or with sudo; or set DSE_CHROMIUM=/path/to/chrome)")
SMALL = {"name": "html-small", "model": "llama2-7b", "hardware": "dgx-a100-80gb",
         "fixed": {"plan.global_batch": 64, "plan.seq_len": 2048},
         "parameters": {"gpus": 8, "plan.tp": [1, 2, 4, 8], "plan.pp": [1, 2, 4], "plan.micro_batch": [1, 2, 4, 8],
                        "plan.zero": [0, 1, 2, 3], "plan.recompute": ["none", "selective", "full"]},
         "objectives": ["time"]}


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed")
    try:
        b = _chromium.Browser(CHROMIUM)
    except RuntimeError as exc:          # installed but unable to start here (e.g. Ubuntu's snap stub in a container)
        pytest.skip(f"{CHROMIUM} cannot start a headless browser here: {str(exc)[:300]}")
    with b:
        yield b


def self_contained(text: str) -> None:
    """Nothing the page would fetch: no src/href attribute, no CSS url() or @import, no absolute URL."""
    assert not re.search(r"\b(src|href)\s*=|url\(|@import|https?://", text)
    assert text.count("<script") == 2           # the JSON data and the inline script


def tip(browser) -> str:
    return browser.evaluate("(function(t){return t.hidden ? '' : t.innerText;})(document.getElementById('tip'))")


def space_file(tmp_path, **changes) -> Path:
    f = tmp_path / "space.yaml"
    f.write_text(yaml.safe_dump({**SMALL, **changes}))
    return f


# ----------------------------------------------------------------------------- pages written without a browser


def test_estimate_html_is_self_contained_and_keeps_json(dse, tmp_path):
    f = tmp_path / "e.html"
    r = dse("estimate", "--model", "llama2-7b", "--hw", "dgx-a100-80gb", "--html", f, "--json")
    assert r.code == 0 and "HTML report written" in r.err
    res = r.json()                                           # stdout is still the JSON alone
    text = f.read_text()
    self_contained(text)
    assert fmt(res["time"]["iteration"], "s") in text and "llama2-7b" in text


@pytest.mark.parametrize("args", [("estimate",), ("search", "--model", "llama2-7b", "--hw", "dgx-a100-80gb")])
def test_unwritable_html_path_is_one_line_naming_the_flag(dse, tmp_path, args):
    for bad, why in ((tmp_path / "no-such-dir" / "r.html", "does not exist"), (tmp_path, "is a directory")):
        r = dse(*args, "--html", bad)
        assert r.code == 2 and r.out == ""
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and "--html" in lines[0] and why in lines[0] and "Traceback" not in r.err


def test_estimate_without_html_imports_no_page_module():
    code = ("import sys; from dse.cli import main; main(['estimate', '--json']); "
            "bad = [m for m in ('dse.report.page', 'dse.report.page_search', 'dse.report.html') if m in sys.modules];"
            " sys.stderr.write(repr(bad))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines()[-1] == "[]"


# ----------------------------------------------------------------------------- in the browser


@needs_chromium
@pytest.mark.parametrize("model,hw,first,label", [("llama2-7b", "dgx-a100-80gb", "compute", "compute"),
                                                  ("gpt2-xl", "chiplet-train-8x8", "forward", "forward")])
def test_estimate_page_renders_breakdowns(dse, tmp_path, browser, model, hw, first, label):
    """One SVG segment per non-zero time component and per non-zero tensor class of each memory tier."""
    f = tmp_path / "e.html"
    res = dse("estimate", "--model", model, "--hw", hw, "--html", f, "--json").json()
    browser.open(f)
    assert browser.problems() == []
    keys = ("forward", "backward", "optimizer") if res.get("kind") == "chiplet" else [k for k, _ in _TIME]
    time_parts = [k for k in keys if res["time"].get(k, 0) > 0]
    assert sum(res["time"][k] for k in time_parts) == pytest.approx(res["time"]["iteration"], rel=1e-9)
    mem_parts = [(t, c) for t, m in res["memory"].items() for c in m if c not in ("total", "capacity") and m[c] > 0]
    if "gpu" in res["memory"]:
        assert set(mem_parts) >= {("gpu", c) for c in _CLASSES if res["memory"]["gpu"][c] > 0}
    assert browser.evaluate("document.querySelectorAll('svg rect.seg').length") == len(time_parts) + len(mem_parts)
    browser.hover("svg rect.seg")                           # the first segment of the time bar
    assert tip(browser) == f"{label}: {fmt(res['time'][first], 's')} " \
                           f"({100 * res['time'][first] / res['time']['iteration']:.1f}%)"


@needs_chromium
def test_search_front_page_points_and_tooltips(cli, tmp_path, browser):
    """Exhaustive, two objectives: one point per front configuration; hover lists it; #point=N shows its detail."""
    f, j = tmp_path / "s.html", tmp_path / "s.json"
    rc, out, err = cli("search", "--space", space_file(tmp_path, objectives=["time", "cost"],
                                                       parameters={**SMALL["parameters"], "gpus": [4, 8]}),
                       "--html", f, "--json", j, "-q")
    assert rc == 0, err
    ranked = json.loads(j.read_text())["pareto_front"]
    assert len(ranked) >= 2
    browser.open(f)
    assert browser.problems() == []
    assert browser.evaluate("document.querySelectorAll('svg circle.pt').length") == len(ranked)
    for i in (0, len(ranked) - 1):
        browser.hover(f"circle.pt[data-i='{i}']")
        shown = tip(browser)
        assert shown.startswith(f"#{i + 1}")
        for path, v in ranked[i]["params"].items():
            assert f"{short(path) if path.startswith('plan.') else path}\t{fmt_param(None, v)}" in shown
    assert browser.evaluate("document.querySelectorAll('.detail').length") == len(ranked)
    browser.open(f, f"point={len(ranked) - 1}")
    visible = browser.evaluate("[...document.querySelectorAll('.detail')].filter(d => !d.hidden).map(d => d.id)")
    assert visible == [f"detail-{len(ranked) - 1}"]
    assert browser.evaluate(f"document.querySelectorAll('#detail-{len(ranked) - 1} rect.seg').length") > 0


@needs_chromium
def test_search_convergence_page_has_every_trial(cli, tmp_path, browser):
    """optuna, one objective: one point per completed trial (feasible or not); hover names the trial."""
    f, j = tmp_path / "c.html", tmp_path / "c.json"
    rc, out, err = cli("search", "--space", space_file(tmp_path), "--engine", "optuna", "--trials", "25",
                       "--storage", "memory", "--html", f, "--json", j, "-q")
    assert rc == 0, err
    res = json.loads(j.read_text())
    complete = [t for t in res["trials"] if t["state"] == "COMPLETE"]
    assert len(complete) == res["evaluated"] >= 25
    browser.open(f)
    assert browser.problems() == []
    assert browser.evaluate("document.querySelectorAll('svg circle.pt').length") == len(complete)
    assert browser.evaluate("document.querySelectorAll('svg circle.pt.best').length") == len(res["top"])
    browser.hover("circle.pt[data-i='3']")
    t = complete[3]
    shown = tip(browser)
    assert shown.startswith(f"trial {t['id']}") and f"tp\t{t['params']['plan.tp']}" in shown
    assert ("feasible\tyes" in shown) == t["feasible"]


# ----------------------------------------------------------------------------- optuna's own API


def test_stored_study_loads_with_optuna(cli, tmp_path):
    """What optuna-dashboard reads: parameters, named objectives, and dse's metrics as a user attribute."""
    optuna = pytest.importorskip("optuna")
    url = f"sqlite:///{tmp_path / 'dse.db'}"
    rc, out, err = cli("search", "--space", space_file(tmp_path, objectives=["time", "cost"]), "--engine", "optuna",
                       "--trials", "12", "--storage", url, "--study", "dash", "-q")
    assert rc == 0, err
    study = optuna.load_study(study_name="dash", storage=url)
    assert study.metric_names == ["time.iteration", "cost.capital_usd"]
    assert study.user_attrs["space"] == "html-small"
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(done) >= 12
    for t in done:
        attrs = t.user_attrs["dse"]
        for name, v in t.params.items():     # a list that is not evenly spaced is sampled by position: "plan.tp[i]"
            path = name.removesuffix("[i]")
            assert attrs["params"][path] == (sorted(SMALL["parameters"][path])[v] if name.endswith("[i]") else v)
        assert {n.removesuffix("[i]") for n in t.params} == set(SMALL["parameters"]) - {"gpus"}
        assert t.values == pytest.approx([attrs["metrics"]["time.iteration"], attrs["metrics"]["cost.capital_usd"]])
        assert {"throughput.tokens_per_s", "memory.gpu.total"} <= set(attrs["metrics"])
        assert isinstance(attrs["feasible"], bool) and attrs["bottleneck"]
