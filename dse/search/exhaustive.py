"""Exhaustive engine: every point of a discrete space, evaluated a block at a time with numpy.

Gives the exact optimum (single objective; ties to the cheaper point, then the lower index) or the
exact Pareto front. Memory stays bounded by the block size whatever the size
of the space (see :mod:`dse.search.grid`).
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np

from dse.search.pareto import Front, TopK

TIEBREAK = ("cost.per_million_tokens_usd", "time.iteration")


def tiebreak_metric(space) -> str:
    """The metric that orders configurations tied on a single objective: cost per token (or time, if that is it)."""
    return TIEBREAK[1] if space.objectives[0].metric == TIEBREAK[0] else TIEBREAK[0]


def run(space, evaluator, grid, *, top: int = 10, progress=None, sink=None) -> dict:
    """Sweep ``grid``; returns the raw outcome (indices, values, metrics, counts, history).

    ``progress(points_done, best)`` is called after every block; ``sink(index, status,
    metrics)`` receives every evaluated point when given (CSV/JSON export).
    """
    single = len(space.objectives) == 1
    acc = (TopK(top, space.objectives[0].sign, tiebreak_metric(space)) if single
           else Front([o.sign for o in space.objectives]))
    counts: Counter = Counter()
    evaluated = feasible = done = 0
    history = []
    t0 = time.perf_counter()
    for gi in range(grid.n_groups):
        g = evaluator.group(grid.group_values(gi))
        base = gi * grid.n_vector
        if g.error:
            counts[g.error] += grid.n_vector
            done += grid.n_vector
            if progress:
                progress(done, acc.best)
            continue
        for start, shape, cols in grid.blocks():
            res = evaluator.block(g, shape, cols, want_all=sink is not None)
            counts.update(res.counts)
            if len(res.feasible):
                acc.add(res.feasible.astype(np.int64) + (base + start), res.objectives, res.metrics)
                feasible += len(res.feasible)
            if sink is not None and res.valid is not None and len(res.valid):
                sink(res.valid.astype(np.int64) + (base + start), res.status, res.valid_metrics)
            evaluated += res.n_valid
            done += res.n
            history.append((done, acc.best))
            if progress:
                progress(done, acc.best)
    return {"engine": "exhaustive", "index": acc.index, "values": acc.values, "metrics": acc.metrics,
            "counts": dict(counts), "points": grid.size, "evaluated": evaluated, "feasible": feasible,
            "elapsed": time.perf_counter() - t0, "history": history}
