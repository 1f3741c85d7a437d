"""Pick the points of a search block out of arrays of any broadcast shape (part of :mod:`dse.search.evaluate`).

A block's estimate is composed on broadcast arrays (a grid of parameters); the points that fit, or
every valid one, are then gathered into flat arrays: :class:`Gather` does it for numbers, arrays,
dicts and the estimate's (frozen) dataclasses alike.
"""

from __future__ import annotations

import dataclasses

import numpy as np


class Gather:
    """Pick the points ``flat`` of a block out of arrays of any broadcast shape."""

    def __init__(self, flat: np.ndarray, shape: tuple):
        self.shape = shape
        self.n = flat.size
        self.axes = np.unravel_index(flat, shape) if len(shape) > 1 else (flat,)
        self.flat = flat
        self._cache = {}

    def __call__(self, x):
        if isinstance(x, dict):
            return {k: self(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(self(v) for v in x)
        if hasattr(x, "map") and dataclasses.is_dataclass(x):   # typed terms (dse.estimate.terms)
            return x.map(self)
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            changes = {f.name: self(getattr(x, f.name)) for f in dataclasses.fields(x)}
            return dataclasses.replace(x, **changes)
        if not isinstance(x, np.ndarray) or x.ndim == 0:
            return x
        if x.ndim != len(self.shape):
            x = np.broadcast_to(x, self.shape)
        idx = self._cache.get(x.shape)
        if idx is None:
            idx, stride = 0, 1
            for k in range(x.ndim - 1, -1, -1):
                if x.shape[k] > 1:
                    idx = idx + self.axes[k] * stride
                    stride *= x.shape[k]
            if isinstance(idx, int):
                idx = np.zeros(self.n, dtype=np.int64)
            self._cache[x.shape] = idx
        return np.take(x, idx)


def broadcast_full(x, shape):
    return np.broadcast_to(np.asarray(x), shape)
