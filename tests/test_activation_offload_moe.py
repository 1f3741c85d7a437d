"""Activation offload of MoE layers (``--offload-activations ssd|host`` on an MoE model; issue 15).

An MoE layer's MLP saves the router's input, fp32 probabilities and int64 indices, the k routed copies, the experts'
activations and outputs (:func:`dse.formulas.activation_offload.moe_mlp_saved_terms`, checked against PyTorch in
tests/test_activation_offload_moe_torch.py). Here: the tensors add up to what the kernel table saves, SSDTrain's
8 Mi-element threshold keeps the router's small tensors on the GPU, a model with dense and MoE layers offloads the
mean layer, one expert is the dense layer under both mechanisms, and the hooks copy the experts' weights.
"""

from __future__ import annotations

import pytest

import dse
import dse.catalog
from dse.formulas import activation_offload as AO
from dse.formulas.kernels import moe_mlp_kernels


def _moe(name: str, **extra) -> dict:
    m = dse.catalog.load_model(name)
    return dict(experts=m.experts, experts_per_token=m.experts_per_token, expert_ffn=m.expert_ffn,
                shared_experts=m.shared_experts, shared_ffn=m.shared_expert_ffn or 0, shared_gate=m.shared_expert_gate,
                **extra)


def _options(m, tp: int, sp: bool, recompute: str) -> dict:
    return dict(tp=tp, sequence_parallel=sp, recompute=recompute, ffn_type=m.ffn_type, norm=m.norm,
                position=m.position, dropout=m.dropout > 0)


@pytest.mark.parametrize("kw", [
    dict(),
    dict(tp=2, sequence_parallel=True),
    dict(shared_experts=1, shared_ffn=512, shared_gate=True),
    dict(capacity=1.25, pad=True, ep=4, imbalance=1.5),
    dict(capacity=1.1, ffn_type="gelu", tp=4),
    dict(tp=4, sequence_parallel=True, ep=8, etp=1),                       # MoE Parallel Folding
    dict(tp=2, sequence_parallel=True, etp=4, shared_experts=1, shared_ffn=512, capacity=1.25, pad=True),
])
def test_the_tensors_sum_to_the_saved_bytes_of_the_moe_rows(kw):
    rows = moe_mlp_kernels(1024, 2, 1024, 8, 2, 2048, **kw)
    assert sum(AO.moe_mlp_saved_terms(1024, 2, 1024, 8, 2, 2048, **kw).values()) == sum(
        r["saved"] for r in rows.values())


def test_one_expert_saves_the_dense_mlps_tensors():
    dense = AO.offloaded_terms(2048, 2, 4096, 32, 8, 128, 14336, min_elements=0, ffn_type="swiglu")
    one = AO.offloaded_terms(2048, 2, 4096, 32, 8, 128, 14336, min_elements=0, ffn_type="swiglu",
                             moe=dict(experts=1, experts_per_token=1, expert_ffn=14336))
    assert sum(one.values()) == sum(dense.values())
    assert one["mlp_input"] == dense["fc1_input"] and one["expert_activation"] == dense["mlp_activation"]


@pytest.mark.parametrize("model, kw", [
    ("mixtral-8x7b", dict(tp=2, dp=1)),
    ("mixtral-8x7b", dict(tp=2, dp=2, ep=2, sequence_parallel=True)),
    ("gpt-oss-120b", dict(tp=8, dp=1)),
])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_the_estimates_saved_bytes_are_the_formulas_tensors(model, kw, recompute):
    """Megatron's kernels: every byte the kernel table saves is one of the tensors; SSDTrain writes those of at
    least 8 Mi elements (at s = 4,096 the router's probabilities and indices, T E and T k elements, stay)."""
    m = dse.catalog.load_model(model)
    r = dse.estimate(model, "dgx-h100", micro_batch=1, seq_len=4096, recompute=recompute,
                     offload_activations="host", **kw)
    ao = r["activation_offload"]
    args = (4096, 1, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden)
    opts = _options(m, kw["tp"], kw.get("sequence_parallel", False), recompute)
    every = AO.offloaded_terms(*args, min_elements=0, moe=_moe(model), **opts)
    assert ao["saved_bytes_per_layer"] == pytest.approx(sum(every.values()), rel=1e-12)
    written = AO.offloaded_terms(*args, moe=_moe(model), **opts)
    assert ao["offloaded_bytes_per_layer"] == pytest.approx(sum(written.values()), rel=1e-12)
    if recompute != "full":
        assert written["router_probs"] == written["router_indices"] == 0 < every["router_probs"]
        assert written["routed_tokens"] == every["routed_tokens"] > 0


def test_a_model_with_dense_and_moe_layers_offloads_the_mean_layer():
    m = dse.catalog.load_model("mixtral-8x7b")
    r = dse.estimate("mixtral-8x7b", "dgx-h100", tp=4, dp=1, micro_batch=1, seq_len=4096, offload_activations="host",
                     overrides=["model.moe_layer_step=2"])          # layers 1, 3, 5, ... are MoE: half of them
    args = (4096, 1, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden)
    opts = _options(m, 4, False, "none")
    moe = AO.offloaded_bytes_per_layer(*args, moe=_moe("mixtral-8x7b"), **opts)
    dense = AO.offloaded_bytes_per_layer(*args, **opts)
    assert moe > dense
    assert r["activation_offload"]["offloaded_bytes_per_layer"] == pytest.approx((moe + dense) / 2, rel=1e-12)


@pytest.mark.parametrize("mechanism, target", [("forwarding", "ssd"), ("forwarding", "host"), ("hooks", "host")])
def test_one_expert_offloads_as_the_dense_model(mechanism, target):
    kw = dict(tp=2, dp=1, micro_batch=2, seq_len=4096, offload_activations=target,
              activation_offload_mechanism=mechanism, offload_layers=2)
    system = "ssdtrain-a100-optane" if target == "ssd" else "dgx-h100"
    dense = dse.estimate("llama3-8b", system, overrides=["model.layers=4"], **kw)
    one = dse.estimate("llama3-8b", system, overrides=["model.layers=4", "model.experts=1",
                                                       "model.experts_per_token=1"], **kw)
    for key, value in dense["activation_offload"].items():
        want = value if isinstance(value, str) else pytest.approx(value, rel=1e-12)
        assert one["activation_offload"][key] == want, key
    assert one["memory"]["gpu"]["total"] == pytest.approx(dense["memory"]["gpu"]["total"], rel=1e-12)


def test_the_hooks_copy_the_moe_tensors_and_every_experts_weights():
    """The hooks' extras over the saved bytes (the attention's second saves, rotary tables, views) are the same for
    8 experts as for one; the rest is the layer's weights, all 8 experts' (the grouped GEMMs save them)."""
    kw = dict(tp=2, dp=1, micro_batch=1, seq_len=4096, offload_activations="host",
              activation_offload_mechanism="hooks")
    eight = dse.estimate("mixtral-8x7b", "dgx-h100", overrides=["model.layers=4"], **kw)
    one = dse.estimate("mixtral-8x7b", "dgx-h100", overrides=["model.layers=4", "model.experts=1",
                                                              "model.experts_per_token=1"], **kw)
    m = dse.catalog.load_model("mixtral-8x7b")
    expert = 3 * m.hidden * m.expert_ffn / 2                   # one expert's weights on one of 2 TP ranks
    extras = []
    for r, experts in ((eight, 8), (one, 1)):
        ao = r["activation_offload"]
        extras.append(ao["copied_bytes_per_layer"] - ao["saved_bytes_per_layer"] - 2 * experts * expert)
    router = 2 * 8 * m.hidden                                  # the router's weight (replicated): 8 x h, bf16
    assert extras[0] - router == pytest.approx(extras[1], rel=1e-9)


def test_qwen3_moe_offload_to_drives_runs_and_frees_memory():
    r = dse.estimate("qwen3-30b-a3b", "ssdtrain-a100-optane", tp=2, dp=1, micro_batch=2, seq_len=4096,
                     offload_activations="ssd", offload_layers=24)
    ao = r["activation_offload"]
    assert ao["layers_offloaded"] == 24 and ao["gpu_memory_saved"] > 0
    assert ao["bytes_offloaded_per_iteration"] > 0 and r["endurance"]
