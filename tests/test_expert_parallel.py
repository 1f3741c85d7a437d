"""Expert parallelism (plan.ep, --ep): parameters and memory per GPU, the all-to-all rows, rules and frameworks.

The checks: ep = 1 is today's estimate exactly; the expert weights per GPU are divided by ep and nothing else is;
the all-to-all bytes of the kernel table equal the expectation of a brute-force count of routed token copies
that cross ranks; the all-to-all time is the pairwise-exchange cost on the group's link; bad input is one line.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dse import catalog
from dse.cli import main
from dse.errors import InputError
from dse.estimate import estimate
from dse.estimate.parameters import layer_counts
from dse.formulas import kernels as K, parallelism as P, transformer as T


def numbers(obj) -> list[float]:
    """Every number of a result, in key order (json's walk)."""
    out: list[float] = []
    json.loads(json.dumps(obj, default=float), parse_float=lambda x: out.append(float(x)) or 0.0,
               parse_int=lambda x: out.append(int(x)) or 0, parse_constant=lambda x: out.append(float(x)) or 0.0)
    return out


def test_ep_1_is_todays_estimate_exactly():
    for model in ("mixtral-8x7b", "qwen3-30b-a3b"):
        base = estimate(model, "dgx-h100", tp=2, recompute="full")
        one = estimate(model, "dgx-h100", tp=2, recompute="full", ep=1)
        assert json.dumps(base, default=float) == json.dumps(one, default=float)
        assert base["time"]["ep_communication"] == 0.0 and base["traffic"]["ep"] == 0.0
    dense = estimate("llama2-7b", "dgx-h100")
    assert "ep_communication" not in dense["time"] and "ep" not in dense["traffic"]   # dense output unchanged
    assert dense["plan"]["ep"] == 1


def test_expert_weights_per_gpu_are_divided_by_ep():
    m = catalog.load_model("mixtral-8x7b")
    experts = m.layers * layer_counts(m, T)["moe_experts"]          # every routed expert's weights
    assert experts == m.layers * 8 * 3 * 4096 * 14336
    one = estimate(m, "dgx-h100", tp=1, dp=8, ep=1)
    eight = estimate(m, "dgx-h100", tp=1, dp=8, ep=8)
    w1, w8 = one["memory"]["gpu"]["weights"], eight["memory"]["gpu"]["weights"]
    assert w1 - w8 == pytest.approx(2 * experts * (1 - 1 / 8), rel=1e-12)        # bf16 weights: expert part / 8
    assert one["parallelism"]["params_per_gpu"] - eight["parallelism"]["params_per_gpu"] == pytest.approx(
        experts * 7 / 8, rel=1e-12)
    # fp32 gradients likewise; ZeRO-1's optimizer shard is the same: dense over 8 ranks, experts/8 over 8/8 ranks
    assert one["memory"]["gpu"]["gradients"] - eight["memory"]["gpu"]["gradients"] == pytest.approx(
        4 * experts * 7 / 8, rel=1e-12)
    assert eight["memory"]["gpu"]["optimizer"] == pytest.approx(one["memory"]["gpu"]["optimizer"], rel=1e-12)
    assert eight["memory"]["gpu"]["activations"] == one["memory"]["gpu"]["activations"]   # T k routed copies
    assert eight["flops"] == one["flops"]                                                # the same work


def test_expert_optimizer_states_shard_over_dp_over_ep():
    m = catalog.load_model("mixtral-8x7b")
    experts = m.layers * layer_counts(m, T)["moe_experts"]
    two = estimate(m, "dgx-h100", tp=1, dp=8, ep=2)
    one = estimate(m, "dgx-h100", tp=1, dp=8, ep=1)
    # ZeRO-1: optimizer 12 B/param of the experts a GPU holds (E/2 of them) over the 4 ranks holding them = 12 P/8
    assert two["memory"]["gpu"]["optimizer"] == pytest.approx(one["memory"]["gpu"]["optimizer"], rel=1e-12)
    z2 = estimate(m, "dgx-h100", tp=1, dp=8, ep=2, zero=2)
    z2_one = estimate(m, "dgx-h100", tp=1, dp=8, ep=1, zero=2)
    assert z2["memory"]["gpu"]["gradients"] == pytest.approx(z2_one["memory"]["gpu"]["gradients"], rel=1e-12)
    assert z2_one["memory"]["gpu"]["weights"] - z2["memory"]["gpu"]["weights"] == pytest.approx(experts, rel=1e-12)


def _routed_copies_crossing_ranks(T_tok, k, E, ep, rng):
    """Brute force: every rank routes its T tokens to k distinct experts drawn uniformly; count, per rank, the
    token copies that go to an expert on another rank (experts j on rank j // (E/ep))."""
    sent = np.zeros(ep)
    for rank in range(ep):
        choice = np.argsort(rng.random((T_tok, E)), axis=1)[:, :k]     # top-k of uniform scores: k distinct
        sent[rank] = np.count_nonzero(choice // (E // ep) != rank)
    return sent


@pytest.mark.parametrize("E, k, ep", [(8, 2, 8), (8, 2, 4), (16, 4, 2), (64, 8, 8)])
def test_alltoall_bytes_match_a_brute_force_count_of_routed_tokens(E, k, ep):
    s, b, h, e = 512, 2, 64, 2
    T_tok = s * b
    table = K.moe_mlp_kernels(s, b, h, E, k, 128, ep=ep, bytes_per_element=e)
    crossing = table["ep_dispatch"]["comm"] * (ep - 1) / ep      # what alltoall_time moves off each rank
    sent = _routed_copies_crossing_ranks(T_tok, k, E, ep, np.random.default_rng(0))
    expected = T_tok * k * (ep - 1) / ep
    assert crossing == e * h * expected
    sd = math.sqrt(T_tok * k * (1 / ep) * (1 - 1 / ep))         # binomial-ish spread of one rank's count
    assert abs(sent.mean() - expected) < 4 * sd / math.sqrt(ep)
    assert [r for r in table if r.startswith("ep_")] == ["ep_dispatch", "ep_combine", "ep_combine_backward",
                                                       "ep_dispatch_backward"]
    assert {table[r]["pass"] for r in ("ep_dispatch", "ep_combine")} == {"forward"}


def test_expert_gemms_hold_e_over_ep_experts_with_the_ranks_tokens():
    one = K.moe_mlp_kernels(4096, 1, 4096, 8, 2, 14336, imbalance=1.25)
    four = K.moe_mlp_kernels(4096, 1, 4096, 8, 2, 14336, imbalance=1.25, ep=4)
    assert four["expert_fc1"]["batch"] == 2 and four["expert_fc1"]["m"] == 1.25 * 4096 * 2 * 4 / 8
    assert four["expert_fc1"]["flops"] == one["expert_fc1"]["flops"]           # the same tokens' work per GPU
    assert "ep_dispatch" not in one and [r for r in one if r not in four] == []
    assert sum(r["saved"] for r in four.values()) == sum(r["saved"] for r in one.values())


def test_alltoall_time_is_the_pairwise_exchange():
    assert P.alltoall_time(8e6, 1, 100e9, 1e-5) == 0.0
    assert P.alltoall_time(8e6, 8, 100e9, 1e-5) == pytest.approx(7 / 8 * 8e6 / 100e9 + 7 * 1e-5)
    assert np.allclose(P.alltoall_time(8e6, np.array([1, 2, 4]), 100e9), [0, 4e-5, 6e-5])


def test_the_estimate_prices_the_alltoalls_on_nvlink_and_across_nodes():
    inside = estimate("mixtral-8x7b", "h100-cluster", tp=2, dp=16, ep=4, recompute="full")
    across = estimate("mixtral-8x7b", "h100-cluster", tp=2, dp=16, ep=8, recompute="full")   # tp ep = 16 > 8
    msg = 2 * 4096 * 1 * 2 * 4096        # e T k h (no SP: T tokens per rank), bf16
    # 4 all-to-alls per layer and micro-batch, the forward two again under full recompute
    calls = [r["parallelism"]["micro_batches"] * r["parallelism"]["layers_per_stage"] * 6 for r in (inside, across)]
    assert inside["traffic"]["ep"] == pytest.approx(calls[0] * msg * 3 / 4)
    # across two nodes, 4 EP ranks a node: a token goes once to the other node when one of its 2 experts is there
    # (1 - C(4,2)/C(8,2) = 22/28), against 2 copies in the message; 3/4 of the copies cross NVLink
    share = (22 / 28) / 2
    assert P.internode_share(8, 2, 2) == pytest.approx(share)
    assert across["traffic"]["ep"] == pytest.approx(calls[1] * msg * (share + 3 / 4))
    nic, nvlink = 3200e9 / 8 * 0.94 / 8, 450e9 * 0.82      # a GPU's share of the node's 8 NICs; NVLink4
    # NCCL's Simple protocol (the stages take ~0.5 ms): 8.4 us once, 6 NVLink hops of 3.4 us, 1 network hop of 14 us
    one = max(share * msg / nic, 3 / 4 * msg / nvlink) + (8.4 + 6 * 3.4 + 14.0) * 1e-6
    assert across["time"]["ep_communication"] == pytest.approx(calls[1] * one, rel=1e-12)
    assert across["traffic"]["inter_node"] >= calls[1] * msg * share
    assert across["time"]["ep_communication"] / across["traffic"]["ep"] > 2 * (
        inside["time"]["ep_communication"] / inside["traffic"]["ep"])   # seconds per byte: the NIC share is slower


@pytest.mark.parametrize("model, hw, tp, dp", [("mixtral-8x7b", "h100-cluster", 1, 16),
                                               ("qwen3-30b-a3b", "dgx-h100", 1, 8)])
def test_ep_8_runs_fits_and_is_faster_where_ep_1_does_not_fit(model, hw, tp, dp):
    one = estimate(model, hw, tp=tp, dp=dp, ep=1, recompute="full")
    eight = estimate(model, hw, tp=tp, dp=dp, ep=8, recompute="full")
    assert all(math.isfinite(v) for v in numbers(eight))
    assert not one["feasible"] and eight["feasible"]
    assert eight["time"]["iteration"] < one["time"]["iteration"]
    assert eight["time"]["dp_communication"] < one["time"]["dp_communication"]   # experts' grads over dp/ep


def test_numpy_ep_column_matches_the_scalar_estimates():
    arr = estimate("mixtral-8x7b", "dgx-h100", tp=1, dp=8, ep=[1, 2, 8])
    for i, ep in enumerate((1, 2, 8)):
        one = estimate("mixtral-8x7b", "dgx-h100", tp=1, dp=8, ep=ep)
        for key in (("time", "iteration"), ("memory", "gpu", "total"), ("traffic", "ep")):
            a, s = arr, one
            for k in key:
                a, s = a[k], s[k]
            assert np.asarray(a).ravel()[i] == pytest.approx(s, rel=1e-9), (ep, key)


@pytest.mark.parametrize("argv, message", [
    (["--model", "llama2-7b", "--ep", "2"], "--ep 2: expert parallelism needs an MoE model"),
    (["--model", "mixtral-8x7b", "--ep", "3", "--dp", "3"], "--ep 3 does not divide the model's 8 experts"),
    (["--model", "mixtral-8x7b", "--ep", "4", "--dp", "2"],
     "--ep 4 x --etp 1 = 4 does not divide --tp 1 x --cp 1 x --dp 2 = 2"),
])
def test_bad_ep_is_a_one_line_error(capsys, argv, message):
    assert main(["estimate", "--hw", "dgx-h100", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_chiplet_packages_refuse_ep():
    with pytest.raises(InputError, match="--ep 2 does not apply to a chiplet package"):
        estimate("llama2-7b", "chiplet-train-8x8", micro_batch=1, ep=2)


def test_frameworks_carry_ep(capsys, tmp_path):
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--ep", "4", "--emit", "megatron"]) == 0
    assert "--expert-model-parallel-size 4 --moe-token-dispatcher-type alltoall" in capsys.readouterr().out
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--ep", "4", "--emit", "torchtitan"]) == 0
    assert "expert_parallel_degree = 4" in capsys.readouterr().out
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--ep", "4", "--emit", "deepspeed"]) == 0
    assert "not a ds_config.json setting" in capsys.readouterr().err + capsys.readouterr().out
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--json", "--from", "megatron",
                 "--tensor-model-parallel-size 1 --expert-model-parallel-size 8"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["ep"] == 8
    toml = tmp_path / "job.toml"
    toml.write_text("[parallelism]\ntensor_parallel_degree = 1\nexpert_parallel_degree = 2\n")
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--json", "--from", "torchtitan",
                 str(toml)]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["ep"] == 2
