"""The optuna engine: as good as the exact answer on every shipped space, seeded, resumable.

Target (issue: dse search): optuna's best within 2% of the exhaustive optimum in at
most 300 trials on every shipped example space, with the default seed. For a space
with several objectives "within 2%" is measured on the hypervolume: the front optuna
finds covers at least 98% of the hypervolume of the exact front (objectives scaled
to the exact front's range, reference point 1.1 x that range).

Beyond the default seed tested here, over seeds 0-39 (300 trials each) the default
sampler was within 2% in 38/40 runs on gpu-choice, 40/40 on llama2-70b-parallelism
and 40/40 (hypervolume) on cost-time-pareto; every shipped space's rate is in docs/search.md
(scripts/optuna_seed_rates.py measures them). cost-time-pareto had fallen to 38/40 with NSGA-II's population of 30
once the A100 NVLink took its measured 2- and 4-GPU rates, the default seed among the misses (hypervolume 0.952);
a population of 20 (more generations in 300 trials) is within 2% in 40/40 of seeds 0-39 and 80/80 of the held-out
seeds 40-119 (population 30: 79/80), the default seed at 0.997.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.errors import InputError
from dse.search import from_dict, load_space, search

ROOT = Path(__file__).resolve().parent.parent
SPACES = sorted((ROOT / "examples" / "spaces").glob("*.yaml"))


def hypervolume_2d(F, ref):
    """Area dominated by the rows of F (minimisation) up to the reference point."""
    P = F[np.argsort(F[:, 0])]
    hv, prev = 0.0, ref[1]
    for x, y in P:
        if y < prev:
            hv += (ref[0] - x) * (prev - y)
            prev = y
    return hv


def target_score(exact, found) -> tuple[float, bool]:
    """(gap to the exact optimum, within 2 %) for one objective; (front hypervolume / the exact front's, >= 0.98)
    for two (objectives scaled to the exact front's range, reference point 1.1). scripts/optuna_seed_rates.py
    applies it over many seeds."""
    objs = exact["objectives"]
    if len(objs) == 1:
        sign = 1.0 if objs[0]["direction"] == "minimize" else -1.0
        best, got = exact["ranked"][0]["value"], found["ranked"][0]["value"]
        gap = sign * (got - best) / abs(best)
        return gap, -1e-9 <= gap <= 0.02
    assert len(objs) == 2
    signs = np.array([1.0 if o["direction"] == "minimize" else -1.0 for o in objs])
    E = np.array([e["values"] for e in exact["ranked"]]) * signs
    O = np.array([e["values"] for e in found["ranked"]]) * signs
    lo, span = E.min(axis=0), E.max(axis=0) - E.min(axis=0)
    ref = np.full(2, 1.1)
    ratio = hypervolume_2d((O - lo) / span, ref) / hypervolume_2d((E - lo) / span, ref)
    return ratio, ratio >= 0.98


def test_every_example_space_is_shipped_and_parses():
    assert len(SPACES) >= 3
    for f in SPACES:
        assert load_space(str(f)).size > 0


@pytest.mark.slow
@pytest.mark.parametrize("path", SPACES, ids=[p.stem for p in SPACES])
def test_optuna_within_2_percent_of_exhaustive(path):
    exact = search(load_space(str(path)), engine="exhaustive")
    found = search(load_space(str(path)), engine="optuna", trials=300, storage="memory")
    assert found["evaluated"] == 300
    score, hit = target_score(exact, found)
    assert hit, score


SMALL = {"model": "llama2-70b", "hardware": "a100-cluster-800g", "fixed": {"plan.global_batch": 512},
         "parameters": {"gpus": 64, "plan.tp": [1, 2, 3, 4, 8], "plan.pp": [1, 2, 4, 8, 16],
                        "plan.micro_batch": [1, 2, 4, 8, 16, 32], "plan.zero": [0, 1, 2],
                        "plan.recompute": ["selective", "full"]}}


def test_seeded_runs_are_reproducible():
    a = search(from_dict(SMALL, "s.yaml"), engine="optuna", trials=60, seed=7, storage="memory")
    b = search(from_dict(SMALL, "s.yaml"), engine="optuna", trials=60, seed=7, storage="memory")
    c = search(from_dict(SMALL, "s.yaml"), engine="optuna", trials=60, seed=8, storage="memory")
    key = lambda out: [(t["state"], t["params"]) for t in out["trials"]]  # noqa: E731
    assert key(a) == key(b)
    assert key(a) != key(c)


def test_invalid_samples_are_not_evaluated_nor_counted():
    out = search(from_dict(SMALL, "s.yaml"), engine="optuna", trials=80, seed=1, storage="memory")
    states = [t["state"] for t in out["trials"]]
    assert states.count("COMPLETE") == 80
    pruned = [t for t in out["trials"] if t["state"] == "PRUNED"]
    assert pruned and out["invalid_samples"] == len(pruned)          # tp = 3 never divides 64 heads
    assert all(t["reason"] and not t["metrics"] for t in pruned)
    assert all(t["params"]["plan.tp"] != 3 for t in out["trials"] if t["state"] == "COMPLETE")
    complete = {tuple(sorted(t["params"].items())) for t in out["trials"] if t["state"] == "COMPLETE"}
    assert len(complete) >= 76     # repeats are steered away; only the random first generation can repeat


def test_constraints_reach_optuna():
    import optuna

    from dse.search.evaluate import Evaluator
    from dse.search.optuna_engine import run

    sp = from_dict({**SMALL, "constraints": {"budget": "$1.3M"}}, "s.yaml")
    raw = run(sp, Evaluator(sp), trials=30, seed=0, storage=optuna.storages.InMemoryStorage(), study_name="c")
    trials = [t for t in raw["study"].trials if t.state.name == "COMPLETE"]
    for t in trials:
        assert {"memory", "gpus", "budget"} <= set(t.constraints)
        assert (max(t.constraints.values()) <= 0) == t.user_attrs["dse"]["feasible"]
        cost = t.user_attrs["dse"]["metrics"]["cost.capital_usd"]
        assert t.constraints["budget"] == pytest.approx((cost - 1.3e6) / 1.3e6)


@pytest.mark.slow
def test_resume_runs_only_the_missing_trials(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    first = search(from_dict(SMALL, "s.yaml"), engine="optuna", trials=20, storage=url, study="r")
    again = search(from_dict(SMALL, "s.yaml"), engine="optuna", trials=35, storage=url, study="r")
    assert first["evaluated"] == 20 and again["evaluated"] == 35
    done = [t for t in again["trials"] if t["state"] == "COMPLETE"]
    assert [t["params"] for t in done[:20]] == [t["params"] for t in first["trials"] if t["state"] == "COMPLETE"]


def test_study_for_another_space_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    search(from_dict(SMALL, "s.yaml"), engine="optuna", trials=5, storage=url, study="x")
    other = {**SMALL, "parameters": {**SMALL["parameters"], "plan.zero": [0, 1]}}
    with pytest.raises(InputError, match="different space"):
        search(from_dict(other, "s.yaml"), engine="optuna", trials=5, storage=url, study="x")


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "nsga3", "ga+tpe", "qmc+nsga2"])
def test_every_sampler_runs(sampler):
    out = search(from_dict(SMALL, "s.yaml"), engine="optuna", trials=40, storage="memory",
                 sampler={"single": sampler, "multi": sampler})
    assert out["evaluated"] == 40 and out["ranked"]


def test_bad_sampler_flag(cli):
    rc, _, err = cli("search", "--model", "llama2-70b", "--hw", "a100-cluster-800g", "--gpus", "64",
                     "--engine", "optuna", "--sampler", "cmaes", "--storage", "memory", "-q")
    assert rc == 2 and "not one of tpe, nsga2, nsga3, ga+tpe" in err


def test_constraints_func_path_for_optuna_without_set_constraint(monkeypatch):
    """optuna < 5 has no Trial.set_constraint: constraints then go through the sampler's constraints_func."""
    import warnings

    import optuna

    from dse.search import optuna_engine
    from dse.search.evaluate import Evaluator

    monkeypatch.setattr(optuna_engine, "_has_set_constraint", lambda: False)
    sp = from_dict({**SMALL, "constraints": {"budget": "$1.3M"}}, "s.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # constraints_func is deprecated from optuna 5 on
        raw = optuna_engine.run(sp, Evaluator(sp), trials=20, seed=0, storage=optuna.storages.InMemoryStorage(),
                                study_name="f")
    trials = [t for t in raw["study"].trials if t.state.name == "COMPLETE"]
    assert len(trials) == 20
    for t in trials:
        want = list(t.user_attrs["dse"]["constraints"].values())
        assert list(t.constraints.values()) == pytest.approx(want)


def test_population_is_20_for_several_objectives_and_30_for_one():
    """NSGA-II's population: 20 for a front (cost-time-pareto 40/40 of seeds 0-39; 30 gave 38/40), 30 for the
    one-objective GA start (its rates were measured with 30: dse/search/optuna_engine.py, SAMPLER)."""
    from dse.search.optuna_engine import make_sampler

    assert make_sampler(2, 0)._population_size == 20
    assert make_sampler(1, 0)._pick(type("T", (), {"number": 0})())._population_size == 30
    assert make_sampler(2, 0, population_size=50)._population_size == 50
