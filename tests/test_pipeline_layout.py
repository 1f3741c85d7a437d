"""Custom pipeline stage layouts (``plan.pipeline_layout``, ``--pp-layout``): Megatron-LM's grammar and placement
rules, per-stage time and memory, the uniform layout against the even split, and the framework flags."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings, strategies as st

import dse as _dse
from dse.cli import main
from dse.specs.pipeline_layout import LayoutError, from_megatron_flags, parse

H100 = "dgx-h100"
PARTS = ("compute", "recompute", "communication", "bubble", "optimizer", "overhead", "io_exposed")


# ----------------------------------------------------------------------------- Megatron's rules, independently


def _megatron_parse(layout_str: str) -> list[list[str]]:
    """Megatron-Core ``PipelineParallelLayerLayout.parse_str_to_list`` (megatron/core/transformer/
    pipeline_parallel_layer_layout.py), transcribed: the reference the parser is checked against."""
    layout_str = layout_str.replace(",", "")
    for pattern in (r'\(([^)]+)\)\*(\d+)', r'(.)\*(\d+)'):
        layout_str = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), layout_str)
    names = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
    return [[names[c] for c in stage] for stage in layout_str.split("|")]


def _megatron_counts(layout: list[list[str]], pp: int) -> list[dict[str, int]]:
    """Per pipeline rank, Megatron's ``get_num_layers_to_build`` of each layer type summed over its model chunks
    (``layout[pp_rank][vpp_rank]`` = stage ``vpp_rank * pp + pp_rank`` of the string)."""
    v = len(layout) // pp
    return [{k: sum(layout[c * pp + r].count(k) for c in range(v)) for k in ("embedding", "decoder", "mtp", "loss")}
            for r in range(pp)]


def _megatron_uneven(layers, pp, v, first, last, emb, loss) -> list[int]:
    """``transformer_block.get_num_layers_to_build`` of each (pp rank, vpp chunk), in stage order."""
    out = []
    for c in range(v):
        for r in range(pp):
            if first is not None or last is not None:
                rest, left = layers - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
                n = rest // left if left else 0
                n = first if r == 0 and first is not None else (last if r == pp - 1 and last is not None else n)
            else:
                n = (layers + emb + loss) // pp
            n //= v
            n -= 1 if emb and r == 0 and c == 0 else 0
            n -= 1 if loss and r == pp - 1 and c == v - 1 else 0
            out.append(n)
    return out


LAYOUTS = [   # (string, pp, layers, mtp)
    ("Et*4|(t*4|)*14tmL", 16, 61, 1),                       # Megatron-Bridge DeepSeek-V3 (pp 16, vp 1)
    ("Ettt|(tt|)*29,m|L", 16, 61, 1),                       # Megatron-Core's docstring example (pp 16, vp 2)
    ("E|(t|)*3,t,L", 5, 4, 0),
    ("(Et|t*3|t*3|t*2|)*1t*2|t*3|t*3|tL", 4, 18, 0),       # vp 2
    ("E,t*2|(t*3|)*2t*3mmL", 4, 11, 2),
    ("Et*2|t*3|t*3|tL", 2, 9, 0),                          # vp 2
]


@pytest.mark.parametrize("text,pp,layers,mtp", LAYOUTS)
def test_layer_counts_per_stage_are_megatrons(text, pp, layers, mtp):
    ranks, v = parse(text, pp, layers, mtp)
    ref = _megatron_counts(_megatron_parse(text), pp)
    assert v == len(_megatron_parse(text)) // pp
    for r, (st_, want) in enumerate(zip(ranks, ref)):
        assert (st_.embedding, len(st_.layers), st_.mtp, st_.loss) == \
            (want["embedding"], want["decoder"], want["mtp"], want["loss"]), r
    ids = sorted(i for s in ranks for i in s.layers)
    assert ids == list(range(layers))     # every layer once, numbered in the string's order


def test_layer_ids_follow_the_string_order_across_chunks():
    ranks, v = parse("Et|t|t|tL", 2, 4)      # vp 2: rank 0 holds stages 0 and 2 (layers 0 and 2)
    assert v == 2 and ranks[0].layers == (0, 2) and ranks[1].layers == (1, 3)


@pytest.mark.parametrize("layers,pp,v,first,last,emb,loss", [
    (32, 4, 1, 5, 9, False, False), (32, 4, 1, 2, None, False, False), (30, 4, 1, None, None, True, True),
    (62, 8, 1, None, None, True, True), (32, 2, 2, 16, 16, False, False), (46, 4, 2, None, None, True, True),
    (61, 8, 1, 5, None, False, False),
])
def test_uneven_flags_place_layers_as_megatron(layers, pp, v, first, last, emb, loss):
    text = from_megatron_flags(layers, pp, v, 0, first, last, emb, loss)
    assert [len(s) for s in (x.replace("E", "").replace("L", "") for x in text.split("|"))] == \
        _megatron_uneven(layers, pp, v, first, last, emb, loss)
    parse(text, pp, layers)               # and Megatron's layout checks accept it


@pytest.mark.parametrize("text,problem", [
    ("Et*2|t*2|t*2|t*2L", "8 transformer layers t, the model has 32"),
    ("Et*8|t*8|t*8|t*8X", "invalid layer character 'X'"),
    ("t*8|Et*8|t*8|t*8L", "first layer must be the embedding"),
    ("Et*8|t*8|t*8|t*8", "last the loss"),
    ("Et*8|t*8|t*8|t*8|L", "5 stages are not a multiple of --pp 4"),
    ("Et*8|t*8|t*8|EEt*8L", "exactly once"),
    ("(Et*8|t*8|)t*8|t*8L", "invalid layer character '('"),      # a group without *n is not unrolled
])
def test_a_bad_layout_is_one_line_naming_the_flag(capsys, text, problem):
    assert main(["estimate", "--model", "llama2-7b", "--hw", H100, "--pp", "4", "--pp-layout", text]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--pp-layout" in err[0] and problem in err[0], err


def test_mtp_placement_rules():
    with pytest.raises(LayoutError, match="MTP depths m, the model has mtp_layers 1"):
        parse("Et*2|t*2L", 2, 4, 1)
    with pytest.raises(LayoutError, match="before the MTP"):
        parse("Et*2m|t*2L", 2, 4, 1)
    with pytest.raises(LayoutError, match="last model chunk"):
        parse("Et*2|t*2m||L", 2, 4, 1)     # m in rank 1's first of two chunks
    parse("Et*2|t*2|m|L", 4, 4, 1)          # standalone MTP stage: Megatron allows it


def test_virtual_stages_must_match_the_layout(capsys):
    assert main(["estimate", "--model", "llama2-7b", "--hw", H100, "--pp", "2", "--pp-layout",
                 "Et*8|t*8|t*8|t*8L"]) == 2
    err = capsys.readouterr().err
    assert "plan.virtual_stages=2" in err and "interleaved" in err


# ----------------------------------------------------------------------------- the estimate, per stage


def _flat(d, pre=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, pre + k + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[pre + k] = v
    return out


@pytest.mark.parametrize("model,kw,layout", [
    ("llama2-7b", dict(tp=1, pp=4, dp=2, global_batch=32), "Et*8|t*8|t*8|t*8L"),
    ("llama2-7b", dict(tp=2, pp=4, dp=1, global_batch=32, recompute="full"), "Et*8|(t*8|)*2t*8L"),
    ("llama2-7b", dict(tp=1, pp=4, dp=2, global_batch=32, schedule="interleaved", virtual_stages=2),
     "(Et*4|t*4|t*4|t*4|)*1t*4|t*4|t*4|t*4L"),
    ("llama2-7b", dict(tp=1, pp=4, dp=2, global_batch=32, schedule="dualpipe"), "Et*8|t*8|t*8|t*8L"),
    ("mixtral-8x7b", dict(tp=2, pp=4, dp=2, ep=2, global_batch=32), "Et*8|t*8|t*8|t*8L"),
    ("gpt2-xl", dict(tp=1, pp=4, dp=2, global_batch=32), "Et*12|t*12|t*12|t*12L"),
])
def test_the_uniform_layout_is_the_even_split_bit_for_bit(model, kw, layout):
    even = _dse.estimate(model, H100, **kw)
    laid = _dse.estimate(model, H100, pipeline_layout=layout, **kw)
    a, b = _flat(even), _flat(laid)
    assert {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)} == {}
    assert sum(laid["stages"]["layers"]) == even["model"]["layers"]     # one entry per rank
    assert len(laid["stages"]["time_per_microbatch"]) == len(laid["stages"]["gpu_memory"]) == kw["pp"]


def test_the_first_stage_holds_the_most_micro_batches():
    r = _dse.estimate("llama2-7b", H100, tp=1, pp=4, dp=2, global_batch=64, pipeline_layout="Et*8|t*8|t*8|t*8L")
    mem = r["stages"]["gpu_memory"]
    assert mem[0] > mem[1] > mem[2] and max(mem) == r["memory"]["gpu"]["total"]


DSV3 = dict(tp=1, pp=16, dp=128, ep=64, zero=1, micro_batch=1, global_batch=15360, seq_len=4096, precision="fp8",
            fp8_scaling="current")
BRIDGE = "Et*4|(t*4|)*14tmL"    # Megatron-Bridge recipes/deepseek/h100/deepseek_v3.py, (pp 16, vp 1)


@pytest.mark.parametrize("schedule", ["1f1b", "dualpipe"])
def test_deepseek_v3_bridge_layout(schedule):
    """The dense first layers are cheaper than MoE ones and the MTP depth sits with the one layer of the last
    stage: the slowest stage is a middle one of four MoE layers, and the parts still add up."""
    even = _dse.estimate("deepseek-v3", "h800-cluster", schedule=schedule, **DSV3)
    laid = _dse.estimate("deepseek-v3", "h800-cluster", schedule=schedule, pipeline_layout=BRIDGE, **DSV3)
    t = laid["time"]
    assert laid["stages"]["layers"] == [4] * 15 + [1]
    assert t["iteration"] < even["time"]["iteration"]
    assert sum(t[k] for k in PARTS) == pytest.approx(t["iteration"], rel=1e-12)
    assert t["per_microbatch"] == pytest.approx(max(laid["stages"]["time_per_microbatch"]), rel=1e-12)
    assert laid["memory"]["gpu"]["total"] == pytest.approx(max(laid["stages"]["gpu_memory"]), rel=1e-12)
    if schedule == "1f1b":   # the slowest stage holds no MTP depth
        assert t["mtp"] == 0.0 and laid["stages"]["time_per_microbatch"][1] == max(
            laid["stages"]["time_per_microbatch"])


def _stages(n: list[int]) -> str:
    return "|".join(("E" if i == 0 else "") + "t" * k + ("L" if i == len(n) - 1 else "") for i, k in enumerate(n))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=5).filter(lambda n: sum(n) >= 2), st.data())
def test_moving_a_layer_off_the_slowest_stage(n, data):
    """Moving one layer from the slowest stage to another never makes the step slower than the new slowest stage
    allows: the step is the slowest stage's micro-batch before and after, and it grows only where the stage that
    took the layer became the slowest."""
    kw = dict(tp=1, pp=len(n), dp=1, global_batch=4 * len(n), overrides=[f"model.layers={sum(n)}"])
    before = _dse.estimate("llama2-7b", H100, pipeline_layout=_stages(n), **kw)
    times = before["stages"]["time_per_microbatch"]
    slow = times.index(max(times))
    if n[slow] == 0:
        return
    to = data.draw(st.sampled_from([i for i in range(len(n)) if i != slow]))
    moved = list(n)
    moved[slow] -= 1
    moved[to] += 1
    after = _dse.estimate("llama2-7b", H100, pipeline_layout=_stages(moved), **kw)
    new = after["stages"]["time_per_microbatch"]
    assert after["time"]["per_microbatch"] == pytest.approx(max(new), rel=1e-12)
    assert new[slow] < times[slow]
    assert after["time"]["per_microbatch"] <= max(before["time"]["per_microbatch"], new[to]) * (1 + 1e-12)


# ----------------------------------------------------------------------------- Megatron-LM arguments


def test_megatron_layout_both_ways(capsys):
    argv = ["estimate", "--model", "llama2-7b", "--hw", H100, "--pp", "4", "--pp-layout", "Et*6|t*9|t*9|t*8L",
            "--emit", "megatron"]
    assert main(argv) == 0
    assert "--pipeline-model-parallel-layout 'Et*6|t*9|t*9|t*8L'" in capsys.readouterr().out
    args = "--pipeline-model-parallel-size 4 --pipeline-model-parallel-layout 'Et*6|t*9|t*9|t*8L' --bf16"
    assert main(["estimate", "--model", "llama2-7b", "--hw", H100, "--from", "megatron", args, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["plan"]["pipeline_layout"] == "Et*6|t*9|t*9|t*8L" and r["stages"]["layers"] == [6, 9, 9, 8]


@pytest.mark.parametrize("flags,layers", [
    ("--decoder-first-pipeline-num-layers 5 --decoder-last-pipeline-num-layers 9", [5, 9, 9, 9]),
    ("--decoder-first-pipeline-num-layers 2", [2, 10, 10, 10]),
    ("--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split", None),
])
def test_megatron_uneven_flags(capsys, flags, layers):
    args = f"--pipeline-model-parallel-size 4 {flags} --bf16"
    code = main(["estimate", "--model", "llama2-7b", "--hw", H100, "--from", "megatron", args, "--json"])
    if layers is None:     # 32 + 2 does not divide by 4: Megatron refuses it, naming the flag
        assert code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--account-for-embedding-in-pipeline-split" in err[0], err
        return
    assert code == 0
    assert json.loads(capsys.readouterr().out)["stages"]["layers"] == layers


def test_the_search_takes_layouts_with_a_fixed_pp(tmp_path):
    """A layout is a search parameter (a list of strings) beside the numeric ones, with pp fixed."""
    import yaml

    from dse.search import load_space, search

    layouts = ["Et*8|t*8|t*8|t*8L", "Et*6|t*9|t*9|t*8L", "Et*9|t*8|t*8|t*7L"]
    doc = {"name": "layout", "model": "llama2-7b", "hardware": H100, "objectives": ["time"],
           "fixed": {"plan.pp": 4, "plan.dp": 2, "plan.global_batch": 64},
           "parameters": {"plan.pipeline_layout": layouts, "plan.micro_batch": [1, 2]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    out = search(load_space(str(tmp_path / "s.yaml")), engine="exhaustive")
    assert out["points"] == 6 and out["ranked"]
    assert {r["params"]["plan.pipeline_layout"] for r in out["ranked"]} <= set(layouts)


def test_deepseek_v3_case_with_the_bridge_layout_is_the_documented_example():
    from dse.validate.deepseek_v3 import BRIDGE_LAYOUT, gpu_hours_per_trillion, result

    def hours(r):
        return gpu_hours_per_trillion(r["time"]["iteration"], 2048, 15360 * 4096)

    assert hours(result()) == pytest.approx(201_972, rel=2e-3)            # the case: the even split
    assert hours(result(BRIDGE_LAYOUT)) == pytest.approx(145_127, rel=2e-3)   # docs/accuracy.md, the module
