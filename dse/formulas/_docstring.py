"""Read the sections of a formula's docstring (used by ``--explain``, the reference page and its tests).

The convention (every public function of :mod:`dse.formulas`)::

    One-line summary.

    Formula: <equation>            (continuation lines may follow)
    Source: <paper, section, equation or table>

    Assumptions, in prose.

    Args:
        name: meaning [unit]
    Returns:
        meaning [unit]

    (doctest examples with their real values)

A module docstring may hold a ``Symbols:`` block in the same form as ``Args:``: it
documents the parameters its functions share (a function's own ``Args:`` entry wins).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_HEADER = re.compile(r"^(Formula|Source):\s*(.*)$")
_BLOCK = re.compile(r"^(Args|Returns|Symbols):\s*(.*)$")
_ENTRY = re.compile(r"^(\*{0,2}\w+):\s*(.*)$")
_UNIT = re.compile(r"\[([^\[\]]+)\]\s*$")


def _formula_continues(line: str) -> bool:
    s = line.strip()
    if not s or s.startswith((">>>", "-")) or _HEADER.match(s) or _BLOCK.match(s):
        return False
    return not (line == line.lstrip() and s[:1].isupper())


def _source_continues(line: str) -> bool:
    s = line.strip()
    return bool(s) and not _HEADER.match(s) and not _BLOCK.match(s) and not s.startswith(">>>")


def parse(doc: str) -> dict[str, Any]:
    """Sections of a (dedented) docstring: summary, formula, source, args, returns, examples, prose.

    ``args`` maps a parameter name to ``(text, unit)``; ``returns`` is ``(text, unit)`` or None;
    ``unit`` is the text of the trailing ``[...]`` or None.

    >>> lines = ["Time.", "", "Formula: t = S / B", "Source: definition", "", "Args:", "    nbytes: S [bytes]",
    ...          "Returns:", "    time [s]"]
    >>> sec = parse(chr(10).join(lines))
    >>> sec["formula"], sec["source"], sec["args"], sec["returns"]
    ('t = S / B', 'definition', {'nbytes': ('S [bytes]', 'bytes')}, ('time [s]', 's'))
    """
    lines = (doc or "").splitlines()
    out: dict[str, Any] = {"summary": "", "formula": None, "source": None, "args": {}, "returns": None, "examples": [],
           "prose": []}
    para: list[str] = []
    for line in lines:
        if not line.strip():
            break
        para.append(line.strip())
    out["summary"] = " ".join(para)
    i = len(para)
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        m = _HEADER.match(s) if line == line.lstrip() else None
        b = _BLOCK.match(s) if line == line.lstrip() else None
        if m:
            key, text = m.group(1).lower(), m.group(2).strip()
            i += 1
            continues = _formula_continues if key == "formula" else _source_continues
            while i < len(lines) and continues(lines[i]):
                text += " " + lines[i].strip()
                i += 1
            out[key] = text
            continue
        if b:
            key = b.group(1).lower()
            entries = []
            if b.group(2).strip():
                entries.append(b.group(2).strip())
            i += 1
            while i < len(lines) and lines[i].startswith((" ", "\t")) and lines[i].strip():
                indent = len(lines[i]) - len(lines[i].lstrip())
                if key == "returns" or not entries or indent <= 4 and _ENTRY.match(lines[i].strip()):
                    entries.append(lines[i].strip())
                else:
                    entries[-1] += " " + lines[i].strip()
                i += 1
            if key == "returns":
                text = " ".join(entries)
                u = _UNIT.search(text)
                out["returns"] = (text, u.group(1) if u else None)
            else:
                table = out.setdefault(key, {})
                for e in entries:
                    em = _ENTRY.match(e)
                    if em:
                        u = _UNIT.search(em.group(2))
                        table[em.group(1).lstrip("*")] = (em.group(2), u.group(1) if u else None)
            continue
        if s.startswith(">>>"):
            example = [s]
            i += 1
            while i < len(lines) and lines[i].strip():
                example.append(lines[i].strip() if not lines[i].strip().startswith("...") else lines[i].strip())
                i += 1
            out["examples"].append("\n".join(example))
            continue
        if s:
            out["prose"].append(s)
        i += 1
    return out


def formula_line(fn: Callable[..., Any]) -> str:
    """The equation of a formula with its source in parentheses (what ``--explain`` prints)."""
    import inspect

    doc = inspect.getdoc(fn) or ""
    sec = parse(doc)
    if sec["formula"] is None:
        return doc.splitlines()[0] if doc else fn.__name__
    if sec["source"]:
        return f"{sec['formula']} ({sec['source']})"
    return str(sec["formula"])
