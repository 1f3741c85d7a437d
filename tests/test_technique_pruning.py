"""The search's memory-first pruning runs for every technique (dse/search/block.py, dse/estimate/technique.py).

For a storage-offload space and an activation-offload space, the block path composes memory
(base + each technique's memory half), drops the points that do not fit, and composes time
(base.compose_time and each technique's apply_time) only for the rest. The tests count the
points that reach the time half and check that the answers still equal the scalar estimate
(dse.estimate.run) point by point, the pruned points included.
"""

from __future__ import annotations

import numpy as np
import pytest

from dse.estimate import activation_offload, base, offload

STORAGE = {"model": "smart-infinity-gpt2-8.4b", "hardware": "smart-infinity-a100",
           "fixed": {"plan.global_batch": 64, "plan.zero": 3, "plan.offload_optimizer": "nvme"},
           "parameters": {"plan.micro_batch": [1, 2, 4, 8, 16, 32, 64], "plan.ssds": [2, 6, 10],
                          "plan.recompute": ["none", "full"], "plan.offload_params": ["gpu", "nvme"]},
           "objectives": ["time"]}
ACTIVATIONS = {"model": "llama2-7b", "hardware": "ssdtrain-a100-optane",
               "fixed": {"plan.dp": 1, "plan.global_batch": 64, "plan.offload_activations": "ssd"},
               "parameters": {"plan.tp": [1, 2], "plan.micro_batch": [1, 2, 4, 8, 16, 32, 64],
                              "plan.ssds": [2, 7], "plan.seq_len": [2048, 4096],
                              "plan.recompute": ["none", "selective"]},
               "objectives": ["throughput"]}


def _count_points(monkeypatch, target, name, seen: list):
    """Wrap ``target.name`` to record how many points each call gets (size of the GPU memory total)."""
    inner = getattr(target, name)

    def wrapped(c, *args, **kwargs):
        seen.append(int(np.size(c["memory"]["gpu"]["total"])))
        return inner(c, *args, **kwargs)
    monkeypatch.setattr(target, name, wrapped)


@pytest.mark.parametrize("data, technique", [(STORAGE, offload.TECHNIQUE), (ACTIVATIONS, activation_offload.TECHNIQUE)],
                         ids=["storage-offload", "activation-offload"])
def test_time_is_composed_only_for_points_that_fit(monkeypatch, data, technique):
    from _block_vs_point import block_vs_point

    from dse.search.evaluate import Evaluator
    from dse.search.grid import Grid
    from dse.search.runner import split_params
    from dse.search.space import from_dict

    space = from_dict(data, "t.yaml")
    ev = Evaluator(space)
    ev.gather_below = 1.0     # always gather the points that fit before time (the default does when few fit)
    group, vector = split_params(space)
    assert vector, "the space must have numeric (vectorised) parameters"
    grid = Grid(group, vector, chunk=1 << 16)
    timed, applied = [], []
    _count_points(monkeypatch, base, "compose_time", timed)
    _count_points(monkeypatch, technique, "apply_time", applied)
    valid, feasible = ev.sweep(grid)
    assert technique.memory in ("exact", "floor")
    assert sum(timed) == ev.timed_points
    assert sum(applied) == sum(timed)               # the technique's time half saw exactly the points that fit
    assert feasible > 0                             # something fits ...
    assert sum(timed) < valid                       # ... and something was pruned before its time was composed
    assert sum(timed) >= feasible
    # the pruned points are infeasible in the scalar estimate too, and every answer equals it
    seen = list(block_vs_point(space, chunk=1 << 16))
    infeasible_memory = [s for s in seen if s["valid"] and any(r.endswith("memory capacity") for r in s["reasons"])]
    assert len(infeasible_memory) >= valid - sum(timed)


def test_a_technique_without_a_memory_half_is_not_pruned(monkeypatch):
    """A one-``apply`` module (ModuleTechnique) knows its memory only after time: every valid point is timed."""
    import dse.estimate as E
    from dse.search.evaluate import Evaluator
    from dse.search.grid import Grid
    from dse.search.runner import split_params
    from dse.search.space import from_dict

    monkeypatch.setattr(E, "TECHNIQUE_MODULES", ["_scalar_only_technique"])
    space = from_dict({**STORAGE, "fixed": {**STORAGE["fixed"], "plan.offload_optimizer": "gpu"},
                       "parameters": {"plan.micro_batch": [1, 8, 64], "plan.recompute": ["none"]}}, "t.yaml")
    ev = Evaluator(space)
    group, vector = split_params(space)
    grid = Grid(group, vector, chunk=1 << 16)
    valid, feasible = ev.sweep(grid)
    assert ev.timed_points == valid > feasible


def test_activation_offload_memory_floor_is_below_the_final_memory():
    """The memory half's floor never exceeds what the time half settles on (so pruning drops no feasible point)."""
    from dse.estimate import resolve
    from dse.estimate.technique import compose

    for tp in (1, 2):
        for mb in (1, 4, 16, 64):
            for layers in (None, 0, 8, 32):
                m, s, p = resolve("llama2-7b", "ssdtrain-a100-optane", None, [], tp=tp, micro_batch=mb, dp=1,
                                  global_batch=64, offload_activations="ssd", offload_layers=layers)
                c = base.compose_memory(m, s, p)
                activation_offload.TECHNIQUE.apply_memory(c, m, s, p)
                floor = {t: c["memory"][t]["total"] for t in ("gpu", "host", "storage")}
                final = compose(m, s, p, [activation_offload.TECHNIQUE])
                for t in floor:
                    assert floor[t] <= final["memory"][t]["total"] * (1 + 1e-12), (tp, mb, layers, t)


def test_registry_follows_the_protocol_and_its_stated_order():
    import dse.estimate as E
    from dse.estimate.technique import Technique, check_order

    names = [t.name for t in E.TECHNIQUES]
    assert names == ["storage_offload", "activation_offload", "paged_optimizer", "drive_wear", "economics"]
    assert all(isinstance(t, Technique) and t.memory in ("exact", "floor") for t in E.TECHNIQUES)
    check_order(E.TECHNIQUES)
    with pytest.raises(ValueError, match="activation_offload must come after storage_offload"):
        check_order([E.TECHNIQUES[1], E.TECHNIQUES[0]])


def test_few_points_that_fit_are_gathered_before_time_many_are_not():
    """The default rule: time for the gathered points only when at most GATHER_BELOW of a block fits."""
    from dse.search.evaluate import GATHER_BELOW, Evaluator
    from dse.search.grid import Grid
    from dse.search.runner import split_params
    from dse.search.space import from_dict

    few = {**STORAGE, "parameters": {"plan.micro_batch": [1, 64, 128, 256, 512], "plan.recompute": ["none"]}}
    many = {**STORAGE, "parameters": {"plan.micro_batch": [1, 2, 4, 64], "plan.recompute": ["full"]}}
    for data, pruned in ((few, True), (many, False)):
        ev = Evaluator(from_dict(data, "t.yaml"))
        group, vector = split_params(ev.space)
        grid = Grid(group, vector, chunk=1 << 16)
        n = valid = feasible = 0
        for gi in range(grid.n_groups):
            g = ev.group(grid.group_values(gi))
            for _, shape, cols in grid.blocks():
                res = ev.block(g, shape, cols)
                n, valid, feasible = n + res.n, valid + res.n_valid, feasible + res.feasible.size
        assert (feasible <= GATHER_BELOW * n) == pruned, (feasible, n)
        assert (ev.timed_points < n) == pruned
