"""Shared helpers for the tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def cli(capsys):
    """Run ``dse ARGS`` in-process: returns (exit status, stdout, stderr)."""
    from dse.cli import main

    def _run(*args):
        rc = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return rc, out, err

    return _run
