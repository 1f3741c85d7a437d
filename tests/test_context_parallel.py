"""Context parallelism (Megatron-LM --context-parallel-size): the sequence split over cp GPUs, ring attention.

Checked against brute force: the causal mask's scores each rank computes under the load-balanced split
(numpy), the bytes a simulated K/V ring moves; and against cp = 1, where every number is today's.
"""

from __future__ import annotations

import numpy as np
import pytest

from dse.cli import main
from dse.errors import InputError
from dse.estimate import estimate
from dse.formulas import compute as C, parallelism as P

H100 = "dgx-h100"


def _ranks_of_rows(s: int, cp: int) -> np.ndarray:
    """The rank holding each token: 2 cp chunks, rank i holds chunks i and 2cp-1-i (Megatron's causal split)."""
    chunk = np.arange(s) // (s // (2 * cp))
    return np.where(chunk < cp, chunk, 2 * cp - 1 - chunk)


@pytest.mark.parametrize("s,cp", [(64, 2), (96, 3), (256, 4), (512, 8)])
def test_load_balanced_attention_work_is_equal_per_rank_and_sums_to_the_causal_work(s, cp):
    mask = np.tril(np.ones((s, s), dtype=np.int64))          # query row attends keys <= its position
    owner = _ranks_of_rows(s, cp)
    per_rank = np.bincount(owner, weights=mask.sum(axis=1), minlength=cp)
    assert np.all(per_rank == per_rank[0])                   # balanced: every rank the same scores
    assert per_rank.sum() == mask.sum()
    # the formula (FlashAttention's convention, s^2/2 causal) gives each rank 1/cp of the layer's causal work
    b, a, d = 2, 4, 16
    f = P.context_parallel_attention_flops(s, b, a, d, cp)
    assert f * cp == pytest.approx(C.flash_attention_flops(s, b, a, d, causal=True))
    assert per_rank[0] / mask.sum() == pytest.approx(1 / cp)
    assert f == pytest.approx(4 * b * a * d * per_rank[0] * (s * s / 2) / mask.sum())


def test_model_flops_per_iteration_do_not_depend_on_cp():
    r1 = estimate("llama3-8b", H100, seq_len=8192, cp=1, dp=1)
    r4 = estimate("llama3-8b", H100, seq_len=8192, cp=4, dp=1)
    # the same sequence's work, split over 4 ranks: the attention's 1/cp per rank times cp ranks
    assert r4["flops"]["model_per_iteration"] == pytest.approx(r1["flops"]["model_per_iteration"], rel=1e-12)


def _ring(cp: int, tokens: int, b: int, kv_dim: int, dtype=np.float16) -> int:
    """Bytes one rank sends in a simulated forward ring pass (cp-1 steps, its current K/V to the next rank)."""
    kv = [np.zeros((2, tokens, b, kv_dim), dtype=dtype) for _ in range(cp)]   # each rank's K and V
    sent = 0
    for _ in range(cp - 1):
        sent += kv[0].nbytes                      # rank 0's send this step (every rank sends as much)
        kv = kv[-1:] + kv[:-1]                    # each buffer moves one rank on
    return sent


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_ring_bytes_match_a_simulated_ring(cp):
    s, b, kv_dim = 64 * cp, 2, 48
    per_step = P.context_parallel_kv_bytes(s, b, kv_dim, cp, 2)
    assert (cp - 1) * per_step == _ring(cp, s // cp, b, kv_dim)


def test_the_estimates_cp_traffic_is_the_ring_forward_backward():
    m = "llama3-8b"
    r = estimate(m, H100, seq_len=16384, cp=4, dp=2, global_batch=2)
    kv = P.context_parallel_kv_bytes(16384, 1, 8 * 128, 4, 2)            # Llama-3-8B: 8 KV heads of 128, t = 1
    layers, micro = 32, 1
    assert r["traffic"]["cp"] == pytest.approx(micro * layers * 3 * 3 * kv)   # cp-1 = 3 steps; S_kv + 2 S_kv
    assert r["traffic"]["intra_node"] >= r["traffic"]["cp"]                   # tp x cp = 4 GPUs: inside a node


def test_activations_scale_as_one_over_cp_and_states_stay():
    base = dict(seq_len=32768, dp=1, recompute="full", global_batch=1)
    r1, r8 = (estimate("llama3-8b", H100, cp=cp, **base) for cp in (1, 8))
    g1, g8 = r1["memory"]["gpu"], r8["memory"]["gpu"]
    assert g8["activations"] == pytest.approx(g1["activations"] / 8, rel=1e-12)
    assert g8["weights"] == g1["weights"]
    # ZeRO-1 shards the optimizer over dp x cp = 8 (Megatron's data-parallel group with cp)
    assert g8["optimizer"] == pytest.approx(g1["optimizer"] / 8, rel=1e-12)
    assert r8["parallelism"]["gpus"] == 8 and r1["parallelism"]["gpus"] == 1


def test_cp_one_is_todays_estimate():
    a = estimate("llama2-7b", H100, tp=2)
    b = estimate("llama2-7b", H100, tp=2, cp=1)
    assert a["time"] == b["time"] and a["memory"] == b["memory"] and a["traffic"] == b["traffic"]
    assert a["time"]["cp_communication"] == 0 and a["traffic"]["cp"] == 0


def test_time_parts_add_up_and_a_slow_ring_is_exposed():
    # cp across nodes on a slow network, a short sequence: the K/V transfer outlasts each step's attention
    r = estimate("llama2-7b", "a100-cluster-800g", seq_len=4096, cp=16, dp=1, global_batch=1,
                 recompute="selective")
    t = r["time"]
    parts = sum(t[k] for k in ("compute", "recompute", "communication", "bubble", "optimizer", "overhead",
                               "io_exposed"))
    assert parts == pytest.approx(t["iteration"], rel=1e-9)
    assert t["cp_communication"] > 0
    r_fast = estimate("llama2-7b", H100, seq_len=131072, cp=8, dp=1, global_batch=1, recompute="full")
    assert r_fast["time"]["cp_communication"] == 0      # long sequences: the ring hides behind the attention


def test_llama3_8b_at_128k_fits_one_dgx_h100_only_with_cp():
    plan = dict(seq_len=131072, recompute="full", micro_batch=1)
    r1 = estimate("llama3-8b", H100, cp=1, **plan)
    r8 = estimate("llama3-8b", H100, cp=8, **plan)
    assert not r1["feasible"] and r1["memory"]["gpu"]["total"] > r1["memory"]["gpu"]["capacity"]
    assert r8["feasible"] and r8["plan"]["dp"] == 1 and r8["parallelism"]["gpus"] == 8


@pytest.mark.parametrize("argv,message", [
    (["--cp", "3", "-s", "4096"], "--cp 3 needs seq_len 4096 divisible by 2 cp = 6"),
    (["--cp", "2", "--attention", "math"], "--cp 2 needs --attention flash"),
])
def test_bad_cp_plans_are_one_line_errors(capsys, argv, message):
    assert main(["estimate", "--model", "llama2-7b", "--hw", H100, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_cp_on_a_chiplet_package_is_refused():
    with pytest.raises(InputError, match="--cp 2 does not apply to a chiplet package"):
        estimate("llama2-7b", "chiplet-train-8x8", cp=2, global_batch=16)


def test_megatron_and_torchtitan_round_trip_cp(capsys):
    args = ("--tensor-model-parallel-size 2 --context-parallel-size 4 --seq-length 32768 --micro-batch-size 1 "
            "--global-batch-size 8 --bf16 --nproc_per_node 8 --nnodes 2")
    assert main(["estimate", "--model", "llama3-8b", "--hw", H100, "--from", "megatron", args, "--json"]) == 0
    import json

    r = json.loads(capsys.readouterr().out)
    assert r["plan"]["cp"] == 4 and r["plan"]["dp"] == 2 and r["parallelism"]["gpus"] == 16
    assert main(["estimate", "--model", "llama3-8b", "--hw", H100, "--cp", "4", "--tp", "2", "-s", "32768",
                 "--emit", "megatron"]) == 0
    assert "--context-parallel-size 4" in capsys.readouterr().out
    assert main(["estimate", "--model", "llama3-8b", "--hw", H100, "--cp", "4", "-s", "32768",
                 "--emit", "torchtitan"]) == 0
    assert "context_parallel_degree = 4" in capsys.readouterr().out
