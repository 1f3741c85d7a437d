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


def test_h100_hf_suite_meets_the_memory_target_and_documents_the_time_miss():
    """The shared H100 file as a suite: 16 configurations x (time, memory), nothing fitted to it.

    With ``stack: pytorch`` (the traced eager kernels), the H100's micro-benchmarked efficiencies and the DGX
    host's transferred launch price (4.17x the reference): peak memory MAPE 1.0 % (target 6 %), time MAPE 5.6 %
    (target 8 %; 7.9 % at the reference host). The one time case outside its tolerance carries its documented
    cause; a case outside its tolerance without one, or errors growing past the bounds below, fails.
    """
    r = run_suite("h100-hf")
    assert r.stats["cases"] == 32
    q = r.stats["by_quantity"]
    assert q["time"]["cases"] == q["memory"]["cases"] == 16
    assert r.targets == {"time": {"mape": 0.08}, "memory": {"mape": 0.06}}
    assert not r.passed and r.accepted
    assert [c.name for c in r.cases if not c.within and not c.expected_miss] == []
    # only the rows outside their tolerance carry an expected miss: every other row must stay within it
    from dse.validate import h100_hf

    times = [c for c in r.cases if c.quantity == "time"]
    missed = {c.name.removesuffix(" time") for c in times if not c.within}
    assert missed == set(h100_hf.EXPECTED_TIME_MISSES)
    assert {c.name.removesuffix(" time") for c in times if c.expected_miss} == missed
    assert all(c.within for c in r.cases if c.quantity == "memory")
    assert r.target_checks()["time mape"] and not r.target_misses     # 5.6 % on the DGX host's transferred scale
    assert q["memory"]["mape"] <= 0.015 and q["time"]["mape"] <= 0.07, q
    assert q["time"]["spearman"] >= 0.95 and q["memory"]["spearman"] >= 0.99, q
    # GPT-2 medium at micro-batch 4 is where the host binds: its most optimistic and its most pessimistic time case
    worst = min((c for c in r.cases if c.quantity == "time"), key=lambda c: c.error)
    assert worst.name.startswith("gpt2-medium sdpa b4") and "rc-full" in worst.name
    slowest = max((c for c in r.cases if c.quantity == "time"), key=lambda c: c.error)
    assert slowest.name.startswith("gpt2-medium sdpa b4") and "rc-none" in slowest.name


def test_h100_hf_scenarios_match_the_measured_models():
    """The plans mirror the measurement: GPT-2 of the measured parameter count, bf16 weights and grads, one GPU."""
    from dse.calibrate.measurements import plan_for, predict
    from dse.catalog import load_system
    from dse.validate import h100_hf

    system = load_system(h100_hf.SYSTEM)
    ms = h100_hf.measurements()
    assert len(ms) == 16
    for m in ms:
        r = __import__("dse").estimate(m.model, system, plan_for(m, system))
        assert r["model"]["params"] in (362163200, 1569080000)
        assert m.model.vocab == 50257 and m.model.tied_embeddings and m.model.dropout == 0
        p = r["plan"]
        assert (p["tp"], p["pp"], p["dp"], p["zero"], p["precision"], p["grad_dtype"]) == (1, 1, 1, 0, "bf16-pure",
                                                                                           "half")
        assert r["memory"]["gpu"]["weights"] == r["memory"]["gpu"]["gradients"] == 2 * r["model"]["params"]
        assert r["time"]["dp_communication"] == 0 and r["time"]["embedding_sync"] == 0
        # what the measurement excludes is subtracted exactly: the optimizer's step and states, the runtime reserve
        t, mem = predict(m, system)
        assert t == r["time"]["iteration"] - r["time"]["optimizer"]
        gpu = r["memory"]["gpu"]
        assert mem == gpu["total"] - system.node.gpu.reserved - gpu["optimizer"]


def test_h100_hf_cli_summary_and_exit_codes(dse):
    r = dse("validate", "h100-hf")
    assert r.code == 1
    assert "time MAPE 5.6%" in " ".join(r.out.split()) and "expected miss" in r.out
    r = dse("validate", "h100-hf", "--allow-expected-misses", "-v")
    assert r.code == 0
    text = " ".join(r.out.split())
    assert "host floor binds" in text and "4.17" in text and "expected target miss" not in text
