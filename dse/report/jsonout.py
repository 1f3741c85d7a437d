"""JSON output: numbers as plain floats/ints (numpy scalars and arrays converted)."""

from __future__ import annotations

import json
import math


def plain(obj):
    """Recursively convert to JSON-safe Python types (NaN/inf become null)."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    tolist = getattr(obj, "tolist", None)
    if tolist is not None:
        return plain(tolist())
    try:
        f = float(obj)
    except (TypeError, ValueError):
        return str(obj)
    if f.is_integer() and abs(f) < 2**53 and type(obj).__name__.startswith("int"):
        return int(f)
    return f if math.isfinite(f) else None


def dumps(obj, indent: int | None = 2) -> str:
    return json.dumps(plain(obj), indent=indent)
