"""Run a search end to end: pick the engine, run it, check and describe the answer.

:func:`search` returns a plain dict (JSON-ready apart from numpy arrays in
``history``): the best configuration (or the Pareto front), the top-k distinct
configurations, every trial (optuna), counts of what was excluded and why. The
reported configurations are re-estimated one by one with the scalar estimate
(``dse estimate``'s code path): their metrics and bottleneck come from there, and
a disagreement with the vectorised value is reported in ``notes``.
"""

from __future__ import annotations

import time

import numpy as np

from dse.errors import InputError
from dse.search.evaluate import Evaluator
from dse.search.grid import Grid

AUTO_MAX_SECONDS = 20.0     # --engine auto exhausts spaces expected to finish within this
AUTO_RATE = 1.0e6           # points/s assumed for that estimate (benchmarks/bench_search.py measures more)
AUTO_BLOCK_SECONDS = 0.004  # fixed cost per block (Python overhead of one composed estimate)
DEFAULT_CHUNK = 1 << 17     # points per block: bounds memory (~100 MB at most)


def split_params(space):
    """(group params, vector params): names, flags and model fields are grouped in Python."""
    group, vector = [], []
    for p in space.params:
        if p.group or not p.numeric or p.path in ("model", "hardware") or p.path.startswith("model."):
            group.append(p)
        else:
            vector.append(p)
    return group, vector


def expected_seconds(grid: Grid) -> float:
    return grid.size / AUTO_RATE + grid.n_groups * grid.n_blocks * AUTO_BLOCK_SECONDS


def choose_engine(space, engine: str, chunk: int = DEFAULT_CHUNK) -> tuple[str, str]:
    """(engine, reason) for ``--engine auto|optuna|exhaustive``."""
    if engine not in ("auto", "optuna", "exhaustive"):
        raise InputError(f"--engine {engine!r} is not one of auto, optuna, exhaustive")
    if not space.discrete:
        cont = next(p.path for p in space.params if not p.discrete)
        if engine == "exhaustive":
            raise InputError(f"--engine exhaustive needs a discrete space; {cont} is a continuous range "
                             f"(give it a step, num, log2 or a list)")
        return "optuna", f"{cont} is continuous"
    group, vector = split_params(space)
    grid = Grid(group, vector, chunk)
    secs = expected_seconds(grid)
    if engine == "auto":
        if secs <= AUTO_MAX_SECONDS:
            return "exhaustive", f"{grid.size:,} points, about {max(secs, 0.1):.1f} s to evaluate them all"
        return "optuna", f"{grid.size:,} points would take about {secs:.0f} s to exhaust"
    return engine, ""


SEED_MAX = 2 ** 32 - 1


def search(space, *, engine: str = "auto", trials: int = 300, seed: int | None = 0, storage: str | None = None,
           study: str | None = None, top: int = 10, chunk: int = DEFAULT_CHUNK, progress=None, sink=None,
           sampler: dict | None = None) -> dict:
    """Search ``space`` (a :class:`~dse.search.space.Space`); see the module docstring.

    Returns a :class:`~dse.search.result.SearchResult`: the result ``dict`` (``ranked``, ``evaluated``, ...) that
    renders as a table in Jupyter and converts to pandas (``to_dataframe()``).

    ``progress(done, total, best)`` is called as the search advances; ``sink`` (an
    :class:`~dse.search.output.Exporter`) receives every evaluated point when given.
    """
    if trials < 1:
        raise InputError(f"--trials {trials}: must be at least 1")
    if top < 1:
        raise InputError(f"--top {top}: must be at least 1")
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise InputError(f"--seed {seed}: must be between 0 and {SEED_MAX} (optuna's samplers seed numpy's "
                         "RandomState, which takes 0 to 2**32 - 1)")
    engine, why = choose_engine(space, engine, chunk)
    ev = Evaluator(space)
    notes = []
    t0 = time.perf_counter()
    if engine == "exhaustive":
        out = _exhaustive(space, ev, top, chunk, seed, progress, sink, notes)
    else:
        ev.probe(seed=seed or 0)
        out = _optuna(space, ev, trials, seed, storage, study, top, progress, sink, notes, sampler)
    if out.get("evaluated"):
        ev.check_metrics()
    notes.extend(ev.notes)
    out.update(engine=engine, engine_reason=why, elapsed=time.perf_counter() - t0)
    out["notes"] = notes + out.get("notes", [])
    out["space"] = describe_space(space)
    out["objectives"] = [{"name": o.name, "metric": o.metric, "direction": o.direction} for o in space.objectives]
    out["constraints"] = [{"name": c.name, "metric": c.metric, "sense": c.sense, "bound": c.bound}
                          for c in space.constraints]
    if not out["ranked"]:
        out["no_feasible"] = no_feasible_message(out["excluded"], out.get("evaluated", 0))
        if space.discrete:
            shares = violation_shares(space, ev, chunk, seed)
            if shares:
                out["violation_shares"] = shares
                n = shares.pop("_sampled")
                out["no_feasible"] += f"; every check on a sample of {n:,} valid points (a point may fail several): " \
                    + ", ".join(f"{k} {100 * v:.0f}%" for k, v in shares.items())
    from dse.search.result import SearchResult

    return SearchResult(out)


def violation_shares(space, ev, chunk: int, seed, sample: int = 200) -> dict:
    """For a space with no feasible point: the share of valid points each check rejects, every check counted.

    The counts of :func:`no_feasible_message` follow the evaluation order (a point that does not fit in memory is
    never priced), so a budget that nothing meets can hide behind memory; this samples up to ``sample`` points
    that pass the plan rules, estimates each in full (the scalar path) and counts every reason it fails.
    Returns {reason: share} sorted by share, plus ``_sampled``.
    """
    group, vector = split_params(space)
    grid = Grid(group, vector, chunk)
    rng = np.random.default_rng(0 if seed is None else seed)
    n = min(grid.size, 20 * sample)
    idx = rng.choice(grid.size, size=n, replace=False) if grid.size > n else np.arange(grid.size)
    counts, valid = {}, 0
    for i in idx:
        s = ev.point(grid.config(int(i)))
        if not s["valid"]:
            continue
        valid += 1
        for reason in dict.fromkeys(s["reasons"]):
            counts[reason] = counts.get(reason, 0) + 1
        if valid >= sample:
            break
    if not valid:
        return {}
    shares = dict(sorted(((k, v / valid) for k, v in counts.items()), key=lambda kv: -kv[1]))
    return {**shares, "_sampled": valid}


def describe_space(space) -> dict:
    return {"name": space.name, "source": space.source, "model": space.model, "hardware": space.hardware,
            "size": space.size if space.discrete else None,
            "fixed": dict(space.fixed),
            "parameters": {p.path: list(p.values) if p.discrete else {"min": p.low, "max": p.high, "log": p.log}
                           for p in space.params}}


def no_feasible_message(excluded: dict, evaluated: int) -> str:
    if not excluded:
        return "no feasible configuration"
    name, n = max(excluded.items(), key=lambda kv: kv[1])
    total = sum(excluded.values())
    rest = sorted(((k, v) for k, v in excluded.items() if k != name), key=lambda kv: -kv[1])[:3]
    also = "; then " + ", ".join(f"{k} ({v:,})" for k, v in rest) if rest else ""
    return (f"no feasible configuration: {name} excluded the most ({n:,} of {total:,} excluded points){also} "
            "(each point is counted under the first check it failed, in the order plan rules, memory, "
            "constraints)")


# ----------------------------------------------------------------------------- engines


def _exhaustive(space, ev, top, chunk, seed, progress, sink, notes) -> dict:
    from dse.search import exhaustive

    group, vector = split_params(space)
    demoted, why = ev.vector_check(vector, group, seed=seed or 0)
    if demoted:
        for p in demoted:
            p.group = True
        group, vector = split_params(space)
        notes.extend(why)
    grid = Grid(group, vector, chunk)
    total = grid.size

    def prog(done, best):
        if progress:
            progress(done, total, best)

    def row_sink(index, status, metrics):
        params = grid.decode(index)
        sink.points({"index": index, "params": params, "status": [ev.reasons[s] for s in status.tolist()],
                     "metrics": metrics})
    raw = exhaustive.run(space, ev, grid, top=top, progress=prog, sink=row_sink if sink is not None else None)
    cands = [(int(i), grid.config(int(i)), [float(x) for x in v]) for i, v in zip(raw["index"], raw["values"])]
    ranked = _verify(space, ev, cands, notes, vector_values=True)
    hist = [(d, b) for d, b in raw["history"]]
    return {"points": total, "evaluated": raw["evaluated"], "feasible": raw["feasible"],
            "excluded": raw["counts"], "ranked": ranked, "history": hist, "trials": None,
            "groups": grid.n_groups, "blocks": grid.n_groups * grid.n_blocks}


def _optuna(space, ev, trials, seed, storage_url, study_name, top, progress, sink, notes, sampler=None) -> dict:
    from dse.search import optuna_engine, storage

    st = storage.open_storage(storage_url)
    name = study_name or f"{space.name}-{space.digest()}-s{seed}"

    def prog(done, best):
        if progress:
            progress(done, trials, best)
    raw = optuna_engine.run(space, ev, trials=trials, seed=seed, storage=st, study_name=name, progress=prog,
                            sampler=sampler)
    if raw["stopped"]:
        notes.append(raw["stopped"])
    study = raw["study"]
    rows = trial_rows(study, space)
    if sink is not None:
        sink.trials(rows)
    excluded: dict = {}
    seen = {}
    for r in rows:
        if r["state"] == "PRUNED":
            excluded[r["reason"]] = excluded.get(r["reason"], 0) + 1
        elif r["state"] == "COMPLETE":
            if not r["feasible"]:
                why = (r["reasons"] or r["violations"] or ["infeasible"])[0]
                excluded[why] = excluded.get(why, 0) + 1
            else:
                key = tuple(sorted((k, repr(v)) for k, v in r["params"].items()))
                if key not in seen:
                    seen[key] = r
    uniq = list(seen.values())
    if len(space.objectives) == 1:
        sign = space.objectives[0].sign
        from dse.search.exhaustive import tiebreak_metric

        tb = tiebreak_metric(space)

        def tie(r):
            v = r["metrics"].get(tb)
            return float("inf") if v is None or v != v else v
        uniq.sort(key=lambda r: (sign * r["values"][0], tie(r), r["trial"]))
        cands = [(r["trial"], r["params"], r["values"]) for r in uniq[:top]]
    else:
        from dse.search.pareto import nondominated

        if uniq:
            X = np.array([r["values"] for r in uniq]) * np.array([o.sign for o in space.objectives])
            keep = nondominated(X, np.array([r["trial"] for r in uniq]))
            front = [uniq[i] for i in keep]
        else:
            front = []
        cands = [(r["trial"], r["params"], r["values"]) for r in front]
    ranked = _verify(space, ev, cands, notes, vector_values=False)
    complete = [r for r in rows if r["state"] == "COMPLETE"]
    history = []
    best = None
    for r in sorted(complete, key=lambda r: r["trial"]):
        if r["feasible"] and len(space.objectives) == 1:
            v = r["values"][0]
            if best is None or space.objectives[0].sign * v < space.objectives[0].sign * best:
                best = v
        history.append((r["trial"], best))
    return {"study": name, "storage": storage.redact(storage.normalise(storage_url)), "points": space.size or None,
            "evaluated": len(complete), "feasible": sum(1 for r in complete if r["feasible"]),
            "invalid_samples": sum(1 for r in rows if r["state"] == "PRUNED"),
            "excluded": excluded, "ranked": ranked, "history": history, "trials": rows}


def trial_rows(study, space) -> list[dict]:
    """Every trial of the study as a plain dict (params, values, metrics, feasibility)."""
    out = []
    for t in study.get_trials(deepcopy=False):
        ua = t.user_attrs.get("dse", {})
        out.append({"trial": t.number, "state": t.state.name, "params": ua.get("params", dict(t.params)),
                    "values": list(t.values) if t.values is not None else None,
                    "feasible": bool(ua.get("feasible", False)), "violations": ua.get("violations", []),
                    "reasons": ua.get("reasons", []),
                    "reason": ua.get("excluded", ""), "metrics": ua.get("metrics", {}),
                    "constraints": ua.get("constraints", {}), "worker": ua.get("worker", "")})
    return out


# ----------------------------------------------------------------------------- checking the answer


def _verify(space, ev, cands, notes, vector_values: bool) -> list[dict]:
    """Re-estimate each reported configuration with the scalar estimate."""
    out = []
    for key, config, values in cands:
        res = ev.point(config)
        if not res["valid"]:
            notes.append(f"dropped {config}: {res['reason']} (the vectorised plan rules let it through)")
            continue
        if vector_values and not np.allclose(res["values"], values, rtol=1e-6, atol=0):
            notes.append(f"vectorised and scalar estimates differ for {config}: {values} vs {res['values']}")
        if not res["feasible"]:
            notes.append(f"dropped {config}: infeasible in the scalar estimate ({'; '.join(res['violations'])})")
            continue
        r = res["result"]
        entry = {"key": key, "params": config, "values": res["values"], "metrics": res["metrics"],
                 "bottleneck": r["bottleneck"], "command": estimate_command(space, config)}
        if len(res["values"]) == 1:
            entry["value"] = res["values"][0]
        out.append(entry)
    return out


# ----------------------------------------------------------------------------- re-running the best

FLAGS = {"plan.tp": "--tp", "plan.pp": "--pp", "plan.dp": "--dp", "plan.cp": "--cp", "plan.ep": "--ep",
         "plan.etp": "--etp", "plan.micro_batch": "--micro-batch",
         "plan.global_batch": "--global-batch", "plan.seq_len": "--seq-len", "plan.recompute": "--recompute",
         "plan.attention": "--attention", "plan.zero": "--zero", "plan.precision": "--precision"}


def _fmt_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    return str(v)


def point_settings(space, config: dict) -> dict:
    """Every dotted setting of one configuration (the space's fixed ones, its parameters; ``gpus`` as plan.dp)."""
    settings = dict(space.fixed)
    settings.update({k: v for k, v in config.items() if k not in ("model", "hardware")})
    if "gpus" in settings:
        gpus = settings.pop("gpus")
        tp, pp = settings.get("plan.tp", 1), settings.get("plan.pp", 1)
        settings["plan.dp"] = gpus // (tp * pp * settings.get("plan.cp", 1))
    return settings


def resolve_point(space, config: dict):
    """One configuration as ``dse estimate`` resolves it: ``(model, system, plan)`` (what ``--emit`` writes)."""
    from dse.estimate import resolve

    plan, sets = {}, []
    for path, v in point_settings(space, config).items():
        if path.startswith("plan.") and path.count(".") == 1:
            plan[path[5:]] = v
        else:
            sets.append(f"{path}={_fmt_value(v)}")
    return resolve(config.get("model", space.model), config.get("hardware", space.hardware), None, sets, **plan)


def estimate_command(space, config: dict) -> str:
    """The ``dse estimate`` command line that re-runs one configuration."""
    import shlex

    settings = point_settings(space, config)
    args = ["dse", "estimate", "--model", config.get("model", space.model),
            "--hw", config.get("hardware", space.hardware)]
    sets = []
    order = list(FLAGS) + ["plan.sequence_parallel"]
    for path, v in sorted(settings.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order),
                                                            kv[0].count("."), kv[0])):
        if path in FLAGS:
            args += [FLAGS[path], _fmt_value(v)]
        elif path == "plan.sequence_parallel":
            args.append("--sequence-parallel" if v else "--no-sequence-parallel")
        else:
            sets += ["--set", f"{path}={_fmt_value(v)}"]
    return " ".join(shlex.quote(a) for a in args + sets)

