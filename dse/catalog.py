"""Find and load the shipped catalog: ``models/`` and ``hwspecs/``.

From a source checkout the catalog is the repository's top-level ``models/`` and
``hwspecs/``; from an installed wheel it is ``dse/_catalog/`` (the wheel maps the
same directories there). Spec files are YAML; a model may also be a Hugging Face
``config.json`` (see :mod:`dse.specs.hf`).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from functools import lru_cache
from pathlib import Path

from dse.errors import InputError, suggest
from dse.specs import _schema
from dse.specs.hardware import (
    CHIPLET_PACKAGE,
    GPU_SYSTEM,
    HARDWARE_KINDS,
    CXLMemorySpec,
    GPUSpec,
    HostSpec,
    LinkSpec,
    StorageSpec,
    SystemSpec,
)
from dse.specs.model import ModelSpec

# Component spec type -> catalog sub-directory of hwspecs/ where its files live.
COMPONENT_DIRS = {GPUSpec: "gpus", HostSpec: "hosts", LinkSpec: "links", StorageSpec: "storage",
                  CXLMemorySpec: "cxl", SystemSpec: "systems"}


@lru_cache(maxsize=1)
def root() -> Path:
    """Directory holding ``models/`` and ``hwspecs/``."""
    here = Path(__file__).resolve().parent
    packaged = here / "_catalog"
    if (packaged / "models").is_dir():
        return packaged
    return here.parent


def models_dir() -> Path:
    return root() / "models"


def hw_dir(kind: str = "systems") -> Path:
    return root() / "hwspecs" / kind


def data_dir() -> Path:
    return root() / "data"


def names(directory: Path) -> list[str]:
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.yaml"))


def read_text(path: Path, what: str = "spec") -> str:
    """A spec file's text, with one-line errors for a missing file, a directory and bytes that are not UTF-8."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a {what} file") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a text file (byte {exc.start} is not UTF-8), expected a {what} file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def read_yaml(path: Path, what: str = "spec") -> dict:
    """Read a YAML mapping with one-line errors for missing files and bad syntax."""
    import yaml

    text = read_text(path, what)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise InputError(f"{path}: YAML syntax error{at}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of fields at the top level, got {type(data).__name__}")
    return data


def _catalog_file(directory: Path, name: str, what: str) -> Path:
    path = directory / f"{name}.yaml"
    if path.is_file():
        return path
    known = names(directory)
    hint = suggest(name, known)
    listing = "" if hint else f"; known: {', '.join(known[:20])}" + (" ..." if len(known) > 20 else "")
    raise InputError(f"unknown {what} '{name}'{hint}{listing} (see `dse list`)")


def _looks_like_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml", ".json")) or "/" in ref or "\\" in ref


# ------------------------------------------------------------------ models


def model_data(ref: str) -> tuple[dict, str]:
    """Raw model fields and the place they came from. ``ref`` resolves, first match wins, to: a catalog name
    (``models/<ref>.yaml``); a file or a directory holding a ``config.json``; a shipped Hugging Face config
    (``models/hf/<org>/<name>/config.json``) by its repository id ``org/name`` or its bare ``name``, in any case
    (:func:`dse.hf_cache.shipped_config`); a repository id in the local Hugging Face cache (:mod:`dse.hf_cache`)."""
    if not _looks_like_path(ref) and (models_dir() / f"{ref}.yaml").is_file():
        return _catalog_yaml(ref)
    from dse import hf_cache

    path = Path(ref)
    if _looks_like_path(ref) and path.exists():
        if path.is_dir():
            path, name = hf_cache.config_path(ref)
            return _hf_json(path, name), str(path)
        if ref.endswith(".json"):
            return _hf_json(path, None), str(path)
        data = read_yaml(path, "model")
        data.setdefault("name", path.stem)
        return data, str(path)
    shipped = hf_cache.shipped_config(ref)
    if shipped is not None:
        path, name = shipped
        where = path.relative_to(root()).as_posix() if path.is_relative_to(root()) else str(path)
        return _hf_json(path, name, where), where
    if not _looks_like_path(ref):
        known = names(models_dir())
        hint = suggest(ref, sorted(set(known + hf_cache.shipped_names())))
        listing = "" if hint else f"; known: {', '.join(known[:20])}" + (" ..." if len(known) > 20 else "")
        raise InputError(f"unknown model '{ref}'{hint}{listing} (see `dse list`)")
    if ref.endswith((".json", ".yaml", ".yml")):
        raise InputError(f"{path}: no such file")
    path, name = hf_cache.config_path(ref)
    return _hf_json(path, name), str(path)


def _catalog_yaml(ref: str) -> tuple[dict, str]:
    data = read_yaml(models_dir() / f"{ref}.yaml", "model")
    data.setdefault("name", ref)
    return data, f"models/{ref}.yaml"


def _hf_json(path: Path, name: str | None, where: str | None = None) -> dict:
    """Model fields of a Hugging Face config.json (:func:`dse.specs.hf.from_hf_config`); ``name``: the model's name
    when the file does not give one (default: its directory's name for a config.json, else the file's stem)."""
    from dse.specs.hf import from_hf_config

    text = read_text(path, "config.json")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    name = name or (path.parent.name if path.stem == "config" else path.stem)
    return from_hf_config(cfg, where or str(path), default_name=name)


def _build(cls, data: dict, where: str, head: str, overrides):
    """:func:`_schema.build`, with an error in a field that an override set named by its ``--set`` flag."""
    try:
        return _schema.build(cls, data, where)
    except InputError as exc:
        msg = str(exc)
        for path, _ in overrides:
            key = ".".join(path)
            for prefix in (f"{where}{key}:", f"{where}: {key}:", f"{where}{key} ", f"{where}: {key} "):
                if msg.startswith(prefix):
                    raise InputError(f"--set {head}.{key}{msg[len(prefix) - 1:]}") from None
        if overrides and msg.startswith(where):   # a check across fields that an override may have broken
            given = ", ".join(f"--set {head}.{'.'.join(path)}={value}" for path, value in overrides)
            head_of_msg = where.rstrip(": ")
            raise InputError(f"{head_of_msg} (with {given}){msg[len(head_of_msg):]}") from None
        raise


# Specs of catalog names loaded without overrides, by (kind, name): the shipped files do not change while a
# process runs, and the specs are frozen dataclasses, so a script calling dse.estimate() in a loop reads and
# validates each file once. Files given by path are read every time (the user may be editing them).
_LOADED: dict[tuple[str, str], object] = {}


def _cached(kind: str, ref, overrides, load):
    if not overrides and type(ref) is str:   # a catalog name loaded before (file paths are never kept)
        hit = _LOADED.get((kind, ref))
        if hit is not None:
            return hit
    if overrides or not isinstance(ref, str) or _looks_like_path(ref):
        return load()
    key = (kind, ref)
    if key not in _LOADED:
        _LOADED[key] = load()
    return _LOADED[key]


def load_model(ref: str | ModelSpec, overrides: list[tuple[list[str], object]] = ()) -> ModelSpec:
    """A resolved :class:`ModelSpec` from a name, a YAML file or a HF config.json."""
    return _cached("model", ref, overrides, lambda: _load_model(ref, overrides))


def _load_model(ref, overrides) -> ModelSpec:
    if isinstance(ref, ModelSpec):
        if not overrides:
            return ref.resolved()
        data, where = dataclasses.asdict(ref), ref.name
    else:
        data, where = model_data(ref)
    for path, value in overrides:
        _schema.set_path(data, path, value, ModelSpec, "--set model")
    return _build(ModelSpec, data, where + ": ", "model", overrides).resolved()


# ---------------------------------------------------------------- hardware


def _resolve_refs(cls, data: dict, where: str) -> dict:
    """Replace component names (strings) by the component's fields, recursively (``where``: ``file: `` or
    ``file: a.b``, what an unknown component's error names)."""
    out = dict(data)
    for name, (_f, tp) in _schema._fields(cls).items():
        if name not in out:
            continue
        tp, _ = _schema._unwrap_optional(tp)
        if not dataclasses.is_dataclass(tp):
            continue
        value = out[name]
        if isinstance(value, str) and tp in COMPONENT_DIRS:
            try:
                path = _catalog_file(hw_dir(COMPONENT_DIRS[tp]), value, f"{COMPONENT_DIRS[tp].rstrip('s')} component")
            except InputError as exc:    # name the field that names it
                raise InputError(f"{_schema._join(where, name)}: {exc}") from None
            comp = read_yaml(path, COMPONENT_DIRS[tp])
            comp.setdefault("name", value)
            value = comp
        if isinstance(value, dict):
            out[name] = _resolve_refs(tp, value, _schema._join(where, name))
    return out


# The directory of hwspecs/ that holds the catalog files of each hardware kind.
KIND_DIRS = {GPU_SYSTEM: "systems", CHIPLET_PACKAGE: "chiplets"}


def hardware_class(kind: str):
    """The spec class of a hardware kind (``dse.specs.chiplet`` is imported only for chiplet packages)."""
    if kind == CHIPLET_PACKAGE:
        from dse.specs.chiplet import ChipletPackageSpec

        return ChipletPackageSpec
    return SystemSpec


def hardware_kind(data: dict, where: str) -> str:
    """The ``kind:`` of a hardware file's fields, checked; inferred (deprecated) when the file has none.

    A file without ``kind:`` is a chiplet package when it has ``die`` and ``nop``, else a GPU system;
    that guess warns (:class:`DeprecationWarning`) naming the file and the line to add.
    """
    kind = data.get("kind")
    if kind is None:
        kind = CHIPLET_PACKAGE if "die" in data and "nop" in data else GPU_SYSTEM
        warnings.warn(f"{where}: hardware file without a 'kind:' field (deprecated; read as {kind}); "
                      f"add 'kind: {kind}'", DeprecationWarning, stacklevel=2)
        return kind
    if kind not in HARDWARE_KINDS:
        raise InputError(f"{where}: kind: {kind!r} is not a hardware kind; allowed: {', '.join(HARDWARE_KINDS)}"
                         f"{suggest(str(kind), HARDWARE_KINDS)}")
    return kind


def hardware_data(ref: str) -> tuple[dict, str, str]:
    """Raw fields, place and kind of a hardware file: a catalog name (systems, then chiplets) or a path."""
    if _looks_like_path(ref):
        path = Path(ref)
        data = read_yaml(path, "hardware")
        data.setdefault("name", path.stem)
        where = str(path)
    else:
        for sub in KIND_DIRS.values():
            path = hw_dir(sub) / f"{ref}.yaml"
            if path.is_file():
                break
        else:
            known = [n for sub in KIND_DIRS.values() for n in names(hw_dir(sub))]
            hint = suggest(ref, known)
            listing = "" if hint else f"; known: {', '.join(known[:20])}" + (" ..." if len(known) > 20 else "")
            raise InputError(f"unknown hardware system or chiplet package '{ref}'{hint}{listing} "
                             "(see `dse list hardware`)")
        data = read_yaml(path, "hardware")
        data.setdefault("name", ref)
        where = f"hwspecs/{sub}/{ref}.yaml"
    kind = hardware_kind(data, where)
    data["kind"] = kind
    return data, where, kind


def system_data(ref: str) -> tuple[dict, str]:
    """Raw fields (components resolved) and place of a GPU-system file."""
    data, where, _ = hardware_data(ref)
    return _resolve_refs(SystemSpec, data, where + ": "), where


def kind_of(ref) -> str:
    """The hardware kind of a spec, a catalog name or a file, without building the spec."""
    if not isinstance(ref, str):
        return ref.kind
    if not _looks_like_path(ref) and (hw_dir(KIND_DIRS[CHIPLET_PACKAGE]) / f"{ref}.yaml").is_file():
        return CHIPLET_PACKAGE
    if not _looks_like_path(ref) or ref.endswith(".json") or not Path(ref).is_file():
        return GPU_SYSTEM          # the loader reports a bad name or file
    return hardware_data(ref)[2]


def load_hardware(ref, overrides: list[tuple[list[str], object]] = (), kind: str | None = None):
    """A validated hardware spec — :class:`SystemSpec` or ``ChipletPackageSpec``, as the file's ``kind:`` says —
    from a catalog name, a YAML file or a spec; ``overrides`` are ``--set hardware.*`` assignments.

    ``kind``: the kind the caller needs; another kind is an input error.
    """
    spec = _cached("hardware", ref, overrides, lambda: _load_hardware(ref, overrides))
    if kind is not None and spec.kind != kind:
        raise InputError(f"hardware '{spec.name}' is a {spec.kind}, not a {kind} (see `dse list hardware`)")
    return spec


def _load_hardware(ref, overrides):
    if isinstance(ref, str):
        data, where, kind = hardware_data(ref)
    else:
        if not overrides:
            return ref
        data, where, kind = dataclasses.asdict(ref), ref.name, ref.kind
    cls = hardware_class(kind)
    data = _resolve_refs(cls, data, where + ": ")
    for path, value in overrides:
        _schema.set_path(data, path, value, cls, "--set hardware")
        data = _resolve_refs(cls, data, where + ": ")  # a component named by one override can take sub-field overrides
        if path and path[-1] == "dispatch_scale" and not any(p[-1:] == ["dispatch_basis"] for p, _ in overrides):
            _parent(data, path).pop("dispatch_basis", None)   # a stated launch speed: no longer the file's basis
    return _build(cls, data, where + ": ", "hardware", overrides)


def _parent(data: dict, path: list[str]) -> dict:
    """The mapping that holds ``path``'s last field ({} where a step is not a mapping)."""
    for key in path[:-1]:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def load_system(ref: str | SystemSpec, overrides: list[tuple[list[str], object]] = ()) -> SystemSpec:
    """A validated GPU :class:`SystemSpec` (:func:`load_hardware` of kind ``gpu-system``)."""
    return load_hardware(ref, overrides, kind=GPU_SYSTEM)


def load_component(kind_dir: str, name: str) -> dict:
    path = _catalog_file(hw_dir(kind_dir), name, kind_dir.rstrip("s"))
    return read_yaml(path, kind_dir)


def find_hardware(name: str):
    """Any hardware item by name: a system or chiplet package first, then components. Returns (kind, spec)."""
    if _looks_like_path(name) or any((hw_dir(sub) / f"{name}.yaml").is_file() for sub in KIND_DIRS.values()):
        spec = load_hardware(name)
        return spec.kind, spec
    for cls, sub in COMPONENT_DIRS.items():
        if cls is SystemSpec:
            continue
        path = hw_dir(sub) / f"{name}.yaml"
        if path.is_file():
            data = read_yaml(path, sub)
            data.setdefault("name", name)
            spec = _schema.build(cls, _resolve_refs(cls, data, f"{path}: "), f"hwspecs/{sub}/{name}.yaml: ")
            return sub.rstrip("s"), spec
    everything = [n for sub in (*COMPONENT_DIRS.values(), "chiplets") for n in names(hw_dir(sub))]
    raise InputError(f"unknown hardware '{name}'{suggest(name, everything)} (see `dse list hardware`)")


# ---------------------------------------------------------------- chiplet packages (hwspecs/chiplets/)


def is_chiplet_package(ref) -> bool:
    """True for a chiplet-package spec, a name in ``hwspecs/chiplets/``, or a file of ``kind: chiplet-package``."""
    return kind_of(ref) == CHIPLET_PACKAGE


def load_chiplet_package(ref, overrides: list[tuple[list[str], object]] = ()):
    """A validated :class:`~dse.specs.chiplet.ChipletPackageSpec` (:func:`load_hardware` of kind
    ``chiplet-package``)."""
    return load_hardware(ref, overrides, kind=CHIPLET_PACKAGE)
