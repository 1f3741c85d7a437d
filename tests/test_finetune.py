"""Fine-tuning with frozen weights (LoRA, QLoRA): parameter counts, saved tensors against PyTorch, memory and time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dse import estimate
from dse.estimate import kernel_table as KT, resolve, run
from dse.formulas import finetune as FT, kernels as K
from dse.formulas.precision import recipe_of

_FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "lora_saved_trace.json").read_text())


def _estimate(model="llama2-7b", hw="dgx-h100", **plan):
    m, s, p = resolve(model, hw, None, (), **{"dp": 1, "micro_batch": 1, "seq_len": 2048, **plan})
    return run(m, s, p), m, p


# --- parameter counts: what Hugging Face PEFT prints ------------------------------------------------------------

@pytest.mark.parametrize("targets, rank, trainable, total", [
    ("qv", 8, 4_194_304, 6_742_609_920),        # PEFT's README example: LoraConfig(r=8) on Llama-2-7B
    ("all", 16, 39_976_960, 6_778_392_576),     # r 16 on every linear layer of Llama-2-7B
])
def test_trainable_and_total_parameters_are_what_peft_prints(targets, rank, trainable, total):
    r, _, _ = _estimate(finetune="lora", lora_rank=rank, lora_targets=targets)
    assert r["model"]["params_trainable"] == trainable
    assert r["model"]["params"] == total


def test_adapters_split_over_tensor_parallel_ranks_as_the_layers_they_adapt():
    a = FT.adapted_linears(4096, 32, 8, 128, 14336, "swiglu", "separate", "all")
    one, eight = FT.adapter_parameters(a, 16), FT.adapter_parameters(a, 16, 8)
    # column-parallel (q, k, v, gate, up): B split; row-parallel (o, down): A split
    rows = 16 * (4096 + 4096 // 8) + 16 * (14336 // 8 + 4096)
    cols = 16 * (5 * 4096 + (4096 + 1024 + 1024 + 2 * 14336) // 8)
    assert eight == pytest.approx(rows + cols)
    assert eight < one


# --- saved tensors against PyTorch autograd (tests/fixtures/lora_saved_trace.json, scripts/trace_lora.py) --------

def _traced_layer(fixture, attn, targets, **plan):
    """The pytorch stack's LoRA layer table at the traced model's dimensions (scripts/trace_lora.py)."""
    d = fixture["dims"]
    m, _, p = resolve("llama2-7b", "dgx-h100", None,
                      [f"model.hidden={d['h']}", f"model.heads={d['heads']}", f"model.kv_heads={d['kv_heads']}",
                       f"model.ffn_hidden={d['ffn']}", f"model.vocab={d['vocab']}"],
                      micro_batch=d["b"], seq_len=d["s"], stack="pytorch", precision="bf16-pure", dp=1,
                      attention={"sdpa": "flash", "eager": "math"}[attn], finetune="lora", lora_rank=fixture["rank"],
                      lora_targets=targets, **plan)
    return KT.kernel_tables(m, p, recipe_of(p))["layer"]


@pytest.mark.parametrize("key", sorted(_FIXTURE["runs"]))
def test_a_lora_layer_saves_and_packs_what_pytorch_does(key):
    """Transformers' Llama with every weight frozen and PEFT-style LoRA adapters on the targeted linear layers:
    the bytes a layer keeps (and that saved-tensor hooks pack) against the pytorch stack's kernel table.

    Frozen linear layers keep no input; an RMSNorm with a frozen weight keeps no normalized copy; each adapter keeps
    its r-wide A x. What the CPU trace cannot show, subtracted with its reason: the attention output's layout copy
    that CUDA makes for o_proj (kept only when o_proj has an adapter; packed alike on both); with adapters on the MLP
    only, the first layer's attention needs no gradient, so the one-layer run keeps no rotary tables and the
    difference counts the two (cos, sin) once."""
    attn, targets = key.split("-")
    d = _FIXTURE["dims"]
    t = _traced_layer(_FIXTURE, attn, targets)
    run_ = _FIXTURE["runs"][key]
    saved = run_["2"]["saved_bytes"] - run_["1"]["saved_bytes"]
    packed = run_["2"]["packed_bytes"] - run_["1"]["packed_bytes"]
    tok, q = d["b"] * d["s"], d["b"] * d["s"] * d["heads"] * 64 * 2
    cuda_copy = q if attn == "sdpa" and targets in ("all", "attention") else 0
    if targets == "mlp":
        saved -= 2 * d["s"] * 64 * 2
    assert K.saved_bytes(t) - cuda_copy == pytest.approx(saved, rel=1e-4)
    assert K.packed_bytes(t) == pytest.approx(packed, rel=1e-4)
    adapters = FT.adapted_linears(d["h"], d["heads"], d["kv_heads"], 64, d["ffn"], "swiglu", "separate", targets)
    assert FT.adapter_parameters(adapters, _FIXTURE["rank"]) == (run_["2"]["trainable_params"]
                                                                 - run_["1"]["trainable_params"])
    assert tok > 0


# --- memory and time --------------------------------------------------------------------------------------------

def test_qlora_fits_the_65b_model_on_one_48gb_gpu_where_16bit_lora_cannot():
    """QLoRA's claim (Dettmers et al. 2023, arXiv 2305.14314, abstract): LLaMA-65B fine-tuned on one 48 GB GPU.
    Their setting: LoRA r 64 on every linear layer, NF4 with double quantization, gradient checkpointing; here with
    micro-batch 1 of 512 tokens and bf16 adapters and optimizer states (the paper pages fp32 states to the CPU when
    the GPU runs out: not modelled)."""
    plan = dict(model="llama-65b", hw="server-l40s-x8", micro_batch=1, seq_len=512, recompute="full",
                precision="bf16-pure", lora_rank=64)
    q, m, _ = _estimate(finetune="qlora", **plan)
    assert m.name == "llama-65b" and q["model"]["params"] - q["model"]["params_trainable"] == 65_285_660_672
    assert q["feasible"]
    gpu = q["memory"]["gpu"]
    # the NF4 weights: 4.127 bits for the 64.76 G linear weights + bf16 embeddings and head + bf16 adapters
    assert gpu["weights"] == pytest.approx(64_761_364_480 * 0.51587 + 2 * 524_296_192 + 2 * 799_539_200, rel=1e-3)
    lora, _, _ = _estimate(finetune="lora", **plan)
    assert not lora["feasible"] and lora["memory"]["gpu"]["weights"] > 130e9


def test_frozen_weights_drop_gradients_optimizer_and_weight_gradient_gemms():
    full, _, _ = _estimate()
    lora, _, _ = _estimate(finetune="lora")
    qlora, _, _ = _estimate(finetune="qlora")
    f, lo = full["memory"]["gpu"], lora["memory"]["gpu"]
    ratio = lora["model"]["params_trainable"] / full["model"]["params_trainable"]
    assert lo["gradients"] == pytest.approx(f["gradients"] * ratio)
    assert lo["optimizer"] == pytest.approx(f["optimizer"] * ratio)
    # model FLOPs: the frozen weights' GEMMs forward + input gradient (2x forward), attention and adapters 3x
    _, m, p = _estimate(finetune="lora")
    t = KT.kernel_tables(m, p, recipe_of(p))
    layer, head = t["layer"], t["head"]
    weights = sum(layer[n]["flops"] for n in ("qkv", "out", "fc1", "fc2"))
    adapters = sum(r.get("flops", 0) for n, r in layer.items() if n.startswith("lora_"))
    other = K.forward_flops(layer) - weights - adapters
    expected = m.layers * (2 * weights + 3 * (adapters + other)) + 2 * K.forward_flops(head)
    assert lora["flops"]["model_per_iteration"] == pytest.approx(expected * p.global_batch / p.micro_batch)
    assert 2 / 3 < lora["flops"]["model_per_iteration"] / full["flops"]["model_per_iteration"] < 0.75
    assert lora["time"]["iteration"] < full["time"]["iteration"]
    assert qlora["time"]["iteration"] > lora["time"]["iteration"]       # dequantization, forward and backward
    assert qlora["memory"]["gpu"]["weights"] < 0.3 * lo["weights"]


def test_a_frozen_gemm_runs_its_data_gradient_only():
    _, m, p = _estimate(finetune="lora", lora_targets="qv")
    layer = KT.kernel_tables(m, p, recipe_of(p))["layer"]
    assert all(layer[n].get("frozen") for n in ("qkv", "out", "fc1", "fc2"))
    assert K.backward_flops(layer) < 2 * K.forward_flops(layer)
    assert {n for n in layer if n.startswith("lora_")} == {"lora_qkv_0_a", "lora_qkv_0_b", "lora_qkv_1_a",
                                                          "lora_qkv_1_b", "lora_merge"}


def test_full_recompute_keeps_only_the_layer_input_with_adapters_too():
    _, m, p = _estimate(finetune="qlora", recompute="full")
    layer = KT.kernel_tables(m, p, recipe_of(p))["layer"]
    assert K.saved_bytes(layer) == 2 * 2048 * 4096
    assert K.rerun_bytes(layer) > K.saved_bytes(layer)


def test_full_training_is_unchanged_by_the_fine_tuning_fields():
    a, _, _ = _estimate()
    b, _, _ = _estimate(finetune="full")
    assert a["time"] == b["time"] and a["memory"] == b["memory"]


@pytest.mark.parametrize("args, needle", [
    (["--lora-rank", "8"], "--lora-rank and --lora-targets need --finetune lora or qlora"),
    (["--finetune", "lora", "--quantization", "int8"], "--quantization int8 needs --finetune qlora"),
    (["--finetune", "lora", "--lora-targets", "ffn"], "lora-targets"),
])
def test_bad_fine_tuning_flags_are_one_line_errors(args, needle):
    r = subprocess.run([sys.executable, "-m", "dse", "estimate", "--model", "llama2-7b", *args],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3


def test_saved_tensor_hooks_copy_what_a_lora_layer_packs():
    """--activation-offload-mechanism hooks with frozen weights: the kernel table's packed bytes (an unadapted
    linear layer packs no input) plus the weights, not full training's count."""
    r, m, p = _estimate(finetune="lora", lora_targets="qv", micro_batch=4, offload_activations="host",
                        activation_offload_mechanism="hooks")
    from dse.formulas import transformer as T

    layer = KT.kernel_tables(m, p, recipe_of(p))["layer"]
    weights = 2 * T.layer_parameters(m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.ffn_type, m.norm,
                                     m.bias, m.qkv_bias)
    adapters = 2 * FT.adapter_parameters(FT.adapted_linears(m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden,
                                                            m.ffn_type, m.qkv_projection, "qv"), 16)
    copied = r["activation_offload"]["copied_bytes_per_layer"]
    assert copied == pytest.approx(K.packed_bytes(layer) + weights + adapters)
    full, _, _ = _estimate(micro_batch=4, offload_activations="host", activation_offload_mechanism="hooks")
    assert copied < full["activation_offload"]["copied_bytes_per_layer"]


_DROPOUT = json.loads((Path(__file__).parent / "fixtures" / "lora_dropout_trace.json").read_text())


@pytest.mark.parametrize("key", sorted(_DROPOUT["runs"]))
def test_lora_dropout_keeps_a_dropped_copy_and_a_mask_per_adapter_as_pytorch_does(key):
    """PEFT's ``lora_dropout`` 0.1 (``scripts/trace_lora.py --dropout 0.1``): each adapter keeps its dropped input
    and the mask, and the input itself is kept by no one. CUDA's fused dropout keeps a bool mask (1 B); the CPU
    trace's ``F.dropout`` keeps a scaled mask in bf16 (2 B): one byte per adapter input element more, added here.
    With dropout the attention output's CUDA layout copy is no longer kept, so no other correction applies."""
    attn, targets = key.split("-")
    d = _DROPOUT["dims"]
    t = _traced_layer(_DROPOUT, attn, targets, lora_dropout=_DROPOUT["lora_dropout"])
    run_ = _DROPOUT["runs"][key]
    saved = run_["2"]["saved_bytes"] - run_["1"]["saved_bytes"]
    packed = run_["2"]["packed_bytes"] - run_["1"]["packed_bytes"]
    tok = d["b"] * d["s"]
    adapters = FT.adapted_linears(d["h"], d["heads"], d["kv_heads"], 64, d["ffn"], "swiglu", "separate", targets)
    cpu_mask = tok * sum(d_in for shapes in adapters.values() for d_in, _ in shapes)   # 1 B more per element on CPU
    if targets == "mlp":
        saved -= 2 * d["s"] * 64 * 2
    assert K.saved_bytes(t) + cpu_mask == pytest.approx(saved, rel=1e-4)
    assert K.packed_bytes(t) + cpu_mask == pytest.approx(packed, rel=1e-4)
    # against dropout 0: the layer keeps more
    q = _FIXTURE["runs"][key]
    assert K.saved_bytes(t) > K.saved_bytes(_traced_layer(_DROPOUT, attn, targets))
    assert (q["2"]["trainable_params"] - q["1"]["trainable_params"]
            == run_["2"]["trainable_params"] - run_["1"]["trainable_params"])


def test_a_gated_gelu_mlp_has_three_adapted_and_quantized_matrices():
    """Gemma's GeGLU MLP has gate, up and down projections like SwiGLU: LoRA on all linear layers adapts all
    seven per layer (PEFT: r (in + out) each) and QLoRA quantizes the gate too (was: GeGLU counted as two matrices,
    42.0 M trainable instead of 54.0 M on gemma2-9b; the gate's weights kept in bf16)."""
    h, layers, r = 3584, 42, 16                     # gemma2-9b: 16 x 256 query, 8 x 256 key/value, FFN 14,336
    per_layer = r * ((h + 4096) + 2 * (h + 2048) + (4096 + h) + 2 * (h + 14336) + (14336 + h))
    lora = estimate("gemma2-9b", "workstation-l40s-x2-gen5", finetune="lora", lora_rank=r)
    assert lora["model"]["params_trainable"] == layers * per_layer == 54_018_048
    qlora = estimate("gemma2-9b", "workstation-l40s-x2-gen5", finetune="qlora", lora_rank=r)
    swiglu = estimate("gemma2-9b", "workstation-l40s-x2-gen5", finetune="qlora", lora_rank=r,
                      overrides=["model.ffn_type=swiglu"])
    assert qlora["memory"]["gpu"]["weights"] == pytest.approx(swiglu["memory"]["gpu"]["weights"], rel=1e-12)
