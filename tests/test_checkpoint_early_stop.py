"""PyTorch's non-reentrant checkpoint stops recomputing after the last saved tensor (dse.formulas.kernels.early_stop).

The GEMM kernels of the H200 profiles (data/h200/hf_families.jsonl, kind profile) show it: a fully recomputed Pythia
layer runs 3 of its 4 forward GEMMs again (the fused-bias forward kernel: 96 calls without recompute, 168 with), a
Llama-3.1-8B layer 6 of its 7 (the q/o/down kernel: 96 -> 160 calls); dse's GEMM time under full recompute then
meets the profile's (Pythia b8 102.1 ms vs 99.0 measured, was 110.6; Llama b1 75.1 vs 73.9, was 80.1).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dse.formulas.kernels import early_stop, executed_flops, layer_kernels, recomputed_flops

DATA = Path(__file__).resolve().parent.parent / "data"


def _stopped(t):
    return {k for k, r in t.items() if r.get("stopped")}


def test_the_mlp_output_gemm_and_residual_stop():
    full = layer_kernels(1024, 8, 1024, 16, 16, 64, 4096, recompute="full", dropout=False)
    t = early_stop(full)
    assert _stopped(t) == {"fc2", "mlp_residual"}
    assert not _stopped(full)                       # the input table is not changed
    fc2 = 2 * 8192 * 4096 * 1024
    assert recomputed_flops(t, "full") == recomputed_flops(full, "full") - fc2
    assert executed_flops(t, "full")["recompute"] == executed_flops(full, "full")["recompute"] - fc2
    assert executed_flops(t, "full")["forward"] == executed_flops(full, "full")["forward"]


def test_parallel_residual_dropout_post_norm_and_no_recompute():
    neox = layer_kernels(1024, 8, 2048, 16, 16, 128, 8192, recompute="full", dropout=False, parallel_residual=True)
    assert _stopped(early_stop(neox, parallel_residual=True)) == {"fc2", "mlp_residual", "attn_residual"}
    # dropout after fc2 keeps a mask (packed after fc2 ran): only the residual add stops
    dropped = {**neox, "dropout": {"kind": "elementwise", "bytes": 1.0, "saved": 0, "rerun": 1.0}}
    assert _stopped(early_stop(dropped)) == {"mlp_residual"}
    # Megatron's fused bias-dropout-add keeps its mask on the residual row: nothing stops
    assert not _stopped(early_stop(layer_kernels(1024, 8, 1024, 16, 16, 64, 4096, recompute="full", dropout=True)))
    # Gemma 2/3: the norm after the MLP keeps fc2's output, so fc2 runs; only the residual stops
    gemma = layer_kernels(1024, 2, 1152, 4, 1, 256, 6912, recompute="full", dropout=False, layer_norms=4)
    assert _stopped(early_stop(gemma)) == {"mlp_residual"}
    # no recompute: nothing keeps a rerun, the rule is not applied by the estimate (see below)
    assert "rerun" not in layer_kernels(1024, 8, 1024, 16, 16, 64, 4096, dropout=False)["fc2"]


def test_estimate_prices_the_stop_for_the_pytorch_stack_only():
    from dse.calibrate.measurements import plan_for, read
    from dse.catalog import load_system
    from dse.estimate.kernel_cost import kernel_time
    from dse.estimate.kernel_table import kernel_tables, kernel_times, stack_spec
    from dse.estimate.links import links
    from dse.formulas import compute as C
    from dse.formulas.precision import peak_flops, recipe_of

    system = load_system("dgx-h200")
    m = next(x for x in read(DATA / "h200" / "hf_families.jsonl") if x.name.endswith("pythia-1.4b/config.json "
                                                                                          "sdpa b8 s1024 rc-full"))
    plan = plan_for(m, system)
    r = recipe_of(plan)
    tables = kernel_tables(m.model, plan, r)
    assert _stopped(tables["layer"]) == {"fc2", "mlp_residual", "attn_residual"}
    peak = peak_flops(system.node.gpu.peak_flops, r.gemm_dtype)
    times = kernel_times(tables, system, plan, peak, links(system, plan, model=m.model))
    from dse.estimate.kernel_cost import cost_of
    hw = cost_of(system.node.gpu, peak)
    skipped = sum(kernel_time(tables["layer"][k], hw, C)[0] for k in ("fc2", "mlp_residual", "attn_residual"))
    skipped += stack_spec("pytorch").gemm_memsets * hw.kernel_overhead   # fc2's GEMM call's memsets do not run either
    assert times["gpu_rec"] == pytest.approx(times["gpu_fwd"] - skipped, rel=1e-9)
    meg = kernel_tables(m.model, dataclasses.replace(plan, stack="megatron"), r)   # Megatron re-runs the layer
    assert not _stopped(meg["layer"])


def test_profiles_recompute_three_of_four_pythia_forward_gemms():
    for line in open(DATA / "h200" / "hf_families.jsonl"):
        p = json.loads(line)
        if p.get("kind") != "profile" or "pythia" not in p["model"] or p["attn"] != "sdpa" or p["b"] != 8:
            continue
        calls = {name: n for _, name, n in p["kernels"]}
        forward = calls["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"]   # the fused-bias forward GEMMs
        assert forward == (96 if p["recompute"] == "none" else 96 + 3 * 24)


def test_torch_checkpoint_skips_the_last_linear_and_add():
    """A checkpointed Transformers layer's backward, counted with a TorchDispatchMode on CPU torch: early stop on
    (the default) runs one GEMM and one add fewer per layer (two adds with GPT-NeoX's parallel residual)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.checkpoint import set_checkpoint_early_stop

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    def counts(model, stop):
        model.train()
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        x = torch.randint(0, 128, (2, 16))
        with set_checkpoint_early_stop(stop):
            loss = model(input_ids=x, labels=x, use_cache=False).loss
        c = Count()
        with c:
            loss.backward()
        model.zero_grad(set_to_none=True)
        return sum(o in ("mm", "addmm") for o in c.ops), c.ops.count("add")

    torch.manual_seed(0)
    layers = 2
    neox = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        hidden_size=64, intermediate_size=256, num_attention_heads=4, num_hidden_layers=layers, vocab_size=128,
        rotary_pct=0.25, hidden_dropout=0.0, attention_dropout=0.0))
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=layers, vocab_size=128))
    for model, adds in ((neox, 2), (llama, 1)):
        (g_on, a_on), (g_off, a_off) = counts(model, True), counts(model, False)
        assert g_off - g_on == layers
        assert a_off - a_on == adds * layers


def test_only_the_pytorch_stack_stops_early():
    from dse.estimate.table_inputs import stack_spec

    assert stack_spec("pytorch").checkpoint_early_stop
    assert not stack_spec("megatron").checkpoint_early_stop and not stack_spec("compiled").checkpoint_early_stop
