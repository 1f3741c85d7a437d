"""The stability promise (README "Stability"): no public name and no JSON key disappears unannounced.

tests/public_api.txt lists every public name (``dse.estimate``, the ``__all__`` of
``dse.formulas`` and of each of its modules) and every key of the estimate's JSON in the
scenarios of scripts/gen_formula_docs.py. Adding names is free; this test fails when a
listed one is gone. To add the new names to the list after a deliberate change:

    python tests/test_public_api.py --update

A removal must first go through a deprecation (README "Stability"); only then may its
line be deleted from the list by hand.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "public_api.txt"


def python_names() -> set[str]:
    import dse
    import dse.formulas
    from dse.estimate import estimate  # dse.estimate(...) calls this function

    names = {"dse.estimate", "dse.formulas"} | parameters("dse.estimate", estimate)
    assert callable(dse.estimate)
    for n in dse.formulas.__all__:
        names.add(f"dse.formulas.{n}")
        obj = getattr(dse.formulas, n)
        if inspect.ismodule(obj):
            for m in obj.__all__:
                names.add(f"dse.formulas.{n}.{m}")
                names |= parameters(f"dse.formulas.{n}.{m}", getattr(obj, m))
    return names


def parameters(name: str, obj) -> set[str]:
    """'param <function> <name>' for each named parameter of a public function (the promise covers them):
    adding a parameter is free, renaming or removing one is caught."""
    if not callable(obj) or inspect.isclass(obj):
        return set()
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return set()
    return {f"param {name} {p.name}" for p in sig.parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _keys(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _keys(v, f"{prefix}{k}.")
    else:
        yield prefix[:-1]


def json_keys() -> set[str]:
    import dse

    spec = importlib.util.spec_from_file_location("gen_formula_docs", ROOT / "scripts" / "gen_formula_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = set()
    for name, _, model, hw, fields in gen.SCENARIOS:
        out |= {f"json {name} {k}" for k in _keys(dse.estimate(model, hw, **fields))}
    return out


def current() -> set[str]:
    return python_names() | json_keys()


def committed() -> set[str]:
    return {line.strip() for line in LIST.read_text().splitlines() if line.strip() and not line.startswith("#")}


def test_no_public_name_disappears():
    missing = sorted(committed() - current())
    assert not missing, ("public names removed without a deprecation (README 'Stability'; restore them, or deprecate "
                         "first and then delete their lines from tests/public_api.txt):\n" + "\n".join(missing))


def test_the_list_covers_the_api():
    listed = committed()
    for name in ("dse.estimate", "dse.formulas.transformer.parameter_count", "dse.formulas.offload.required_bandwidth",
                 "json gpu time.iteration", "json chiplet-2d chiplet.compute_to_communication",
                 "json smart-infinity time.phase_update", "json ssdtrain activation_offload.layers_offloaded"):
        assert name in listed, name


def test_a_renamed_parameter_is_caught(monkeypatch):
    import dse.formulas.parallelism as par

    def allreduce_time(nbytes, ranks, bandwidth, latency=0.0):   # 'n' renamed
        return 0.0

    monkeypatch.setattr(par, "allreduce_time", allreduce_time)
    assert "param dse.formulas.parallelism.allreduce_time n" in committed() - python_names()


def test_a_removed_name_is_caught(monkeypatch):
    import dse.formulas.cost

    monkeypatch.setattr(dse.formulas.cost, "__all__", [n for n in dse.formulas.cost.__all__ if n != "capital_cost"])
    assert "dse.formulas.cost.capital_cost" in committed() - python_names()


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_public_api.py --update   (adds the current public names to the list)")
    names = committed() | current() if LIST.exists() else current()
    header = ("# Public names of dse (README 'Stability'); tests/test_public_api.py fails when one disappears.\n"
              "# 'param <function> <name>': a named parameter of a public function.\n"
              "# 'json <scenario> <key>': a key of dse.estimate's result (= dse estimate --json) in that scenario of\n"
              "# scripts/gen_formula_docs.py. Update with: python tests/test_public_api.py --update\n")
    LIST.write_text(header + "\n".join(sorted(names)) + "\n")
    print(f"wrote {LIST} ({len(names)} names)")
