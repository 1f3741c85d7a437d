"""The exhaustive engine's answer equals a brute-force loop over the scalar estimate.

The brute force builds every configuration with ``dse.estimate.resolve`` (the path
``dse estimate`` takes: catalog files, --set overrides, check_plan) and runs
``dse.estimate.run`` on each; it shares no code with the vectorised engine beyond
the formulas themselves.
"""

from __future__ import annotations

import functools
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from dse.errors import InputError
from dse.estimate import resolve, run
from dse.search import from_dict, load_space, search
from dse.search.objectives import lookup
from dse.search.pareto import Front, TopK, nondominated

ROOT = Path(__file__).resolve().parent.parent

SMALL = {
    "model": "llama2-70b", "hardware": "a100-cluster-800g",
    "fixed": {"plan.global_batch": 256, "plan.seq_len": 4096},
    "parameters": {
        "hardware.node.gpu": ["a100-sxm-80gb", "h100-sxm-80gb"],
        "gpus": [32, 64, 128],
        "plan.tp": [1, 2, 4, 8],
        "plan.pp": [1, 2, 4, 8, 16],
        "plan.micro_batch": [1, 2, 4],
        "plan.zero": [0, 1, 3],
        "plan.recompute": ["selective", "full"],
        "hardware.node.network.bandwidth": ["400 Gb/s", "800 Gb/s"],
    },
}


@functools.cache
def _scalar_results():
    """(config, result) of every feasible point of SMALL, through resolve() + run() (computed once)."""
    names = list(SMALL["parameters"])
    space = from_dict(SMALL, "t.yaml")
    out = []
    for combo in itertools.product(*[space.param(n).values for n in names]):
        cfg = dict(zip(names, combo))
        sets = [(k.split("."), v) for k, v in SMALL["fixed"].items()]
        sets += [(k.split("."), v) for k, v in cfg.items() if k != "gpus"]
        sets.sort(key=lambda kv: len(kv[0]))           # a catalog component before its sub-fields
        tp, pp = cfg["plan.tp"], cfg["plan.pp"]
        if cfg["gpus"] % (tp * pp):
            continue
        sets.append((["plan", "dp"], cfg["gpus"] // (tp * pp)))
        try:
            m, s, p = resolve(SMALL["model"], SMALL["hardware"], None, sets)
        except InputError:
            continue
        r = run(m, s, p)
        if r["feasible"]:
            out.append((cfg, r))
    return out


def brute_force(data):
    """[(config, objective values)] of every feasible point of ``data`` (SMALL with objectives/constraints)."""
    space = from_dict(data, "t.yaml")
    return [(cfg, [lookup(r, o.metric) for o in space.objectives]) for cfg, r in _scalar_results()
            if all(c.violation(lookup(r, c.metric)) <= 0 for c in space.constraints)]


@pytest.mark.slow
def test_exhaustive_optimum_equals_brute_force():
    data = {**SMALL, "objectives": ["time"]}
    ex = search(from_dict(data, "t.yaml"), engine="exhaustive", top=5)
    bf = brute_force(data)
    assert len(bf) == ex["feasible"] > 100
    bf.sort(key=lambda x: x[1][0])
    assert ex["ranked"][0]["value"] == pytest.approx(bf[0][1][0], rel=1e-12)
    assert ex["ranked"][0]["params"] == dict(bf[0][0])
    assert [e["value"] for e in ex["ranked"]] == pytest.approx([v[0] for _, v in bf[:5]], rel=1e-12)


def test_exhaustive_with_budget_and_throughput_equals_brute_force():
    data = {**SMALL, "objectives": ["throughput"], "constraints": {"budget": "$2M"}}
    ex = search(from_dict(data, "t.yaml"), engine="exhaustive", top=3)
    bf = brute_force(data)
    best = max(v[0] for _, v in bf)
    assert ex["ranked"][0]["value"] == pytest.approx(best, rel=1e-12)
    assert ex["ranked"][0]["metrics"]["cost.capital_usd"] <= 2e6


def test_exhaustive_pareto_front_equals_brute_force():
    data = {**SMALL, "objectives": ["time", "cost"]}
    ex = search(from_dict(data, "t.yaml"), engine="exhaustive")
    pts = np.array([v for _, v in brute_force(data)])
    dominated = [(np.all(pts <= p, axis=1) & np.any(pts < p, axis=1)).any() for p in pts]
    front = {tuple(np.round(p, 9)) for p, d in zip(pts, dominated) if not d}
    got = {tuple(np.round(e["values"], 9)) for e in ex["ranked"]}
    assert got == front and len(front) >= 3


@pytest.mark.parametrize("chunk", [1, 7, 200, 1 << 17])
def test_block_size_does_not_change_the_answer(chunk):
    params = dict(SMALL["parameters"]) if chunk > 1 else {"gpus": [32, 64], "plan.tp": [2, 4, 8], "plan.pp": [2, 4]}
    data = {**SMALL, "parameters": params, "objectives": ["time", "energy"]}
    ex = search(from_dict(data, "t.yaml"), engine="exhaustive", chunk=chunk)
    ref = search(from_dict(data, "t.yaml"), engine="exhaustive", chunk=1 << 20)
    assert [e["params"] for e in ex["ranked"]] == [e["params"] for e in ref["ranked"]]
    assert ex["excluded"] == ref["excluded"] and ex["feasible"] == ref["feasible"]


def test_no_feasible_point_says_which_constraint_excluded_most(cli, tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text("model: llama2-70b\nhardware: a100-cluster-800g\nfixed: {plan.global_batch: 64}\n"
                 "parameters: {gpus: [8, 16], plan.tp: [1, 2, 4, 8], plan.pp: [1, 2]}\n")
    rc, out, err = cli("search", "--space", f, "--engine", "exhaustive", "-q")
    assert rc == 0
    assert "no feasible configuration: gpu memory capacity excluded the most" in out
    rc, out, err = cli("search", "--space", f, "--engine", "optuna", "--trials", "8", "--storage", "memory", "-q")
    assert rc == 0 and "no feasible configuration: gpu memory capacity excluded the most" in out


def test_no_feasible_point_names_a_constraint_hidden_behind_memory():
    """Memory is checked first, so a budget nothing meets is counted under memory for the points that also
    overflow it; the sample of fully estimated points shows the budget rejects every one."""
    data = {**SMALL, "constraints": {"budget": "$100"}}
    out = search(from_dict(data, "t.yaml"), engine="exhaustive")
    assert not out["ranked"]
    shares = out["violation_shares"]
    assert shares["budget (capital cost)"] == 1.0 and max(shares.values()) == 1.0
    assert "budget (capital cost) 100%" in out["no_feasible"]


# ----------------------------------------------------------------------------- pareto / top-k bookkeeping


def naive_front(X):
    keep = []
    for i, x in enumerate(X):
        dom = any((np.all(y <= x) and np.any(y < x)) or (np.all(y == x) and j < i) for j, y in enumerate(X) if j != i)
        if not dom:
            keep.append(i)
    return keep


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_nondominated_matches_naive(d):
    rng = np.random.default_rng(d)
    X = rng.integers(0, 6, size=(300, d)).astype(float)        # many ties and duplicates
    got = sorted(nondominated(X, np.arange(len(X))).tolist())
    assert got == naive_front(X)


@pytest.mark.slow
def test_front_streamed_in_blocks_equals_front_of_all():
    rng = np.random.default_rng(7)
    X = rng.random((2000, 3))
    X[::10] = X[1::10]                                          # duplicates across blocks
    f = Front([1.0, -1.0, 1.0])
    for a in range(0, len(X), 97):
        f.add(np.arange(a, min(a + 97, len(X))), X[a:a + 97], {"m": X[a:a + 97, 0]})
    want = naive_front(X * np.array([1.0, -1.0, 1.0]))
    assert sorted(f.index.tolist()) == want
    assert np.allclose(f.metrics["m"], X[f.index, 0])


def test_topk_keeps_lowest_index_on_ties():
    t = TopK(3, -1.0)                     # maximise
    t.add(np.array([5, 6, 7, 8]), np.array([[1.0], [3.0], [3.0], [2.0]]), {})
    t.add(np.array([1, 2]), np.array([[3.0], [0.5]]), {})
    assert t.index.tolist() == [1, 6, 7] and t.best == 3.0
    assert math.isclose(t.values[0, 0], 3.0)


def test_topk_breaks_objective_ties_by_the_tiebreak_metric():
    """Equally fast configurations: the cheaper first (the search's tie-break is the cost per token)."""
    t = TopK(2, 1.0, tiebreak="cost")
    t.add(np.array([0, 1, 2]), np.array([[5.0], [5.0], [6.0]]), {"cost": np.array([3.0, 1.0, 0.1])})
    t.add(np.array([3]), np.array([[5.0]]), {"cost": np.array([2.0])})
    assert t.index.tolist() == [1, 3]


def test_exhaustive_ranks_equal_times_by_cost():
    """On the ZeRO-Infinity example space, ties on iteration time list the cheaper hardware first."""
    out = search(load_space(str(ROOT / "examples" / "spaces" / "zero-infinity-offload.yaml")), engine="exhaustive")
    ranked = out["ranked"]
    for a, b in zip(ranked, ranked[1:]):
        ta, tb = a["metrics"]["time.iteration"], b["metrics"]["time.iteration"]
        assert ta <= tb
        if ta == tb:
            assert a["metrics"]["cost.per_million_tokens_usd"] <= b["metrics"]["cost.per_million_tokens_usd"]


def test_model_fields_are_searchable():
    """model.* parameters are grouped in Python (a model is resolved per value) in both engines."""
    data = {"model": "llama2-70b", "hardware": "a100-cluster-800g", "fixed": {"plan.global_batch": 256},
            "parameters": {"model.layers": [40, 80], "gpus": 64, "plan.tp": [4, 8], "plan.pp": [1, 2, 4],
                           "plan.recompute": ["full"]}, "objectives": ["time"]}
    ex = search(from_dict(data, "m.yaml"), engine="exhaustive", top=20)
    assert {e["params"]["model.layers"] for e in ex["ranked"]} == {40, 80}
    for e in ex["ranked"]:
        m, s, p = resolve("llama2-70b", "a100-cluster-800g", None,
                          [(["model", "layers"], e["params"]["model.layers"]), (["plan", "global_batch"], 256),
                           (["plan", "recompute"], "full")],
                          tp=e["params"]["plan.tp"], pp=e["params"]["plan.pp"],
                          dp=64 // (e["params"]["plan.tp"] * e["params"]["plan.pp"]))
        assert run(m, s, p)["time"]["iteration"] == pytest.approx(e["value"], rel=1e-12)


def test_parameters_grouped_in_python_give_the_same_answer():
    """``group: true`` (what the array-safety check falls back to) changes speed, not results."""
    data = {**SMALL, "objectives": ["time"]}
    as_group = ("gpus", "plan.tp", "hardware.node.network.bandwidth")
    grouped = {**data, "parameters": {k: ({"values": v, "group": True} if k in as_group else v)
                                      for k, v in SMALL["parameters"].items()}}
    a = search(from_dict(data, "a.yaml"), engine="exhaustive", top=5)
    b = search(from_dict(grouped, "b.yaml"), engine="exhaustive", top=5)
    assert [e["params"] for e in a["ranked"]] == [e["params"] for e in b["ranked"]]
    assert [e["value"] for e in a["ranked"]] == pytest.approx([e["value"] for e in b["ranked"]], rel=1e-12)
    assert b["groups"] > a["groups"]


def test_chiplet_sram_costs_silicon_in_a_search():
    """With area: auto the vectorised search charges SRAM: the cheapest feasible die has the least SRAM that fits,
    and the vectorised values equal the scalar estimate (no 'differ' note)."""
    data = {"model": "llama2-70b", "hardware": "chiplet-train-8x8",
            "fixed": {"plan.global_batch": 16, "plan.seq_len": 4096, "plan.micro_batch": 1,
                      "plan.chiplet_scheme": "hecaton-2d", "plan.chiplet_schedule": "microbatch"},
            "parameters": {"hardware.die.sram": ["128 MiB", "160 MiB", "192 MiB", "256 MiB", "384 MiB"]},
            "objectives": ["cost"]}
    out = search(from_dict(data, "s.yaml"), engine="exhaustive", top=5)
    assert not [n for n in out["notes"] if "differ" in n]
    srams = [e["params"]["hardware.die.sram"] for e in out["ranked"]]
    costs = [e["metrics"]["cost.capital_usd"] for e in out["ranked"]]
    assert srams == sorted(srams) and costs == sorted(costs) and len(set(costs)) == len(costs)
    # 128 and 160 MiB do not hold the hecaton-2d working set (167 MiB): they spill through DRAM (issue 17), still
    # feasible, so the cheapest die is the smallest
    assert srams[0] == 128 * 2**20 and len(srams) == 5
