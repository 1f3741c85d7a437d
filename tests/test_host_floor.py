"""The host side of a layer: the kernels each stack launches, the measured host time per launch, the launch floor,
and Megatron's unfused softmax fallback (issue 14, small models on one node)."""

from __future__ import annotations

import json

import pytest

from dse.catalog import data_dir, load_system
from dse.estimate import kernel_table as KT
from dse.estimate.links import links
from dse.formulas import compute as C, kernels as K, transformer as T
from dse.formulas.kernels.layer import fused_softmax_available, softmax_row
from dse.formulas.precision import peak_flops, recipe_of
from dse.specs import stack as stack_spec
from dse.specs.model import ModelSpec
from dse.specs.plan import Plan
from dse.validate import megatron

GPT = dict(ffn_type="gelu", norm="layernorm", position="learned", dropout=True)


def test_the_stacks_dispatch_is_the_host_measurement_plus_the_launch():
    d = json.loads((data_dir() / "host_dispatch_cpu.json").read_text())
    launch = d["derived"]["cuda_launch_us"]
    mega = d["megatron_layer"]["checkpointed_step_us"] / d["megatron_gpu_launches_per_checkpointed_step"] + launch
    eager = d["gpt2_block"]["us_per_op_step"] + launch
    assert stack_spec.load("megatron").dispatch == pytest.approx(round(mega, 1) * 1e-6)
    assert d["derived"]["pytorch_dispatch_us"] == round(eager, 1)
    # the pytorch stack prices the GPT2Block step (70 launches) at that time per launch, split into its launches and
    # a share per layer pass (tests/test_host_layers.py)
    py = stack_spec.load("pytorch")
    assert K.step_host_time((20, 50), py.dispatch, py.layer_dispatch) == pytest.approx(70 * round(eager, 1) * 1e-6,
                                                                                       rel=2e-3)
    # the GPU launches of that step: a GPT layer's forward, its recompute and its backward
    f, b = K.table_launches(K.layer_kernels(16, 1, 16, 2, 2, 8, 64, tp=2, attention="math", **GPT),
                            K.MEGATRON_LAUNCHES, ranks=2)
    assert 2 * f + b == d["megatron_gpu_launches_per_checkpointed_step"]


def test_megatron_launches_are_counted_per_row_and_collectives_in_their_own_pass():
    layer = K.layer_kernels(2048, 4, 1024, 16, 16, 64, 4096, tp=8, attention="math", **GPT)
    assert K.table_launches(layer, K.MEGATRON_LAUNCHES, ranks=8) == (16, 32)
    # one GPU: no all-reduce is launched (two forward, two backward fewer)
    assert K.table_launches(layer, K.MEGATRON_LAUNCHES, ranks=1) == (14, 30)
    # flash attention: one kernel forward and two backward in place of score, softmax, dropout and context
    flash = K.layer_kernels(2048, 4, 1024, 16, 16, 64, 4096, tp=8, attention="flash", **GPT)
    assert K.table_launches(flash, K.MEGATRON_LAUNCHES, ranks=8) == (12, 27)
    # a software stack's element-wise rows launch what they state
    assert K.row_launches("x", {"kind": "elementwise", "kernels": 8, "kernels_backward": 11}) == (8, 11)


def _reference(system: str):
    """``system`` with its host at the reference launch price (dispatch_scale 1), as the stacks' dispatch is stated."""
    return load_system(system, overrides=[(["node", "host", "dispatch_scale"], 1.0)])


def _layer_times(model, plan, system="a100-cluster-800g"):
    sysm = load_system(system) if isinstance(system, str) else system
    tables = KT.kernel_tables(model, plan, recipe_of(plan))
    peak = peak_flops(sysm.node.gpu.peak_flops, recipe_of(plan).gemm_dtype)
    return KT.kernel_times(tables, sysm, plan, peak, links(sysm, plan)), tables


def test_a_layer_pass_takes_the_longer_of_its_gpu_and_host_time():
    tiny = ModelSpec(name="tiny", layers=2, hidden=64, heads=4, vocab=512, max_seq_len=64, bias=True,
                     tied_embeddings=True, dropout=0.1, source="test", ffn_type="gelu", norm="layernorm",
                     position="learned").resolved()
    plan = Plan(tp=1, pp=1, dp=1, micro_batch=1, global_batch=1, seq_len=64, recompute="full", attention="math",
                precision="fp16", grad_dtype="half")
    kt, tables = _layer_times(tiny, plan, _reference("dgx-h100"))
    dispatch = stack_spec.load("megatron").dispatch
    f, b = K.table_launches(tables["layer"], K.MEGATRON_LAUNCHES, ranks=1)
    # a 64-wide layer's kernels take a few microseconds of GPU time each on an H100: the host is the bottleneck
    # (not on the A100, whose fitted 43 us per GEMM is itself above the host's 13.5 us per launch)
    assert kt["gpu_fwd"] < dispatch * f
    assert kt["layer_fwd"] == pytest.approx(dispatch * f) and kt["layer_bwd"] == pytest.approx(dispatch * b)
    assert kt["layer_rec"] == pytest.approx(dispatch * f)
    assert kt["layer_host_excess"] > 0
    # a large layer's GPU time is far above its ~0.7 ms of host time: the floor changes nothing
    big = megatron.model_for(megatron.rows()[0])
    kt, _ = _layer_times(big, megatron.plan_for(megatron.rows()[0], big))
    assert kt["layer_host_excess"] == 0 and kt["layer_fwd"] == kt["gpu_fwd"]


@pytest.mark.parametrize("s, b, heads, fused", [
    (2048, 1, 2, False),     # 16 heads on tp 8, micro-batch 1: b a/t = 2
    (2048, 2, 2, True),      # b a/t = 4
    (2048, 1, 6, False),     # 24 heads on tp 4: 6
    (2048, 2, 3, False),     # 48 heads on tp 16, micro-batch 2: 6
    (4096, 4, 8, False),     # key length above 2048
    (16, 4, 4, False),       # key length 16 or less
    (1024, 1, 4, True),
])
def test_megatron_runs_its_fused_softmax_only_where_its_constraint_holds(s, b, heads, fused):
    assert fused_softmax_available(s, b, heads) is fused
    assert fused_softmax_available(s, b, heads, bytes_per_element=4) is False    # fp32 inputs: never fused


def test_the_unfused_softmax_moves_the_fp32_chain_and_keeps_fp32_probabilities():
    s, b, h, a, t = 2048, 1, 1024, 16, 8
    scores = a // t * s * s * b
    plain = K.layer_kernels(s, b, h, a, a, h // a, 4 * h, tp=t, attention="math", **GPT)
    fallback = K.layer_kernels(s, b, h, a, a, h // a, 4 * h, tp=t, attention="math", softmax_fallback=True, **GPT)
    assert fallback["softmax"]["bytes"] - plain["softmax"]["bytes"] == 32 * scores
    assert fallback["softmax"]["bytes_backward"] == 40 * scores and fallback["softmax"]["kernels_backward"] == 5
    assert fallback["softmax"]["saved"] == 4 * scores
    assert K.saved_bytes(fallback) - K.saved_bytes(plain) == 2 * scores
    # the closed forms count the fused kernel; where it runs, the fallback table is the same table
    fused = K.layer_kernels(s, 4, h, a, a, h // a, 4 * h, tp=t, attention="math", softmax_fallback=True, **GPT)
    assert K.saved_bytes(fused) == T.activation_bytes_per_layer(s, 4, h, a, a, h // a, 4 * h, tp=t, attention="math",
                                                                 **GPT)
    moved = sum(r["bytes"] for r in fused.values() if r["kind"] == "elementwise")
    assert moved == C.elementwise_bytes(s, 4, h, 4 * h, a, a, h // a, tp=t, attention="math", dropout=True)
    # array plans: the micro-batch may be an array
    import numpy as np

    row = softmax_row(2048, np.array([1, 2]), 2)
    assert list(row["kernels"]) == [5, 1]


def test_the_one_fitted_megatron_run_without_the_fused_softmax_is_the_18b_at_tp16_mb2():
    unfused = [(r["params_b"], r["tp"], r["micro_batch"]) for r in megatron.rows()
               if not fused_softmax_available(r["seq_len"], r["micro_batch"], r["heads"] // r["tp"])]
    assert unfused == [(18.4, 16, 2)]


def test_megatrons_dropless_moe_dispatcher_syncs_once_per_forward_unless_padded_to_capacity():
    """Megatron-Core's token dispatcher copies the per-expert token counts to the host and waits for them once per
    MoE layer forward (its full recompute too, not backward): the GPU idles for the host's next launch; padding to
    capacity makes the counts static (no sync). Dense layers and other stacks have none."""
    from dse.catalog import load_model

    assert K.moe_host_syncs(128) == (1, 0) and K.moe_host_syncs(128, pad=True) == (0, 0)
    assert K.moe_host_syncs(1) == (0, 0)
    oss = load_model("gpt-oss-120b")
    base = dict(tp=1, pp=4, dp=16, ep=8, seq_len=4096, micro_batch=1, global_batch=1280, zero=1)
    dispatch = stack_spec.load("megatron").dispatch
    h100 = _reference("h100-cluster")    # at the reference host's 13.5 us a launch: GPU-bound
    kt, tables = _layer_times(oss, Plan(**base), h100)
    f, _ = K.table_launches(tables["layer"], K.MEGATRON_LAUNCHES, ranks=1, ep_ranks=8)
    assert kt["gpu_fwd"] > dispatch * f                      # GPU-bound: the sync's launch is what is exposed
    assert kt["layer_fwd"] == pytest.approx(kt["gpu_fwd"] + dispatch)
    assert kt["layer_bwd"] == kt["gpu_bwd"]
    kt, _ = _layer_times(oss, Plan(**base, recompute="full"), h100)
    assert kt["layer_rec"] == pytest.approx(kt["gpu_rec"] + dispatch)
    kt, _ = _layer_times(oss, Plan(**base, expert_capacity=1.25, pad_to_capacity=True), h100)
    assert kt["layer_fwd"] == kt["gpu_fwd"]
    kt, _ = _layer_times(oss, Plan(**base, stack="pytorch"), h100)
    assert kt["layer_fwd"] == kt["gpu_fwd"]
    big = megatron.model_for(megatron.rows()[0])             # a dense layer: no router, no sync
    kt, _ = _layer_times(big, megatron.plan_for(megatron.rows()[0], big))
    assert kt["layer_fwd"] == kt["gpu_fwd"]


def test_checkpointing_adds_the_measured_factor_to_a_layers_host_time_where_the_host_did_not_measure_its_own():
    """stacks/pytorch.yaml checkpoint_dispatch: the mean of the two measured hosts' checkpointed / plain scales; a
    host without its own (every reference host) takes scale x factor under full recompute, nothing else changes."""
    import dataclasses

    from dse import catalog
    from dse.estimate.passes import host_dispatch

    def component(name):
        return catalog.find_hardware(name)[1]

    ratios = [component(h).checkpoint_dispatch_scale / component(h).dispatch_scale
              for h in ("firecracker-xeon-vm", "firecracker-xeon-vm-h100")]
    spec = stack_spec.load("pytorch")
    assert spec.checkpoint_dispatch == pytest.approx(sum(ratios) / 2, abs=0.005)
    assert stack_spec.load("megatron").checkpoint_dispatch == 1.0
    ref = dataclasses.replace(component("dgx-h100-host"), dispatch_scale=1.0)   # a host without its own checkpoint
    assert ref.checkpoint_dispatch_scale is None
    args = (spec.dispatch, ref, "pytorch")
    plain, full = host_dispatch(*args, "none", spec.layer_dispatch, 1.4), host_dispatch(*args, "full",
                                                                                          spec.layer_dispatch, 1.4)
    assert plain[0] == full[0] and full[1] == pytest.approx(1.4 * plain[1])
    assert full[2] == pytest.approx(tuple(1.4 * x for x in plain[2]))
    measured = dataclasses.replace(ref, checkpoint_dispatch_scale=2.0)       # a host's own measurement wins
    assert host_dispatch(spec.dispatch, measured, "pytorch", "full", spec.layer_dispatch, 1.4)[1] == \
        pytest.approx(2.0 * spec.dispatch)
    assert host_dispatch(spec.dispatch, ref, "megatron", "full", (0.0, 0.0), 1.4)[1] == spec.dispatch   # reentrant
