"""docs/architecture.md's "How to add a technique" runs as written: one module, one option, one registry line.

The three code blocks of that section are taken from the page itself: the technique module (executed as
a module), the ``Plan`` field (added to a subclass of ``Plan``, as the line would be in
dse/specs/plan.py) and the registry line (evaluated against ``dse.estimate``'s names). The test checks
that the technique changes the estimate as the page says, and that it changes nothing else: without
its option the estimate is identical, and with it only the iteration time, what follows from it
(throughput, cost and energy per token) and its own section differ.
"""

from __future__ import annotations

import dataclasses
import re
import types
from pathlib import Path

import pytest

import dse.estimate as E
from dse.estimate import resolve, run
from dse.specs._schema import spec_field
from dse.specs.plan import Plan

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def guide_blocks() -> list[str]:
    text = GUIDE.read_text()
    section = text.split("## How to add a technique\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def leaves(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from leaves(v, f"{path}.{k}")
    elif isinstance(x, list):
        yield path, tuple(x)
    else:
        yield path, x


@pytest.fixture
def technique(monkeypatch):
    """The guide's module, option and registration, applied as the guide says (undone after the test)."""
    module_src, field_src, registry_src = guide_blocks()
    mod = types.ModuleType("dse.estimate.checkpoint")
    exec(compile(module_src, "docs/architecture.md (dse/estimate/checkpoint.py)", "exec"), mod.__dict__)
    namespace = {"Plan": Plan, "spec_field": spec_field, "dataclass": dataclasses.dataclass}
    exec("@dataclass(frozen=True)\nclass GuidePlan(Plan):\n" + field_src, namespace)
    names = {**{n: getattr(E, n) for n in dir(E) if not n.startswith("_")}, "checkpoint": mod}
    exec(compile(registry_src, "docs/architecture.md (dse/estimate/__init__.py)", "exec"), names)
    registry = names["TECHNIQUES"]
    original = list(E.TECHNIQUES)
    assert [t for t in registry if t is not mod.TECHNIQUE] == original   # one entry added, the order kept
    monkeypatch.setattr(E, "TECHNIQUES", registry)
    return mod, namespace["GuidePlan"], original


def test_the_guide_has_the_three_blocks():
    module_src, field_src, registry_src = guide_blocks()
    assert "TECHNIQUE = " in module_src and "class Checkpoint(TechniqueBase)" in module_src
    assert field_src.strip().startswith("checkpoint_interval:")
    assert len(registry_src.strip().splitlines()) == 1


def test_the_technique_changes_only_what_it_should(technique, monkeypatch):
    mod, GuidePlan, original = technique
    from dse.estimate.technique import check_order

    check_order(E.TECHNIQUES)
    assert mod.TECHNIQUE in E.techniques()
    m, s, p = resolve("llama2-7b", "a100-server-nvme", tp=2, micro_batch=2)
    fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(Plan)}
    with monkeypatch.context() as before:       # the code as it is without the technique
        before.setattr(E, "TECHNIQUES", original)
        base = run(m, s, p)
    off = run(m, s, GuidePlan(**fields))                           # option unset: the technique is inactive
    on = run(m, s, GuidePlan(**fields, checkpoint_interval=100))
    option = ".plan.checkpoint_interval"                     # the option itself shows in the resolved plan
    assert dict(leaves(off)).pop(option) is None
    assert {k: v for k, v in leaves(off) if k != option} == dict(leaves(base))

    ck = on["checkpoint"]
    assert ck["bytes_per_checkpoint"] == pytest.approx(base["model"]["params"] * 14)   # bf16 weights, fp32 Adam: 2+12
    assert ck["seconds_per_iteration"] == pytest.approx(ck["bytes_per_checkpoint"] / (ck["write_bandwidth"] * 100))
    t0, t1 = base["time"], on["time"]
    assert t1["iteration"] == pytest.approx(t0["iteration"] + ck["seconds_per_iteration"])
    assert t1["io_exposed"] == pytest.approx(t0["io_exposed"] + ck["seconds_per_iteration"])
    parts = ("compute", "recompute", "communication", "bubble", "optimizer", "overhead", "io_exposed")
    assert t1["iteration"] == pytest.approx(sum(t1[k] for k in parts))          # the parts still add up
    assert on["throughput"]["tokens_per_s"] == pytest.approx(base["throughput"]["tokens_per_s"] * t0["iteration"]
                                                             / t1["iteration"])

    changed = {k for k, v in leaves(on) if dict(leaves(base)).get(k, object()) != v}
    allowed = {".time.iteration", ".time.io_exposed", ".throughput.tokens_per_s", ".throughput.samples_per_s",
               ".throughput.mfu", ".throughput.hfu", ".cost.per_million_tokens_usd", ".cost.tokens_per_s_per_kusd",
               ".energy.iteration_j", ".energy.per_token_j", ".bottleneck", option,
               ".checkpoint.bytes_per_checkpoint", ".checkpoint.write_bandwidth", ".checkpoint.seconds_per_iteration"}
    assert changed <= allowed, changed - allowed
    assert {".time.iteration", ".checkpoint.seconds_per_iteration", ".energy.iteration_j"} <= changed


def test_the_technique_is_array_safe(technique):
    """A search evaluates arrays of plans (the composition it runs): the technique broadcasts with them."""
    import numpy as np

    from dse.estimate.technique import compose

    mod, GuidePlan, _ = technique
    m, s, p = resolve("llama2-7b", "a100-server-nvme", tp=2, micro_batch=2)
    fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(Plan)}
    many = compose(m, s, GuidePlan(**fields, checkpoint_interval=np.array([50, 100, 500])), E.techniques())
    one = run(m, s, GuidePlan(**fields, checkpoint_interval=100))
    assert many["checkpoint"]["seconds_per_iteration"][1] == pytest.approx(one["checkpoint"]["seconds_per_iteration"])
    assert many["time"]["iteration"][1] == pytest.approx(one["time"]["iteration"])
    assert list(np.diff(many["time"]["iteration"]) < 0) == [True, True]      # rarer checkpoints, shorter iterations
