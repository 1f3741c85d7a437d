"""Expert tensor parallelism other than tp (``--etp``, MoE Parallel Folding) and ep drawn from tp x cp x dp.

Megatron-Core (``parallel_state.initialize_model_parallel``; Liu et al. 2025, arXiv 2504.14960): the attention
layers' ranks are ordered tp, cp, dp (pp last), the MoE layers' etp, ep, edp over the same ranks, with
etp x ep x edp = tp x cp x dp. The checks below enumerate those ranks explicitly on small cases and compare the
groups, the experts a GPU holds and the bytes its dispatch, gather and all-to-all move with what the estimate
builds; etp = tp reproduces the estimate without the field exactly.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import dse
from dse.catalog import load_hardware, load_model
from dse.cli import main
from dse.estimate import make_plan
from dse.estimate.kernel_table import kernel_tables
from dse.estimate.links import links
from dse.estimate.parameters import parameters
from dse.formulas.precision import recipe_of


def _grid(sizes: list[tuple[str, int]]) -> dict[str, list[list[int]]]:
    """Megatron's RankGenerator: rank = sum of coordinate x stride, the first dimension fastest; the groups of each
    dimension are the ranks that differ in that coordinate only."""
    names = [n for n, _ in sizes]
    strides, s = [], 1
    for _, n in sizes:
        strides.append(s)
        s *= n
    groups: dict[str, list[list[int]]] = {}
    for i, name in enumerate(names):
        others = [range(n) for j, (_, n) in enumerate(sizes) if j != i]
        for rest in itertools.product(*others):
            coords = list(rest)
            coords.insert(i, 0)
            base = sum(c * st for c, st in zip(coords, strides))
            groups.setdefault(name, []).append([base + k * strides[i] for k in range(sizes[i][1])])
    return groups


def _coords(rank: int, sizes: list[tuple[str, int]]) -> dict[str, int]:
    out = {}
    for name, n in sizes:
        out[name], rank = rank % n, rank // n
    return out


CASES = [  # (tp, cp, dp, etp, ep, GPUs per node)
    (2, 1, 4, 1, 8, 8), (2, 1, 4, 2, 4, 8), (4, 1, 4, 1, 8, 8), (4, 2, 2, 2, 8, 8), (2, 2, 4, 1, 16, 8),
    (1, 1, 16, 2, 4, 8), (8, 1, 2, 1, 8, 8), (4, 1, 4, 4, 2, 8), (2, 1, 8, 1, 4, 4),
]


@pytest.mark.parametrize("tp, cp, dp, etp, ep, G", CASES)
def test_expert_groups_match_an_enumeration_of_the_ranks(tp, cp, dp, etp, ep, G):
    world = tp * cp * dp
    edp = world // (etp * ep)
    expert = [("etp", etp), ("ep", ep), ("edp", edp)]
    groups = _grid(expert)
    model = load_model("qwen3-30b-a3b")
    system = load_hardware("h100-cluster", [(["node", "gpus_per_node"], G)])
    plan = make_plan(model, system, dict(tp=tp, cp=cp, dp=dp, etp=etp, ep=ep, sequence_parallel=True,
                                         seq_len=4096))
    lk = links(system, plan, model=model)
    assert lk["ep"].ranks == ep and lk["edp"].ranks == edp
    if etp != tp:
        assert lk["etp"].ranks == etp and lk["etp"].inside == all(g[-1] // G == g[0] // G for g in groups["etp"])
    ep_group = groups["ep"][0]                                    # rank 0's EP group
    assert lk["ep"].per_node == sum(r // G == 0 for r in ep_group)
    assert lk["ep"].inside == all(len({r // G for r in g}) == 1 for g in groups["ep"])
    if edp > 1:   # (one rank reduces nothing)
        assert lk["edp"].inside == all(len({r // G for r in g}) == 1 for g in groups["edp"])
    # the GPUs holding the same experts (their ep and etp coordinates) are one EDP group, of edp ranks
    holders: dict[tuple[int, int], list[int]] = {}
    for r in range(world):
        c = _coords(r, expert)
        holders.setdefault((c["ep"], c["etp"]), []).append(r)
    assert sorted(map(sorted, holders.values())) == sorted(map(sorted, groups["edp"]))
    # a GPU's expert parameters: its E/ep experts' 1/etp shard
    prm = parameters(model, plan)
    per_layer_experts = 3 * model.hidden * model.expert_ffn * model.experts
    assert prm["p_expert_gpu"] == pytest.approx(model.layers * per_layer_experts / (ep * etp), rel=1e-12)


@pytest.mark.parametrize("tp, cp, dp, etp, ep, G", CASES)
def test_dispatch_and_gather_bytes_match_an_enumeration(tp, cp, dp, etp, ep, G):
    """Each rank routes its s/(cp tp) tokens (sequence parallelism) top-k uniformly over the E experts; a copy for
    expert x goes to the rank of the source's EP group that holds x (the same etp coordinate), then each rank
    all-gathers what its etp peers received. Expected bytes, summed over every (source, expert) pair."""
    model = load_model("qwen3-30b-a3b")
    E, k, h, e = model.experts, model.experts_per_token, model.hidden, 2
    system = load_hardware("h100-cluster")
    plan = make_plan(model, system, dict(tp=tp, cp=cp, dp=dp, etp=etp, ep=ep, sequence_parallel=True,
                                         seq_len=4096))
    world = tp * cp * dp
    expert = [("etp", etp), ("ep", ep), ("edp", world // (etp * ep))]
    tokens = 4096 / cp / tp                                     # a rank's tokens in the MoE layer
    per_pair = e * h * tokens * k / E                           # bytes of one rank's copies for one expert
    sent = dict.fromkeys(range(world), 0.0)
    received = dict.fromkeys(range(world), 0.0)
    for src in range(world):
        c = _coords(src, expert)
        for x in range(E):
            owner_ep = x // (E // ep)
            dst = src + (owner_ep - c["ep"]) * etp               # the EP group's member holding x
            received[dst] += per_pair
            if dst != src:
                sent[src] += per_pair
    tables = kernel_tables(model, plan, recipe_of(plan))["layer"]
    a2a = tables["ep_dispatch"]["comm"]
    assert all(v == pytest.approx(a2a * (ep - 1) / ep, rel=1e-12) for v in sent.values())
    gathered = {r: sum(received[p] for p in range(world) if p != r and p // etp == r // etp) for r in range(world)}
    # the expert-TP group's all-gather, also at etp = tp (the alltoall dispatcher's dispatch_postprocess gathers the
    # received copies over expt_tp): (etp-1)/etp of its output (the ring's share) from the peers
    out = tables["expert_allreduce"]["comm"]
    assert tables["expert_allreduce"]["group"] == ("tp" if etp == tp else "etp")
    assert all(v == pytest.approx(out * (etp - 1) / etp, rel=1e-12) for v in gathered.values())
    assert tables["expert_fc1"]["m"] * tables["expert_fc1"]["batch"] == pytest.approx(
        sum(received[p] for p in range(etp)) / (e * h), rel=1e-12)      # every copy the etp group received
    assert tables["expert_fc1"]["n"] == 2 * model.expert_ffn / etp


MIXTRAL = [dict(tp=2, dp=8, ep=4, sequence_parallel=True), dict(tp=1, dp=16, ep=8), dict(tp=4, dp=4, ep=2),
           dict(tp=2, dp=8, ep=8, cp=1, recompute="full", zero=3), dict(tp=2, dp=4, cp=2, ep=8,
                                                                        sequence_parallel=True)]


@pytest.mark.parametrize("plan", MIXTRAL)
def test_etp_equal_to_tp_is_the_estimate_without_it(plan):
    base = dse.estimate("mixtral-8x7b", "h100-cluster", **plan)
    same = dse.estimate("mixtral-8x7b", "h100-cluster", **plan, etp=plan["tp"])
    assert json.dumps(base, sort_keys=True, default=str) == json.dumps(same, sort_keys=True, default=str)


def test_folding_keeps_the_flops_and_moves_the_expert_bytes():
    kw = dict(tp=4, dp=4, ep=8, sequence_parallel=True, recompute="full")
    at_tp = dse.estimate("qwen3-30b-a3b", "h100-cluster", **{**kw, "ep": 4})    # ep x etp = 16 = tp dp
    folded = dse.estimate("qwen3-30b-a3b", "h100-cluster", **kw, etp=1)
    assert folded["plan"]["etp"] == 1 and "etp" not in at_tp["plan"]
    assert folded["flops"]["model_per_iteration"] == at_tp["flops"]["model_per_iteration"]
    # the tensor-parallel traffic is the attention's alone: the routed tokens no longer gather over tp
    assert folded["traffic"]["tp"] < at_tp["traffic"]["tp"]
    # the experts' parameters per GPU: 1/(ep etp) of them: 1/(4 x 4) at etp = tp against 1/(8 x 1) folded
    m = load_model("qwen3-30b-a3b")
    s = load_hardware("h100-cluster")
    p1, p2 = (parameters(m, make_plan(m, s, {**kw, **x})) for x in ({"ep": 4}, {"etp": 1}))
    assert p2["p_expert_gpu"] / p1["p_expert_gpu"] == pytest.approx(2.0)


def test_folding_rank_order_puts_ep_in_one_node():
    """tp 2 ep 8 on 8-GPU nodes: at etp = tp the EP group spans 16 ranks (two nodes), at etp 1 eight (one)."""
    kw = dict(tp=2, dp=16, ep=8, sequence_parallel=True)
    m, s = load_model("mixtral-8x7b"), load_hardware("h100-cluster")
    assert not links(s, make_plan(m, s, kw), model=m)["ep"].inside
    assert links(s, make_plan(m, s, {**kw, "etp": 1}), model=m)["ep"].inside


def test_an_array_of_etp_is_the_loop_of_scalar_calls():
    kw = dict(tp=4, dp=4, ep=4, sequence_parallel=True, overrides=["model.layers=4"])
    arr = dse.estimate("mixtral-8x7b", "h100-cluster", etp=np.array([1, 2, 4]), **kw)
    for i, etp in enumerate((1, 2, 4)):
        one = dse.estimate("mixtral-8x7b", "h100-cluster", etp=etp, **kw)
        assert arr["time"]["iteration"][i] == pytest.approx(one["time"]["iteration"], rel=1e-12)
        assert arr["memory"]["gpu"]["total"][i] == pytest.approx(one["memory"]["gpu"]["total"], rel=1e-12)
        assert arr["traffic"]["tp"][i] == pytest.approx(one["traffic"]["tp"], rel=1e-12)


@pytest.mark.parametrize("argv, message", [
    (["--model", "mixtral-8x7b", "--etp", "3", "--dp", "3", "--ep", "1"],
     "expert tensor parallelism 3 (--etp, default --tp) does not divide the routed experts' FFN size"),
    (["--model", "mixtral-8x7b", "--tp", "2", "--etp", "1", "--dp", "4"], "needs --sequence-parallel"),
    (["--model", "mixtral-8x7b", "--tp", "2", "--etp", "1", "--ep", "8", "--dp", "2", "--sequence-parallel"],
     "--ep 8 x --etp 1 = 8 does not divide --tp 2 x --cp 1 x --dp 2 = 4"),
    (["--model", "llama2-7b", "--tp", "2", "--etp", "1", "--dp", "4", "--sequence-parallel"],
     "--etp 1: expert tensor parallelism needs an MoE model"),
])
def test_bad_etp_is_a_one_line_error(capsys, argv, message):
    assert main(["estimate", "--hw", "dgx-h100", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_ep_may_span_the_tensor_parallel_ranks(capsys):
    """Megatron-Core allows ep x etp up to tp x cp x dp: ep 8 over tp 4 x dp 2 with etp 1 (was refused: ep 8
    does not divide dp 2)."""
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--tp", "4", "--dp", "2", "--ep", "8",
                 "--etp", "1", "--sequence-parallel", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["plan"]["etp"] == 1 and r["plan"]["ep"] == 8


def test_megatron_arguments_carry_the_expert_tensor_parallel_size(capsys, tmp_path):
    args = ("--model", "mixtral-8x7b", "--hw", "h100-cluster", "--tp", "2", "--dp", "8", "--ep", "8", "--etp", "1",
            "--sequence-parallel")
    assert main(["estimate", *args, "--emit", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --moe-token-dispatcher-type alltoall" \
        in out                                     # etp x ep = 8 ranks: one node, NCCL's all-to-all
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "h100-cluster", "--tp", "2", "--dp", "8", "--ep",
                 "8", "--sequence-parallel", "--emit", "megatron"]) == 0
    assert "--expert-tensor-parallel-size" not in capsys.readouterr().out     # etp = tp: Megatron's default
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
                      "--num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 14336 --num-experts 8 "
                      "--moe-router-topk 2 --seq-length 4096 --max-position-embeddings 32768 --swiglu "
                      "--normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights "
                      "--disable-bias-linear --tensor-model-parallel-size 2 --sequence-parallel "
                      "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --micro-batch-size 1 "
                      "--global-batch-size 64 --bf16 --vocab-size 32000\n")
    assert main(["estimate", "--from", "megatron", str(script), "--model", "mixtral-8x7b", "--hw", "h100-cluster",
                 "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["tp"], plan["ep"], plan["etp"], plan["dp"]) == (2, 8, 1, 8)


def test_search_over_etp_excludes_invalid_points_and_reruns_with_the_flag(cli):
    from pathlib import Path

    space = Path(__file__).resolve().parent.parent / "examples" / "spaces" / "moe-parallel-folding.yaml"
    rc, out, err = cli("search", "--space", space, "--engine", "exhaustive", "--json", "-", "-q")
    assert rc == 0, err
    res = json.loads(out)
    assert res["excluded"]["ep x etp does not divide tp x cp x dp"] == 12    # 16 GPUs: ep etp in 16, 32, 64
    for t in res["trials"]:
        p = t["params"]
        assert t.get("valid", True) == (16 % (p["plan.ep"] * p["plan.etp"]) == 0), p
    rc, out, err = cli("search", "--space", space, "--engine", "exhaustive", "--top", "1", "-q")
    cmd = out.strip().splitlines()[-1]
    assert " --etp " in cmd and "plan.etp" not in cmd
    rc, js, _ = cli(*cmd.split()[1:], "--json")
    best = json.loads(js)["plan"]
    assert best["ep"] * best.get("etp", best["tp"]) <= 16
