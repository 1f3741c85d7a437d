"""MoE mechanics against brute force: the nodes a token's experts lie on, and the bytes a hierarchical all-to-all
moves across nodes and over NVLink, counted on simulated routings."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from dse.cli import main
from dse.errors import InputError
from dse.estimate import estimate
from dse.formulas import parallelism as P, transformer as T_


def _enumerated_nodes(E: int, k: int, N: int, G: int, M: int) -> Fraction:
    """Expected distinct nodes of a token's k experts: M of G groups uniformly, then k of their experts uniformly."""
    node_of = [e * N // E for e in range(E)]
    group_of = [e * G // E for e in range(E)]
    total, count = Fraction(0), 0
    for chosen in itertools.combinations(range(G), M):
        pool = [e for e in range(E) if group_of[e] in chosen]
        picks = list(itertools.combinations(pool, k))
        for pick in picks:   # every (groups, experts) pair: equally likely within a group choice
            total += Fraction(len({node_of[e] for e in pick}), len(picks))
        count += 1
    return total / count


@pytest.mark.parametrize("E, k, N, G, M", [
    (8, 2, 2, 8, 8),      # no group limit
    (8, 2, 4, 4, 2),      # one group a node
    (12, 3, 3, 6, 2),     # two groups a node
    (8, 2, 4, 2, 1),      # a group spans two nodes
    (16, 4, 4, 8, 3),
    (12, 4, 2, 4, 2),
    (6, 1, 3, 3, 1),      # top-1 of one group: one node
])
def test_nodes_per_token_match_enumeration(E, k, N, G, M):
    exact = _enumerated_nodes(E, k, N, G, M)
    assert P.expert_nodes_per_token(E, k, N, G, M) == pytest.approx(float(exact), rel=1e-12)
    assert P.expert_nodes_per_token(E, k, N, G, M) <= min(N, k, M * max(N // G, 1)) + 1e-12


def test_nodes_per_token_broadcast_over_nodes():
    nodes = np.array([1, 2, 4, 8])
    got = P.expert_nodes_per_token(256, 8, nodes, 8, 4)
    assert got == pytest.approx([P.expert_nodes_per_token(256, 8, int(n), 8, 4) for n in nodes], rel=1e-12)
    assert got[0] == 1.0 and np.all(np.diff(got) > 0)


def _simulated_bytes(E, k, ep, q, G, M, tokens, seed=0):
    """Per GPU: (bytes over the network with one copy per destination node, bytes over NVLink, copies to other
    ranks) of one dispatch, in units of one token's hidden vector, from ``tokens`` random routings per rank."""
    rng = np.random.default_rng(seed)
    w = E // G
    net = nvl = flat = 0
    for src in range(ep):
        src_node, src_local = divmod(src, q)
        for _ in range(tokens):
            groups = rng.choice(G, M, replace=False)
            pool = (groups[:, None] * w + np.arange(w)).ravel()
            experts = rng.choice(pool, k, replace=False)
            ranks = experts // (E // ep)
            net += len(set((ranks // q).tolist()) - {src_node})   # once per destination node (DeepEP)
            for r in ranks.tolist():                      # every copy: where it arrives, where it must go
                node = r // q
                arrive = src if node == src_node else node * q + src_local
                nvl += r != arrive
                flat += r != src
    return net / ep / tokens, nvl / ep / tokens, flat / ep / tokens


@pytest.mark.parametrize("E, k, ep, q, G, M", [
    (16, 4, 8, 4, 16, 16),    # two nodes, no group limit
    (16, 4, 8, 2, 4, 2),      # four nodes, one group a node, two groups a token
    (32, 8, 16, 4, 8, 2),     # four nodes of two groups
])
def test_hierarchical_alltoall_bytes_match_a_simulation(E, k, ep, q, G, M):
    net, nvl, flat = _simulated_bytes(E, k, ep, q, G, M, tokens=3000)
    N = ep // q
    # per token: the dispatch message holds k copies, so the formulas' shares times k are copies per token
    assert net == pytest.approx(k * P.internode_share(E, k, N, G, M), rel=0.03)
    assert nvl == pytest.approx(k * (q - 1) / q, rel=0.03)
    assert flat == pytest.approx(k * (ep - 1) / ep, rel=0.03)     # the pairwise all-to-all's bytes


def test_hierarchical_alltoall_in_one_node_is_the_pairwise_one():
    for S, n in ((64e6, 8), (1e6, 4), (3e7, 2)):
        assert P.hierarchical_alltoall_time(S, n, n, 0.0, 50e9, 150e9, 1e-6) == pytest.approx(
            P.alltoall_time(S, n, 150e9, 1e-6), rel=1e-12)
    assert P.hierarchical_alltoall_time(64e6, 1, 1, 0.0, 50e9, 150e9) == 0.0


def test_group_limits_cut_the_network_bytes():
    free = P.internode_share(256, 8, 8)
    limited = P.internode_share(256, 8, 8, 8, 4)
    assert limited < free
    assert P.internode_share(256, 8, 8, 8, 1) == pytest.approx(7 / 8 / 8, rel=1e-12)   # one node a token


# ----------------------------------------------------------------------------------------- capacity, dropped tokens


def _exact_dropped(T: int, E: int, k: int, C: float) -> float:
    """E[(X - a)+] / mu for X ~ Binomial(T, k/E), a = ceil(C T k / E): the exact sum."""
    p, mu = k / E, T * k / E
    a = math.ceil(C * mu)
    log = math.log
    total = sum((x - a) * math.exp(math.lgamma(T + 1) - math.lgamma(x + 1) - math.lgamma(T - x + 1) + x * log(p)
                                   + (T - x) * log(1 - p)) for x in range(a + 1, T + 1))
    return total / mu


@pytest.mark.parametrize("T, E, k, C", [(4096, 8, 2, 1.0), (4096, 8, 2, 1.05), (4096, 128, 8, 1.0),
                                        (16384, 128, 8, 1.1), (512, 64, 6, 1.0), (2048, 64, 6, 1.25)])
def test_dropped_fraction_matches_the_exact_binomial_sum(T, E, k, C):
    exact = _exact_dropped(T, E, k, C)
    got = T_.dropped_token_fraction(T, E, k, C)
    assert got == pytest.approx(exact, rel=0.05, abs=2e-5)     # the normal approximation, tail included


def test_dropped_fraction_matches_simulated_routing():
    rng = np.random.default_rng(1)
    T, E, k, C = 1024, 16, 2, 1.0
    cap = math.ceil(C * T * k / E)
    dropped = 0
    trials = 200
    for _ in range(trials):
        picks = np.argsort(rng.random((T, E)), axis=1)[:, :k]          # k distinct experts per token, uniform
        load = np.bincount(picks.ravel(), minlength=E)
        dropped += np.maximum(load - cap, 0).sum()
    assert dropped / (trials * T * k) == pytest.approx(T_.dropped_token_fraction(T, E, k, C), rel=0.05)


def test_a_skewed_expert_drops_at_least_its_excess():
    assert T_.dropped_token_fraction(4096, 8, 2, 1.0, imbalance=1.5) == pytest.approx(0.5 / 8)
    arr = T_.dropped_token_fraction(np.array([1024, 4096]), 8, 2, np.array([1.0, 2.0]))
    assert arr[0] > 0 and arr[1] == pytest.approx(0.0, abs=1e-12)


def _expert_rows(**plan):
    from dse.estimate import load, make_plan
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.precision import recipe_of

    m, s, data = load("mixtral-8x7b", "dgx-h100", None, ["model.expert_imbalance=1.5"], **plan)
    p = make_plan(m, s, data)
    return kernel_tables(m, p, recipe_of(p))["layer"]


def test_capacity_caps_the_busiest_expert_and_padding_fills_every_expert():
    tok, k, E = 4096, 2, 8
    free = _expert_rows(tp=1, dp=8, ep=8)
    capped = _expert_rows(tp=1, dp=8, ep=8, expert_capacity=1.25)
    padded = _expert_rows(tp=1, dp=8, ep=8, expert_capacity=1.25, pad_to_capacity=True)
    assert free["expert_fc1"]["m"] == 1.5 * tok * k * 8 / E                 # imbalance 1.5 sets the time
    assert capped["expert_fc1"]["m"] == 1.25 * tok * k * 8 / E              # ... capped at C
    assert padded["expert_fc1"]["m"] == 1.25 * tok * k * 8 / E
    kept = 1 - T_.dropped_token_fraction(tok, E, k, 1.25, 1.5)     # the busiest expert's excess: (1.5 - 1.25)/8
    assert kept == pytest.approx(1 - 0.25 / 8, rel=1e-9)
    assert capped["ep_dispatch"]["comm"] == pytest.approx(kept * free["ep_dispatch"]["comm"], rel=1e-12)  # dropped
    assert capped["expert_fc1"]["saved"] == pytest.approx(kept * free["expert_fc1"]["saved"], rel=1e-12)
    assert padded["ep_dispatch"]["comm"] == 1.25 * free["ep_dispatch"]["comm"]   # the padded buffers travel
    assert padded["expert_fc1"]["saved"] == 1.25 * free["expert_fc1"]["saved"]
    assert capped["expert_fc1"]["flops"] == free["expert_fc1"]["flops"]         # model FLOPs: unchanged


def test_the_estimate_reports_dropped_tokens(capsys):
    r = estimate("mixtral-8x7b", "dgx-h100", tp=1, dp=8, ep=8, recompute="full",
                 overrides=["plan.expert_capacity=1.0"])
    assert r["model"]["dropped_tokens"] == pytest.approx(T_.dropped_token_fraction(4096, 8, 2, 1.0))
    assert "dropped_tokens" not in estimate("mixtral-8x7b", "dgx-h100", tp=8, recompute="full")["model"]
    slow = estimate("mixtral-8x7b", "dgx-h100", tp=1, dp=8, ep=8, recompute="full",
                    overrides=["model.expert_imbalance=1.5"])
    capped = estimate("mixtral-8x7b", "dgx-h100", tp=1, dp=8, ep=8, recompute="full",
                      overrides=["model.expert_imbalance=1.5", "plan.expert_capacity=1.0"])
    assert capped["time"]["iteration"] < slow["time"]["iteration"]
    assert capped["model"]["dropped_tokens"] == pytest.approx(0.5 / 8)
    arr = estimate("mixtral-8x7b", "dgx-h100", tp=1, dp=8, ep=8, recompute="full", expert_capacity=[1.0, 1.25],
                   overrides=["model.expert_imbalance=1.5"])      # a numpy column of capacities: one per scenario
    assert np.asarray(arr["time"]["iteration"]).ravel()[0] == pytest.approx(capped["time"]["iteration"], rel=1e-9)
    assert np.asarray(arr["model"]["dropped_tokens"]).ravel() == pytest.approx([0.5 / 8, 0.25 / 8])


@pytest.mark.parametrize("argv, message", [
    (["--model", "llama2-7b", "--set", "plan.expert_capacity=1.0"], "a capacity factor needs an MoE model"),
    (["--model", "mixtral-8x7b", "--set", "plan.pad_to_capacity=true"], "needs plan.expert_capacity"),
    (["--model", "mixtral-8x7b", "--from", "megatron", "--num-experts 16"],
     "--num-experts: 16, but model mixtral-8x7b has experts 8"),
    (["--model", "llama2-7b", "--from", "megatron", "--num-experts 8"], "model llama2-7b has experts 0"),
    (["--model", "mixtral-8x7b", "--from", "megatron", "--num-experts 8 --moe-router-topk 4"],
     "--moe-router-topk: 4, but model mixtral-8x7b has experts_per_token 2"),
    (["--model", "mixtral-8x7b", "--from", "megatron", "--moe-expert-capacity-factor -1"],
     "--moe-expert-capacity-factor"),
])
def test_bad_capacity_and_megatron_moe_arguments(capsys, argv, message):
    assert main(["estimate", "--hw", "dgx-h100", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_megatron_reads_and_writes_the_moe_arguments(capsys, tmp_path):
    argv = ["estimate", "--model", "qwen3-30b-a3b", "--hw", "h100-cluster", "--tp", "1", "--dp", "16", "--ep", "16",
            "--set", "plan.expert_capacity=1.5", "--set", "plan.pad_to_capacity=true",
            "--set", "model.expert_groups=8", "--set", "model.expert_groups_per_token=4", "--emit", "megatron"]
    assert main(argv) == 0
    script = capsys.readouterr().out
    # 16 ranks over 2 nodes, padded to capacity: NCCL's all-to-all (Megatron-Core's DeepEP does not pad)
    assert "--moe-token-dispatcher-type alltoall" in script
    assert "--moe-expert-capacity-factor 1.5 --moe-pad-expert-input-to-capacity" in script
    path = tmp_path / "run.sh"
    path.write_text(script)
    assert main(["estimate", "--hw", "h100-cluster", "--json", "--from", "megatron", str(path)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["plan"]["expert_capacity"], r["plan"]["pad_to_capacity"], r["plan"]["ep"]) == (1.5, True, 16)
    qk_norms = 48 * 2 * 128          # Megatron's reader ignores --qk-layernorm (its own warning says so)
    assert (r["model"]["params"], r["model"]["active_params"]) == (30_532_122_624 - qk_norms,
                                                                    3_353_032_704 - qk_norms)
    assert (r["model"]["experts"], r["model"]["experts_per_token"]) == (128, 8)
    # the same --num-experts as the --model: accepted
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--json", "--from", "megatron",
                 "--num-experts 8 --moe-router-topk 2"]) == 0
    capsys.readouterr()


def test_moe_layer_freq_patterns():
    from dse.frameworks.megatron_moe import layer_pattern

    assert layer_pattern("s", "1", 4) == [1, 1, 1, 1]
    assert layer_pattern("s", "2", 4) == [1, 0, 1, 0]                       # Megatron: i % n == 0
    assert layer_pattern("s", "'([0]*3+[1]*2)'", 5) == [0, 0, 0, 1, 1]
    assert layer_pattern("s", "[0, 1, 0, 1]", 4) == [0, 1, 0, 1]
    assert layer_pattern("s", "([1]*3+[0]*1)*3", 12) == [1, 1, 1, 0] * 3              # Megatron's README example
    for bad in ("__import__('os')", "[2]*4", "[0]*3"):
        with pytest.raises(InputError, match="--moe-layer-freq"):
            layer_pattern("s", bad, 4)


# ----------------------------------------------------------------------------------------- search


def test_search_excludes_invalid_ep_and_reruns_with_the_ep_flag(cli):
    from pathlib import Path

    space = Path(__file__).resolve().parent.parent / "examples" / "spaces" / "moe-expert-parallel.yaml"
    rc, out, err = cli("search", "--space", space, "--engine", "exhaustive", "--json", "-", "-q")
    assert rc == 0, err
    res = json.loads(out)
    excluded = res["excluded"]
    assert excluded["ep does not divide the experts"] == 4          # ep 16 with each of the 4 tp
    assert excluded["ep x etp does not divide tp x cp x dp"] == 3   # ep 4 at tp 8 (dp 2), ep 8 at tp 4 and 8
    assert all(t["params"]["plan.ep"] != 16 for t in res["trials"] if t.get("valid", True))
    rc, out, err = cli("search", "--space", space, "--engine", "exhaustive", "--top", "1", "-q")
    cmd = out.strip().splitlines()[-1]
    assert " --ep 8" in cmd and "plan.ep" not in cmd
    rc, js, _ = cli(*cmd.split()[1:], "--json")
    assert json.loads(js)["plan"]["ep"] == 8


def test_expert_parallelism_composes_with_context_parallelism():
    """The MoE layers of a cp rank run its s/cp tokens: the dispatch and combine carry 1/cp of the bytes."""
    runs = [estimate("mixtral-8x7b", "h100-cluster", tp=1, dp=8, ep=8, cp=cp, seq_len=32768, recompute="full")
            for cp in (1, 2, 4)]
    for cp, r in zip((1, 2, 4), runs):
        assert r["traffic"]["ep"] == pytest.approx(runs[0]["traffic"]["ep"] / cp, rel=1e-12)
        assert r["parallelism"]["gpus"] == 8 * cp
    assert runs[2]["memory"]["gpu"]["total"] < runs[1]["memory"]["gpu"]["total"] < runs[0]["memory"]["gpu"]["total"]


# ----------------------------------------------------------------------------------------- experts' ZeRO shards


def test_experts_reduce_and_step_over_the_ranks_that_hold_them():
    """dp = ep: each expert lives on one rank of its expert-data-parallel group, so only the dense parameters are
    reduced over dp (5.25 bytes per parameter: fp32 gradients reduce-scattered, bf16 weights all-gathered, 7/8 of
    each), and the optimizer steps the GPU's whole experts' shard."""
    r = estimate("qwen3-30b-a3b", "dgx-h100", ep=8, recompute="full")
    p_gpu = r["parallelism"]["params_per_gpu"]
    experts = 128 * 3 * 2048 * 768 * 48 / 8                 # E n_m h F_e L_moe / ep
    assert r["traffic"]["dp"] == pytest.approx((p_gpu - experts) * 7 / 8 * (4 + 2), rel=1e-12)
    one = estimate("qwen3-30b-a3b", "dgx-h100", ep=1, recompute="full")
    assert one["traffic"]["dp"] == pytest.approx(one["parallelism"]["params_per_gpu"] * 7 / 8 * 6, rel=1e-12)


@pytest.mark.parametrize("offload", [dict(offload_optimizer="cpu"), dict(offload_optimizer="cpu", offload_params="cpu"),
                                     dict(offload_optimizer="nvme")])
def test_expert_parallelism_with_storage_offload_conserves_the_states(offload):
    """Every parameter's states exist once over the dp ranks: dense ones sharded over dp, each expert's over the
    dp/ep ranks holding it; a node's host memory and drives hold the same bytes with or without expert parallelism,
    and a GPU's shard is (p - p_e)/dp + p_e/(dp/ep)."""
    kw = dict(tp=1, dp=16, zero=3, recompute="full", **offload)
    one = estimate("mixtral-8x7b", "h100-cluster", ep=1, **kw)
    eight = estimate("mixtral-8x7b", "h100-cluster", ep=8, **kw)
    assert eight["feasible"]
    for tier in ("host", "storage"):
        for k in ("optimizer", "weights", "gradients"):
            if k in one["memory"][tier]:
                assert eight["memory"][tier][k] == pytest.approx(one["memory"][tier][k], rel=1e-9), (tier, k)
    assert eight["memory"]["gpu"]["total"] < one["memory"]["gpu"]["total"]
