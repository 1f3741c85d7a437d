"""Evaluate the points of a space: a block at a time with numpy, or one point with the scalar estimate.

Vectorised path (:meth:`Evaluator.block`), for every numeric plan/hardware parameter:

1. the plan rules of :func:`dse.specs.plan.plan_rules` drop invalid combinations;
2. :func:`dse.estimate.base.compose_memory` (and each technique's ``apply_memory``)
   gives the memory on every tier; points that do not fit are dropped;
3. the remaining points are gathered into flat arrays and only they get
   :func:`~dse.estimate.base.compose_time`, the techniques' time part and the
   cost/energy sections; then the budget/power/lifetime constraints.

If a technique module has not split ``apply`` into ``apply_memory``/``apply_time``,
step 2 cannot know the final memory, so the block is composed in full and checked
afterwards (same results, less pruning).

Scalar path (:meth:`Evaluator.point`): the same specs through
:func:`dse.estimate.run`, exactly what ``dse estimate`` computes; optuna trials and
the final report use it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dse.errors import InputError
from dse.search.objectives import lookup, missing_metric_error

# Metrics recorded for every evaluated point (besides objectives and constraints).
KEY_METRICS = ("time.iteration", "throughput.tokens_per_s", "throughput.mfu", "memory.gpu.total",
               "memory.gpu.capacity", "cost.capital_usd", "cost.per_million_tokens_usd", "energy.per_token_j",
               "energy.power_w", "gpus", "nodes")
MEMORY_METRICS = ("memory.gpu.total", "memory.gpu.capacity", "gpus", "nodes")
GPUS_RULE = "gpus not divisible by tp x pp"


# ----------------------------------------------------------------------------- helpers


def tune_allocator() -> bool:
    """Let glibc serve numpy's block-sized temporaries from its heap (Linux only).

    By default glibc maps every allocation above 128 KiB with a fresh ``mmap`` and
    unmaps it on free, so each temporary array of a block costs system calls and
    page faults: on flat 131,072-point columns that halved the rate of the composed
    estimate (benchmarks/bench_search.py prints both). Raising the mmap threshold to
    32 MiB and keeping up to 256 MiB of freed heap avoids that; memory stays bounded
    by the block size. Returns whether the settings took effect.
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3      # <malloc.h>
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 256 << 20)
                    and libc.mallopt(m_top_pad, 16 << 20))
    except (OSError, AttributeError):    # not glibc (musl, ...): keep the defaults
        return False



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
    system: object = None
    plan: object = None           # unresolved Plan (numeric vector fields replaced per block)
    error: str | None = None      # the specs cannot be built: every point of the group is excluded


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


# ----------------------------------------------------------------------------- evaluator


class Evaluator:
    """Builds specs for a space's points and evaluates them (see the module docstring)."""

    def __init__(self, space):
        from dse.estimate import techniques

        self.space = space
        self.objectives = space.objectives
        self.constraints = space.constraints
        self.techniques = techniques()
        self.memory_first = all(hasattr(t, "apply_memory") and hasattr(t, "apply_time") for t in self.techniques)
        self.record = list(dict.fromkeys([o.metric for o in self.objectives] + [c.metric for c in self.constraints]
                                         + list(KEY_METRICS)))
        self.reasons = ["feasible"]        # status codes of evaluated points
        self._groups: dict = {}

    def reason_code(self, reason: str) -> int:
        if reason not in self.reasons:
            self.reasons.append(reason)
        return self.reasons.index(reason)

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
        from dse.catalog import load_model, load_system
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
            g.system = load_system(href, [(r, v) for h, r, v in items if h == "hardware"])
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
        """(system, resolved plan, extra rules) with the numeric columns in place."""
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
        return system, plan.resolved(g.model), rules

    # ------------------------------------------------------------------ one point (scalar estimate)

    def point(self, config: dict) -> dict:
        """Evaluate one configuration with :func:`dse.estimate.run`.

        Returns ``{"valid": bool, "reason": str, "result": dict, "values": [..],
        "constraints": {name: violation}, "feasible": bool, "metrics": {..}}``.
        """
        from dse.estimate import run
        from dse.specs.plan import check_plan, plan_rules

        gvals = {p.path: config[p.path] for p in self.space.params if p.group and p.path in config}
        g = self.group(gvals)
        if g.error:
            return {"valid": False, "reason": g.error}
        cols = {p: v for p, v in config.items() if p not in gvals and p not in ("model", "hardware")}
        system, plan, rules = self._specs(g, cols)
        if rules and not all(rules.values()):
            return {"valid": False, "reason": GPUS_RULE}
        try:
            check_plan(plan, g.model)
        except InputError as exc:   # named like the vectorised rules, so counts add up across engines
            broken = [name for name, ok in plan_rules(plan, g.model).items() if not ok]
            return {"valid": False, "reason": broken[0] if broken else str(exc).split(": ", 1)[-1]}
        r = run(g.model, system, plan)
        return self.score(r)

    def score(self, r: dict) -> dict:
        """Objectives, constraint violations and feasibility of one estimate result."""
        violations = list(r["violations"])
        reasons = []                                # the names the vectorised path counts under
        for tier, mem in r["memory"].items():      # every tier, also ones techniques add
            if mem.get("total", 0) > mem.get("capacity", math.inf):
                reasons.append(f"{tier} memory capacity")
                if tier not in ("gpu", "host", "storage"):
                    violations.append(f"{tier} memory")
        if r["parallelism"]["gpus"] > r["hardware"]["nodes"] * r["hardware"]["gpus_per_node"]:
            reasons.append("more GPUs than the system has")
        extra = [v for v in r["violations"] if not v.startswith(("gpu memory", "host memory", "storage memory",
                                                                  "the plan needs"))]
        reasons += extra
        cons = {}
        for c in self.constraints:
            v = lookup(r, c.metric)
            if v is None:
                raise missing_metric_error(c.metric, f"constraint {c.name}", self.space.source)
            cons[c.name] = float(c.violation(float(v)))
            if cons[c.name] > 0:
                violations.append(c.label)
                reasons.append(c.label)
        values = []
        for o in self.objectives:
            v = lookup(r, o.metric)
            if v is None:
                raise missing_metric_error(o.metric, f"objective {o.name}", self.space.source)
            values.append(float(v))
        if not all(math.isfinite(v) for v in values):
            reasons.append("objective not finite")
            violations.append("objective not finite")
        metrics = {m: float(v) for m in self.record if isinstance(v := lookup(r, m), (int, float, np.number))}
        return {"valid": True, "reason": "", "result": r, "values": values, "constraints": cons,
                "feasible": not violations, "violations": violations, "reasons": reasons, "metrics": metrics}

    def memory_violation(self, r: dict) -> dict:
        """Normalised memory overflow per tier (<= 0 fits), for optuna's constraints."""
        out = {}
        for tier, mem in r["memory"].items():
            cap = mem.get("capacity", 0.0)
            total = mem.get("total", 0.0)
            if cap > 0:
                out[f"memory.{tier}"] = (total - cap) / cap
            elif total > 0:
                out[f"memory.{tier}"] = 1.0
        par = r["parallelism"]
        hw = r["hardware"]
        avail = hw["nodes"] * hw["gpus_per_node"]
        out["gpus available"] = (par["gpus"] - avail) / avail
        return out

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
        from dse.estimate import base, economics
        from dse.specs.plan import plan_rules

        model = g.model
        system, plan, extra = self._specs(g, columns)
        # 1. plan rules: each excluded point is counted under the first rule it breaks
        valid = np.ones(shape, dtype=bool)
        for name, ok in list(extra.items()) + list(plan_rules(plan, model).items()):
            if ok is True:
                continue
            bad = valid & ~_full(ok, shape)
            k = int(np.count_nonzero(bad))
            if k:
                counts[name] = counts.get(name, 0) + k
                valid &= ~bad
        n_valid = int(np.count_nonzero(valid))
        if n_valid == 0:
            return empty
        empty = dataclasses.replace(empty, n_valid=n_valid)
        # 2. memory (and the GPUs the system has)
        if self.memory_first:
            c = base.compose_memory(model, system, plan, None)
            for t in self.techniques:
                t.apply_memory(c, model, system, plan, None)
        else:
            c = base.compose(model, system, plan, None)
            for t in self.techniques:
                t.apply(c, model, system, plan, None)
        fits = valid.copy()
        for tier, mem in c["memory"].items():
            over = fits & _full(mem["total"] > mem["capacity"], shape)
            k = int(np.count_nonzero(over))
            if k:
                counts[f"{tier} memory capacity"] = counts.get(f"{tier} memory capacity", 0) + k
                fits &= ~over
        over = fits & _full(c["gpus"] > system.nodes * system.node.gpus_per_node, shape)
        if over.any():
            counts["more GPUs than the system has"] = counts.get("more GPUs than the system has", 0) + int(over.sum())
            fits &= ~over
        valid_idx = np.flatnonzero(valid) if want_all else None
        fit_idx = np.flatnonzero(fits)
        if want_all:
            status = np.zeros(valid_idx.size, dtype=np.int16)
            vm = {m: np.full(valid_idx.size, np.nan) for m in self.record}
            gv = _Gather(valid_idx, shape)
            for m in MEMORY_METRICS:
                x = lookup(c, m)
                if x is not None:
                    vm[m] = np.full(valid_idx.size, float(x)) if np.ndim(x) == 0 else gv(x).astype(float)
            notfit = ~np.isin(valid_idx, fit_idx, assume_unique=True)
            for tier, mem in c["memory"].items():
                over = notfit & np.broadcast_to(gv(np.asarray(mem["total"] > mem["capacity"])), notfit.shape)
                status[over & (status == 0)] = self.reason_code(f"{tier} memory capacity")
            status[notfit & (status == 0)] = self.reason_code("more GPUs than the system has")
        if fit_idx.size == 0:
            res = dataclasses.replace(empty)
            if want_all:
                res.valid, res.status, res.valid_metrics = valid_idx, status, vm
            return res
        # 3. time, techniques, cost and energy only for the points that fit
        G = _Gather(fit_idx, shape)
        if self.memory_first:
            c = G(c)
            system1, plan1 = G(system), G(plan)
            base.compose_time(c, model, system1, plan1, None)
            for t in self.techniques:
                t.apply_time(c, model, system1, plan1, None)
            economics.apply(c, model, system1, plan1, None)
        else:
            economics.apply(c, model, system, plan, None)
            c = G(c)
        m_fit = fit_idx.size
        ok = np.ones(m_fit, dtype=bool)
        code = np.zeros(m_fit, dtype=np.int16)
        for item in c.get("extra_violations", []):
            msg, bad = (item, True) if isinstance(item, str) else item
            bad = np.broadcast_to(np.asarray(bad), (m_fit,)) & ok
            k = int(np.count_nonzero(bad))
            if k:
                counts[msg] = counts.get(msg, 0) + k
                code[bad] = self.reason_code(msg)
                ok &= ~bad
        metrics = {}
        for m in self.record:
            x = lookup(c, m)
            if x is not None and not isinstance(x, dict):
                metrics[m] = np.broadcast_to(np.asarray(x, dtype=float), (m_fit,))
        for con in self.constraints:
            if con.metric not in metrics:
                raise missing_metric_error(con.metric, f"constraint {con.name}", self.space.source)
            bad = ok & ~(con.violation(metrics[con.metric]) <= 0)
            k = int(np.count_nonzero(bad))
            if k:
                counts[con.label] = counts.get(con.label, 0) + k
                code[bad] = self.reason_code(con.label)
                ok &= ~bad
        cols = []
        for o in self.objectives:
            if o.metric not in metrics:
                raise missing_metric_error(o.metric, f"objective {o.name}", self.space.source)
            cols.append(metrics[o.metric])
        obj = np.stack(cols, axis=1) if cols else np.zeros((m_fit, 0))
        finite = np.isfinite(obj).all(axis=1)
        bad = ok & ~finite
        if bad.any():
            counts["objective not finite"] = counts.get("objective not finite", 0) + int(bad.sum())
            code[bad] = self.reason_code("objective not finite")
            ok &= ~bad
        res = BlockResult(n, counts, fit_idx[ok], obj[ok], {k: v[ok] for k, v in metrics.items()}, n_valid=n_valid)
        if want_all:
            pos = np.searchsorted(valid_idx, fit_idx)
            status[pos] = code
            for k, v in metrics.items():
                vm[k][pos] = v
            res.valid, res.status, res.valid_metrics = valid_idx, status, vm
        return res

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
