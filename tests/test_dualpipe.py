"""DualPipe (DeepSeek-V3 §3.2.1): the bidirectional schedule whose forward and backward chunks overlap each
other's all-to-alls and pipeline sends; a rank holds two stages and p + 1 micro-batches of activations."""

from __future__ import annotations

import numpy as np
import pytest

import dse as _dse
from dse.formulas.parallelism import dualpipe_bubble, dualpipe_pair_time

PARTS = ("compute", "recompute", "communication", "bubble", "optimizer", "overhead", "io_exposed")
MOE = dict(tp=1, pp=4, dp=4, ep=4, global_batch=64, recompute="full", overrides=["model.layers=8"])


def _est(model, system, schedule, **kw):
    return _dse.estimate(model, system, schedule=schedule, **kw)


@pytest.mark.parametrize("model,system,kw", [
    ("mixtral-8x7b", "h100-cluster", MOE),
    ("llama3-8b", "h100-cluster", dict(tp=2, pp=4, dp=2, global_batch=32, recompute="none")),
    ("deepseek-v3", "h800-cluster", dict(tp=1, pp=16, dp=128, ep=64, global_batch=15360, seq_len=4096)),
])
def test_parts_add_up_to_the_iteration(model, system, kw):
    t = _est(model, system, "dualpipe", **kw)["time"]
    assert sum(t[k] for k in PARTS) == pytest.approx(t["iteration"], rel=1e-12)
    comm = ("tp_communication", "pp_communication", "cp_communication", "dp_communication", "embedding_sync",
            "ep_communication")
    assert sum(t.get(k, 0.0) for k in comm) == pytest.approx(t["communication"], rel=1e-12)


def test_overlap_hides_the_all_to_all_behind_compute():
    """Expert all-to-alls and sends exposed only as far as the SM share they take: with sigma = 0 and compute longer
    than communication nothing is exposed; with DeepSeek's 20 of 132 SMs, sigma M per micro-batch."""
    one = _est("mixtral-8x7b", "h100-cluster", "1f1b", **MOE)["time"]
    dual = _est("mixtral-8x7b", "h100-cluster", "dualpipe", **MOE)["time"]
    free = _est("mixtral-8x7b", "h100-cluster", "dualpipe", comm_sm_share=0.0, **MOE)["time"]
    assert 0 < dual["ep_communication"] < one["ep_communication"]
    assert free["ep_communication"] == 0 and free["pp_communication"] == 0
    sigma = 20 / 132   # compute-bound here: exposed = sigma M, M the 1F1B all-to-alls and sends
    assert dual["ep_communication"] + dual["pp_communication"] == pytest.approx(
        sigma * (one["ep_communication"] + one["pp_communication"]), rel=1e-9)


def test_pair_time_and_bubble_formulas():
    assert dualpipe_pair_time(1.0, 2.0, 0.15) == 2.0                       # communication-bound
    assert dualpipe_pair_time(2.0, 1.0, 0.0) == 2.0                        # fully hidden
    assert dualpipe_bubble(2, 5.0, 1.0, 0.1) == 0.0                        # p = 2: no bubble
    assert dualpipe_bubble(8, 1.0, 1.0, 1.0) == 0.0                        # W large: clipped at zero
    arr = dualpipe_pair_time(np.array([1.0, 3.0]), np.array([2.0, 1.0]), 0.0)
    assert list(arr) == [2.0, 3.0]


def test_bubble_is_the_published_formula_and_below_1f1b():
    """(p/2 - 1)(F&B + B - 3W) with F&B the pair time per micro-batch (compute-bound dense model: the stage time
    less the fixed per-micro-batch time), against 1F1B's (p - 1) stage times."""
    kw = dict(tp=1, pp=8, dp=1, global_batch=64, recompute="none", overrides=["model.layers=16"])
    one = _est("llama3-8b", "dgx-h100", "1f1b", **kw)
    dual = _est("llama3-8b", "dgx-h100", "dualpipe", **kw)
    i = dual["time"]
    assert dual["time"]["bubble"] < one["time"]["bubble"]
    assert 0 < i["bubble"]
    # rank 0 holds stages 0 and 7: two stages' weights, once the embedding and the head
    l_stage, ends = 2, dual["model"]["params"] - 16 * dual["layer_params"]
    assert dual["parallelism"]["params_per_gpu"] == pytest.approx(2 * l_stage * dual["layer_params"] + ends,
                                                                  rel=1e-12)


def test_two_parameter_copies_and_one_more_micro_batch_in_flight():
    """Weights and gradients of two stages per rank; ZeRO-1 shards each stage's optimizer states over its 2 dp
    replicas, so the states per rank stay those of one stage's worth; p + 1 micro-batches of activations."""
    kw = dict(tp=1, pp=4, dp=2, global_batch=64, recompute="none", zero=1, overrides=["model.layers=16"])
    one = _est("llama3-8b", "h100-cluster", "1f1b", **kw)
    dual = _est("llama3-8b", "h100-cluster", "dualpipe", **kw)
    g1, g2 = one["memory"]["gpu"], dual["memory"]["gpu"]
    ends = one["model"]["params"] - 16 * one["layer_params"]      # embedding, head, final norm
    assert g2["weights"] == pytest.approx(2 * (2 * 4 * one["layer_params"] + ends), rel=1e-9)   # bf16
    assert g2["gradients"] == pytest.approx(2 * g2["weights"], rel=1e-9)           # fp32 gradients
    assert g2["optimizer"] < g1["optimizer"] * 1.5
    a = one["activation_bytes_per_layer"]
    assert g2["activations"] - g1["activations"] >= 4 * a * (1 - 1e-9)            # one more stage of 4 layers


def test_gradient_group_doubles():
    kw = dict(tp=1, pp=4, dp=2, global_batch=64, recompute="none", zero=1, overrides=["model.layers=16"])
    one = _est("llama3-8b", "h100-cluster", "1f1b", **kw)
    dual = _est("llama3-8b", "h100-cluster", "dualpipe", **kw)
    assert dual["traffic"]["dp"] > 1.9 * one["traffic"]["dp"]


def test_search_block_path_equals_point_path_with_dualpipe():
    from _block_vs_point import block_vs_point

    from dse.search.space import from_dict

    data = {"model": "mixtral-8x7b", "hardware": "h100-cluster",
            "fixed": {"plan.seq_len": 4096, "model.layers": 8, "plan.global_batch": 64, "plan.recompute": "full"},
            "parameters": {"gpus": [16, 32], "plan.pp": [1, 2, 4], "plan.ep": [1, 2, 4],
                           "plan.schedule": ["1f1b", "dualpipe"], "plan.comm_sm_share": [0.0, 0.15]},
            "objectives": ["time"]}
    seen = [s for s in block_vs_point(from_dict(data, "t.yaml"), chunk=17) if s["valid"] and s["feasible"]]
    dual = [s for s in seen if s["result"]["plan"]["schedule"] == "dualpipe"]
    assert len(dual) >= 10 and {s["result"]["plan"]["pp"] for s in dual} == {2, 4}


def test_bad_plans_are_one_line_errors(dse):
    for args, words in ((["--pp", "3"], "--pp must be even"),
                        (["--pp", "4", "--dp", "2", "--global-batch", "6"], "must be even"),
                        (["--pp", "4", "--zero", "3", "--offload-optimizer", "nvme"], "pipeline engine refuses")):
        ran = dse("estimate", "-m", "llama3-8b", "--hw", "h100-cluster", *args, "--set", "plan.schedule=dualpipe")
        assert ran.code == 2
        assert words in ran.err and len(ran.err.strip().splitlines()) == 1
