"""Objectives and constraints of a search, read from the estimate's result keys.

An objective is a metric path in the estimate (``time.iteration``,
``cost.capital_usd``, ...; see :mod:`dse.estimate.economics`) and a direction.
Named ones cover the common cases; any other metric is ``{metric: a.b,
direction: minimize|maximize}``. A constraint bounds a metric (``budget``:
capital cost, ``power_cap``: power at the wall, ``min_ssd_lifetime``: years to the
SSDs' rated endurance) or ``{a.b: {max: X}}``. Memory capacity on every tier is
always a constraint (the estimate's feasibility).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dse import units
from dse.errors import InputError, suggest

SECONDS_PER_YEAR = 365.25 * 86400


@dataclass(frozen=True)
class Objective:
    name: str
    metric: str          # dotted path in the estimate result
    direction: str       # "minimize" | "maximize"
    label: str
    unit: str            # dse.units.fmt kind ("" = plain number)

    @property
    def sign(self) -> float:
        """+1 to minimise, -1 to maximise: ``sign * value`` is always minimised."""
        return 1.0 if self.direction == "minimize" else -1.0


@dataclass(frozen=True)
class Constraint:
    name: str
    metric: str
    sense: str           # "max": metric <= bound; "min": metric >= bound
    bound: float
    label: str
    unit: str
    tokens: float | None = None   # max_train_time: the tokens to train (the table shows the time they take)

    def violation(self, value):
        """Normalised violation, <= 0 when satisfied (optuna's convention). Array-safe."""
        scale = abs(self.bound) if self.bound else 1.0
        return (value - self.bound) / scale if self.sense == "max" else (self.bound - value) / scale


OBJECTIVES = {
    "time": ("time.iteration", "minimize", "iteration time", "s"),
    "throughput": ("throughput.tokens_per_s", "maximize", "tokens/s", "count"),
    "tokens_per_s": ("throughput.tokens_per_s", "maximize", "tokens/s", "count"),
    "cost": ("cost.capital_usd", "minimize", "capital cost", "USD"),
    "cost_per_token": ("cost.per_million_tokens_usd", "minimize", "USD per million tokens", "USD"),
    "energy": ("energy.per_token_j", "minimize", "energy per token", "J"),
    "ssd_lifetime": ("endurance.lifetime_years", "maximize", "SSD lifetime (years)", ""),
}
# Constraint name -> (metric, sense, unit kind for parsing, label, unit kind for printing)
CONSTRAINTS = {
    "budget": ("cost.capital_usd", "max", "USD", "budget (capital cost)", "USD"),
    "power_cap": ("energy.power_w", "max", "W", "power cap (at the wall)", "W"),
    "min_ssd_lifetime": ("endurance.lifetime_years", "min", "years", "minimum SSD lifetime (years)", ""),
}
# Where a metric comes from, for the error when a space cannot produce it.
METRIC_HINTS = {
    "endurance": "SSD lifetime exists only where something is written to drives: activations offloaded to SSDs "
                 "(plan.offload_activations: ssd) or storage offload (plan.offload_optimizer: nvme|csd, "
                 "plan.offload_params: nvme), and the space enables none of them",
}
# What a metric is worth where the estimate has no such key. A configuration that writes nothing to the
# drives never wears them out: its SSD lifetime is unlimited (inf). The estimate leaves its ``endurance``
# section out instead of reporting inf (json.dumps would write the invalid token Infinity); the search
# reads the absence as inf: best on the ssd_lifetime objective, and any min_ssd_lifetime is met (the
# constraint is skipped). A search's JSON export writes inf as null (dse.report.jsonout.plain).
ABSENT = {"endurance.lifetime_years": math.inf}


def parse_objectives(raw, where: str) -> list[Objective]:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise InputError(f"{where}: objectives: give at least one of {', '.join(OBJECTIVES)}")
    out = []
    for item in items:
        if isinstance(item, str) and item in OBJECTIVES:
            metric, direction, label, unit = OBJECTIVES[item]
            out.append(Objective(item, metric, direction, label, unit))
        elif isinstance(item, dict):
            bad = [k for k in item if k not in ("metric", "direction", "name")]
            if bad or "metric" not in item:
                raise InputError(f"{where}: objectives: a custom objective is "
                                 "{metric: a.b, direction: minimize|maximize}")
            direction = item.get("direction", "minimize")
            if direction not in ("minimize", "maximize"):
                raise InputError(f"{where}: objectives: direction {direction!r} is not one of minimize, maximize")
            metric = str(item["metric"])
            out.append(Objective(str(item.get("name", metric)), metric, direction, metric, ""))
        else:
            raise InputError(f"{where}: unknown objective {item!r}{suggest(str(item), OBJECTIVES)}; "
                             f"known: {', '.join(OBJECTIVES)}, or {{metric: a.b, direction: minimize}}")
    metrics = [o.metric for o in out]
    if len(set(metrics)) != len(metrics):
        raise InputError(f"{where}: objectives: the same metric is given twice")
    return out


def constraint_bound(key: str, value, where: str) -> float:
    """The bound of a named constraint (:data:`CONSTRAINTS`: ``budget``, ``power_cap``, ``min_ssd_lifetime``) from
    its text or number, > 0; ``where`` names it in errors (the space file's key, or the flag)."""
    kind = CONSTRAINTS[key][2]
    if kind == "years":
        bound = units.parse(value, "s", where)
        bound = bound / SECONDS_PER_YEAR if isinstance(value, str) else float(value)
    elif kind == "USD" and isinstance(value, str) and value.strip().upper().endswith(("M", "K", "B")):
        bound = _money(value, where)
    else:
        bound = units.parse(value, kind, where)
    if not bound > 0:
        raise InputError(f"{where}: must be greater than 0, got {value!r}")
    return float(bound)


def parse_constraints(raw, where: str) -> list[Constraint]:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: constraints: expected a mapping such as {{budget: $5M, power_cap: 500 kW}}")
    out = []
    for key, value in raw.items():
        key = str(key)
        if key in CONSTRAINTS:
            metric, sense, _, label, unit = CONSTRAINTS[key]
            if value is None:
                continue
            out.append(Constraint(key, metric, sense, constraint_bound(key, value, f"{where}: constraints.{key}"),
                                  label, unit))
        elif key == "max_train_time":
            out.append(train_time_constraint(value, f"{where}: constraints.{key}"))
        elif "." in key and isinstance(value, dict) and set(value) <= {"max", "min"} and value:
            for sense, bound in value.items():
                try:
                    b = float(bound) if not isinstance(bound, bool) else math.nan
                except (TypeError, ValueError):
                    b = math.nan
                if not math.isfinite(b):
                    raise InputError(f"{where}: constraints.{key}.{sense}: expected a finite number, got {bound!r}")
                out.append(Constraint(f"{key} {sense}", key, sense, b, f"{key} ({sense} {b:g})", ""))
        else:
            raise InputError(f"{where}: unknown constraint '{key}'{suggest(key, (*CONSTRAINTS, 'max_train_time'))}; "
                             f"known: {', '.join(CONSTRAINTS)}, max_train_time, or a metric path with {{max: X}} / "
                             "{min: X}")
    return out


def train_time_constraint(value, where: str) -> Constraint:
    """``max_train_time: {tokens: 500M, time: 24 h}``: train that many tokens within that time.

    Formula: hours to train = tokens / (tokens/s); within T exactly when tokens/s >= tokens / T, so the constraint
    bounds the estimate's ``throughput.tokens_per_s`` from below (a fine-tuning run's data set, e.g. 3 epochs of
    50,000 samples of 2,048 tokens = 307M tokens).

    >>> c = train_time_constraint({"tokens": "300M", "time": "24 h"}, "space")
    >>> c.metric, c.sense, round(c.bound, 1)
    ('throughput.tokens_per_s', 'min', 3472.2)
    """
    if not isinstance(value, dict) or set(value) != {"tokens", "time"}:
        raise InputError(f"{where}: expected {{tokens: 500M, time: 24 h}} (tokens to train and the time allowed)")
    tokens = _tokens(value["tokens"], f"{where}.tokens")
    seconds = units.parse(value["time"], "s", f"{where}.time")
    if not seconds > 0:
        raise InputError(f"{where}.time: must be greater than 0, got {value['time']!r}")
    label = f"train {units.fmt(tokens, 'count')} tokens within {units.fmt(seconds, 's')}"
    return Constraint("max_train_time", "throughput.tokens_per_s", "min", tokens / seconds, label, "count", tokens)


def _tokens(value, where: str) -> float:
    """500M, 1.5B, 2e9, 300000 -> tokens (> 0)."""
    text = str(value).strip().replace(",", "").replace("_", "")
    mult = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text[-1:].upper(), 1.0)
    try:
        n = float(text[:-1] if mult != 1.0 else text) * mult
    except ValueError:
        raise InputError(f"{where}: cannot parse {value!r} as a token count; write it like 500M, 1.5B or 2e9") from None
    if not n > 0:
        raise InputError(f"{where}: must be greater than 0, got {value!r}")
    return n


def _money(text: str, where: str) -> float:
    """'$5M', '2.5 k', '$1B' -> USD."""
    t = text.strip().lstrip("$").strip()
    mult = {"K": 1e3, "M": 1e6, "B": 1e9}[t[-1].upper()]
    try:
        return float(t[:-1].replace(",", "")) * mult
    except ValueError:
        raise InputError(f"{where}: cannot parse {text!r} as USD; write it like \"$5M\" or 5000000") from None


def lookup(result: dict, metric: str):
    """Value at a dotted path of a (composed or final) estimate dict, or None when absent."""
    node = result
    for key in metric.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def missing_metric_error(metric: str, what: str, source: str) -> InputError:
    hint = METRIC_HINTS.get(metric.split(".")[0], "")
    hint = f" ({hint})" if hint else ""
    return InputError(f"{source}: {what} needs '{metric}', which the estimate for this space does not produce{hint}")
