"""Readable quantities at the boundary, SI base units inside.

Spec files and flags accept strings such as ``"80 GiB"``, ``"25 GB/s"``,
``"800 Gb/s"``, ``"989 TFLOP/s"``, ``"0.3 pJ/bit"``; :func:`parse` turns them into
floats in SI base units (bytes, bytes/s, FLOP, FLOP/s, seconds, joules, watts,
joules per byte, USD). Decimal and binary prefixes are exact: GB = 1e9 B,
GiB = 2**30 B. A bare number is taken to be in base units already.

Printing goes through :func:`fmt` so every number in every report looks the same.
"""

from __future__ import annotations

import math
import re

from dse.errors import InputError

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}
_SMALL = {"": 1.0, "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9, "p": 1e-12, "f": 1e-15, "k": 1e3, "M": 1e6}


def _table() -> dict[str, dict[str, float]]:
    """Unit symbol -> multiplier to the base unit, per kind."""
    t: dict[str, dict[str, float]] = {k: {} for k in (
        "bytes", "bytes/s", "flop", "flop/s", "s", "J", "W", "J/B", "J/flop", "Hz",
        "USD", "mm2", "1/cm2", "fraction", "count", "USD/mm2")}
    for p, m in {**_DEC, **_BIN}.items():
        t["bytes"][p + "B"] = m
        t["bytes/s"][p + "B/s"] = m
        t["bytes/s"][p + "Bps"] = m
        t["bytes/s"][p + "b/s"] = m / 8
        t["bytes/s"][p + "bps"] = m / 8
    for p, m in _DEC.items():
        for sym in ("FLOP", "FLOPs", "flop"):
            t["flop"][p + sym] = m
        for sym in ("FLOP/s", "FLOPS", "flop/s", "OP/s", "OPS"):
            t["flop/s"][p + sym] = m
        t["Hz"][p + "Hz"] = m
    for p, m in _SMALL.items():
        t["s"][p + "s"] = m
        t["J"][p + "J"] = m
        t["W"][p + "W"] = m
        t["J/B"][p + "J/B"] = m
        t["J/B"][p + "J/byte"] = m
        t["J/B"][p + "J/bit"] = m * 8
        t["J/flop"][p + "J/FLOP"] = m
        t["J/flop"][p + "J/flop"] = m
        t["J/flop"][p + "J/MAC"] = m / 2
    t["s"].update({"min": 60.0, "h": 3600.0, "hours": 3600.0, "days": 86400.0,
                   "years": 365.25 * 86400.0, "y": 365.25 * 86400.0})
    t["USD"].update({"USD": 1.0, "$": 1.0, "kUSD": 1e3})
    t["USD/mm2"].update({"USD/mm2": 1.0, "$/mm2": 1.0})
    t["mm2"].update({"mm2": 1.0, "mm^2": 1.0, "cm2": 100.0, "cm^2": 100.0})
    t["1/cm2"].update({"/cm2": 1.0, "/cm^2": 1.0, "1/cm2": 1.0, "1/cm^2": 1.0})
    t["fraction"].update({"%": 0.01})
    return t


UNITS = _table()
_EXAMPLE = {
    "bytes": '"80 GiB"', "bytes/s": '"25 GB/s" or "800 Gb/s"', "flop": '"1.2 PFLOP"',
    "flop/s": '"312 TFLOP/s"', "s": '"5 us"', "J": '"2 pJ"', "W": '"400 W"',
    "J/B": '"0.3 pJ/bit"', "J/flop": '"0.5 pJ/FLOP"', "Hz": '"1.4 GHz"', "USD": '"$2400"',
    "mm2": '"100 mm2"', "1/cm2": '"0.09 /cm2"', "fraction": '"0.8" or "80%"',
    "count": '"8"', "USD/mm2": '"0.005 $/mm2"',
}
_NUM = re.compile(r"^\s*(\$)?\s*([-+]?(?:\d[\d_,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def _finite(x: float, value, kind: str, where: str) -> float:
    """``x``, or an error where it is NaN or infinite (``1e400``, YAML's ``.inf``): no quantity is."""
    if not math.isfinite(x):
        raise InputError(f"{where}: {value!r} is not a finite {kind} quantity; write it like "
                         f"{_EXAMPLE.get(kind, 'a number')}")
    return x


def parse(value, kind: str, where: str = "value") -> float:
    """Parse a readable quantity of ``kind`` into SI base units.

    >>> parse("80 GiB", "bytes")
    85899345920.0
    >>> parse("800 Gb/s", "bytes/s")
    100000000000.0
    >>> parse("0.3 pJ/bit", "J/B")
    2.4e-12
    """
    if isinstance(value, bool):
        raise InputError(f"{where}: expected a {kind} quantity such as {_EXAMPLE.get(kind, 'a number')}, got {value!r}")
    if isinstance(value, (int, float)):
        return _finite(float(value), value, kind, where)
    if not isinstance(value, str):
        raise InputError(f"{where}: expected a {kind} quantity such as {_EXAMPLE.get(kind, 'a number')}, got {value!r}")
    m = _NUM.match(value)
    if not m:
        raise InputError(f"{where}: cannot parse {value!r} as {kind}; write it like {_EXAMPLE.get(kind, 'a number')}")
    dollar, num, unit = m.groups()
    number = _finite(float(num.replace(",", "").replace("_", "")), value, kind, where)
    unit = unit.replace(" ", "")
    if dollar:
        if kind not in ("USD",) or unit:
            raise InputError(f"{where}: cannot parse {value!r} as {kind}; "
                             f"write it like {_EXAMPLE.get(kind, 'a number')}")
        return number
    if not unit:
        return number
    table = UNITS.get(kind, {})
    if unit in table:
        return _finite(number * table[unit], value, kind, where)
    if unit.endswith("/s") and kind == "flop/s" and unit[:-2] in UNITS["flop/s"]:
        return _finite(number * UNITS["flop/s"][unit[:-2]], value, kind, where)
    allowed = ", ".join(sorted({u for u in table if len(u) <= 7})[:12])
    raise InputError(f"{where}: unknown unit {unit!r} for {kind} in {value!r}; allowed units include {allowed}")


# --------------------------------------------------------------------------- printing

_BIN_STEPS = [(2.0**50, "PiB"), (2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB")]
_DEC_STEPS = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def _num(x: float) -> str:
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _scaled(x: float, unit: str) -> str:
    for m, p in _DEC_STEPS:
        if abs(x) >= m:
            return f"{_num(x / m)} {p}{unit}"
    return f"{_num(x)} {unit}"


def fmt(x, kind: str) -> str:
    """Format an SI value for people: one formatter for every report.

    >>> fmt(85899345920.0, "bytes")
    '80.0 GiB'
    >>> fmt(2.5e10, "bytes/s")
    '25.0 GB/s'
    >>> fmt(0.0123, "s")
    '12.3 ms'
    """
    if x is None:
        return "-"
    x = float(x)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf"
    if kind == "bytes":
        for m, u in _BIN_STEPS:
            if abs(x) >= m:
                return f"{_num(x / m)} {u}"
        return f"{x:.0f} B"
    if kind == "bytes/s":
        return _scaled(x, "B/s")
    if kind == "flop":
        return _scaled(x, "FLOP")
    if kind == "flop/s":
        return _scaled(x, "FLOP/s")
    if kind == "count":
        return _scaled(x, "").strip()
    if kind == "s":
        a = abs(x)
        if a == 0:
            return "0 s"
        if a >= 3600 * 24 * 365.25:
            return f"{_num(x / (3600 * 24 * 365.25))} years"
        if a >= 86400:
            return f"{_num(x / 86400)} days"
        if a >= 3600:
            return f"{_num(x / 3600)} h"
        if a >= 1:
            return f"{_num(x)} s"
        if a >= 1e-3:
            return f"{_num(x * 1e3)} ms"
        if a >= 1e-6:
            return f"{_num(x * 1e6)} µs"
        return f"{_num(x * 1e9)} ns"
    if kind == "J":
        for m, p in [(1e6, "MJ"), (1e3, "kJ"), (1, "J"), (1e-3, "mJ"), (1e-6, "µJ"), (1e-9, "nJ")]:
            if abs(x) >= m:
                return f"{_num(x / m)} {p}"
        return f"{_num(x * 1e12)} pJ"
    if kind == "W":
        return _scaled(x, "W")
    if kind == "USD":
        return f"${x:,.0f}" if abs(x) >= 100 else f"${x:,.2f}"
    if kind == "fraction":
        return f"{100 * x:.1f}%"
    if kind == "J/B":
        return f"{_num(x / 8 * 1e12)} pJ/bit"
    return f"{x:.4g}"
