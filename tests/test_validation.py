"""Accuracy claims, as tests: the base time model against measured Megatron runs, formulas against papers."""

from dse.validate import run_suite


def test_megatron_a100_targets():
    """MAPE <= 10 % and Spearman >= 0.85 over all 88 measured runs with one shared parameter set."""
    r = run_suite("megatron-a100")
    assert r.stats["cases"] == 88
    assert r.stats["mape"] <= 0.10, r.stats
    assert r.stats["spearman"] >= 0.85, r.stats
    misses = [c.name for c in r.cases if not c.within and not c.expected_miss]
    assert not misses, misses
    assert r.stats["expected_misses"] <= 4


def test_formula_suite_exact():
    r = run_suite("formulas")
    assert r.passed
    assert all(abs(c.error) <= c.tolerance for c in r.cases)
