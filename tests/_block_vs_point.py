"""Shared check for the search tests: the vectorised block path equals the scalar point path."""

from __future__ import annotations

import numpy as np


def block_vs_point(space, chunk: int):
    """Evaluate ``space`` block by block and point by point; assert they agree on feasibility and objective values.

    Yields each point's scalar evaluation (``Evaluator.point``), for tests that count what they saw.
    """
    from dse.search.evaluate import Evaluator
    from dse.search.grid import Grid
    from dse.search.runner import split_params

    ev = Evaluator(space)
    group, vector = split_params(space)
    grid = Grid(group, vector, chunk=chunk)
    for gi in range(grid.n_groups):
        g = ev.group(grid.group_values(gi))
        for start, shape, cols in grid.blocks():
            res = ev.block(g, shape, cols)
            feas = dict(zip(res.feasible.tolist(), res.objectives.tolist()))
            for local in range(int(np.prod(shape))):
                config = grid.config(gi * grid.n_vector + start + local)
                s = ev.point(config)
                ok = s["valid"] and s["feasible"]
                assert ok == (local in feas), config
                if ok:
                    np.testing.assert_allclose(feas[local], s["values"], rtol=1e-12)
                yield s
