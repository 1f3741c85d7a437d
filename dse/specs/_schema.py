"""Build validated, frozen dataclasses from plain dicts (YAML, JSON, flags).

A spec class declares its fields with :func:`spec_field`, which records the unit
kind of the field (parsed with :mod:`dse.units`), the allowed choices or range,
and a one-line help text. :func:`build` walks a dict, rejects unknown fields
with the nearest valid name, parses units, checks ranges, recurses into nested
spec classes, and raises :class:`~dse.errors.InputError` naming the file and the
dotted field path. :func:`apply_overrides` implements ``--set a.b.c=value``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache

from dse import units
from dse.errors import InputError, suggest

_MISSING = dataclasses.MISSING
_Spec = typing.TypeVar("_Spec")


def spec_field(default=_MISSING, *, unit: str | None = None, choices=None, gt=None, ge=None,
               le=None, lt=None, help: str = "", factory=None):
    """A dataclass field with validation metadata (see module docstring)."""
    meta = {"unit": unit, "choices": choices, "gt": gt, "ge": ge, "le": le, "lt": lt, "help": help}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _join(where: str, name: str) -> str:
    """Location of a sub-field: ``file.yaml: a.b`` (file roots end with ': ')."""
    if not where:
        return name
    if where.endswith(": "):
        return where + name
    return f"{where}.{name}"


def _at(where: str) -> str:
    return where[:-2] if where.endswith(": ") else where


@cache
def _fields(cls):
    hints = typing.get_type_hints(cls)
    return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}


@cache
def _required(cls) -> frozenset[str]:
    """The fields of ``cls`` without a default."""
    return frozenset(n for n, (f, _) in _fields(cls).items() if f.default is _MISSING and f.default_factory is _MISSING)


def field_names(cls) -> list[str]:
    return list(_fields(cls))


@cache
def _unwrap_optional(tp: typing.Any) -> tuple[typing.Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


@cache
def _kind(tp: typing.Any) -> tuple[typing.Any, bool, str]:
    """How :func:`_convert` reads a field type: (the type without Optional, None allowed, its kind).

    The kind is ``spec`` (a nested spec class), ``dict``, ``sequence`` (list or tuple) or ``value``
    (bool, str, int, float). Worked out once per type: every plan of an estimate converts its fields.
    """
    tp, optional = _unwrap_optional(tp)
    if dataclasses.is_dataclass(tp):
        return tp, optional, "spec"
    origin = typing.get_origin(tp)
    return tp, optional, "dict" if origin is dict else "sequence" if origin in (list, tuple) else "value"


class _Field(typing.NamedTuple):
    """How :func:`arguments` reads one field of a spec class."""

    position: int
    read: tuple        # _convert_as's (type without Optional, None allowed, kind, spec_field metadata)


@cache
def _table(cls) -> dict[str, _Field]:
    """Each field of ``cls`` -> its :class:`_Field`, worked out once per class (every estimate converts a plan)."""
    return {name: _Field(i, (*_kind(tp), dict(f.metadata))) for i, (name, (f, tp)) in enumerate(_fields(cls).items())}


#: The largest integer field value: 2**53, the last integer a float64 holds exactly (the formulas multiply
#: counts in floating point, and numpy's int64 arrays of the vectorised search overflow not far above).
MAX_INT = 2 ** 53


def _convert(value, tp, meta, where):
    return _convert_as(value, *_kind(tp), meta, where)


def _convert_as(value, tp, optional, kind, meta, where):
    """:func:`_convert` with the field type read (:func:`_kind`)."""
    if optional and tp in (int, float) and isinstance(value, str) and value.strip().lower() == "auto":
        value = None                     # an optional number's "auto" is its derived default
    if value is None:
        if optional:
            return None
        raise InputError(f"{where}: a value is required")
    if kind == "value":
        return _value(value, tp, meta, where)
    if kind == "spec":
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a mapping of fields, got {value!r}")
        return build(tp, value, where)
    if kind == "dict":
        _, vt = typing.get_args(tp)
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a mapping, got {value!r}")
        return {str(k): _convert(v, vt, meta, _join(where, str(k))) for k, v in value.items()}
    (vt, *_) = typing.get_args(tp)      # a list or a tuple
    if not isinstance(value, (list, tuple)):
        value = [value]
    out = [_convert(v, vt, meta, f"{where}[{i}]") for i, v in enumerate(value)]
    return tuple(out) if typing.get_origin(tp) is tuple else out


def _value(value, tp, meta, where):
    """A bool, str, int or float field's value, converted and checked (``tp``: the type without Optional)."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
            return value.lower() in ("true", "yes", "on", "1")
        raise InputError(f"{where}: expected true or false, got {value!r}")
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise InputError(f"{where}: expected a string, got {value!r}")
        value = str(value)
        choices = meta.get("choices")
        if choices and value not in choices:
            raise InputError(f"{where}: {value!r} is not one of {', '.join(choices)}{suggest(value, choices)}")
        return value
    if tp is int:
        if type(value) is int and -MAX_INT <= value <= MAX_INT:    # the common case: an int already
            _check_range(value, meta, where)
            return value
        if isinstance(value, bool):
            raise InputError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str):
            try:
                num = units.parse(value, meta.get("unit") or "count", where)
            except InputError:
                raise InputError(f"{where}: expected an integer, got {value!r}") from None
            if not float(num).is_integer():
                raise InputError(f"{where}: expected an integer, got {value!r}")
            value = int(num)
        if not isinstance(value, int):
            raise InputError(f"{where}: expected an integer, got {value!r}")
        if not -MAX_INT <= value <= MAX_INT:
            raise InputError(f"{where}: {value:.3g} is too large (at most 2**53 = {MAX_INT:,}: beyond it an integer "
                             "is not exact in the formulas' float arithmetic)")
        _check_range(value, meta, where)
        return value
    if tp is float:
        if not meta.get("unit") and isinstance(value, str):   # a plain number (a factor, a fraction, a count)
            try:
                num = units.parse(value, "count", where)
            except InputError:
                raise InputError(f"{where}: expected a number, got {value!r}") from None
        else:
            num = units.parse(value, meta.get("unit") or "count", where)
        _check_range(num, meta, where)
        return num
    return value  # pragma: no cover - unused types


def _check_range(x, meta, where):
    if meta.get("gt") is not None and not x > meta["gt"]:
        raise InputError(f"{where}: must be greater than {meta['gt']}, got {_shown(x, meta)}")
    if meta.get("ge") is not None and not x >= meta["ge"]:
        raise InputError(f"{where}: must be at least {meta['ge']}, got {_shown(x, meta)}")
    if meta.get("lt") is not None and not x < meta["lt"]:
        raise InputError(f"{where}: must be less than {meta['lt']}, got {_shown(x, meta)}")
    if meta.get("le") is not None and not x <= meta["le"]:
        raise InputError(f"{where}: must be at most {meta['le']}, got {_shown(x, meta)}")


def _shown(x, meta) -> str:
    """A value out of range, as the error shows it (with its unit)."""
    unit = meta.get("unit")
    return units.fmt(x, unit) if unit and unit not in ("count", "fraction") else repr(x)


def build(cls: type[_Spec], data: dict, where: str) -> _Spec:
    """Construct ``cls`` from ``data``; ``where`` prefixes every error (file or path)."""
    obj = cls(**arguments(cls, data, where))
    check = getattr(obj, "_check", None)
    if check is not None:
        check(_at(where))
    return obj


def arguments(cls: type, data: dict, where: str) -> dict[str, typing.Any]:
    """The checked keyword arguments :func:`build` constructs ``cls`` with: the fields ``data`` sets, converted.

    Raises the same one-line :class:`~dse.errors.InputError` as :func:`build` for an unknown, missing or bad field.
    """
    if not isinstance(data, dict):
        raise InputError(f"{_at(where)}: expected a mapping of fields, got {type(data).__name__}")
    fields = _table(cls)
    if _required(cls) <= data.keys():
        try:   # the common case, every field known and valid: converted in the order given
            kwargs = {}
            for name, value in data.items():
                tp, optional, kind, meta = fields[name].read
                kwargs[name] = _convert_as(value, tp, optional, kind, meta, _join(where, name))
            return kwargs
        except Exception:   # any problem: found again below, in field order, so that the first one is reported
            pass
    unknown = [k for k in data if k not in fields]
    if unknown:
        k = unknown[0]
        raise InputError(f"{_join(where, str(k))}: unknown field '{k}'{suggest(k, fields)}; "
                         f"valid fields: {', '.join(fields)}")
    kwargs = {}
    # the fields set and the required ones, in field order: the first problem is reported
    for name in sorted({*data, *_required(cls)}, key=lambda n: fields[n].position):
        if name not in data:
            raise InputError(f"{_at(where)}: missing required field '{name}'")
        kwargs[name] = _convert_as(data[name], *fields[name].read, _join(where, name))
    return kwargs


def to_dict(obj) -> dict:
    """A spec as plain data (JSON-ready)."""
    return dataclasses.asdict(obj)


def parse_assignment(text: str, flag: str = "--set") -> tuple[list[str], object]:
    """Split ``a.b.c=value`` into (["a","b","c"], value) with YAML-typed value."""
    import yaml

    if "=" not in text:
        raise InputError(f"{flag} {text!r}: expected dotted.path=value, e.g. model.hidden=4096")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise InputError(f"{flag} {text!r}: empty field path")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return path, value


def set_path(data: dict, path: list[str], value, cls, where: str) -> None:
    """Set ``data[path...] = value`` after checking each step names a real field of ``cls``."""
    node = data
    tp = cls
    for i, key in enumerate(path):
        tp, _ = _unwrap_optional(tp)
        here = where + "." + ".".join(path[: i + 1])
        if dataclasses.is_dataclass(tp):
            fields = _fields(tp)
            if key not in fields:
                raise InputError(f"{here}: unknown field '{key}'{suggest(key, fields)}; "
                                 f"valid fields: {', '.join(fields)}")
            sub_tp = fields[key][1]
        elif typing.get_origin(tp) is dict:
            sub_tp = typing.get_args(tp)[1]
        else:
            raise InputError(f"{here}: '{path[i - 1]}' has no sub-fields")
        if i == len(path) - 1:
            node[key] = value
        else:
            nxt = node.get(key)
            if not isinstance(nxt, dict):
                nxt = {} if nxt is None else nxt
                if not isinstance(nxt, dict):
                    raise InputError(f"{here}: '{key}' has no sub-fields")
                node[key] = nxt
            node = nxt
            tp = sub_tp
