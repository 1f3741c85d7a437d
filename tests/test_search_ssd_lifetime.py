"""SSD lifetime in a search: storage offload wears drives too, and no drive writes means unlimited lifetime.

A configuration that writes nothing to the drives has no ``endurance`` section in its
estimate; the search reads that as an unlimited lifetime (inf, dse.search.objectives.ABSENT):
it meets any ``min_ssd_lifetime`` and is best on the ``ssd_lifetime`` objective.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from dse.search import from_dict, search

ROOT = Path(__file__).resolve().parent.parent
SPACES = ROOT / "examples" / "spaces"


def _writes(params: dict) -> bool:
    return (params.get("plan.offload_optimizer") in ("nvme", "csd") or params.get("plan.offload_params") == "nvme"
            or params.get("plan.offload_activations") == "ssd")


def _space(name: str, **changes):
    data = yaml.safe_load((SPACES / f"{name}.yaml").read_text())
    data.update(changes)
    return from_dict(data, f"{name}.yaml")


def test_min_ssd_lifetime_on_the_storage_offload_space(cli, tmp_path):
    out = tmp_path / "points.json"
    rc, _, err = cli("search", "--space", SPACES / "zero-infinity-offload.yaml", "--min-ssd-lifetime", "3 years",
                     "--engine", "exhaustive", "--json", out, "-q")
    assert rc == 0, err
    points = json.loads(out.read_text())["trials"]
    feasible = [p for p in points if p["feasible"]]
    years = [p["metrics"]["endurance.lifetime_years"] for p in feasible]
    assert feasible and all(y is None or y >= 3 for y in years)
    assert all(p["metrics"]["endurance.lifetime_years"] is None for p in feasible if not _writes(p["params"]))
    # optimizer states on drives wear them out within months; fp16 parameters alone may leave years
    cut = [p for p in points if p["status"] == "minimum SSD lifetime (years)"]
    assert cut and all(p["metrics"]["endurance.lifetime_years"] < 3 for p in cut)
    assert {p["params"]["plan.offload_optimizer"] for p in cut} >= {"nvme", "csd"}
    assert any(_writes(p["params"]) for p in feasible)


def test_lifetime_objective_on_the_storage_offload_space_prefers_no_writes():
    out = search(_space("zero-infinity-offload", objectives=["ssd_lifetime"]), engine="exhaustive", top=3)
    assert not out["notes"]
    assert all(e["value"] == math.inf and not _writes(e["params"]) for e in out["ranked"])


@pytest.mark.parametrize("engine", ["exhaustive", "optuna"])
def test_throughput_lifetime_front_keeps_the_fastest_configuration_that_writes_nothing(engine):
    sp = _space("activation-offload", objectives=["throughput", "ssd_lifetime"])
    kw = dict(trials=80, seed=0, storage="memory") if engine == "optuna" else {}
    out = search(sp, engine=engine, **kw)
    assert not any("differ" in n for n in out["notes"])
    fastest = search(_space("activation-offload", objectives=["throughput"]), engine="exhaustive", top=1)["ranked"][0]
    front = out["ranked"]
    quiet = [e for e in front if not _writes(e["params"])]
    assert quiet and all(e["values"][1] == math.inf for e in quiet)
    assert max(e["values"][0] for e in front) == pytest.approx(fastest["value"], rel=1e-12)
    assert "no endurance.lifetime_years in this configuration" not in out["excluded"]


def test_vectorised_lifetime_equals_the_scalar_estimate():
    """The search's block path against its scalar path (what optuna evaluates) on storage-offload points."""
    from _block_vs_point import block_vs_point

    sp = _space("zero-infinity-offload", objectives=["throughput", "ssd_lifetime"],
                constraints={"min_ssd_lifetime": "0.3 years"},
                parameters={"plan.offload_optimizer": ["gpu", "cpu", "nvme", "csd"],
                            "plan.offload_params": ["gpu", "cpu", "nvme"], "plan.zero": [0, 3],
                            "plan.micro_batch": [1, 4, 16], "plan.recompute": ["full"], "plan.ssds": [2, 6, 10]})
    seen = {"inf": 0, "finite": 0, "cut": 0}
    for s in block_vs_point(sp, chunk=7):
        if s["valid"] and s["feasible"]:
            seen["inf" if s["values"][1] == math.inf else "finite"] += 1
        elif s["valid"] and "minimum SSD lifetime (years)" in s["reasons"]:
            seen["cut"] += 1
    assert min(seen.values()) > 0, seen
