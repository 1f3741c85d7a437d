"""Hygiene, run by the test suite as CI runs it: ruff (lint) and mypy (types), configured in pyproject.toml.

- ``python -m ruff check .``: the rules of ``[tool.ruff.lint]`` over the code, tests, scripts and examples;
- ``python -m mypy``: the packages of ``[tool.mypy] files``, strict on ``dse.formulas`` and ``dse.estimate``
  (``[[tool.mypy.overrides]]``; a new estimate module must be listed there: :data:`NOT_YET_STRICT` is empty).

Both tools are in the ``test`` extra (``pip install -e '.[test]'``, what scripts/test.sh and CI install); a test
is skipped, saying why, only where the tool is not installed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(module: str, *args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: pip install -e '.[test]' (CI installs it)")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_ruff_finds_nothing():
    proc = _tool("ruff", "check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_finds_nothing():
    proc = _tool("mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("module", ["dse/formulas/probe.py", "dse/estimate/offload.py"])
def test_mypy_is_strict_on_the_formulas_and_the_estimate(tmp_path, module):
    """The strict settings do apply: an unannotated function in a dse.formulas or dse.estimate module is an error."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed: pip install -e '.[test]' (CI installs it)")
    path = tmp_path / module
    path.parent.mkdir(parents=True)
    (tmp_path / "dse" / "__init__.py").write_text("")
    (path.parent / "__init__.py").write_text("")
    path.write_text("def untyped(x):\n    return x\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / "cache"), module],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "no-untyped-def" in proc.stdout, proc.stdout


# dse.estimate modules not yet under the strict settings (being reworked; annotate them, then drop them here).
NOT_YET_STRICT: set[str] = set()   # every dse.estimate module is strict


def test_every_estimate_module_is_strict():
    """A new dse.estimate module is strict from the start: pyproject.toml's strict override lists each one."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    strict = {m for o in config["tool"]["mypy"]["overrides"] if o.get("disallow_untyped_defs") for m in o["module"]}
    modules = {"dse.estimate"} | {f"dse.estimate.{p.stem}" for p in (ROOT / "dse" / "estimate").glob("*.py")
                                  if p.stem != "__init__"}
    missing = sorted(modules - strict - NOT_YET_STRICT)
    assert not missing, f"add to the strict [[tool.mypy.overrides]] of pyproject.toml: {missing}"
    assert not NOT_YET_STRICT & strict, "strict now: remove it from NOT_YET_STRICT"
