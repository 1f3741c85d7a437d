"""Shared fixtures: run the CLI in-process and capture its output and exit status."""

from __future__ import annotations

import importlib.util
import json

import pytest

# The torch reference layers import torch at module level; without torch, pytest's doctest collector must skip them
# (the tests that use them are marked `torch` and import it with pytest.importorskip).
collect_ignore = [] if importlib.util.find_spec("torch") else ["torch_reference.py"]

from dse.cli import main  # noqa: E402  (after collect_ignore, which must not import torch)


class Ran:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)


@pytest.fixture(scope="session")
def _search_db_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("search-db")


@pytest.fixture(autouse=True)
def _search_storage_off_cwd(_search_db_dir, monkeypatch):
    """A search that names no ``--storage`` writes its default database in a temporary folder, not in the folder
    the tests were started from (``dse.search.storage.DEFAULT`` is ``dse-search.db`` in the working directory)."""
    monkeypatch.setattr("dse.search.storage.DEFAULT", f"sqlite:///{_search_db_dir / 'dse-search.db'}")


@pytest.fixture
def dse(capsys):
    """Call ``dse ARGS`` in-process; returns (exit code, stdout, stderr)."""

    def call(*args):
        code = main([str(a) for a in args])
        cap = capsys.readouterr()
        return Ran(code, cap.out, cap.err)

    return call


@pytest.fixture
def gpt_small():
    """A small GPT-style model spec written inline (independent of the catalog)."""
    from dse.specs.model import ModelSpec

    return ModelSpec(name="gpt-test", layers=12, hidden=1024, heads=16, vocab=50257, max_seq_len=2048,
                     dropout=0.1).resolved()


@pytest.fixture
def llama_small():
    from dse.specs.model import ModelSpec

    return ModelSpec(name="llama-test", layers=16, hidden=2048, heads=16, kv_heads=4, ffn_hidden=5632,
                     ffn_type="swiglu", norm="rmsnorm", bias=False, position="rotary", tied_embeddings=False,
                     vocab=32000, max_seq_len=4096).resolved()


@pytest.fixture
def cluster():
    from dse.catalog import load_system

    return load_system("a100-cluster-800g")


@pytest.fixture
def cli(capsys):
    """Run ``dse ARGS`` in-process: returns (exit status, stdout, stderr) as a tuple (the search tests)."""

    def _run(*args):
        rc = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return rc, out, err

    return _run
