"""The papers' published numbers, read from ``data/published/*.yaml`` (shipped in the wheel).

Each file holds the numbers of one paper (or one group of sources) that ``dse validate``
checks the model against. A file is a mapping of tables; each table has a ``source``
(the paper and its table or figure, and how the numbers were read), optionally a
``unit`` and ``columns``, and ``values``: numbers, ``null`` where a figure gives none, or
lists and mappings of them. An entry of ``values`` may carry its own source as
``{value: 0.47, source: "..."}``. Top-level keys that are not tables (``paper``,
``note``) describe the file.

>>> si = load("smart_infinity")
>>> si.values("fig11_a100")["SU+O+C"], si.source("fig11_a100")[:12]
(10.63, 'Fig. 11(b) (')
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from dse.errors import InputError

META = ("paper", "note")


def directory() -> Path:
    from dse.catalog import data_dir

    return data_dir() / "published"


class Published:
    """The tables of one ``data/published/NAME.yaml`` file."""

    def __init__(self, name: str, data: dict):
        self.name = name
        self.paper: str = data.get("paper", "")
        self.note: str = data.get("note", "")
        self.tables: dict[str, dict] = {k: v for k, v in data.items() if k not in META}

    def _table(self, table: str) -> dict:
        try:
            return self.tables[table]
        except KeyError:
            raise KeyError(f"data/published/{self.name}.yaml has no table {table!r}") from None

    def values(self, table: str) -> Any:
        """The table's values, lists as tuples; ``{value:, source:}`` entries as their value."""
        return _plain(self._table(table)["values"])

    def source(self, table: str, key=None) -> str:
        """The source of a table, or of one entry of it when the entry names its own."""
        t = self._table(table)
        if key is not None:
            entry = t["values"][key]
            if isinstance(entry, dict) and "source" in entry:
                return entry["source"]
        return t["source"]


def _plain(v):
    if isinstance(v, dict):
        if set(v) >= {"value", "source"}:
            return _plain(v["value"])
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return tuple(_plain(x) for x in v)
    return v


def _check_numbers(v, where: str) -> None:
    """Only numbers and nulls (YAML 1.1 reads ``1e-3`` as a string: write ``1.0e-3``)."""
    if isinstance(v, dict):
        for k, x in v.items():
            if k != "source":
                _check_numbers(x, f"{where}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _check_numbers(x, f"{where}[{i}]")
    elif v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise InputError(f"{where}: expected a number or null, got {v!r}")


@cache
def load(name: str) -> Published:
    """The published numbers of ``data/published/{name}.yaml``, checked: every table has a source and numbers."""
    from dse.catalog import read_yaml

    path = directory() / f"{name}.yaml"
    data = read_yaml(path, "published numbers")
    for key, table in data.items():
        if key in META:
            continue
        where = f"{path.name}: {key}"
        if not isinstance(table, dict) or not table.get("source") or "values" not in table:
            raise InputError(f"{where}: expected a table with a source and values")
        _check_numbers(table["values"], f"{where}.values")
    return Published(name, data)


def names() -> list[str]:
    return sorted(p.stem for p in directory().glob("*.yaml"))
