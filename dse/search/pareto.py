"""Exact best-k and Pareto-front bookkeeping over a stream of evaluated points.

Points arrive in blocks (index, objective values, metrics). Everything is
minimised after multiplying by the objectives' signs. Ties are broken by the
lower point index, so results do not depend on how the grid was cut into
blocks. Pareto fronts keep one point per distinct objective vector (the lowest
index): a point is dropped when another is at least as good in every objective.
"""

from __future__ import annotations

import numpy as np

_PAIRS = 1 << 22        # bound on the size of pairwise comparison arrays


def _take(metrics: dict, sel) -> dict:
    return {k: v[sel] for k, v in metrics.items()}


def _cat(a: dict, b: dict) -> dict:
    keys = set(a) | set(b)
    na = len(next(iter(a.values()))) if a else 0
    nb = len(next(iter(b.values()))) if b else 0
    return {k: np.concatenate([a.get(k, np.full(na, np.nan)), b.get(k, np.full(nb, np.nan))]) for k in keys}


class TopK:
    """The ``k`` best points of a single objective.

    Ties on the objective go to the lower ``tiebreak`` metric when it is given and present
    (the search passes the cost per million tokens: of equally fast configurations, the
    cheapest first), then to the lower point index.
    """

    def __init__(self, k: int, sign: float, tiebreak: str | None = None):
        self.k = max(1, k)
        self.sign = sign
        self.tiebreak = tiebreak
        self.index = np.zeros(0, np.int64)
        self.values = np.zeros((0, 1))
        self.metrics: dict = {}

    def add(self, index, values, metrics) -> None:
        if len(index) == 0:
            return
        key = self.sign * values[:, 0]
        if len(key) > self.k:  # cheap cut before the exact sort: keep everything tied with the k-th
            thr = np.partition(key, self.k - 1)[self.k - 1]
            sel = np.flatnonzero(key <= thr)
            index, values, metrics, key = index[sel], values[sel], _take(metrics, sel), key[sel]
        index = np.concatenate([self.index, index])
        values = np.concatenate([self.values, values])
        metrics = _cat(self.metrics, metrics) if self.metrics else metrics
        tie = metrics.get(self.tiebreak) if self.tiebreak else None
        tie = np.zeros(len(index)) if tie is None else np.nan_to_num(np.asarray(tie, float), nan=np.inf)
        order = np.lexsort((index, tie, self.sign * values[:, 0]))[: self.k]
        self.index, self.values, self.metrics = index[order], values[order], _take(metrics, order)

    @property
    def best(self):
        return None if len(self.index) == 0 else float(self.values[0, 0])


def weakly_dominated(X: np.ndarray, F: np.ndarray) -> np.ndarray:
    """Rows of X for which some row of F is <= in every column."""
    out = np.zeros(len(X), dtype=bool)
    if len(F) == 0 or len(X) == 0:
        return out
    step = max(1, _PAIRS // max(1, len(F) * X.shape[1]))
    for a in range(0, len(X), step):
        x = X[a:a + step]
        out[a:a + step] = (F[None, :, :] <= x[:, None, :]).all(axis=2).any(axis=1)
    return out


def strictly_dominated(X: np.ndarray, F: np.ndarray) -> np.ndarray:
    """Rows of X dominated by some row of F (<= everywhere, < somewhere)."""
    out = np.zeros(len(X), dtype=bool)
    if len(F) == 0 or len(X) == 0:
        return out
    step = max(1, _PAIRS // max(1, len(F) * X.shape[1]))
    for a in range(0, len(X), step):
        x = X[a:a + step][:, None, :]
        le = (F[None, :, :] <= x).all(axis=2)
        lt = (F[None, :, :] < x).any(axis=2)
        out[a:a + step] = (le & lt).any(axis=1)
    return out


def nondominated(X: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Positions of the Pareto-optimal rows of X (minimisation), one per distinct vector (lowest index)."""
    n, d = X.shape
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((index,) + tuple(X[:, j] for j in range(d - 1, -1, -1)))
    S = X[order]
    if d == 1:
        return order[:1]
    if d == 2:   # sorted by (f1, f2): kept iff f2 beats every earlier f2
        prev = np.minimum.accumulate(S[:, 1])
        keep = np.ones(n, dtype=bool)
        keep[1:] = S[1:, 1] < prev[:-1]
        return order[keep]
    # d >= 3: in lexicographic order only earlier rows can dominate a row (weakly)
    kept: list[np.ndarray] = []
    front = np.zeros((0, d))
    B = 512
    for a in range(0, n, B):
        blk = S[a:a + B]
        alive = ~weakly_dominated(blk, front)
        le = (blk[None, :, :] <= blk[:, None, :]).all(axis=2)      # le[i, j]: row j <= row i
        le &= np.tri(len(blk), k=-1, dtype=bool)                   # only earlier rows j < i
        alive &= ~le.any(axis=1)
        sel = np.flatnonzero(alive) + a
        kept.append(sel)
        front = np.concatenate([front, S[sel]])
    return order[np.concatenate(kept)]


class Front:
    """The exact Pareto front of several objectives."""

    def __init__(self, signs):
        self.signs = np.asarray(signs, dtype=float)
        self.index = np.zeros(0, np.int64)
        self.values = np.zeros((0, len(self.signs)))
        self.metrics: dict = {}

    def add(self, index, values, metrics) -> None:
        if len(index) == 0:
            return
        X = values * self.signs
        F = self.values * self.signs
        if len(F):
            sel = np.flatnonzero(~weakly_dominated(X, F))
            if sel.size == 0:
                return
            index, values, metrics, X = index[sel], values[sel], _take(metrics, sel), X[sel]
        keep = nondominated(X, index)
        index, values, metrics, X = index[keep], values[keep], _take(metrics, keep), X[keep]
        if len(F):
            stay = np.flatnonzero(~strictly_dominated(F, X))
            index = np.concatenate([self.index[stay], index])
            values = np.concatenate([self.values[stay], values])
            metrics = _cat(_take(self.metrics, stay), metrics)
        order = np.lexsort((index,) + tuple((values * self.signs)[:, j] for j in range(values.shape[1] - 1, -1, -1)))
        self.index, self.values, self.metrics = index[order], values[order], _take(metrics, order)

    @property
    def best(self):
        return None if len(self.index) == 0 else len(self.index)
