"""The public formula API is complete: __all__, typed signatures, units, equation, source, runnable examples."""

from __future__ import annotations

import importlib
import inspect

import pytest

import dse.formulas
from dse.formulas._docstring import parse
from dse.formulas._modules import defines, home_modules

MODULES = [m for m in dse.formulas.__all__ if inspect.ismodule(getattr(dse.formulas, m))]
HOME_MODULES = [m for m in MODULES if m != "energy"]   # energy only re-exports


def _module(name):
    return importlib.import_module(f"dse.formulas.{name}")


def _functions(name):
    mod = _module(name)
    return [(n, getattr(mod, n)) for n in mod.__all__ if inspect.isfunction(getattr(mod, n))
            and defines(mod, getattr(mod, n))]


def test_every_concern_has_a_module():
    for name in ("transformer", "memory", "parallelism", "compute", "cost", "offload", "near_storage",
                 "activation_offload", "chiplet", "package_cost", "energy"):
        assert name in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_all_lists_exactly_the_public_names(name):
    mod = _module(name)
    assert isinstance(mod.__all__, list) and len(set(mod.__all__)) == len(mod.__all__)
    for n in mod.__all__:
        assert hasattr(mod, n), f"{name}.__all__ names {n}, which does not exist"
        assert not n.startswith("_")
    defined = [n for home in home_modules(mod) for n, v in vars(home).items()   # a package: its submodules too
               if inspect.isfunction(v) and v.__module__ == home.__name__ and not n.startswith("_")]
    missing = sorted(set(defined) - set(mod.__all__))
    assert not missing, f"public functions of {name} missing from __all__ (prefix private ones with _): {missing}"


def test_energy_only_reexports():
    for n in dse.formulas.energy.__all__:
        obj = getattr(dse.formulas.energy, n)
        if callable(obj):
            assert obj.__module__ != "dse.formulas.energy" and obj.__module__.startswith("dse.formulas.")


@pytest.mark.parametrize("name", HOME_MODULES)
def test_every_public_function_is_documented(name):
    mod = _module(name)
    symbols = parse(inspect.getdoc(mod) or "").get("symbols", {})
    problems = []
    for fname, fn in _functions(name):
        where = f"{name}.{fname}"
        sec = parse(inspect.getdoc(fn) or "")
        if not sec["summary"]:
            problems.append(f"{where}: no summary line")
        if not sec["formula"]:
            problems.append(f"{where}: no 'Formula:' line")
        if not sec["source"]:
            problems.append(f"{where}: no 'Source:' line")
        if not sec["returns"] or not sec["returns"][1]:
            problems.append(f"{where}: no 'Returns:' with a [unit]")
        if not sec["examples"]:
            problems.append(f"{where}: no doctest example")
        sig = inspect.signature(fn)
        if sig.return_annotation is inspect.Signature.empty:
            problems.append(f"{where}: no return annotation")
        for p in sig.parameters.values():
            if p.kind is not p.VAR_KEYWORD and p.annotation is inspect.Parameter.empty:
                problems.append(f"{where}: parameter {p.name} has no type annotation")
            doc = sec["args"].get(p.name) or symbols.get(p.name)
            if doc is None:
                problems.append(f"{where}: parameter {p.name} is documented neither in Args: "
                                "nor in the module's Symbols:")
            elif not doc[1]:
                problems.append(f"{where}: parameter {p.name} has no [unit]")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", HOME_MODULES)
def test_every_module_shows_an_array_example(name):
    examples = [e for _, fn in _functions(name) for e in parse(inspect.getdoc(fn) or "")["examples"]]
    assert any("np." in e for e in examples), f"{name}: no doctest example with numpy arrays"


def test_explain_prints_equation_and_source():
    from dse.estimate.trace import formula_line

    line = formula_line(dse.formulas.parallelism.allreduce_time)
    assert line.startswith("2 (n-1)/n S / B") and "Patarasuk & Yuan 2009" in line


@pytest.mark.parametrize("name", MODULES)
def test_a_package_reexports_every_name_of_its_submodules(name):
    """A concern split into submodules (activation_offload/) keeps one import path for each of its names."""
    mod = _module(name)
    for sub in home_modules(mod)[1:]:
        assert isinstance(sub.__all__, list), sub.__name__
        for n in sub.__all__:
            assert n in mod.__all__, f"{sub.__name__}.{n} is not in {mod.__name__}.__all__"
            assert getattr(mod, n) is getattr(sub, n)


@pytest.mark.parametrize("name", ["activation_offload", "chiplet", "offload"])
def test_a_split_concern_is_a_package_of_submodules(name):
    assert len(home_modules(_module(name))) > 1
