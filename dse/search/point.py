"""One point of a search space through the scalar estimate, and its objectives and constraints.

Part of :class:`dse.search.evaluate.Evaluator` (a mixin: the attributes it reads, ``space``,
``objectives``, ``constraints``, ``record``, ``seen_metrics``, and the methods ``group`` and
``_specs``, are the evaluator's). optuna trials, the engines' verification and the final
report use it: exactly what ``dse estimate`` computes.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dse.errors import InputError
from dse.estimate import feasibility
from dse.search.group import GPUS_RULE
from dse.search.objectives import ABSENT, lookup, missing_metric_error


class PointEvaluation:
    """:meth:`point` (one configuration), :meth:`score` (one estimate's objectives and constraints)."""

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
            config = {p.path: rng.choice(p.values) if p.discrete else rng.uniform(p.low, p.high)
                      for p in self.space.params}
            valid += self.point(config)["valid"]
        if valid:
            self.check_metrics()

    def check_metrics(self) -> None:
        """After a search: an objective or constraint no evaluated point produced is an input error."""
        for what, metric in ([(f"objective {o.name}", o.metric) for o in self.objectives]
                             + [(f"constraint {c.name}", c.metric) for c in self.constraints]):
            if metric not in self.seen_metrics:
                raise missing_metric_error(metric, what, self.space.source)
