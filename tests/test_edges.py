"""The edges of the library: optional imports, figures and process-wide settings belong to the CLI side.

- every optional package (optuna, scipy, matplotlib, psycopg2) is imported through
  :func:`dse._optional.require`, so a missing one reads the same everywhere: one line, exit 2;
- figures are drawn by :mod:`dse.report.plots` only; the model modules return numbers;
- the allocator setting is made by ``dse search`` (the command), never by ``dse.search`` (the library).
"""

from __future__ import annotations

import ast
import builtins
import subprocess
import sys
from pathlib import Path

import pytest

from dse._optional import EXTRAS, require
from dse.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "examples" / "spaces" / "llama2-70b-parallelism.yaml"
OPTIONAL = tuple(EXTRAS)
# Modules imported only after require() succeeded in their one importer (dse/measure/command.py requires torch).
AFTER_REQUIRE = {"dse/measure/micro.py", "dse/measure/gpt.py", "dse/measure/host.py"}


def _hide(monkeypatch, *names):
    """Make ``import NAME`` (and its submodules) fail as if the package were not installed."""
    real = builtins.__import__

    def fake(name, *a, **k):
        if name.split(".")[0] in names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)


def _imports(path: Path):
    """(module name, line) of every import statement in a source file."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno


def test_require_message_names_the_extra(monkeypatch):
    _hide(monkeypatch, "matplotlib")
    with pytest.raises(InputError) as exc:
        require("matplotlib.pyplot", needed_by="--plot")
    assert str(exc.value) == "--plot needs matplotlib: pip install 'dse[plot]'"
    assert require("json").__name__ == "json"
    assert EXTRAS == {"matplotlib": "plot", "optuna": "search", "scipy": "search", "psycopg2": "postgres",
                      "torch": "measure", "pandas": "notebook"}


def test_optional_packages_are_imported_only_through_require():
    """No module of dse imports an optional package directly (the first import must be require's, one-line error);
    optuna's submodules may be imported after ``require('optuna')`` in the same function."""
    offenders = []
    for path in sorted((ROOT / "dse").rglob("*.py")):
        for name, line in _imports(path):
            top = name.split(".")[0]
            after = top == "optuna" and name != "optuna" or str(path.relative_to(ROOT)) in AFTER_REQUIRE
            if top in OPTIONAL and not after:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert offenders == []


def test_model_modules_draw_no_figures():
    """Plot writing lives in dse/report/plots.py (called by the CLI); estimate, search and formulas return numbers."""
    for sub in ("estimate", "search", "formulas", "specs", "validate"):
        for path in (ROOT / "dse" / sub).rglob("*.py"):
            text = path.read_text()
            assert not any(n.startswith("matplotlib") for n, _ in _imports(path)) and "savefig" not in text, path


@pytest.mark.parametrize("args", [
    ["offload-compare", "--model", "smart-infinity-gpt2-4.0b", "--scaling", "1"],
    ["rok", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--micro-batches", "1"],
    ["chiplet-scaling", "--steps", "0"],
    ["search", "--space", str(SPACE), "--engine", "exhaustive", "-q"],
])
def test_plot_without_matplotlib_fails_first_in_one_line(dse, monkeypatch, tmp_path, args):
    _hide(monkeypatch, "matplotlib")
    r = dse(*args, "--plot", tmp_path / "x.png")
    assert r.code == 2 and r.err == "dse: error: --plot needs matplotlib: pip install 'dse[plot]'\n"
    assert r.out == ""                               # failed before computing anything


def test_plot_to_an_unwritable_path_is_one_line(dse, tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "no-such-dir" / "x.png"
    r = dse("chiplet-scaling", "--steps", "0", "--plot", target)
    assert r.code == 2 and r.err.startswith(f"dse: error: --plot {target}: cannot write") and r.err.count("\n") == 1


def test_optuna_missing_is_one_line(dse, monkeypatch):
    from dse.search import storage

    monkeypatch.setattr(storage, "_OPENED", {})
    _hide(monkeypatch, "optuna")
    r = dse("search", "--space", SPACE, "--engine", "optuna", "--trials", "3", "--storage", "memory", "-q")
    assert r.code == 2
    assert r.err == "dse: error: dse search with the optuna engine needs optuna: pip install 'dse[search]'\n"


def test_postgres_driver_missing_is_one_line(dse, monkeypatch):
    from dse.search import storage

    pytest.importorskip("optuna")
    monkeypatch.setattr(storage, "_OPENED", {})
    monkeypatch.setattr(storage, "with_driver", lambda url: url)
    _hide(monkeypatch, "psycopg2")
    url = "postgresql://someone@127.0.0.1:1/db"
    r = dse("search", "--space", SPACE, "--engine", "optuna", "--trials", "3", "--storage", url, "-q")
    assert r.code == 2
    assert r.err == f"dse: error: --storage {url} needs psycopg2: pip install 'dse[postgres]'\n"


def test_allocator_is_tuned_by_the_command_not_the_library():
    """``dse.search`` (library) never changes the process's allocator; ``dse search`` (exhaustive) does."""
    for path in (ROOT / "dse").rglob("*.py"):
        if path.name in ("_process.py", "command.py"):
            continue
        assert "tune_allocator" not in path.read_text() and "mallopt" not in path.read_text(), path
    code = ("import dse._process as p; calls = []; p.tune_allocator = lambda: calls.append(1) or True; "
            "from dse.search import load_space; from dse.search.runner import search; "
            f"search(load_space({str(SPACE)!r}), engine='exhaustive'); print('library', len(calls)); "
            "from dse.cli import main; "
            f"main(['search', '--space', {str(SPACE)!r}, '--engine', 'exhaustive', '-q']); "
            "print('command', len(calls))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "library 0" in out and "command 1" in out
