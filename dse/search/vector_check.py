"""Check that a space's numeric parameters can be evaluated as numpy arrays (block = scalar estimate).

Part of :class:`dse.search.evaluate.Evaluator` (a mixin: it uses the evaluator's ``group``,
``block`` and ``point``).
"""

from __future__ import annotations

import numpy as np

from dse.errors import InputError


class VectorCheck:
    """:meth:`vector_check`: which parameters must be grouped in Python instead."""

    def vector_check(self, vector_params, group_params, samples: int = 16, seed: int = 0):
        """Check that numpy evaluation equals the scalar estimate on sample points.

        Returns ``(demoted, notes)``: parameters that must be grouped in Python
        because some formula or technique module does not accept arrays for them
        (found one at a time; all of them if the failure needs several together).
        """
        import random

        if not vector_params:
            return [], []
        rng = random.Random(seed)
        gvals = {p.path: p.values[0] for p in group_params}
        configs = [{p.path: p.values[0] for p in vector_params}]
        configs += [{p.path: rng.choice(p.values) for p in vector_params} for _ in range(samples - 1)]
        problem = self._compare(gvals, configs, [p.path for p in vector_params])
        if problem is None:
            return [], []
        demoted = []
        for p in vector_params:
            one = [{**configs[0], p.path: c[p.path]} for c in configs]
            if self._compare(gvals, one, [p.path]) is not None:
                demoted.append(p)
        if not demoted:
            demoted = list(vector_params)
        names = ", ".join(p.path for p in demoted)
        return demoted, [f"evaluated {names} per value in Python, not as numpy arrays ({problem})"]

    def _compare(self, gvals: dict, configs: list, arr_paths: list) -> str | None:
        g = self.group(gvals)
        if g.error:
            return None
        S = len(configs)
        cols = {}
        for path in configs[0]:
            if path in arr_paths:
                cols[path] = np.array([float(c[path]) for c in configs])
            else:
                cols[path] = configs[0][path]
        try:
            res = self.block(g, (S,), cols)
        except InputError:
            raise
        except Exception as exc:  # a formula or technique branched on an array value
            return f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
        vec = dict(zip(res.feasible.tolist(), res.objectives.tolist()))
        for i, c in enumerate(configs):
            s = self.point({**gvals, **c})
            feas = s["valid"] and s["feasible"]
            if feas != (i in vec):
                return f"feasibility differs at {c}"
            if feas and not np.allclose(vec[i], s["values"], rtol=1e-9, atol=0):
                return f"values differ at {c}: {vec[i]} vs {s['values']}"
        return None
