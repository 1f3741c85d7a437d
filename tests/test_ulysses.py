"""DeepSpeed-Ulysses context parallelism (``plan.cp_comm`` a2a; Jacobs et al. 2023, arXiv 2309.14509; Megatron-Core
``--cp-comm-type a2a``): the all-to-all bytes against an enumeration of ranks, tokens and heads, cp 1 and the
default unchanged, the attention FLOPs equal to the ring's, the heads rule, the framework arguments both ways,
and the search parameter."""

from __future__ import annotations

import itertools
import json

import pytest

from dse.cli import main
from dse.estimate import estimate
from dse.formulas import parallelism as P

H100 = "dgx-h100"


def _sent_by_enumeration(s: int, b: int, heads: int, cp: int) -> list[int]:
    """Elements each rank sends in one Ulysses all-to-all: rank r holds tokens [r s/cp, (r+1) s/cp) of every head
    before, heads [r H/cp, (r+1) H/cp) of every token after; an element moves when its two owners differ."""
    sent = [0] * cp
    for _batch, token, head in itertools.product(range(b), range(s), range(heads)):
        before, after = token // (s // cp), head // (heads // cp)
        if before != after:
            sent[before] += 1
    return sent


@pytest.mark.parametrize("s, b, heads, cp", [(8, 1, 4, 2), (12, 2, 6, 3), (16, 1, 8, 4), (16, 2, 8, 8), (6, 1, 2, 1)])
def test_alltoall_bytes_match_an_enumeration(s, b, heads, cp):
    sent = _sent_by_enumeration(s, b, heads, cp)
    assert len(set(sent)) == 1                           # every rank sends the same
    for e in (1, 2):
        assert (cp - 1) / cp * P.ulysses_alltoall_bytes(s, b, heads, cp, e) == pytest.approx(e * sent[0], abs=1e-12)


def test_cp_one_is_the_same_for_both_comm_types_and_the_default_is_the_ring():
    base = estimate("llama2-7b", H100, tp=2)
    for comm in ("p2p", "a2a"):
        r = estimate("llama2-7b", H100, tp=2, cp=1, cp_comm=comm)
        assert r["time"] == base["time"] and r["memory"] == base["memory"] and r["traffic"] == base["traffic"]
    ring = estimate("llama3-8b", H100, seq_len=32768, cp=4, dp=2, recompute="full")
    assert ring == estimate("llama3-8b", H100, seq_len=32768, cp=4, dp=2, recompute="full", cp_comm="p2p")


def test_ulysses_and_ring_agree_on_attention_flops_not_on_traffic():
    kw = dict(seq_len=32768, cp=8, dp=1, global_batch=2, recompute="full")
    ring = estimate("llama3-8b", H100, **kw)
    uly = estimate("llama3-8b", H100, cp_comm="a2a", **kw)
    assert uly["flops"] == ring["flops"]
    assert uly["memory"]["gpu"]["activations"] == ring["memory"]["gpu"]["activations"]
    # per layer and micro-batch: 3 passes (forward, recompute, backward) of Q, K, V and the output, (cp-1)/cp of
    # each rank's s/cp tokens; the ring sends cp-1 steps of K, V (x2 backward, + forward again)
    s, b, cp, e, h, kv = 32768, 1, 8, 2, 4096, 1024
    per_layer = 3 * (cp - 1) / cp * e * (s / cp) * b * (h + 2 * kv + h)
    assert uly["traffic"]["cp"] == pytest.approx(2 * 32 * per_layer, rel=1e-12)
    assert ring["traffic"]["cp"] == pytest.approx(2 * 32 * 4 * (cp - 1) * 2 * e * (s / cp) * b * kv, rel=1e-12)
    assert uly["time"]["cp_communication"] > 0     # not overlapped: the attention waits for its heads


def test_mla_exchanges_the_latent_attentions_q_k_v_and_output():
    kw = dict(pp=16, dp=8, ep=8, micro_batch=1, global_batch=16, recompute="none", overrides=["model.seq_len=8192"])
    ring = estimate("deepseek-v3", "h800-cluster", cp=2, **kw)
    uly = estimate("deepseek-v3", "h800-cluster", cp=2, cp_comm="a2a", **kw)
    assert uly["flops"]["model_per_iteration"] == pytest.approx(ring["flops"]["model_per_iteration"], rel=1e-12)
    assert uly["traffic"]["cp"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--model", "llama3-8b", "--tp", "8", "--cp", "2", "-s", "8192"], "4 query and 1 key/value heads"),   # kv 8 / tp 8
    (["--model", "llama2-7b", "--cp", "3", "-s", "6144"], "32 query and 32 key/value heads"),
])
def test_heads_not_divisible_by_cp_is_one_line(capsys, argv, message):
    assert main(["estimate", "--hw", H100, "--cp-comm", "a2a", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Ulysses" in err[0], err


def test_bad_cp_comm_is_one_line(capsys):
    assert main(["estimate", "--model", "llama2-7b", "--hw", H100, "--cp-comm", "ring"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cp-comm" in err[0] and "a2a" in err[0], err


def test_megatron_arguments_both_ways(capsys):
    argv = ["estimate", "--model", "llama3-8b", "--hw", H100, "--cp", "4", "--cp-comm", "a2a", "-s", "32768",
            "--emit", "megatron"]
    assert main(argv) == 0
    assert "--context-parallel-size 4 --cp-comm-type a2a" in capsys.readouterr().out
    args = ("--context-parallel-size 4 --cp-comm-type a2a --seq-length 32768 --micro-batch-size 1 "
            "--global-batch-size 8 --bf16 --nproc_per_node 8")
    assert main(["estimate", "--model", "llama3-8b", "--hw", H100, "--from", "megatron", args, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["plan"]["cp_comm"] == "a2a" and r["plan"]["cp"] == 4
    mixed = args.replace("a2a", "p2p a2a")   # a per-layer list mixing types: estimated as the ring, listed ignored
    assert main(["estimate", "--model", "llama3-8b", "--hw", H100, "--from", "megatron", mixed, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["plan"]["cp_comm"] == "p2p"


def test_search_takes_cp_comm_and_excludes_what_the_heads_forbid(tmp_path):
    from dse.search import load_space, search

    space = tmp_path / "s.yaml"
    space.write_text("name: ulysses\nmodel: llama3-8b\nhardware: dgx-h100\nfixed:\n  plan.seq_len: 32768\n"
                     "  plan.global_batch: 8\n  plan.recompute: full\n  plan.dp: 1\nparameters:\n  plan.tp: [1, 2, 8]\n"
                     "  plan.cp: [2, 4]\n  plan.cp_comm: [p2p, a2a]\nobjectives: [time]\n")
    out = search(load_space(str(space)), engine="exhaustive")
    assert out["points"] == 12
    assert out["excluded"]["Ulysses cp needs the heads divisible by tp x cp"] >= 1     # tp 8: one K/V head per rank
    ranked = [r["params"]["plan.cp_comm"] for r in out["ranked"]]
    assert "a2a" in ranked and "p2p" in ranked
