"""Published figures live in data/published/*.yaml, each with its source, and the validation suites read them there."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dse.errors import InputError
from dse.validate import published

ROOT = Path(__file__).resolve().parents[1]
SUITE_FILES = {"smart-infinity": "smart_infinity", "ssdtrain": "ssdtrain", "chiplet": "chiplet",
               "formulas": "korthikanti2022", "megatron-bridge": "megatron_bridge", "moe-h100": "megatron_core_moe",
               "llama3-405b": "llama3", "megatron-selene": "korthikanti2022_selene"}


def _numbers(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from _numbers(x)
    elif isinstance(v, tuple):
        for x in v:
            yield from _numbers(x)
    elif v is not None:
        yield v


def test_every_file_loads_and_every_table_has_a_source():
    names = published.names()
    assert set(SUITE_FILES.values()) <= set(names)
    for name in names:
        pub = published.load(name)
        assert pub.paper and pub.note.startswith("docs/reference/") and (ROOT / pub.note).is_file(), name
        assert pub.tables, name
        for table in pub.tables:
            assert len(pub.source(table)) > 20, (name, table)
            assert list(_numbers(pub.values(table))), (name, table)


@pytest.mark.parametrize("suite", SUITE_FILES)
def test_suite_references_come_from_the_data(suite):
    """Every reference a suite checks is a number of its data file, except yes/no indicators (1 = yes, 0 = no)
    and ratios of two published numbers."""
    from dse.validate import load

    pub = published.load(SUITE_FILES[suite])
    data = {float(x) for t in pub.tables for x in _numbers(pub.values(t))}
    ratios = {a / b for a in data for b in data if b}
    for case in load(suite).cases():
        indicator = case.kind == "absolute" and case.reference in (0.0, 1.0) and case.tolerance == 0.0
        claim = case.reference in data or case.reference in ratios
        assert indicator or claim or (case.reference == 1.0 and "nearly constant" in case.source), case.name


@pytest.mark.parametrize("module", ["smart_infinity", "ssdtrain", "chiplet", "formulas"])
def test_validate_modules_hold_no_published_literals(module):
    """The numbers moved out of the code: no float literal of a data file appears in the suite's module."""
    name = SUITE_FILES["formulas"] if module == "formulas" else module
    pub = published.load(name)
    data = {float(x) for t in pub.tables for x in _numbers(pub.values(t))} - {0.0, 1.0, 2.0, 4.0}
    tree = ast.parse((ROOT / "dse" / "validate" / f"{module}.py").read_text())
    literals = {float(n.value) for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)}
    assert literals & data == set()


def test_strings_where_numbers_belong_are_refused(tmp_path, monkeypatch):
    """YAML 1.1 reads 1e-3 as a string; a data file with one fails in one line naming the place."""
    (tmp_path / "bad.yaml").write_text("paper: x\nnote: y\nt:\n  source: somewhere, Table 1\n  values: {a: 1e-3}\n")
    monkeypatch.setattr(published, "directory", lambda: tmp_path)
    published.load.cache_clear()
    try:
        with pytest.raises(InputError, match=r"bad.yaml: t.values.a: expected a number or null, got '1e-3'"):
            published.load("bad")
        (tmp_path / "nosrc.yaml").write_text("t:\n  values: {a: 1.0}\n")
        with pytest.raises(InputError, match="nosrc.yaml: t: expected a table with a source and values"):
            published.load("nosrc")
    finally:
        published.load.cache_clear()
