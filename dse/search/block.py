"""One block of a search space with numpy: plan rules, memory first, time only for the points that fit.

Part of :class:`dse.search.evaluate.Evaluator` (a mixin: the steps are described in
:mod:`dse.search.evaluate`; the attributes it reads, ``objectives``, ``constraints``, ``record``,
``seen_metrics``, ``gather_below``, ``timed_points``, ``space``, and the methods ``_specs``,
``active_techniques``, ``reason_code``, ``note`` and ``point``, are the evaluator's).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dse.estimate import feasibility
from dse.search.gather import Gather, broadcast_full
from dse.search.group import BlockResult, Group, add_count, space_value
from dse.search.objectives import ABSENT, lookup

MEMORY_METRICS = ("memory.gpu.total", "memory.gpu.capacity", "gpus", "nodes")


class BlockEvaluation:
    """:meth:`block`: the vectorised path (see :mod:`dse.search.evaluate`)."""

    def block(self, g: Group, shape: tuple, columns: dict, want_all: bool = False) -> BlockResult:
        """Evaluate one block of a group (see :class:`~dse.search.grid.Grid`)."""
        n = math.prod(shape)
        counts: dict = {}
        empty = BlockResult(n, counts, np.zeros(0, np.int64), np.zeros((0, len(self.objectives))), {})
        if g.error:
            counts[g.error] = n
            return empty
        with np.errstate(all="ignore"):
            return self._block(g, shape, columns, want_all, n, counts, empty)

    def _block(self, g, shape, columns, want_all, n, counts, empty):
        model = g.model
        hw = g.backend
        system, plan, extra = self._specs(g, columns)
        plan = plan.resolved(model, system)
        valid = self._rules(hw, plan, model, system, extra, shape, counts)
        n_valid = int(np.count_nonzero(valid))
        if n_valid == 0:
            return empty
        empty = dataclasses.replace(empty, n_valid=n_valid)
        # 2. memory (and the GPUs the system has), before time when every active technique can say it
        active = self.active_techniques(plan) if hw.techniques else []
        c, states, prune = self._memory(hw, model, system, plan, active, n)
        for metric in [o.metric for o in self.objectives] + [c_.metric for c_ in self.constraints]:
            if lookup(c, metric) is not None:      # the space can produce it (even where memory does not fit)
                self.seen_metrics.add(metric)
        fits = valid.copy()
        over_by = []
        limits = [(v.reason, v.violated) for v in feasibility.check(c["memory"], system, plan)]
        for reason, bad in limits + hw.limits(c, system):     # memory per tier, then the hardware's (GPUs)
            over = fits & broadcast_full(bad, shape)
            add_count(counts, reason, int(np.count_nonzero(over)))
            over_by.append((reason, bad))
            fits &= ~over
        valid_idx = np.flatnonzero(valid) if want_all else None
        fit_idx = np.flatnonzero(fits)
        status = vm = None
        if want_all:
            status, vm = self._memory_status(c, shape, valid_idx, fit_idx, over_by)
        if fit_idx.size == 0:
            res = dataclasses.replace(empty)
            if want_all:
                res.valid, res.status, res.valid_metrics = valid_idx, status, vm
            return res
        # 3. time, techniques, cost and energy only for the points that fit: gathered into flat arrays first
        #    when few fit; when many do, composed on the block's broadcast arrays, then gathered (cheaper)
        G = Gather(fit_idx, shape)
        if prune and fit_idx.size > self.gather_below * n:
            self._compose_time(c, states, model, system, plan, active, n, G=None)
            prune = False
        c = G(c)
        system1, plan1 = G(system), G(plan)
        if prune:
            self._compose_time(c, states, model, system1, plan1, active, fit_idx.size, G=G)
        res = self._finish(c, g, columns, shape, fit_idx, system1, plan1, active, counts, n, n_valid)
        if want_all:
            pos = np.searchsorted(valid_idx, fit_idx)
            status[pos] = res.status
            for k, v in res.valid_metrics.items():
                vm[k][pos] = v
            res.valid, res.status, res.valid_metrics = valid_idx, status, vm
        else:
            res.status = res.valid_metrics = None
        return res

    def _rules(self, hw, plan, model, system, extra, shape, counts) -> np.ndarray:
        """1. plan rules: each excluded point is counted under the first rule it breaks; True where valid."""
        valid = np.ones(shape, dtype=bool)
        for name, ok in list(extra.items()) + list(hw.plan_rules(plan, model, system).items()):
            if ok is True:
                continue
            bad = valid & ~broadcast_full(ok, shape)
            add_count(counts, name, int(np.count_nonzero(bad)))
            valid &= ~bad
        return valid

    def _memory(self, hw, model, system, plan, active, n):
        """The memory of every point: base + each active technique's memory half.

        Returns ``(c, states, prune)``. ``prune``: every active technique gives its memory (exact or a
        floor) before time, so time is composed later only for the points that fit; otherwise (a
        technique whose memory is known only after time) everything is composed here.
        """
        if not hw.techniques:                      # e.g. a chiplet package: its own composition, in full
            return hw.numbers(model, system, plan)[0], [], False
        from dse.estimate import base

        prune = all(t.memory in ("exact", "floor") for t in active)
        c = base.compose_memory(model, system, plan, None)
        states = [t.apply_memory(c, model, system, plan, None) for t in active]
        if not prune:
            self._compose_time(c, states, model, system, plan, active, n, G=None)
        return c, states, prune

    def _compose_time(self, c, states, model, system, plan, active, points: int, G=None) -> None:
        """Base time and every active technique's time half on ``c`` (``G``: gather the memory states first)."""
        from dse.estimate import base

        self.timed_points += points
        base.compose_time(c, model, system, plan, None)
        for t, state in zip(active, states):
            t.apply_time(c, state if G is None else G(state), model, system, plan, None)

    def _memory_status(self, c, shape, valid_idx, fit_idx, over_by):
        """Status codes and memory metrics of every valid point (``want_all``)."""
        status = np.zeros(valid_idx.size, dtype=np.int16)
        vm = {m: np.full(valid_idx.size, np.nan) for m in self.record}
        gv = Gather(valid_idx, shape)
        for m in MEMORY_METRICS:
            x = lookup(c, m)
            if x is not None and not isinstance(x, dict):
                vm[m] = np.full(valid_idx.size, float(x)) if np.ndim(x) == 0 else gv(np.asarray(x)).astype(float)
        notfit = ~np.isin(valid_idx, fit_idx, assume_unique=True)
        for reason, mask in over_by:
            over = notfit & np.broadcast_to(gv(np.asarray(mask)), notfit.shape)
            status[over & (status == 0)] = self.reason_code(reason)
        return status, vm

    def _finish(self, c, g, columns, shape, fit_idx, system1, plan1, active, counts, n, n_valid) -> BlockResult:
        """Final constraints of the points that fit (memory again: floors are final only now; techniques';
        budget, power, lifetime; objectives), with their objectives and metrics."""
        from dse.estimate.technique import ModuleTechnique

        m_fit = fit_idx.size
        ok = np.ones(m_fit, dtype=bool)
        code = np.zeros(m_fit, dtype=np.int16)

        def exclude(reason, bad):
            nonlocal ok
            bad = np.broadcast_to(np.asarray(bad, dtype=bool), (m_fit,)) & ok
            k = int(np.count_nonzero(bad))
            if k:
                add_count(counts, reason, k)
                code[bad] = self.reason_code(reason)
                ok &= ~bad

        for item in c.get("extra_violations", []):
            msg, bad = (item, True) if isinstance(item, str) else item
            exclude(msg, bad)
        modern = [t for t in active if not isinstance(t, ModuleTechnique)]
        for v in feasibility.check(c["memory"], system1, plan1, c=c, techniques=modern):
            exclude(v.reason, v.violated)
        for t in active:
            if isinstance(t, ModuleTechnique) and hasattr(t.module, "violations"):
                exclude(*self._scalar_violations(t, g, columns, shape, fit_idx, ok))
        metrics = {}
        for m in self.record:
            x = lookup(c, m)
            if x is not None and not isinstance(x, dict):
                metrics[m] = np.broadcast_to(np.asarray(x, dtype=float), (m_fit,))
        for con in self.constraints:
            if con.metric not in metrics:          # does not apply to this configuration
                continue
            self.seen_metrics.add(con.metric)
            exclude(con.label, ~(con.violation(metrics[con.metric]) <= 0))
        cols = []
        for o in self.objectives:
            if o.metric not in metrics and o.metric in ABSENT:   # e.g. no drive writes: unlimited SSD lifetime
                cols.append(np.full(m_fit, float(ABSENT[o.metric])))
                continue
            if o.metric not in metrics:
                exclude(f"no {o.metric} in this configuration", True)
                cols.append(np.full(m_fit, np.nan))
                continue
            self.seen_metrics.add(o.metric)
            cols.append(metrics[o.metric])
        obj = np.stack(cols, axis=1) if cols else np.zeros((m_fit, 0))
        absent = np.array([ABSENT.get(o.metric, np.nan) for o in self.objectives])
        exclude("objective not finite", ~(np.isfinite(obj) | (obj == absent)).all(axis=1))
        return BlockResult(n, counts, fit_idx[ok], obj[ok], {k: v[ok] for k, v in metrics.items()}, n_valid=n_valid,
                           status=code, valid_metrics=metrics)

    def _scalar_violations(self, technique, g, columns, shape, fit_idx, ok):
        """A technique's scalar ``violations`` hook, point by point (it has no ``violation_masks``)."""
        name = technique.name
        self.note(f"technique {name} has no array form of its constraints (a Technique's violations): "
                  "those points were checked one by one with the scalar estimate")
        bad = np.zeros(fit_idx.size, dtype=bool)
        axes = np.unravel_index(fit_idx, shape) if len(shape) > 1 else (fit_idx,)
        for j in np.flatnonzero(ok):
            config = dict(g.values)
            for path, col in columns.items():
                value = np.broadcast_to(np.asarray(col), shape)[tuple(a[j] for a in axes)]
                config[path] = space_value(self.space.param(path), value)
            res = self.point(config)
            bad[j] = res["valid"] and any(d["kind"] == name for d in res["result"]["violation_details"])
        return f"{name} constraints", bad
