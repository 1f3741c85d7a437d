"""The token dispatcher's expert tensor-parallel gather against a simulation of Megatron-Core's dispatcher steps.

Megatron-Core ``megatron/core/transformer/moe/token_dispatcher.py``: the dispatcher's tensor-parallel group is the
expert one (``self.tp_group = pg_collection.expt_tp``, etp = tp by default). ``MoEAlltoAllTokenDispatcher`` (ep > 1):
``dispatch_preprocess`` permutes a rank's own s/tp tokens into routed copies, ``token_dispatch`` sends them over the
ep group, ``dispatch_postprocess`` all-gathers the received copies over the expert-TP group and
``combine_preprocess`` reduce-scatters the experts' output there. ``MoEAllGatherTokenDispatcher`` (ep = 1) gathers
the tokens before routing over the tp x ep group instead. The simulation below routes real token indices top-k at
random on every rank, runs those steps and counts the rows each rank's all-gather outputs; the kernel table's
message (the all-gather's output, of which a ring moves (n-1)/n) must equal their mean exactly (the sum over ranks
does not depend on the routing).
"""

from __future__ import annotations

import numpy as np
import pytest

from dse.catalog import load_hardware, load_model
from dse.estimate import make_plan
from dse.estimate.kernel_table import kernel_tables
from dse.formulas import kernels as K
from dse.formulas.precision import recipe_of


def _alltoall_dispatcher(s: int, tp: int, etp: int, ep: int, E: int, k: int, rng) -> np.ndarray:
    """Rows each rank's dispatch_postprocess all-gather outputs. Attention ranks: tp fastest (rank // tp: its
    sequence shard's group), expert ranks: etp fastest, then ep (Megatron's RankGenerator orders)."""
    world = int(np.lcm(tp, etp * ep))                             # the ranks both foldings cover
    local = s // tp                                               # a rank's tokens (sequence parallelism)
    received = np.zeros(world, dtype=np.int64)                    # rows after token_dispatch's all-to-all
    for src in range(world):
        scores = rng.random((local, E))
        topk = np.argsort(scores, axis=1)[:, :k]                  # k distinct experts per token
        permuted = np.sort(topk.ravel())                          # dispatch_preprocess: the copies, by expert
        ep_rank, etp_rank = (src // etp) % ep, src % etp
        for expert in permuted:                                   # token_dispatch: to the EP peer holding it
            owner = expert // (E // ep)
            dst = src + (owner - ep_rank) * etp
            received[dst] += 1
        assert 0 <= etp_rank < etp
    gathered = np.array([received[(r // etp) * etp:(r // etp + 1) * etp].sum() for r in range(world)])
    return gathered                                               # dispatch_postprocess: AG over expt_tp


def _allgather_dispatcher(s: int, tp: int, etp: int) -> np.ndarray:
    """Rows each rank's MoEAllGatherTokenDispatcher.token_dispatch gathers at ep = 1: the s/tp tokens of every rank
    of its tp x ep (= etp) group, before routing."""
    return np.full(max(tp, etp), (s // tp) * etp)


@pytest.mark.parametrize("tp, etp, ep, E, k", [(2, 2, 4, 8, 2), (4, 4, 2, 8, 2), (2, 2, 2, 16, 4), (4, 1, 4, 8, 2),
                                               (2, 1, 8, 8, 2), (4, 2, 2, 16, 4)])
def test_the_expert_gather_is_the_routed_copies_of_the_alltoall_dispatcher(tp, etp, ep, E, k):
    s, h, e = 256, 64, 2
    gathered = _alltoall_dispatcher(s, tp, etp, ep, E, k, np.random.default_rng(tp * 100 + ep))
    t = K.layer_kernels(s, 1, h, 8, 8, 8, 4 * h, tp=tp, sequence_parallel=True,
                        moe=dict(experts=E, experts_per_token=k, expert_ffn=4 * h, ep=ep,
                                 **({} if etp == tp else {"etp": etp})))
    row = t["expert_allreduce"]
    assert row["group"] == ("tp" if etp == tp else "etp")
    assert row["comm"] == e * h * gathered.mean()                 # e T (etp/tp) k h: the k copies, exactly
    assert gathered.mean() == s * etp // tp * k
    assert t["expert_dgrad_allreduce"]["comm"] == row["comm"]     # backward: reduce-scatter and all-gather again
    # the layer's own tp collective no longer carries the routed experts' tokens (no shared experts here)
    assert t["mlp_allreduce"]["comm"] == 0 and t["fc1_dgrad_allreduce"]["comm"] == 0
    assert t["attn_allreduce"]["comm"] == e * s * h               # the attention's all-gather and reduce-scatter


@pytest.mark.parametrize("tp, etp", [(2, 2), (4, 4), (4, 1), (2, 1), (4, 2)])
def test_at_ep_1_the_allgather_dispatcher_gathers_the_tokens_before_routing(tp, etp):
    s, h, e = 256, 64, 2
    gathered = _allgather_dispatcher(s, tp, etp)
    t = K.layer_kernels(s, 1, h, 8, 8, 8, 4 * h, tp=tp, sequence_parallel=True,
                        moe=dict(experts=8, experts_per_token=2, expert_ffn=4 * h,
                                 **({} if etp == tp else {"etp": etp})))
    if etp == tp:   # the tp group's all-gather of T tokens is the layer's mlp_allreduce message
        assert "expert_allreduce" not in t and t["mlp_allreduce"]["comm"] == e * h * gathered.mean()
    else:
        assert t["expert_allreduce"]["comm"] == e * h * gathered.mean() and t["mlp_allreduce"]["comm"] == 0


def test_shared_experts_keep_their_tensor_parallel_gather():
    """SharedExpertMLP is a dense tensor-parallel MLP: its column-parallel fc1 all-gathers the T tokens over tp and
    its fc2 reduce-scatters them, beside the dispatcher's gather of the routed copies."""
    s, h, e = 256, 64, 2
    t = K.layer_kernels(s, 1, h, 8, 8, 8, 4 * h, tp=2, sequence_parallel=True,
                        moe=dict(experts=8, experts_per_token=2, expert_ffn=4 * h, ep=4, shared_experts=1,
                                 shared_ffn=4 * h))
    assert t["mlp_allreduce"]["comm"] == e * s * h and t["expert_allreduce"]["comm"] == 2 * e * s * h


def test_without_sequence_parallelism_the_layer_output_is_all_reduced():
    """Megatron-Core refuses tp > 1 without sequence parallelism in MoE training; dse keeps its all-reduce there."""
    t = K.layer_kernels(256, 1, 64, 8, 8, 8, 256, tp=2, moe=dict(experts=8, experts_per_token=2, expert_ffn=256,
                                                                   ep=4))
    assert "expert_allreduce" not in t and t["mlp_allreduce"]["comm"] == 2 * 256 * 64


def test_an_array_plan_takes_each_elements_dispatcher():
    tp, ep = np.array([1, 2, 2, 4]), np.array([4, 1, 4, 2])
    arr = K.layer_kernels(256, 1, 64, 8, 8, 8, 256, tp=tp, sequence_parallel=True,
                          moe=dict(experts=8, experts_per_token=2, expert_ffn=256, ep=ep))
    for i in range(4):
        one = K.layer_kernels(256, 1, 64, 8, 8, 8, 256, tp=int(tp[i]), sequence_parallel=True,
                              moe=dict(experts=8, experts_per_token=2, expert_ffn=256, ep=int(ep[i])))
        for name in ("mlp_allreduce", "expert_allreduce"):
            assert arr[name]["comm"][i] == (one[name]["comm"] if name in one else 0)


def test_the_estimates_tensor_parallel_traffic_carries_the_routed_copies():
    """Mixtral 8x7B, tp 2 ep 4 with sequence parallelism: per layer and micro-batch the tp group's messages are the
    attention's two (forward and backward, e T h each) and the dispatcher's two of the k = 2 routed copies
    (e T k h each), not the dense MLP's e T h."""
    m, s = load_model("mixtral-8x7b"), load_hardware("h100-cluster")
    plan = make_plan(m, s, dict(tp=2, dp=8, ep=4, sequence_parallel=True, seq_len=4096))
    sums = kernel_tables(m, plan, recipe_of(plan))["sums"]
    T, h, e = 4096, m.hidden, 2
    assert sums["tp_messages"] == pytest.approx(2 * e * T * h + 2 * e * T * 2 * h, rel=1e-12)
