"""Fine-tuning with frozen weights (``--finetune lora|qlora``) in the base estimate: parameters and model states.

The kernels (frozen GEMMs, adapters, dequantization) are in the kernel table
(:func:`dse.formulas.finetune.apply_layer`, via :mod:`dse.estimate.kernel_table`); here, what the memory side
needs: the adapters' parameters per GPU (they alone have gradients and optimizer states), the frozen weights'
bytes (QLoRA: the linear weights in their storage format), and QLoRA's dequantized weight buffer. The data-parallel
reduction and the optimizer step of :mod:`dse.estimate.base` read ``trainable_params_per_gpu``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.formulas import finetune as _finetune, memory as _memory
from dse.formulas._array import where

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Num, Section
    from dse.formulas.precision import Recipe
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def with_adapters(prm: Section, model: ModelSpec, t: Num, rank: Num, targets: str) -> Section:
    """The parameter counts of :func:`dse.estimate.base.parameters` with every weight frozen and LoRA adapters.

    Adds ``p_train`` (the adapters), ``p_train_gpu`` (those on the most loaded stage's GPU) and ``p_linear_stage``
    (that stage's linear weights, which QLoRA quantizes); the totals and the stages' counts include the adapters.
    """
    kv: Any = model.kv_heads           # resolved specs: set
    d: Any = model.head_dim
    ffn: Any = model.ffn_hidden
    adapters = _finetune.adapted_linears(model.hidden, model.heads, kv, d, ffn, model.ffn_type, model.qkv_projection,
                                         targets)
    l_stage = prm["l_stage"]
    a_total = model.layers * _finetune.adapter_parameters(adapters, rank)
    a_stage = l_stage * _finetune.adapter_parameters(adapters, rank, t)      # the adapters on one stage's GPU
    lin_stage = l_stage * _finetune.linear_parameters(model.hidden, model.heads, kv, d, ffn, model.ffn_type, t)
    return {**prm, "params": prm["params"] + a_total, "p_train": a_total, "p_train_gpu": a_stage,
            "p_linear_stage": lin_stage, "p_first": prm["p_first"] + a_stage, "p_last": prm["p_last"] + a_stage,
            "p_gpu": prm["p_gpu"] + a_stage}


def states(prm: Section, stage: str, model: ModelSpec, plan: Plan, r: Recipe, state_bytes: Section,
           M: FormulaModule = _memory) -> Section:
    """Model states of one stage's GPU when its weights are frozen (LoRA, QLoRA): only the adapters train.

    The adapters hold weights, gradients and optimizer states as in full training (ZeRO as configured); every
    other parameter is a frozen weight in the working dtype, the linear layers' in QLoRA's storage format
    (:func:`dse.formulas.finetune.quantized_bytes_per_param`); ZeRO-3 shards the frozen weights too.
    """
    zero: Num = plan.zero       # a resolved plan: zero, dp, quantization are set
    d: Num = plan.dp
    out = M.model_state_bytes(prm["p_train_gpu"], d, zero, state_bytes["weights"], state_bytes["gradients"],
                              state_bytes["optimizer"])
    sharded = frozen_bytes(prm, stage, model, plan, r) / where(zero >= 3, d, 1)
    return {**out, "weights": out["weights"] + sharded + quantization_constants(prm, model, plan)}


def frozen_bytes(prm: Section, stage: str, model: ModelSpec, plan: Plan, r: Recipe) -> Num:
    """Bytes of the frozen weights on one stage's GPU that ZeRO-3 shards and gathers (and ZeRO-Infinity offloads).

    Formula: (P_stage - P_adapters) e_w, QLoRA: + P_linear (v - e_w), v the packed values' bytes per weight (nf4:
    0.5, int8: 1; the quantization constants are :func:`quantization_constants`). bitsandbytes packs the 4-bit
    values into the model's float dtype (``bnb_4bit_quant_storage``) so that ZeRO-3 / FSDP shard, gather and
    offload the packed bytes (Hugging Face PEFT's "QLoRA and DeepSpeed with ZeRO3" guide; Answer.AI's FSDP+QLoRA,
    2024).
    """
    stored = (prm[stage] - prm["p_train_gpu"]) * r.weights
    if plan.finetune == "qlora":
        stored = stored + prm["p_linear_stage"] * (_VALUE_BYTES[plan.quantization or "nf4"] - r.weights)
    return stored


_VALUE_BYTES = {"nf4": 0.5, "int8": 1.0}   # bytes of a quantized weight's value, without its block's constants


def quantization_constants(prm: Section, model: ModelSpec, plan: Plan) -> Num:
    """Bytes of QLoRA's quantization constants on every GPU: replicated, never sharded or offloaded.

    Formula: P_linear (q - v): nf4 with double quantization 0.0159 B per weight (8-bit absmax per 64, fp32 per
    256 of those), int8 4 / d_in (an fp32 scale per row); 0 for LoRA
    Source: bitsandbytes keeps them in each ``Params4bit``'s ``quant_state``, a Python object rather than a
    parameter or buffer: FSDP and ZeRO-3 shard only parameters, so every rank holds the constants of every layer
    (AnswerDotAI/fsdp_qlora PR #4: "quant_state ... doesn't get synced by FSDP ... only supports syncing
    parameters and buffers").
    """
    if plan.finetune != "qlora":
        return 0.0
    fmt = plan.quantization or "nf4"
    q = _finetune.quantized_bytes_per_param(fmt, model.hidden)   # int8: d_in ~ h
    return prm["p_linear_stage"] * (q - _VALUE_BYTES[fmt])


def dequantized_buffer(model: ModelSpec, r: Recipe, t: Num) -> Num:
    """Bytes of QLoRA's dequantized copy of the largest linear weight, alive while its GEMM runs (one GPU)."""
    kv: Any = model.kv_heads   # resolved specs: set
    d: Any = model.head_dim
    ffn: Any = model.ffn_hidden
    return r.weights * _finetune.largest_linear(model.hidden, model.heads, kv, d, ffn, model.qkv_projection, t)


def kernel_inputs(model: ModelSpec, plan: Plan) -> dict[str, Any] | None:
    """The fine-tuning keywords of :func:`dse.formulas.kernels.layer_kernels` (None: full training)."""
    if plan.finetune == "full":
        return None
    kv: Any = model.kv_heads          # resolved specs: set
    d: Any = model.head_dim
    ffn: Any = model.ffn_hidden
    adapters = _finetune.adapted_linears(model.hidden, model.heads, kv, d, ffn, model.ffn_type,
                                         model.qkv_projection, plan.lora_targets or "all")
    out: dict[str, Any] = {"adapters": adapters, "rank": plan.lora_rank, "lora_dropout": plan.lora_dropout}
    if plan.finetune == "qlora":
        # int8: d_in ~ h
        out["quantized_bytes"] = _finetune.quantized_bytes_per_param(plan.quantization or "nf4", model.hidden)
        out["layer_linear_params"] = _finetune.linear_parameters(model.hidden, model.heads, kv, d, ffn,
                                                                 model.ffn_type, plan.tp)
        out["linears"] = _finetune.linear_count(model.ffn_type, model.qkv_projection)
    return out
