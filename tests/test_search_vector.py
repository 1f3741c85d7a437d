"""The composed estimate on numpy arrays equals the scalar estimate, point by point.

Every numeric plan and hardware field the search varies is given as an array, in
the two layouts the search uses (a broadcasting grid block, and flat columns of
gathered points); every leaf of the composed result (memory, time, traffic,
throughput, cost, energy and the internal terms) is compared with the scalar
estimate of the same point. Results agree to floating-point rounding (the scalar
path keeps Python ints where the array path has float64).
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from dse.estimate import base, economics, resolve
from dse.search.evaluate import replace_path

NUMERIC = {
    "plan.tp": [1, 2, 4, 8],
    "plan.pp": [1, 2, 3, 8],
    "plan.dp": [1, 2, 16],
    "plan.micro_batch": [1, 2, 4],
    "plan.zero": [0, 1, 2, 3],
    "plan.global_batch": [64, 96, 256],
    "hardware.node.network.bandwidth": [25e9, 100e9],
    "hardware.node.gpu_link.bandwidth": [150e9, 450e9],
    "hardware.node.gpu.hbm_bandwidth": [2.0e12, 3.35e12],
}
GROUPS = [
    dict(recompute="none", attention="flash", sequence_parallel=False, schedule="1f1b"),
    dict(recompute="selective", attention="flash", sequence_parallel=True, schedule="1f1b", overlap_grad_reduce=True),
    dict(recompute="full", attention="math", sequence_parallel=False, schedule="gpipe", async_tp_allreduce=False),
    dict(recompute="full", attention="flash", sequence_parallel=True, schedule="interleaved", virtual_stages=2,
         overlap_grad_reduce=True),
]


def composed(model, system, plan):
    c = base.compose(model, system, plan)
    economics.apply(c, model, system, plan)
    return c


def apply(system, plan, values: dict):
    for path, v in values.items():
        head, *rest = path.split(".")
        if head == "plan":
            plan = replace_path(plan, rest, v)
        else:
            system = replace_path(system, rest, v)
    return system, plan


def leaves(tree, prefix=""):
    if hasattr(tree, "as_dict"):   # typed terms (dse.estimate.terms): every field
        tree = tree.as_dict()
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else k)
    elif not isinstance(tree, str):
        yield prefix, tree


def check_point(c_arr, c_scalar, where, shape):
    got = dict(leaves(c_arr))
    for key, want in leaves(c_scalar):
        g = np.broadcast_to(np.asarray(got[key]), shape)[where]
        if isinstance(want, (bool, np.bool_)):
            assert bool(g) == bool(want), key
        else:
            np.testing.assert_allclose(float(g), float(want), rtol=1e-12, atol=0, err_msg=key)


def specs(model_name, group):
    return resolve(model_name, "a100-cluster-800g", None, [], **group)


@pytest.mark.parametrize("model_name", ["llama2-70b", "gpt2-xl"])
@pytest.mark.parametrize("gi", range(len(GROUPS)))
def test_grid_block_equals_scalar(model_name, gi):
    m, s, p = specs(model_name, GROUPS[gi])
    names = list(NUMERIC)
    nd = len(names)
    arrays = {}
    for k, name in enumerate(names):
        shape = [1] * nd
        shape[k] = len(NUMERIC[name])
        arrays[name] = np.asarray(NUMERIC[name], dtype=float).reshape(shape)
    sa, pa = apply(s, p, arrays)
    with np.errstate(all="ignore"):
        c = composed(m, sa, pa)
    full = tuple(len(NUMERIC[n]) for n in names)
    rng = random.Random(gi)
    idx_all = list(itertools.product(*[range(len(NUMERIC[n])) for n in names]))
    for idx in rng.sample(idx_all, 40):
        vals = {n: NUMERIC[n][i] for n, i in zip(names, idx)}
        ss, ps = apply(s, p, vals)
        check_point(c, composed(m, ss, ps), idx, full)


@pytest.mark.parametrize("model_name", ["llama2-70b", "gpt2-xl"])
def test_flat_columns_equal_scalar(model_name):
    rng = np.random.default_rng(3)
    for group in GROUPS:
        m, s, p = specs(model_name, group)
        n = 64
        cols = {name: np.asarray(v, dtype=float)[rng.integers(0, len(v), n)] for name, v in NUMERIC.items()}
        sa, pa = apply(s, p, cols)
        with np.errstate(all="ignore"):
            c = composed(m, sa, pa)
        for i in range(0, n, 4):
            vals = {k: (int(v[i]) if k.startswith("plan.") else float(v[i])) for k, v in cols.items()}
            ss, ps = apply(s, p, vals)
            check_point(c, composed(m, ss, ps), (i,), (n,))


def test_compose_is_memory_then_time():
    m, s, p = resolve("llama2-70b", "a100-cluster-800g", None, [], tp=8, pp=4, dp=8, micro_batch=1, global_batch=512)
    c = base.compose(m, s, p)
    half = base.compose_memory(m, s, p)
    assert set(half) < set(c) and "time" not in half and half["memory"] == c["memory"]
    base.compose_time(half, m, s, p)
    assert list(half) == list(c)
    assert half["terms"].as_dict().keys() == c["terms"].as_dict().keys() and half["terms"].time is not None
    assert half["time"] == c["time"] and half["traffic"] == c["traffic"]


def test_evaluator_block_equals_scalar_points():
    """The search's own block path (rules, memory first, gathered time) against its scalar path."""
    from _block_vs_point import block_vs_point

    from dse.search.space import from_dict

    sp = from_dict({"model": "llama2-70b", "hardware": "a100-cluster-800g",
                    "fixed": {"plan.global_batch": 512, "plan.seq_len": 4096},
                    "parameters": {"gpus": [32, 64], "plan.tp": [1, 2, 4, 8], "plan.pp": [1, 2, 4, 8, 16],
                                   "plan.micro_batch": [1, 2, 4], "plan.zero": [0, 1, 3],
                                   "hardware.node.network.bandwidth": ["200 Gb/s", "800 Gb/s"],
                                   "plan.recompute": ["selective", "full"]},
                    "objectives": ["time", "cost"], "constraints": {"power_cap": "100 kW"}}, "t.yaml")
    seen = sum(s["valid"] and s["feasible"] for s in block_vs_point(sp, chunk=50))
    assert seen > 50


def test_technique_that_is_not_array_safe_is_detected(monkeypatch):
    """A technique module that branches on a numeric field: that field is grouped, answers stay exact."""
    import dse.estimate as E
    from dse.search import from_dict, search

    monkeypatch.setattr(E, "TECHNIQUE_MODULES", ["_scalar_only_technique"])
    data = {"model": "llama2-70b", "hardware": "a100-cluster-800g", "fixed": {"plan.global_batch": 256},
            "parameters": {"gpus": 64, "plan.tp": [2, 4, 8], "plan.pp": [1, 2, 4, 8], "plan.zero": [0, 1, 2, 3],
                           "plan.micro_batch": [1, 2]}, "objectives": ["time"]}
    out = search(from_dict(data, "t.yaml"), engine="exhaustive", top=200)
    assert any("plan.zero" in n and "Python" in n for n in out["notes"])
    assert not any("differ" in n for n in out["notes"])
    brute = {}
    for tp, pp, zero, mb in itertools.product([2, 4, 8], [1, 2, 4, 8], [0, 1, 2, 3], [1, 2]):
        try:
            m, s, pl = resolve("llama2-70b", "a100-cluster-800g", None, [(["plan", "global_batch"], 256)],
                               tp=tp, pp=pp, dp=64 // (tp * pp), zero=zero, micro_batch=mb)
        except Exception:
            continue
        r = E.run(m, s, pl)
        if r["feasible"]:
            brute[(tp, pp, zero, mb)] = r["time"]["iteration"]
    got = {(e["params"]["plan.tp"], e["params"]["plan.pp"], e["params"]["plan.zero"], e["params"]["plan.micro_batch"]):
           e["value"] for e in out["ranked"]}
    assert got.keys() == brute.keys()
    assert all(got[k] == pytest.approx(v, rel=1e-12) for k, v in brute.items())
