"""The composed estimate: structure, physical properties, scalar/array agreement, CLI output."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dse.estimate import base, estimate, resolve, run
from dse.specs.plan import Plan

REQUIRED = {
    "model": {"name", "params", "layers", "hidden", "heads"},
    "hardware": {"name"},
    "flops": {"model_per_iteration", "hardware_per_iteration"},
    "time": {"iteration", "compute", "communication", "bubble", "recompute", "optimizer", "io_exposed"},
    "throughput": {"tokens_per_s", "mfu"},
}
TIERS = {"weights", "gradients", "optimizer", "activations", "buffers", "total", "capacity"}
PARTS = ("compute", "recompute", "communication", "bubble", "optimizer", "overhead", "io_exposed")


def est(model, system, **plan):
    p = Plan(**plan).resolved(model)
    return run(model, system, p)


def test_json_has_every_documented_key(dse):
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--dp", "8", "--json")
    assert r.code == 0, r.err
    out = r.json()
    for key, sub in REQUIRED.items():
        assert sub <= set(out[key]), (key, set(out[key]))
    for tier in ("gpu", "host", "storage"):
        assert TIERS <= set(out["memory"][tier])
    assert isinstance(out["plan"], dict) and out["plan"]["dp"] == 8 and out["plan"]["global_batch"] == 8
    assert isinstance(out["traffic"], dict) and out["traffic"]
    assert out["activation_bytes_per_layer"] > 0
    assert isinstance(out["feasible"], bool) and isinstance(out["violations"], list)
    assert isinstance(out["bottleneck"], str) and out["bottleneck"]
    assert out["model"]["params"] == 1_557_611_200


def test_time_components_explain_the_iteration(gpt_small, cluster):
    for plan in (dict(tp=2, pp=2, dp=2, micro_batch=2, global_batch=64, recompute="full"),
                 dict(tp=1, pp=1, dp=8, micro_batch=4, recompute="selective", attention="math"),
                 dict(tp=4, pp=4, dp=1, micro_batch=1, global_batch=32, schedule="interleaved", virtual_stages=3)):
        r = est(gpt_small, cluster, **plan)
        t = r["time"]
        assert sum(t[k] for k in PARTS) == pytest.approx(t["iteration"], rel=1e-9), plan
        assert all(t[k] >= 0 for k in PARTS)


def test_memory_totals_are_sums_of_classes(llama_small, cluster):
    r = est(llama_small, cluster, tp=2, pp=2, dp=2, micro_batch=2, global_batch=32, zero=1)
    for m in r["memory"].values():
        assert m["total"] == pytest.approx(sum(m[k] for k in ("weights", "gradients", "optimizer", "activations",
                                                                 "buffers")))


def test_zero_stages_shrink_gpu_state_memory(gpt_small, cluster):
    mem = [est(gpt_small, cluster, dp=8, zero=z)["memory"]["gpu"] for z in range(4)]
    assert mem[1]["optimizer"] == pytest.approx(mem[0]["optimizer"] / 8)
    assert mem[2]["gradients"] == pytest.approx(mem[1]["gradients"] / 8)
    assert mem[3]["weights"] == pytest.approx(mem[2]["weights"] / 8)
    totals = [m["weights"] + m["gradients"] + m["optimizer"] for m in mem]
    assert totals == sorted(totals, reverse=True)
    # 18 bytes/param without ZeRO (bf16 weights, fp32 grads, fp32 master + Adam), all on one stage:
    assert totals[0] == pytest.approx(18 * r_params(gpt_small), rel=1e-12)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("micro_batch", [1, 4])
def test_zero_3_is_never_faster_than_zero_1(gpt_small, cluster, overlap, micro_batch):
    """ZeRO-3 gathers the weights twice per micro-batch and reduces the gradients each time: under the same overlap
    rule it costs at least ZeRO-1/2's time, and its data-parallel traffic is the Psi/2 Psi/3 Psi of ZeRO section 7."""
    plan = dict(dp=8, micro_batch=micro_batch, global_batch=64, overlap_grad_reduce=overlap)
    r = [est(gpt_small, cluster, zero=z, **plan) for z in range(4)]
    assert r[1]["time"]["iteration"] == pytest.approx(r[2]["time"]["iteration"], rel=1e-12)
    assert r[3]["time"]["iteration"] >= r[1]["time"]["iteration"]
    assert r[3]["time"]["dp_communication"] >= r[1]["time"]["dp_communication"]
    p, d, m = r_params(gpt_small), 8, 64 // (8 * micro_batch)
    dp = [x["traffic"]["dp"] for x in r]           # bf16 weights (2 B), fp32 gradients (4 B), ring: (d-1)/d per byte
    assert dp[0] == pytest.approx(2 * (d - 1) / d * 4 * p, rel=1e-12)
    assert dp[1] == dp[2] == pytest.approx((d - 1) / d * (4 + 2) * p, rel=1e-12)
    assert dp[3] == pytest.approx(m * (d - 1) / d * (4 + 2 * 2) * p, rel=1e-12)


def test_the_time_table_rows_add_up_to_the_iteration(gpt_small, cluster):
    """Every second of the iteration is in one row of `dse estimate`'s time table (tied embeddings, pp > 1)."""
    from dse.report.console import TIME_ROWS

    assert gpt_small.tied_embeddings
    r = est(gpt_small, cluster, tp=2, pp=4, dp=2, micro_batch=2, global_batch=64)
    t = r["time"]
    assert t["embedding_sync"] > 0
    assert sum(t.get(k, 0.0) for k, _ in TIME_ROWS) == pytest.approx(t["iteration"], rel=1e-9)   # ep: MoE only
    moe = estimate("mixtral-8x7b", "h100-cluster", tp=2, dp=16, ep=8, recompute="full")["time"]   # EP across nodes
    assert moe["ep_communication"] > 0
    assert sum(moe.get(k, 0.0) for k, _ in TIME_ROWS) == pytest.approx(moe["iteration"], rel=1e-9)


def r_params(model):
    from dse.formulas.transformer import parameter_count

    return parameter_count(model.layers, model.hidden, model.heads, model.kv_heads, model.head_dim, model.ffn_hidden,
                           model.vocab, position_embeddings=model.position_embeddings)


def test_recompute_trades_memory_for_time(gpt_small, cluster):
    kw = dict(tp=1, dp=8, micro_batch=8, attention="math")
    none, sel, full = (est(gpt_small, cluster, recompute=r, **kw) for r in ("none", "selective", "full"))
    assert full["activation_bytes_per_layer"] < sel["activation_bytes_per_layer"] < none["activation_bytes_per_layer"]
    assert none["time"]["iteration"] < sel["time"]["iteration"] < full["time"]["iteration"]
    assert none["flops"]["hardware_per_iteration"] == none["flops"]["model_per_iteration"]
    assert full["flops"]["hardware_per_iteration"] > sel["flops"]["hardware_per_iteration"]
    # Full recompute costs on the order of the 30-40 % of Korthikanti et al. 2022 (§6.2): between 20 and 45 %.
    assert 1.2 < full["time"]["iteration"] / none["time"]["iteration"] < 1.45


def test_tensor_parallelism_splits_parameters_and_adds_communication(gpt_small, cluster):
    r1 = est(gpt_small, cluster, tp=1, dp=1)
    r4 = est(gpt_small, cluster, tp=4, dp=1)
    assert r4["parallelism"]["params_per_gpu"] < r1["parallelism"]["params_per_gpu"] / 3
    assert r1["time"]["tp_communication"] == 0 < r4["time"]["tp_communication"]
    assert r4["time"]["iteration"] < r1["time"]["iteration"]


def test_bubble_follows_p_minus_1_over_m(gpt_small, cluster):
    """Near-uniform stages (tiny vocabulary, no LM-head imbalance): bubble = (p - 1)/m of m t_stage. On the reference
    host: the measured cluster's calibrated launch floor would make the short first and last stages host-bound."""
    model = dataclasses.replace(gpt_small, vocab=64, layers=16)
    host = dataclasses.replace(cluster.node.host, dispatch_scale=1.0)
    cluster = dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host))
    for pp, m, v in ((4, 16, 1), (4, 8, 2), (8, 32, 1)):
        sched = "interleaved" if v > 1 else "1f1b"
        r = est(model, cluster, pp=pp, micro_batch=1, global_batch=m, schedule=sched, virtual_stages=v)
        t = r["time"]
        assert r["parallelism"]["micro_batches"] == m
        # within the embedding/head imbalance of a 2-layer stage
        assert t["bubble"] / (m * t["per_microbatch"]) == pytest.approx((pp - 1) / (v * m), rel=0.05)
        c = base.compose(model, cluster, Plan(pp=pp, micro_batch=1, global_batch=m, schedule=sched,
                                              virtual_stages=v).resolved(model))
        assert c["time"]["bubble"] == pytest.approx((pp - 1) / v * c["terms"].time.stage_mean, rel=1e-12)


def test_plan_larger_than_system_is_infeasible(gpt_small, cluster):
    r = est(gpt_small, cluster, dp=1024)
    assert not r["feasible"]
    assert any("needs 1024 GPUs" in v for v in r["violations"])


def test_mfu_is_a_fraction(gpt_small, cluster):
    r = est(gpt_small, cluster, dp=8, micro_batch=4)
    assert 0.05 < r["throughput"]["mfu"] < 0.8
    tokens = r["plan"]["global_batch"] * r["plan"]["seq_len"]
    assert r["throughput"]["tokens_per_s"] == pytest.approx(tokens / r["time"]["iteration"])


def test_cost_and_energy_sections(gpt_small, cluster):
    r = est(gpt_small, cluster, dp=16)  # 2 nodes
    node = cluster.node
    assert r["cost"]["capital_usd"] == pytest.approx(16 * node.gpu.price + 2 * (node.price + node.host.price))
    watts = (16 * node.gpu.power + 2 * node.host.power) * cluster.site.pue
    assert r["energy"]["power_w"] == pytest.approx(watts)
    assert r["energy"]["iteration_j"] == pytest.approx(watts * r["time"]["iteration"])
    assert r["cost"]["per_million_tokens_usd"] > 0


def _flatten(d, prefix=""):
    for k, v in d.items():
        if hasattr(v, "as_dict"):   # typed terms (dse.estimate.terms): compare every field
            v = v.as_dict()
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}.")
        elif not isinstance(v, str):
            yield prefix + k, v


def test_arrays_broadcast_like_scalars(llama_small, cluster):
    """compose() on numpy arrays of plan fields equals a loop of scalar composes (the search relies on it)."""
    tps, pps, dps, mbs = [1, 2, 4, 2, 1], [1, 2, 2, 4, 8], [8, 2, 1, 1, 1], [1, 2, 4, 1, 2]
    gb = 64
    scalars = []
    for tp, pp, dp, mb in zip(tps, pps, dps, mbs):
        p = Plan(tp=tp, pp=pp, dp=dp, micro_batch=mb, global_batch=gb, recompute="selective").resolved(llama_small)
        scalars.append(dict(_flatten(base.compose(llama_small, cluster, p))))
    vp = dataclasses.replace(Plan(recompute="selective").resolved(llama_small), global_batch=gb)
    vp = _Vec(vp, tp=np.array(tps), pp=np.array(pps), dp=np.array(dps), micro_batch=np.array(mbs))
    vec = dict(_flatten(base.compose(llama_small, cluster, vp)))
    for key, arr in vec.items():
        for i, sc in enumerate(scalars):
            want = sc[key]
            got = np.broadcast_to(np.asarray(arr, dtype=float), (len(tps),))[i]
            assert got == pytest.approx(float(want), rel=1e-12, abs=1e-12), (key, i)


class _Vec:
    """A plan whose numeric fields are arrays (duck-typed like Plan)."""

    def __init__(self, plan, **arrays):
        self.__dict__.update(dataclasses.asdict(plan))
        self.__dict__.update(arrays)


def test_explain_lists_every_formula(dse):
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--dp", "8", "--explain", "--json")
    assert r.code == 0, r.err
    rows = r.json()["explain"]
    terms = {row["term"] for row in rows}
    for needed in ("kernels.layer_kernels", "kernels.saved_bytes", "kernels.forward_flops", "memory.model_state_bytes",
                   "compute.gemm_time", "parallelism.allreduce_time", "parallelism.pipeline_time",
                   "cost.capital_cost"):
        assert needed in terms
    for row in rows:
        assert row["formula"] and row["inputs"] is not None and row["value"] is not None


def test_explain_shows_how_the_formulas_combine(dse):
    """After the formula calls, --explain gives the composition: each headline number from its parts, exactly."""
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--pp", "4", "--dp", "8", "--explain",
            "--json")
    assert r.code == 0, r.err
    out = r.json()
    rows = {row["term"]: row for row in out["explain"] if row["context"] == "composition"}
    assert set(rows) == {"time.iteration", "time.communication", "throughput.tokens_per_s", "throughput.mfu",
                         "memory.gpu.total"}
    for term in ("time.iteration", "time.communication", "memory.gpu.total"):
        assert sum(rows[term]["inputs"].values()) == pytest.approx(rows[term]["value"], rel=1e-12), term
    assert rows["time.communication"]["inputs"]["embedding_sync"] > 0          # tied embeddings, pp 4
    mfu = rows["throughput.mfu"]["inputs"]
    achieved = mfu["model_flops"] / (mfu["iteration"] * mfu["gpus"] * mfu["peak"])
    assert achieved == pytest.approx(out["throughput"]["mfu"])


def test_explain_table_renders(dse):
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--explain")
    assert r.code == 0, r.err
    assert "Every formula evaluated" in r.out and "saved_bytes" in r.out


def test_human_output_has_the_tables(dse):
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--dp", "8", "--micro-batch", "4")
    assert r.code == 0, r.err
    for needle in ("Time per iteration", "Memory", "Throughput", "bottleneck", "feasible", "capacity"):
        assert needle in r.out


def test_set_overrides_reach_the_model(dse):
    a = dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--json").json()
    b = dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--json",
            "--set", "model.layers=24", "--set", "hardware.node.gpu.hbm_capacity=40 GiB", "--set", "plan.zero=1").json()
    assert b["model"]["layers"] == 24 and b["plan"]["zero"] == 1
    assert b["memory"]["gpu"]["capacity"] == 40 * 2**30
    assert b["model"]["params"] < a["model"]["params"]


def test_library_entry_point():
    import dse

    r = dse.estimate("gpt2-xl", "a100-cluster-800g", dp=8, micro_batch=2)
    assert r["parallelism"]["gpus"] == 8 and r["time"]["iteration"] > 0 and math.isfinite(r["throughput"]["mfu"])
    m, s, p = resolve("gpt2-xl", "a100-cluster-800g", dp=2)
    assert p.global_batch == 2


def test_run_resolves_and_checks_a_plan_built_by_hand():
    """dse.estimate.run on a Plan whose defaults are unset (dp, ZeRO, gradients' dtype): resolved as make_plan
    resolves it, the same numbers (it raised a TypeError from deep inside); make_plan is what checks a plan."""
    from dse.catalog import load_model, load_system
    from dse.errors import InputError
    from dse.estimate import make_plan, run
    from dse.specs.plan import Plan

    m, s = load_model("gpt2-medium"), load_system("dgx-h100")
    fields = dict(tp=1, pp=1, micro_batch=2, global_batch=16, seq_len=1024)   # dp: the node's 8
    assert run(m, s, Plan(**fields))["time"] == run(m, s, make_plan(m, s, fields))["time"]
    with pytest.raises(InputError, match="--tp 3"):
        make_plan(m, s, dict(tp=3, pp=1, micro_batch=1, seq_len=1024))
