"""The discrete grid of a space: groups (Python-level choices) times a numeric block grid.

Points are numbered in row-major order over the parameters: first the group
parameters (strings, booleans, catalog items: one set of specs per combination),
then the vector parameters (numbers: numpy arrays). A *block* is a slab of the
vector grid whose points have consecutive indices: a slice of one axis times all
the axes after it, so its parameters broadcast against each other (an axis of n
values is an array of shape (1, .., n, .., 1)) and every term of the estimate is
computed at the size of the axes it depends on. A block holds at most ``chunk``
points, which bounds the memory of a sweep of any size.
"""

from __future__ import annotations

import math

import numpy as np


class Grid:
    def __init__(self, group_params, vector_params, chunk: int = 1 << 17):
        self.group_params = list(group_params)
        self.vector_params = list(vector_params)
        self.chunk = max(1, int(chunk))
        self.group_sizes = [len(p) for p in self.group_params]
        self.vector_sizes = [len(p) for p in self.vector_params]
        self.n_groups = math.prod(self.group_sizes)
        self.n_vector = math.prod(self.vector_sizes)
        self.size = self.n_groups * self.n_vector
        self.arrays = [np.asarray(p.values, dtype=float) for p in self.vector_params]

    # ------------------------------------------------------------------ groups

    def group_values(self, gi: int) -> dict:
        """Values of the group parameters of group ``gi`` (mixed-radix decoding)."""
        out = {}
        for p, n in zip(reversed(self.group_params), reversed(self.group_sizes)):
            gi, r = divmod(gi, n)
            out[p.path] = p.values[r]
        return {p.path: out[p.path] for p in self.group_params}

    # ------------------------------------------------------------------ blocks

    @property
    def n_blocks(self) -> int:
        """Blocks per group (what :meth:`blocks` yields)."""
        sizes = self.vector_sizes
        inner, j = 1, len(sizes)
        while j > 0 and inner * sizes[j - 1] <= self.chunk:
            inner *= sizes[j - 1]
            j -= 1
        if j == 0:
            return 1
        step = max(1, self.chunk // inner)
        return math.prod(sizes[:j - 1]) * -(-sizes[j - 1] // step)

    def blocks(self):
        """Yield ``(start, shape, columns)`` covering the vector grid once, in index order.

        ``columns`` maps each vector parameter's path to a float, or to an array that
        broadcasts to ``shape``; block point ``i`` (row-major in ``shape``) has vector
        index ``start + i``.
        """
        sizes, K = self.vector_sizes, len(self.vector_sizes)
        if K == 0:
            yield 0, (1,), {}
            return
        inner = 1
        j = K
        while j > 0 and inner * sizes[j - 1] <= self.chunk:
            inner *= sizes[j - 1]
            j -= 1
        if j == 0:                          # the whole vector grid is one block
            yield 0, tuple(sizes), self._columns({}, None, 0, tuple(sizes))
            return
        part = j - 1                        # the axis cut into slices
        step = max(1, self.chunk // inner)
        outer_sizes = sizes[:part]
        for outer in np.ndindex(*outer_sizes) if outer_sizes else [()]:
            fixed = dict(zip(range(part), outer))
            base = 0
            for k, i in enumerate(outer):
                base = base * sizes[k] + i
            base *= sizes[part]
            for a in range(0, sizes[part], step):
                L = min(step, sizes[part] - a)
                shape = (L,) + tuple(sizes[j:])
                yield (base + a) * inner, shape, self._columns(fixed, part, a, shape)

    def _columns(self, fixed: dict, part, a: int, shape) -> dict:
        cols = {}
        nd = len(shape)
        first_axis = 0 if part is None else part       # parameter index that maps to block axis 0
        for k, p in enumerate(self.vector_params):
            if k in fixed:
                cols[p.path] = float(self.arrays[k][fixed[k]])
                continue
            ax = k - first_axis
            vals = self.arrays[k] if k != part else self.arrays[k][a:a + shape[0]]
            s = [1] * nd
            s[ax] = len(vals)
            cols[p.path] = vals.reshape(s)
        return cols

    # ------------------------------------------------------------------ decoding

    def decode(self, index) -> dict:
        """Parameter values (object arrays) of global point indices."""
        index = np.asarray(index, dtype=np.int64)
        out = {}
        vi = index % self.n_vector
        gi = index // self.n_vector
        for p, n in zip(reversed(self.vector_params), reversed(self.vector_sizes)):
            vi, r = np.divmod(vi, n)
            out[p.path] = np.asarray(p.values, dtype=object)[r]
        for p, n in zip(reversed(self.group_params), reversed(self.group_sizes)):
            gi, r = np.divmod(gi, n)
            out[p.path] = np.asarray(p.values, dtype=object)[r]
        return {p.path: out[p.path] for p in self.group_params + self.vector_params}

    def config(self, index: int) -> dict:
        """``{path: value}`` of one point (Python values, as written in the space)."""
        return {k: v[0] for k, v in self.decode([index]).items()}
