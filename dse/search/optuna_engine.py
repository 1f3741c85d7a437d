"""optuna engine: NSGA-II then TPE for one objective, NSGA-II for several; persistent, resumable, shareable.

Each trial evaluates one configuration with the scalar estimate
(:meth:`dse.search.evaluate.Evaluator.point`). A sampled combination that breaks
a plan rule (tp not dividing the heads, ...) is not evaluated and not counted:
it is told to optuna as *pruned* (so TPE learns to avoid the region) and the
sampler is asked again. Memory on every tier, the GPUs the system has, and the
space's budget / power / lifetime limits are optuna constraints (<= 0 feasible),
so the sampler learns from infeasible trials too.

``--trials N`` is the number of *completed* trials the study should hold: a
resumed study runs only the missing ones, and several workers on one study stop
together once the study has N (each may finish the trial it is running).
"""

from __future__ import annotations

import math
import os
import socket
import time
import warnings

from dse._optional import require
from dse.errors import InputError

MAX_REJECTED = 2000        # consecutive invalid samples before giving up on a space


def _optuna():
    """optuna, or a one-line error naming the extra to install (:func:`dse._optional.require`)."""
    return require("optuna", "search", "dse search with the optuna engine")


def _arith_step(vals) -> int | None:
    """The step of an integer arithmetic progression, else None."""
    if len(vals) < 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return None
    step = vals[1] - vals[0]
    if step <= 0 or any(b - a != step for a, b in zip(vals, vals[1:])):
        return None
    return step


def suggest(trial, params) -> dict:
    """Sample a configuration: ordered numbers as ints (native or by index), names as categories."""
    config = {}
    for p in params:
        if not p.discrete:
            config[p.path] = trial.suggest_float(p.path, p.low, p.high, log=p.log)
        elif len(p.values) == 1:
            config[p.path] = p.values[0]
        elif p.numeric:
            step = _arith_step(p.values)
            if step is not None:
                config[p.path] = trial.suggest_int(p.path, p.values[0], p.values[-1], step=step)
            else:
                order = sorted(range(len(p.values)), key=lambda i: p.values[i])
                k = trial.suggest_int(f"{p.path}[i]", 0, len(p.values) - 1)
                config[p.path] = p.values[order[k]]
        else:
            config[p.path] = trial.suggest_categorical(p.path, list(p.values))
    return config


# Sampler settings. One objective: a genetic algorithm (optuna's NSGA-II, which also
# handles one objective) for the first third of the trials, then TPE, which sees every
# earlier trial. TPE alone refines best but sometimes settles in the first good region it
# finds (256 A100s when 128 H100s fit the budget); the GA start keeps several regions alive.
# Measured with 300 trials, seeds 0-39, runs within 2% of the exact optimum:
#   examples/spaces/gpu-choice.yaml              TPE alone 34/40 (seed 0: 18% off)   GA then TPE 38/40
#   examples/spaces/llama2-70b-parallelism.yaml  TPE alone 39/40                     GA then TPE 40/40
# Several objectives: NSGA-II with a population of 20 (15 generations in 300 trials), measured
# on examples/spaces/cost-time-pareto.yaml (front hypervolume >= 98% of the exact front's), 300
# trials, with scripts/optuna_seed_rates.py (2026-11-27). Seconds: median of seeds 0-5 run alternately in
# one process on the shared 2-core machine.
#                                     seeds 0-39  worst   s/search  held-out seeds 40-119
#   NSGA-II, population 30 (before)   38/40       0.952   1.1       79/80 (seed 72: 0.896)
#   NSGA-II, population 20 (chosen)   40/40       0.995   1.2       80/80 (worst 0.985)
#   NSGA-II, population 50            36/40       0.932
#   NSGA-III, population 30           40/40       0.986   1.2       80/80 (worst 0.990): a tie; NSGA-II is the
#                                                                   smaller change and not "experimental"
#   NSGA-III, population 50           39/40       0.977
#   TPE (multivariate, constant liar) 40/40       0.995   4.5
#   NSGA-II then TPE (ga+tpe)         40/40       0.985
#   30 Sobol points (qmc), then NSGA-II 40/40 (0.980), then TPE 40/40 (0.985)
#   GPSampler (logEHVI): over 300 s for one search on this CPU, not measured further.
# A reading, not isolated further: fewer individuals per generation leave more generations of selection in
# 300 trials. The one-objective GA keeps 30 (its rates above were measured with 30; its trials are unchanged).
SAMPLER = {"single": "ga+tpe", "multi": "nsga2", "switch": 1 / 3, "population_size": {"single": 30, "multi": 20},
           "n_startup_trials": 30, "n_ei_candidates": 24, "tries": 64}
#: what ``single``/``multi`` may name (``ga`` is ``nsga2``), alone or as ``FIRST+THEN`` (see :func:`make_sampler`)
KINDS = ("tpe", "nsga2", "nsga3", "qmc")


def _without_repeats(cls, seed, tries: int):
    """``cls`` (an optuna sampler) that does not spend trials on configurations already tried.

    When the sampler proposes a configuration the study already holds (complete,
    running, or rejected as invalid), one, then two, ... parameters are moved to a
    neighbouring value (ordered parameters by one step, categories to another
    choice) until the configuration is new; after ``tries`` attempts the proposal
    stands. The moves draw from a generator seeded by ``seed`` and the trial number,
    so a seeded search stays reproducible.
    """
    import numpy as np

    optuna = _optuna()
    from optuna.distributions import CategoricalDistribution, IntDistribution

    class NoRepeat(cls):
        def sample_relative(self, study, trial, search_space):
            params = super().sample_relative(study, trial, search_space)
            if not params or tries <= 0:
                return params
            names = sorted(params)
            states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
                      optuna.trial.TrialState.RUNNING)
            seen = {tuple(t.params.get(n) for n in names)
                    for t in study.get_trials(deepcopy=False, states=states) if t.number != trial.number}
            if tuple(params[n] for n in names) not in seen:
                return params
            movable = [n for n in names if isinstance(search_space.get(n), (IntDistribution, CategoricalDistribution))
                       and _choices(search_space[n]) > 1]
            if not movable:
                return params
            rng = np.random.RandomState(((seed or 0) * 1_000_003 + trial.number) % (2**32))
            for k in range(tries):
                cand = dict(params)
                for n in rng.choice(movable, size=min(len(movable), 1 + k // 8), replace=False):
                    cand[n] = _neighbour(search_space[n], cand[n], rng)
                if tuple(cand[n] for n in names) not in seen:
                    return cand
            return params

    NoRepeat.__name__ = cls.__name__
    return NoRepeat


def _choices(dist) -> int:
    from optuna.distributions import CategoricalDistribution

    if isinstance(dist, CategoricalDistribution):
        return len(dist.choices)
    return (dist.high - dist.low) // dist.step + 1


def _neighbour(dist, value, rng):
    from optuna.distributions import CategoricalDistribution

    if isinstance(dist, CategoricalDistribution):
        others = [c for c in dist.choices if c != value]
        return others[rng.randint(len(others))]
    step = dist.step * (1 if rng.rand() < 0.5 else -1)
    v = value + step
    if v < dist.low or v > dist.high:
        v = value - step
    return int(min(max(v, dist.low), dist.high))


def _phased(first, second, switch: int):
    """A sampler that is ``first`` for trials numbered below ``switch`` and ``second`` after.

    Used as a genetic algorithm (broad, keeps several regions alive) followed by TPE
    (fine refinement of the best region), which sees every earlier trial.
    """
    optuna = _optuna()

    class Phased(optuna.samplers.BaseSampler):
        def _pick(self, trial):
            return first if trial.number < switch else second

        def infer_relative_search_space(self, study, trial):
            return self._pick(trial).infer_relative_search_space(study, trial)

        def sample_relative(self, study, trial, search_space):
            return self._pick(trial).sample_relative(study, trial, search_space)

        def sample_independent(self, study, trial, param_name, param_distribution):
            return self._pick(trial).sample_independent(study, trial, param_name, param_distribution)

        def before_trial(self, study, trial):
            self._pick(trial).before_trial(study, trial)

        def after_trial(self, study, trial, state, values):
            self._pick(trial).after_trial(study, trial, state, values)

        def reseed_rng(self):
            first.reseed_rng()
            second.reseed_rng()

    return Phased()


def make_sampler(n_objectives: int, seed: int | None, constraints_func=None, trials: int = 300, **settings):
    """The seeded sampler for a study (see ``SAMPLER``; ``settings`` override it).

    ``single``/``multi`` name the sampler: ``tpe``, ``nsga2`` (also ``ga``), ``nsga3``, ``qmc``
    (scrambled Sobol points), or ``FIRST+THEN`` such as ``ga+tpe``
    (FIRST for the first ``switch`` share of ``trials``, then THEN). ``population_size`` (the
    genetic samplers) is one number or ``{"single": n, "multi": m}``.
    """
    optuna = _optuna()

    cfg = {**SAMPLER, **settings}
    kw = {"constraints_func": constraints_func} if constraints_func is not None else {}
    kind = cfg["single"] if n_objectives == 1 else cfg["multi"]
    if "+" in kind:
        head, _, tail = kind.partition("+")
        ga = make_sampler(n_objectives, seed, constraints_func, trials,
                          **{**settings, "single": head, "multi": head})
        rest = make_sampler(n_objectives, seed, constraints_func, trials,
                            **{**settings, "single": tail, "multi": tail})
        return _phased(ga, rest, max(1, round(cfg["switch"] * trials)))
    if kind == "tpe":
        cls = _without_repeats(optuna.samplers.TPESampler, seed, cfg["tries"])
        return cls(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=cfg["n_startup_trials"],
                   n_ei_candidates=cfg["n_ei_candidates"], **kw)
    if kind in ("nsga2", "ga"):
        cls = _without_repeats(optuna.samplers.NSGAIISampler, seed, cfg["tries"])
        return cls(seed=seed, population_size=_population(cfg, n_objectives), **kw)
    if kind == "nsga3":
        cls = _without_repeats(optuna.samplers.NSGAIIISampler, seed, cfg["tries"])
        with warnings.catch_warnings():     # "experimental" in optuna 3.2-5
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(seed=seed, population_size=_population(cfg, n_objectives), **kw)
    if kind == "qmc":
        cls = _without_repeats(optuna.samplers.QMCSampler, seed, cfg["tries"])
        with warnings.catch_warnings():     # "experimental" in optuna 3-5
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(seed=seed, qmc_type="sobol", scramble=True, warn_independent_sampling=False)
    raise InputError(f"sampler {kind!r} is not one of {', '.join(KINDS)}, or FIRST+THEN of two of them")


def _population(cfg, n_objectives: int) -> int:
    pop = cfg["population_size"]
    return pop["single" if n_objectives == 1 else "multi"] if isinstance(pop, dict) else pop


def _has_set_constraint() -> bool:
    optuna = _optuna()

    return hasattr(optuna.trial.Trial, "set_constraint")


def _constraints_from_attrs(trial):
    return list(trial.user_attrs.get("dse", {}).get("constraints", {}).values()) or [0.0]


def constraint_values(evaluator, res) -> dict:
    """optuna constraints of one evaluated point (<= 0 satisfied), few keys (each is a storage write).

    ``memory``: the largest relative overflow over every memory tier; ``gpus``: GPUs
    needed beyond the system's; ``technique``: 1 when a technique reports a violation;
    then one per space constraint (budget, power cap, SSD lifetime, ...).
    """
    mem = evaluator.memory_violation(res["result"])
    cons = {"memory": max((v for k, v in mem.items() if k.startswith("memory.")), default=-1.0)}
    if "gpus available" in mem:          # GPU systems (a chiplet package has no GPUs to run out of)
        cons["gpus"] = mem["gpus available"]
    if any(d["kind"] not in ("memory", "gpus") for d in res["result"].get("violation_details", [])):
        cons["technique"] = 1.0
    cons.update(res["constraints"])
    return {k: float(v) if math.isfinite(v) else 1e9 for k, v in cons.items()}


def open_study(space, storage, study_name: str, seed, trials: int = 300, **settings):
    """Create or load the study; a study made for another space or objectives is refused."""
    optuna = _optuna()

    directions = [o.direction for o in space.objectives]
    native = _has_set_constraint()
    sampler = make_sampler(len(directions), seed, None if native else _constraints_from_attrs, trials, **settings)
    try:
        study = optuna.create_study(storage=storage, study_name=study_name, directions=directions,
                                    sampler=sampler, load_if_exists=True)
    except ValueError as exc:  # directions differ from the stored study
        raise InputError(f"--study {study_name}: {exc}") from None
    if [d.name.lower() for d in study.directions] != directions:
        raise InputError(f"--study {study_name}: the stored study optimises "
                         f"{', '.join(d.name.lower() for d in study.directions)}; this search {', '.join(directions)}")
    digest = space.digest()
    stored = study.user_attrs.get("space_digest")
    if stored is None:
        study.set_user_attr("space_digest", digest)
        study.set_user_attr("space", space.name)
        study.set_user_attr("objectives", [o.metric for o in space.objectives])
        name_objectives(study, space)
    elif stored != digest:
        raise InputError(f"--study {study_name}: the study was created for a different space or objectives "
                         f"({study.user_attrs.get('space')}, digest {stored}; this one {digest}); "
                         "use another --study name")
    return study


def name_objectives(study, space) -> None:
    """Store the objectives' metric names on the study (``study.metric_names``): optuna-dashboard labels its
    axes with them instead of "Objective 0". One write per study; optuna < 3.2 has no metric names."""
    if not hasattr(study, "set_metric_names"):
        return
    optuna = _optuna()
    with warnings.catch_warnings():         # "experimental" in optuna 3.2-5
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([o.metric for o in space.objectives])


def complete_trials(study):
    optuna = _optuna()

    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def run(space, evaluator, *, trials: int, seed, storage, study_name: str, progress=None, sampler=None) -> dict:
    """Run (or resume, or join) the study until it holds ``trials`` completed trials."""
    optuna = _optuna()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = open_study(space, storage, study_name, seed, trials, **(sampler or {}))
    native = _has_set_constraint()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    state = {"rejected": 0, "stopped": "", "done": len(complete_trials(study)), "best": _best(study, space)}
    single = len(space.objectives) == 1
    sign = space.objectives[0].sign
    t0 = time.perf_counter()

    def objective(trial):
        config = suggest(trial, space.params)
        res = evaluator.point(config)
        if not res["valid"]:
            trial.set_user_attr("dse", {"params": config, "worker": worker, "excluded": res["reason"]})
            raise optuna.TrialPruned(res["reason"])
        r = res["result"]
        cons = constraint_values(evaluator, res)
        if native:
            for k, v in cons.items():
                trial.set_constraint(k, v)
        trial.set_user_attr("dse", {"params": config, "worker": worker, "constraints": cons, "metrics": res["metrics"],
                                    "feasible": bool(res["feasible"]), "violations": res["violations"],
                                    "reasons": res["reasons"], "bottleneck": r["bottleneck"]})
        return res["values"] if len(res["values"]) > 1 else res["values"][0]

    def callback(study, frozen):
        if frozen.state == optuna.trial.TrialState.PRUNED:
            state["rejected"] += 1
            if state["rejected"] >= MAX_REJECTED:
                state["stopped"] = (f"stopped after {MAX_REJECTED} consecutive invalid samples: "
                                    "the sampler finds no valid combination")
                study.stop()
            return
        state["rejected"] = 0
        state["done"] = len(complete_trials(study))
        if single and frozen.user_attrs.get("dse", {}).get("feasible") and frozen.value is not None:
            if state["best"] is None or sign * frozen.value < sign * state["best"]:
                state["best"] = frozen.value
        if progress:
            progress(state["done"], state["best"])
        if state["done"] >= trials:
            study.stop()

    if state["done"] < trials:
        if progress:
            progress(state["done"], state["best"])
        study.optimize(objective, n_trials=None, callbacks=[callback], catch=(), gc_after_trial=False)
    return {"engine": "optuna", "study": study, "elapsed": time.perf_counter() - t0, "stopped": state["stopped"]}


def _best(study, space):
    """Best feasible value so far (single objective) or the front size."""
    feas = [t for t in complete_trials(study) if t.user_attrs.get("dse", {}).get("feasible")]
    if not feas:
        return None
    if len(space.objectives) == 1:
        o = space.objectives[0]
        return min((t.value for t in feas), key=lambda v: o.sign * v)
    return None
