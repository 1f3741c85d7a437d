"""Evaluate the points of a space: a block at a time with numpy, or one point with the scalar estimate.

Vectorised path (:meth:`Evaluator.block`), for every numeric plan/hardware parameter:

1. the plan rules of :func:`dse.specs.plan.plan_rules` drop invalid combinations;
2. :func:`dse.estimate.base.compose_memory` and each active technique's memory half
   (:mod:`dse.estimate.technique`) give the memory on every tier — exact, or a floor
   (activation offload: the most offloading can free); points that do not fit, and
   plans needing more GPUs than the system has, are dropped
   (:func:`dse.estimate.feasibility.check`);
3. the remaining points (and the techniques' memory states) are gathered into flat
   arrays and only they get :func:`~dse.estimate.base.compose_time` and the techniques'
   time halves (cost, energy, drive wear included); then every constraint again (memory
   is final only now), the techniques' and the budget/power/lifetime ones.

Where more than :data:`GATHER_BELOW` of a block fits, step 3 composes time on the block's
broadcast arrays and gathers after (flat arrays cost more per point than a broadcast grid).
A technique written as one ``apply`` (:class:`~dse.estimate.technique.ModuleTechnique`)
knows its memory only after time: such a block is composed in full and checked
afterwards (same results, no pruning). :attr:`Evaluator.timed_points` counts the points
whose time was composed.

Scalar path (:meth:`Evaluator.point`): the same specs through
:func:`dse.estimate.run`, exactly what ``dse estimate`` computes; optuna trials and
the final report use it.

The code: this module builds the specs of a group and of a block's columns and holds
:class:`Evaluator`; :mod:`dse.search.block` is the vectorised path, :mod:`dse.search.point` the
scalar one, :mod:`dse.search.vector_check` the array-safety check, :mod:`dse.search.group` the
group and block types, :mod:`dse.search.gather` picks a block's points out of broadcast arrays.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dse.errors import InputError
from dse.search.block import MEMORY_METRICS, BlockEvaluation
from dse.search.group import GPUS_RULE, BlockResult, Group, load_hardware, replace_path
from dse.search.point import PointEvaluation
from dse.search.vector_check import VectorCheck

__all__ = ["Evaluator", "Group", "BlockResult", "replace_path", "load_hardware", "KEY_METRICS",
           "GATHER_BELOW", "MEMORY_METRICS", "GPUS_RULE"]

# Metrics recorded for every evaluated point (besides objectives and constraints).
KEY_METRICS = ("time.iteration", "throughput.tokens_per_s", "throughput.mfu", "memory.gpu.total",
               "memory.gpu.capacity", "cost.capital_usd", "cost.per_million_tokens_usd", "energy.per_token_j",
               "energy.power_w", "gpus", "nodes", "memory.sram.total", "memory.sram.capacity")
GATHER_BELOW = 0.5    # see Evaluator.gather_below


class Evaluator(PointEvaluation, BlockEvaluation, VectorCheck):
    """Builds specs for a space's points and evaluates them (see the module docstring).

    The specs of a group and of a block's columns are built here; one point is scored by
    :class:`~dse.search.point.PointEvaluation`, one block by :class:`~dse.search.block.BlockEvaluation`,
    the array-safety check is :class:`~dse.search.vector_check.VectorCheck`.
    """

    def __init__(self, space):
        from dse.estimate import techniques

        self.space = space
        self.objectives = space.objectives
        self.constraints = space.constraints
        self.techniques = techniques()
        self.record = list(dict.fromkeys([o.metric for o in self.objectives] + [c.metric for c in self.constraints]
                                         + list(KEY_METRICS)))
        self.reasons = ["feasible"]        # status codes of evaluated points
        self.seen_metrics: set = set()     # objective/constraint metrics some evaluated point produced
        self.notes: list = []
        self._groups: dict = {}
        self.timed_points = 0              # points whose time was composed (memory-first pruning skips the rest)
        # Compose time on the gathered points that fit only when they are at most this share of a block: a flat
        # gathered array costs several times more per point than the block's broadcast grid (bench_search.py,
        # technique sweeps: gathering always was ~20 % slower on storage offload, where blocks fit 30-70 %).
        self.gather_below = GATHER_BELOW

    def reason_code(self, reason: str) -> int:
        if reason not in self.reasons:
            self.reasons.append(reason)
        return self.reasons.index(reason)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # ------------------------------------------------------------------ specs

    def overrides(self, config: dict):
        """(model ref, hardware ref, [(head, path list, value)]) for a configuration."""
        sp = self.space
        items = [(p, v) for p, v in sp.fixed] + [(p, v) for p, v in config.items()
                                                 if p not in ("model", "hardware", "gpus")]
        out = []
        for path, value in items:
            head, *rest = path.split(".")
            out.append((head, rest, value))
        out.sort(key=lambda x: (x[0] != "hardware", len(x[1])))  # a component before its sub-fields
        return config.get("model", sp.model), config.get("hardware", sp.hardware), out

    def group(self, values: dict) -> Group:
        """Specs of one group (cached); numeric parameters take their first value until a block replaces them."""
        key = tuple(values.items())
        g = self._groups.get(key)
        if g is not None:
            return g
        from dse.catalog import load_model
        from dse.specs import _schema
        from dse.specs.plan import Plan

        config = dict(values)
        for p in self.space.params:
            if p.path not in config and p.path != "gpus":
                config[p.path] = p.values[0] if p.discrete else p.low
        mref, href, items = self.overrides(config)
        g = Group(values=dict(values))
        try:
            g.model = load_model(mref, [(r, v) for h, r, v in items if h == "model"])
            g.system = load_hardware(href, [(r, v) for h, r, v in items if h == "hardware"])
            data = {}
            for h, r, v in items:
                if h == "plan":
                    _schema.set_path(data, r, v, Plan, "plan.")
            g.plan = _schema.build(Plan, data, "plan")
        except InputError as exc:
            g.error = str(exc)
        if len(self._groups) > 4096:
            self._groups.clear()
        self._groups[key] = g
        return g

    def _specs(self, g: Group, columns: dict):
        """(system, unresolved plan, extra rules) with the numeric columns in place."""
        system, plan = g.system, g.plan
        gpus = None
        for path, value in columns.items():
            if path == "gpus":
                gpus = value
                continue
            head, *rest = path.split(".")
            if head == "plan":
                plan = replace_path(plan, rest, value)
            elif head == "hardware":
                system = replace_path(system, rest, value)
        rules = {}
        if gpus is None:                    # gpus grouped in Python: part of the group's values
            gpus = g.values.get("gpus")
        if gpus is not None:
            tp_pp = plan.tp * plan.pp * plan.cp     # the GPUs of one replica (cp ranks replicate it like tp)
            rules[GPUS_RULE] = gpus % tp_pp == 0
            scalar = isinstance(tp_pp, int) and isinstance(gpus, int)     # dp >= 1 also where the rule fails
            plan = dataclasses.replace(plan, dp=max(gpus // tp_pp, 1) if scalar
                                       else np.maximum(np.floor_divide(gpus, tp_pp), 1))
        return system, plan, rules

    def active_techniques(self, plan) -> list:
        """The techniques that change this plan's estimate (``active(plan)``: its string/bool fields)."""
        return [t for t in self.techniques if t.active(plan)]

    def sweep(self, grid) -> tuple[int, int]:
        """Every block of ``grid`` (a :class:`~dse.search.grid.Grid` of this space) through the block path.

        Returns (points that pass the plan rules, feasible points). The search keeps each block's results
        (:mod:`dse.search.exhaustive`); this only counts them: what the benchmark and the tests of the
        block path run.
        """
        valid = feasible = 0
        for gi in range(grid.n_groups):
            g = self.group(grid.group_values(gi))
            for _, shape, cols in grid.blocks():
                res = self.block(g, shape, cols)
                valid += res.n_valid
                feasible += res.feasible.size
        return valid, feasible

