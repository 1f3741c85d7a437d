"""Hygiene, run by the test suite as CI runs it: ruff (lint) and mypy (types), configured in pyproject.toml.

- ``python -m ruff check .``: the rules of ``[tool.ruff.lint]`` over the code, tests, scripts and examples;
- ``python -m mypy``: the packages of ``[tool.mypy] files``, strict on ``dse.formulas`` (``[[tool.mypy.overrides]]``).

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
def test_mypy_is_strict_on_the_formulas(tmp_path):
    """The strict settings do apply: an unannotated function in a dse.formulas module is an error."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed: pip install -e '.[test]' (CI installs it)")
    pkg = tmp_path / "dse" / "formulas"
    pkg.mkdir(parents=True)
    (tmp_path / "dse" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "probe.py").write_text("def untyped(x):\n    return x\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / "cache"), "dse/formulas/probe.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "no-untyped-def" in proc.stdout, proc.stdout
