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
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dse.errors import InputError
from dse.estimate import feasibility
from dse.search.objectives import ABSENT, lookup, missing_metric_error

# Metrics recorded for every evaluated point (besides objectives and constraints).
KEY_METRICS = ("time.iteration", "throughput.tokens_per_s", "throughput.mfu", "memory.gpu.total",
               "memory.gpu.capacity", "cost.capital_usd", "cost.per_million_tokens_usd", "energy.per_token_j",
               "energy.power_w", "gpus", "nodes", "memory.sram.total", "memory.sram.capacity")
GATHER_BELOW = 0.5    # see Evaluator.gather_below
MEMORY_METRICS = ("memory.gpu.total", "memory.gpu.capacity", "gpus", "nodes")


def _python(param, value):
    """A numpy value of a vector parameter back as the space wrote it (int or float)."""
    v = float(value)
    return int(v) if param is not None and param.kind == "int" else v
GPUS_RULE = "gpus not divisible by tp x pp"


# ----------------------------------------------------------------------------- helpers


def replace_path(obj, path: list[str], value):
    """Copy of a (frozen) spec tree with the field at ``path`` replaced; no validation."""
    key = path[0]
    if isinstance(obj, dict):
        return {**obj, key: value if len(path) == 1 else replace_path(obj[key], path[1:], value)}
    if len(path) == 1:
        return dataclasses.replace(obj, **{key: value})
    return dataclasses.replace(obj, **{key: replace_path(getattr(obj, key), path[1:], value)})


class _Gather:
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


def _full(x, shape):
    return np.broadcast_to(np.asarray(x), shape)


@dataclasses.dataclass
class Group:
    values: dict                  # group parameter -> value
    model: object = None
    system: object = None         # a GPU SystemSpec or a chiplet package
    plan: object = None           # unresolved Plan (numeric vector fields replaced per block)
    error: str | None = None      # the specs cannot be built: every point of the group is excluded

    @property
    def backend(self):
        """The hardware backend of the group's system (:mod:`dse.estimate.backends`)."""
        from dse.estimate.backends import backend

        return backend(self.system)


@dataclasses.dataclass
class BlockResult:
    n: int                                          # points in the block
    counts: dict                                    # exclusion reason -> points
    feasible: np.ndarray                            # local flat indices of feasible points
    objectives: np.ndarray                          # (n_feasible, n_objectives), as reported (not sign-flipped)
    metrics: dict                                   # metric -> array over feasible points
    valid: np.ndarray | None = None                 # local indices of every evaluated (rule-valid) point
    status: np.ndarray | None = None                # reason index per valid point (0 = feasible)
    valid_metrics: dict | None = None               # metric -> array over valid points (NaN where not computed)
    n_valid: int = 0                                # points that passed the plan rules (evaluated)


def _count(counts: dict, reason: str, k: int) -> None:
    if k:
        counts[reason] = counts.get(reason, 0) + k


def load_hardware(ref, overrides=()):
    """A GPU system or a chiplet package, from a catalog name, a file or a spec (:func:`dse.catalog.load_hardware`)."""
    from dse.catalog import load_hardware as load

    return load(ref, list(overrides))


# ----------------------------------------------------------------------------- evaluator


class Evaluator:
    """Builds specs for a space's points and evaluates them (see the module docstring)."""

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
        items = [(p, v) for p, v in sp.fixed] + [(p, v) for p, v in config.items() if p not in ("model", "hardware", "gpus")]
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
            tp_pp = plan.tp * plan.pp
            rules[GPUS_RULE] = gpus % tp_pp == 0
            scalar = isinstance(tp_pp, int) and isinstance(gpus, int)     # dp >= 1 also where the rule fails
            plan = dataclasses.replace(plan, dp=max(gpus // tp_pp, 1) if scalar
                                       else np.maximum(np.floor_divide(gpus, tp_pp), 1))
        return system, plan, rules

    def active_techniques(self, plan) -> list:
        """The techniques that change this plan's estimate (``active(plan)``: its string/bool fields)."""
        return [t for t in self.techniques if t.active(plan)]

    # ------------------------------------------------------------------ one point (scalar estimate)

    def point(self, config: dict) -> dict:
        """Evaluate one configuration exactly as ``dse estimate`` would (:func:`dse.estimate.make_plan`, ``run``).

        Returns ``{"valid": bool, "reason": str, "result": dict, "values": [..],
        "constraints": {name: violation}, "feasible": bool, "metrics": {..}}``.
        """
        from dse.estimate import make_plan, run
        from dse.specs.plan import plan_rules

        gvals = {p.path: config[p.path] for p in self.space.params if p.group and p.path in config}
        g = self.group(gvals)
        if g.error:
            return {"valid": False, "reason": g.error}
        cols = {p: v for p, v in config.items() if p not in gvals and p not in ("model", "hardware")}
        system, plan, rules = self._specs(g, cols)
        if rules and not all(rules.values()):
            return {"valid": False, "reason": GPUS_RULE}
        data = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
        try:
            plan = make_plan(g.model, system, {k: v for k, v in data.items() if v is not None})
        except InputError as exc:   # named like the vectorised rules, so counts add up across engines
            try:
                resolved = g.plan.__class__(**data).resolved(g.model, system)
                broken = [name for name, ok in plan_rules(resolved, g.model, system).items() if not ok]
            except (InputError, TypeError, ValueError):
                broken = []
            return {"valid": False, "reason": broken[0] if broken else str(exc).split(": ", 1)[-1]}
        return self.score(run(g.model, system, plan))

    def score(self, r: dict) -> dict:
        """Objectives, constraint violations and feasibility of one estimate result."""
        violations = list(r["violations"])
        # the names the vectorised path counts under (dse.estimate.feasibility.Violation.reason)
        reasons = [d["reason"] for d in r.get("violation_details", [])]
        cons = {}
        for c in self.constraints:
            v = lookup(r, c.metric)
            if v is None:          # the constraint does not apply here (e.g. no drives written: no wear)
                continue
            self.seen_metrics.add(c.metric)
            cons[c.name] = float(c.violation(float(v)))
            if cons[c.name] > 0:
                violations.append(c.label)
                reasons.append(c.label)
        values = []
        for o in self.objectives:
            v = lookup(r, o.metric)
            if v is None and o.metric in ABSENT:   # e.g. no drive writes: unlimited SSD lifetime (objectives.ABSENT)
                values.append(float(ABSENT[o.metric]))
                continue
            if v is None:
                violations.append(f"no {o.metric}")
                reasons.append(f"no {o.metric} in this configuration")
                values.append(float("nan"))
                continue
            self.seen_metrics.add(o.metric)
            values.append(float(v))

        def finite(v, o):
            return math.isfinite(v) or v == ABSENT.get(o.metric)
        if not all(finite(v, o) for v, o in zip(values, self.objectives)):
            if not any(x.startswith("no ") for x in reasons):
                reasons.append("objective not finite")
                violations.append("objective not finite")
            values = [v if finite(v, o) else (1e300 if o.sign > 0 else -1e300) for v, o in zip(values, self.objectives)]
        metrics = {m: float(v) for m in self.record if isinstance(v := lookup(r, m), (int, float, np.number))}
        return {"valid": True, "reason": "", "result": r, "values": values, "constraints": cons,
                "feasible": not violations, "violations": violations, "reasons": reasons, "metrics": metrics}

    def memory_violation(self, r: dict) -> dict:
        """Normalised memory overflow per tier (<= 0 fits), and GPUs beyond the system's, for optuna's constraints."""
        out = {}
        for v in feasibility.memory_checks(r["memory"]):
            if v.available > 0:
                out[f"memory.{v.tier}"] = (v.needed - v.available) / v.available
            elif v.needed > 0:
                out[f"memory.{v.tier}"] = 1.0
        hw = r.get("hardware", {})
        if "gpus_per_node" in hw:
            avail = hw["nodes"] * hw["gpus_per_node"]
            out["gpus available"] = (r["parallelism"]["gpus"] - avail) / avail
        return out

    def probe(self, samples: int = 32, seed: int = 0) -> None:
        """Evaluate a few random points first: a metric none of the valid ones produces is an input error."""
        import random

        rng = random.Random(seed)
        valid = 0
        for _ in range(samples):
            config = {p.path: rng.choice(p.values) if p.discrete else rng.uniform(p.low, p.high) for p in self.space.params}
            valid += self.point(config)["valid"]
        if valid:
            self.check_metrics()

    def check_metrics(self) -> None:
        """After a search: an objective or constraint no evaluated point produced is an input error."""
        for what, metric in ([(f"objective {o.name}", o.metric) for o in self.objectives]
                             + [(f"constraint {c.name}", c.metric) for c in self.constraints]):
            if metric not in self.seen_metrics:
                raise missing_metric_error(metric, what, self.space.source)

    # ------------------------------------------------------------------ a block (numpy)

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
            over = fits & _full(bad, shape)
            _count(counts, reason, int(np.count_nonzero(over)))
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
        G = _Gather(fit_idx, shape)
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
            bad = valid & ~_full(ok, shape)
            _count(counts, name, int(np.count_nonzero(bad)))
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
        gv = _Gather(valid_idx, shape)
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
                _count(counts, reason, k)
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
                config[path] = _python(self.space.param(path), value)
            res = self.point(config)
            bad[j] = res["valid"] and any(d["kind"] == name for d in res["result"]["violation_details"])
        return f"{name} constraints", bad

    # ------------------------------------------------------------------ array-safety check

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
