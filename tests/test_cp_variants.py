"""Context parallelism's other communication types (issue 15): hierarchical a2a+p2p and the K/V all-gather, and
what Transformer Engine refuses (sliding windows on the ring, attention sinks outside a2a).

Bytes are checked against simulations that move every element (the a2a's owners before and after, the ring's
buffers, the all-gather's blocks), the load balance against the enumerated causal and sliding-window masks, and the
estimate against cp = 1 (today's numbers) and against the plain type a one-level hierarchy is.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dse.cli import main
from dse.estimate import estimate
from dse.formulas import parallelism as P

H100, CLUSTER = "dgx-h100", "h100-cluster"


def _owner(s: int, cp: int) -> np.ndarray:
    """The cp rank holding each token: 2 cp chunks, rank r holds chunks r and 2cp-1-r (TE's DualChunkSwap)."""
    chunk = np.arange(s) // (s // (2 * cp))
    return np.where(chunk < cp, chunk, 2 * cp - 1 - chunk)


def _hierarchical(s: int, a2a: int, ring: int, heads: int, kv_heads: int, d: int, e: int = 2):
    """Simulate a2a+p2p on one sequence (b = 1): cp rank r = j A + i (ring index j, a2a index i). Returns the bytes
    each rank sends in the a2a of Q, K, V, in the a2a of the output, in the forward ring, and each rank's causal
    score pairs (queries x keys it computes, over its heads)."""
    cp = a2a * ring
    own = _owner(s, cp)
    sent_qkv, sent_o, sent_ring, pairs = np.zeros(cp), np.zeros(cp), np.zeros(cp), np.zeros(cp)
    for r in range(cp):
        j, i = divmod(r, a2a)
        group = own // a2a == j                    # tokens of ring group j, gathered by its a2a
        mine = own == r
        for h_all, weight in ((heads, 1), (kv_heads, 2)):        # Q; K and V
            keep = np.arange(h_all) // (h_all // a2a) == i       # head slice i stays on this rank
            sent_qkv[r] += weight * mine.sum() * (~keep).sum() * d * e
        keep_q = np.arange(heads) // (heads // a2a) == i
        sent_o[r] += mine.sum() * (~keep_q).sum() * d * e        # the output goes back the same way
        buf = 2 * group.sum() * (kv_heads // a2a) * d * e        # the ring's K, V: group j's tokens, kv heads of i
        sent_ring[r] = (ring - 1) * buf                          # passed on at each of R-1 steps
        pos = np.nonzero(group)[0]
        pairs[r] = (pos + 1).sum() * (heads // a2a)              # causal: query p sees keys 0..p
    return sent_qkv, sent_o, sent_ring, pairs


@pytest.mark.parametrize("s,a2a,ring,heads,kv", [(64, 2, 2, 4, 2), (96, 2, 3, 8, 4), (128, 4, 2, 8, 4),
                                                 (256, 1, 4, 4, 2), (256, 4, 1, 8, 4), (512, 2, 4, 16, 2)])
def test_hierarchical_bytes_and_balance_match_a_simulation(s, a2a, ring, heads, kv):
    d, e, cp = 8, 2, a2a * ring
    qkv, out, ring_sent, pairs = _hierarchical(s, a2a, ring, heads, kv, d, e)
    s_qkv = P.ulysses_alltoall_bytes(s, 1, (heads + 2 * kv) * d, cp, e)
    s_o = P.ulysses_alltoall_bytes(s, 1, heads * d, cp, e)
    s_kv = P.context_parallel_kv_bytes(s, 1, kv * d, cp, e)
    assert np.allclose(qkv, (a2a - 1) / a2a * s_qkv) and np.allclose(out, (a2a - 1) / a2a * s_o)
    assert np.allclose(ring_sent, (ring - 1) * s_kv)             # the ring's message: the plain ring's S_kv
    assert np.all(pairs == pairs[0]) and pairs.sum() == heads * s * (s + 1) // 2   # balanced, all the causal work


def _ring_allgather(cp: int, block: int) -> tuple[int, bool]:
    """NCCL's ring all-gather of cp blocks: at step k rank r sends the block it got at step k-1 to r+1. Returns
    the bytes rank 0 sends and whether every rank ends with every block."""
    have = [{r} for r in range(cp)]
    last = list(range(cp))
    sent = 0
    for _ in range(cp - 1):
        nxt = [last[(r - 1) % cp] for r in range(cp)]
        sent += block
        for r in range(cp):
            have[r].add(nxt[r])
        last = nxt
    return sent, all(len(h) == cp for h in have)


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_allgather_bytes_match_a_simulated_ring_allgather(cp):
    s_kv = P.context_parallel_kv_bytes(64 * cp, 2, 48, cp, 2)
    sent, complete = _ring_allgather(cp, s_kv)
    assert complete and sent == (cp - 1) * s_kv
    bw = 100e9
    assert P.allgather_attention_time(s_kv, cp, bw) == pytest.approx(sent / bw)
    assert P.allgather_attention_time(s_kv, cp, bw, backward=True) == pytest.approx(2 * sent / bw)  # + reduce-scatter
    assert P.allgather_buffer_bytes(s_kv, cp) == 2 * cp * s_kv   # whole K, V and dK, dV


@pytest.mark.parametrize("s,w,cp", [(64, 8, 2), (64, 40, 2), (96, 13, 3), (128, 100, 4), (256, 7, 8),
                                    (256, 64, 8), (512, 300, 4), (64, 64, 2), (64, 200, 4)])
def test_window_pairs_of_the_busiest_rank_match_the_enumerated_mask(s, w, cp):
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    mask = (j <= i) & (j > i - w)                                # Hugging Face sliding_window_overlay
    per_rank = np.bincount(_owner(s, cp), weights=mask.sum(axis=1), minlength=cp)
    expect = per_rank.max() if w < s else s * s / (2 * cp)       # a window >= s: the full causal layer (s^2/2)
    assert P.context_parallel_window_pairs(s, w, cp) == expect
    assert per_rank.argmax() == cp - 1 or per_rank.max() == per_rank[cp - 1]   # the two middle chunks


KINDS = ("p2p", "a2a", "a2a+p2p", "allgather")


@pytest.mark.parametrize("kind", KINDS)
def test_cp_one_is_todays_estimate_for_every_type(kind):
    a = estimate("llama3-8b", H100, seq_len=8192)
    b = estimate("llama3-8b", H100, seq_len=8192, cp=1, cp_comm=kind)
    assert a["time"] == b["time"] and a["memory"] == b["memory"] and a["traffic"] == b["traffic"]


def _numbers(r):
    return r["time"], r["memory"], r["traffic"], r["throughput"]


@pytest.mark.parametrize("hw,cp,tp", [(H100, 8, 1), (CLUSTER, 16, 1), (CLUSTER, 8, 2)])
def test_a_one_level_hierarchy_is_the_plain_type(hw, cp, tp):
    kw = dict(seq_len=32768, recompute="full", tp=tp, dp=1, global_batch=2)
    ring = estimate("llama3-8b", hw, cp=cp, cp_comm="p2p", **kw)
    assert _numbers(estimate("llama3-8b", hw, cp=cp, cp_comm="a2a+p2p", cp_a2a=1, **kw)) == _numbers(ring)
    if (8 // tp) % cp == 0:   # Ulysses needs the 8 K/V heads split over cp
        uly = estimate("llama3-8b", hw, cp=cp, cp_comm="a2a", **kw)
        assert _numbers(estimate("llama3-8b", hw, cp=cp, cp_comm="a2a+p2p", cp_a2a=cp, **kw)) == _numbers(uly)


def test_hierarchical_default_level_is_one_nodes_cp_ranks_and_its_traffic_splits_by_link():
    kw = dict(seq_len=131072, recompute="full", dp=1, global_batch=1)
    r = estimate("llama3-8b", CLUSTER, cp=16, cp_comm="a2a+p2p", **kw)
    assert _numbers(r) == _numbers(estimate("llama3-8b", CLUSTER, cp=16, cp_comm="a2a+p2p", cp_a2a=8, **kw))
    s, L = 131072, 32
    qkv = P.ulysses_alltoall_bytes(s, 1, (32 + 16) * 128, 16)
    o = P.ulysses_alltoall_bytes(s, 1, 32 * 128, 16)
    kv = P.context_parallel_kv_bytes(s, 1, 8 * 128, 16)
    a2a_bytes = L * 3 * 7 / 8 * (qkv + o)          # forward, backward, recompute; 7/8 of each leaves the rank
    ring_bytes = L * 1 * 4 * kv                     # R - 1 = 1 step: S_kv forward and recompute, 2 S_kv backward
    assert r["traffic"]["cp"] == pytest.approx(a2a_bytes + ring_bytes, rel=1e-12)
    flat = estimate("llama3-8b", CLUSTER, cp=16, cp_comm="p2p", **kw)   # the ring over both nodes: all network
    assert flat["traffic"]["cp"] == pytest.approx(L * 15 * 4 * kv, rel=1e-12)
    other = flat["traffic"]["inter_node"] - flat["traffic"]["cp"]     # the gradients' share of the network
    assert r["traffic"]["inter_node"] == pytest.approx(other + ring_bytes, rel=1e-12)   # a2a on NVLink, ring across
    assert r["traffic"]["intra_node"] - flat["traffic"]["intra_node"] == pytest.approx(a2a_bytes, rel=1e-12)


def test_allgather_is_exposed_and_holds_the_whole_kv():
    kw = dict(seq_len=131072, recompute="full", dp=1, global_batch=1)
    ring = estimate("llama3-8b", H100, cp=8, **kw)
    ag = estimate("llama3-8b", H100, cp=8, cp_comm="allgather", **kw)
    assert ag["traffic"]["cp"] == ring["traffic"]["cp"]              # the same bytes ...
    assert ring["time"]["cp_communication"] == 0 < ag["time"]["cp_communication"]   # ... not hidden
    kv = P.context_parallel_kv_bytes(131072, 1, 8 * 128, 8)
    from dse.catalog import load_system
    from dse.estimate.links import links

    link = links(load_system(H100), type("p", (), {"tp": 1, "dp": 1, "cp": 8, "ep": 1, "etp": None,
                                                   "schedule": "1f1b", "cp_comm": "allgather"})())["cp"]
    per_layer = (2 * P.allgather_attention_time(kv, 8, link.bandwidth, path=link.path)
                 + P.allgather_attention_time(kv, 8, link.bandwidth, backward=True, path=link.path))
    assert ag["time"]["cp_communication"] == pytest.approx(32 * per_layer, rel=1e-12)   # fwd, recompute, bwd
    extra = ag["memory"]["gpu"]["buffers"] - ring["memory"]["gpu"]["buffers"]
    assert extra == pytest.approx(2 * 8 * kv - 4 * kv, rel=1e-12)   # whole K, V, dK, dV instead of 4 ring buffers


@pytest.mark.parametrize("kind", KINDS)
def test_more_cp_never_raises_memory_per_gpu(kind):
    kw = dict(seq_len=32768, recompute="full", dp=1, global_batch=1)
    mem = [estimate("llama3-8b", H100, cp=cp, cp_comm=kind, **kw)["memory"]["gpu"] for cp in (1, 2, 4, 8)]
    for a, b in zip(mem, mem[1:]):
        assert b["activations"] <= a["activations"] and b["total"] <= a["total"]


def test_allgather_windows_priced_at_the_busiest_rank():
    from dse.catalog import load_model
    from dse.estimate.context import gathered_share
    from dse.specs.plan import Plan

    m = load_model("mistral-7b")                      # every layer sliding, window 4096
    plan = Plan(cp=2, cp_comm="allgather", seq_len=8192, dp=1)
    s, w = 8192, 4096
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    per_rank = np.bincount(_owner(s, 2), weights=((j <= i) & (j > i - w)).sum(axis=1), minlength=2)
    assert gathered_share(m, plan) * s * s == pytest.approx(2 * per_rank.max(), rel=1e-12)
    kw = dict(seq_len=8192, dp=1, global_batch=1)
    ag, uly = (estimate("mistral-7b", H100, cp=2, cp_comm=k, **kw) for k in ("allgather", "a2a"))
    assert ag["flops"]["model_per_iteration"] == uly["flops"]["model_per_iteration"]   # the same windowed work
    assert ag["time"]["compute"] > uly["time"]["compute"]      # ... but the busiest rank's 17% more sets the time


@pytest.mark.parametrize("argv,message", [
    (["--model", "mistral-7b", "--cp", "2", "-s", "32768"],
     "--cp 2 with --cp-comm p2p: the model's 32 sliding-window layers (window 4096) are shorter than seq_len 32768"),
    (["--model", "gemma3-27b", "--cp", "2", "-s", "32768", "--cp-comm", "a2a+p2p", "--cp-a2a", "1"],
     "allowed: --cp-comm a2a or allgather"),
    (["--model", "gpt-oss-120b", "--cp", "2", "-s", "8192", "--cp-comm", "allgather", "--tp", "8"],
     "attention sinks"),
    (["--model", "llama3-8b", "--cp", "4", "--cp-a2a", "2"], "--cp-a2a 2 sets the a2a level of --cp-comm a2a+p2p"),
    (["--model", "llama3-8b", "--cp", "4", "--cp-comm", "a2a+p2p", "--cp-a2a", "3"], "--cp-a2a 3 must divide --cp 4"),
    (["--model", "llama3-8b", "--cp", "16", "--cp-comm", "a2a+p2p", "--cp-a2a", "16", "--hw", CLUSTER],
     "over 16 ranks: both must be divisible by 16"),
])
def test_what_transformer_engine_refuses_is_one_line(capsys, argv, message):
    hw = [] if "--hw" in argv else ["--hw", H100]
    assert main(["estimate", *argv, *hw]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_window_as_long_as_the_sequence_runs_on_the_ring():
    r = estimate("mistral-7b", H100, cp=2, seq_len=4096, dp=1, global_batch=1)   # window 4096 = s: no mask
    assert r["time"]["iteration"] > 0


def test_megatron_arguments_both_ways(capsys):
    base = ["estimate", "--model", "llama3-8b", "--hw", CLUSTER, "-s", "131072", "--dp", "1", "--recompute", "full"]
    assert main([*base, "--cp", "16", "--cp-comm", "a2a+p2p", "--emit", "megatron"]) == 0
    assert "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 8 2" in capsys.readouterr().out
    assert main([*base, "--cp", "8", "--cp-comm", "allgather", "--emit", "megatron"]) == 0
    assert "--context-parallel-size 8 --cp-comm-type all_gather" in capsys.readouterr().out
    args = ("--context-parallel-size 16 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 4 4 "
            "--seq-length 131072 --micro-batch-size 1 --global-batch-size 1 --bf16 --nnodes 2 --nproc_per_node 8")
    assert main(["estimate", "--model", "llama3-8b", "--hw", CLUSTER, "--from", "megatron", args, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["plan"]["cp_comm"], r["plan"]["cp_a2a"], r["plan"]["cp"]) == ("a2a+p2p", 4, 16)
    for spelling in ("all_gather", "allgather"):
        a = args.replace("a2a+p2p --hierarchical-context-parallel-sizes 4 4", spelling)
        assert main(["estimate", "--model", "llama3-8b", "--hw", CLUSTER, "--from", "megatron", a, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["plan"]["cp_comm"] == "allgather"


@pytest.mark.parametrize("hcp,message", [("", "a2a+p2p needs --hierarchical-context-parallel-sizes"),
                                         ("--hierarchical-context-parallel-sizes 4 2", "product is"),
                                         ("--hierarchical-context-parallel-sizes 16", "two levels"),
                                         ("--hierarchical-context-parallel-sizes 2 4 2", "a third level does not run")])
def test_megatron_hierarchical_sizes_are_checked(capsys, hcp, message):
    args = f"--context-parallel-size 16 --cp-comm-type a2a+p2p {hcp} --seq-length 131072 --bf16 --nnodes 2"
    assert main(["estimate", "--model", "llama3-8b", "--hw", CLUSTER, "--from", "megatron", args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_search_block_path_equals_scalar_points_for_every_type():
    from _block_vs_point import block_vs_point

    from dse.search.space import from_dict

    sp = from_dict({"model": "llama3-8b", "hardware": CLUSTER,
                    "fixed": {"plan.seq_len": 32768, "plan.global_batch": 16, "plan.recompute": "full"},
                    "parameters": {"gpus": [16, 32], "plan.tp": [1, 2, 4], "plan.cp": [1, 2, 4, 8, 16],
                                   "plan.cp_comm": list(KINDS)},
                    "objectives": ["throughput"]}, "t.yaml")
    seen = {s["result"]["plan"]["cp_comm"] for s in block_vs_point(sp, chunk=7) if s["valid"] and s["feasible"]
            and s["result"]["plan"]["cp"] > 1}
    assert seen == set(KINDS)
