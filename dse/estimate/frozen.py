"""Fine-tuning with frozen weights (``--finetune lora|qlora``) in the base estimate: parameters and model states.

The kernels (frozen GEMMs, adapters, dequantization) are in the kernel table
(:func:`dse.formulas.finetune.apply_layer`, via :mod:`dse.estimate.kernel_table`); here, what the memory side
needs: the adapters' parameters per GPU (they alone have gradients and optimizer states), the frozen weights'
bytes (QLoRA: the linear weights in their storage format), and QLoRA's dequantized weight buffer. The data-parallel
reduction and the optimizer step of :mod:`dse.estimate.base` read ``trainable_params_per_gpu``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.estimate import context as _context
from dse.formulas import finetune as _finetune, memory as _memory
from dse.formulas._array import maximum, where
from dse.specs.plan import expert_tp, folded

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Num, Section
    from dse.formulas.precision import Recipe
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def with_adapters(prm: Section, model: ModelSpec, t: Num, rank: Num, targets: str, ep: Num = 1,
                  et: Num | None = None, layout: str = "peft") -> Section:
    """The parameter counts of :func:`dse.estimate.base.parameters` with every weight frozen and LoRA adapters.

    Adds ``p_train`` (the adapters), ``p_train_gpu`` (those on the most loaded stage's GPU) and ``p_linear_stage``
    (that stage's linear weights, which QLoRA quantizes); the totals and the stages' counts include the adapters.
    An MoE model's MoE layers have the adapters of :func:`dse.formulas.finetune.moe_adapted_linears` (one per
    expert, E / ep on a GPU) instead of the dense MLP's; per-layer numbers are the mean over the layers. With
    expert parallelism ``p_expert_gpu`` is the experts' adapters on the stage's GPU (the trainable expert
    parameters, whose gradients and ZeRO shards go over the dp/ep ranks holding the same experts) and
    ``p_frozen_expert_gpu`` the frozen experts' weights there (ZeRO-3 shards them over the same ranks). With
    expert tensor parallelism other than tp (``et``, MoE Parallel Folding) the experts' adapters and frozen
    weights split over et, as their experts (Megatron-Bridge ``ParallelLinearAdapter(is_expert=True)``: the
    expert-TP group ``expt_tp``). ``layout`` (:func:`lora_layout`): how tensor parallelism splits the dense
    adapters (megatron: both matrices, :func:`dse.formulas.finetune.megatron_adapter_parameters`).
    """
    ffn: Any = model.ffn_hidden        # resolved specs: set
    dense = dense_adapters(model, targets)
    l_stage = prm["l_stage"]
    a_layer = _finetune.adapter_parameters(dense, rank)
    a_gpu = _finetune.adapter_parameters(dense, rank, t, layout=layout)   # the adapters on one stage's GPU
    lin_gpu = _linear_parameters(model, ffn, t)
    n_moe, L = model.moe_layers, model.layers
    a_total = L * a_layer
    e_gpu: Num = 0.0                    # the routed experts' adapters on one GPU (E / ep experts), per layer
    if n_moe:
        attn = {row: shapes for row, shapes in dense.items() if row not in ("fc1", "fc2")}
        moe = {**attn, **_moe_adapters(model, targets)}
        E: Any = model.experts
        local = E if _one(ep) else E / ep
        m_layer = _finetune.adapter_parameters(moe, rank, experts=E)
        m_gpu = _finetune.adapter_parameters(moe, rank, t, experts=local, etp=et, layout=layout)
        m_exp = _finetune.adapter_parameters({k: v for k, v in moe.items() if k in _finetune.EXPERT_ROWS}, rank, t,
                                             experts=local, etp=et)
        m_lin = _linear_parameters(model, 0, t) + _moe_linears(model, t, ep, et)
        a_total = (L - n_moe) * a_layer + n_moe * m_layer
        a_gpu, lin_gpu, e_gpu = (v * (1 - n_moe / L) + w * n_moe / L if n_moe < L else w
                                 for v, w in ((a_gpu, m_gpu), (lin_gpu, m_lin), (0.0, m_exp)))
    a_stage = l_stage * a_gpu
    split = bool(n_moe) and (et is not None or not _one(ep))      # the experts split over ep (and etp)
    return {**prm, "params": prm["params"] + a_total, "p_train": a_total, "p_train_gpu": a_stage,
            "p_linear_stage": l_stage * lin_gpu, "p_first": prm["p_first"] + a_stage,
            "p_last": prm["p_last"] + a_stage, "p_gpu": prm["p_gpu"] + a_stage,
            "p_expert_gpu": l_stage * e_gpu if split else prm["p_expert_gpu"],
            "p_frozen_expert_gpu": prm["p_expert_gpu"] if split else 0.0}


def _one(x: Num) -> bool:
    return type(x) is int and x == 1


def dense_adapters(model: ModelSpec, targets: str) -> dict[str, list[tuple[Any, ...]]]:
    """The adapters of a dense layer (:func:`dse.formulas.finetune.adapted_linears`); a multi-head latent attention
    model's attention rows are its five projections (:func:`dse.formulas.finetune.mla_adapted_linears`)."""
    kv: Any = model.kv_heads           # resolved specs: set
    d: Any = model.head_dim
    ffn: Any = model.ffn_hidden
    out = _finetune.adapted_linears(model.hidden, model.heads, kv, d, ffn, model.ffn_type, model.qkv_projection,
                                    targets)
    if not model.mla:
        return out
    mlp = {row: shapes for row, shapes in out.items() if row in ("fc1", "fc2")}
    return {**_finetune.mla_adapted_linears(*_mla(model), targets), **mlp}


def _mla(model: ModelSpec) -> tuple[Any, Any, Any, Any, Any, Any, Any]:
    """(h, a, d_c', d_c, d_nope, d_R, d_v): the arguments of the MLA formulas (:mod:`dse.formulas.finetune.mla`)."""
    return (model.hidden, model.heads, model.q_lora_rank or 0, model.kv_lora_rank, model.qk_nope_head_dim,
            model.qk_rope_head_dim, model.v_head_dim)


def _linear_parameters(model: ModelSpec, ffn: Any, t: Num) -> Num:
    """A layer's linear weights on one GPU with a dense MLP of inner size ``ffn`` (0: none), MLA's projections for
    its attention (:func:`dse.formulas.finetune.mla_linear_parameters`)."""
    kv: Any = model.kv_heads           # resolved specs: set
    d: Any = model.head_dim
    if model.mla:
        return _finetune.mla_linear_parameters(*_mla(model), t) \
            + _finetune.linear_parameters(model.hidden, 0, 0, d, ffn, model.ffn_type, t)
    return _finetune.linear_parameters(model.hidden, model.heads, kv, d, ffn, model.ffn_type, t)


def _attention_linears(model: ModelSpec) -> int:
    """The attention's linear modules of a layer (QLoRA's dequantization kernels): q, k, v (or one fused) and out,
    or MLA's five (four without a query latent)."""
    if model.mla:
        return _finetune.mla_linear_count(model.q_lora_rank or 0)
    return _finetune.linear_count(model.ffn_type, model.qkv_projection) - (3 if model.ffn_type in _finetune.GATED
                                                                            else 2)


def _moe_adapters(model: ModelSpec, targets: str) -> dict[str, list[tuple[Any, ...]]]:
    """The adapters of an MoE layer's MLP (:func:`dse.formulas.finetune.moe_adapted_linears`)."""
    E: Any = model.experts
    f_e: Any = model.expert_ffn          # resolved specs: set
    return _finetune.moe_adapted_linears(model.hidden, E, f_e, model.ffn_type,
                                         model.shared_experts * (model.shared_expert_ffn or 0),
                                         model.shared_expert_gate, targets)


def _moe_linears(model: ModelSpec, t: Num, ep: Num, et: Num | None = None) -> Num:
    """An MoE layer's MLP linear weights on one GPU (router, E / ep experts over et or t, shared)."""
    E: Any = model.experts
    f_e: Any = model.expert_ffn
    return _finetune.moe_linear_parameters(model.hidden, E, f_e, model.ffn_type,
                                           model.shared_experts * (model.shared_expert_ffn or 0),
                                           model.shared_expert_gate, t, ep, et)


def states(prm: Section, stage: str, model: ModelSpec, plan: Plan, r: Recipe, state_bytes: Section,
           M: FormulaModule = _memory) -> Section:
    """Model states of one stage's GPU when its weights are frozen (LoRA, QLoRA): only the adapters train.

    The adapters hold weights, gradients and optimizer states as in full training (ZeRO as configured; with expert
    parallelism the experts' adapters shard over the EDP = tp dp / (etp ep) ranks that hold the same experts);
    every other parameter is a frozen weight in the working dtype, the linear layers' in QLoRA's storage format
    (:func:`dse.formulas.finetune.quantized_bytes_per_param`); ZeRO-3 shards the frozen weights too, the frozen
    experts over the EDP ranks (:func:`zero3_frozen_shard`).
    """
    from dse.estimate.data_parallel import expert_parallel
    from dse.estimate.links import expert_replicas

    zero: Num = plan.zero       # a resolved plan: zero, dp, quantization are set
    d: Num = _context.grad_ranks(plan)     # dp x cp (DualPipe: 2 dp cp, each stage on two ranks)
    w, g, o = state_bytes["weights"], state_bytes["gradients"], state_bytes["optimizer"]
    edp: Num = d
    if expert_parallel(plan, model):   # the experts' adapters: ZeRO shards over the EDP ranks
        pe, edp = prm["p_expert_gpu"], expert_replicas(plan, d)
        dense = M.model_state_bytes(prm["p_train_gpu"] - pe, d, zero, w, g, o)
        experts = M.model_state_bytes(pe, edp, zero, w, g, o)
        out = {k: dense[k] + experts[k] for k in dense}
    else:
        out = M.model_state_bytes(prm["p_train_gpu"], d, zero, w, g, o)
    sharded = zero3_frozen_shard(frozen_bytes(prm, stage, model, plan, r), frozen_expert_bytes(prm, plan, r),
                                 zero, d, edp)
    return {**out, "weights": out["weights"] + sharded + quantization_constants(prm, model, plan)}


def frozen_expert_bytes(prm: Section, plan: Plan, r: Recipe) -> Num:
    """Bytes of the frozen routed experts on one GPU (part of :func:`frozen_bytes`; 0 without expert parallelism).

    Formula: P_e e_w, QLoRA: P_e v (the experts' linear weights, packed), P_e = ``p_frozen_expert_gpu``
    Source: as :func:`frozen_bytes`.
    """
    v = _VALUE_BYTES[plan.quantization or "nf4"] if plan.finetune == "qlora" else r.weights
    return prm.get("p_frozen_expert_gpu", 0.0) * v


def zero3_frozen_shard(frozen: Num, experts: Num, zero: Num, d: Num, edp: Num) -> Num:
    """Bytes of a GPU's frozen weights it keeps between uses: their ZeRO-3 shard, all of them below ZeRO-3.

    Formula: (F - F_e) / d + F_e / EDP at ZeRO-3, else F; F the frozen bytes, F_e the frozen experts' of them,
    d the data-parallel ranks, EDP the expert-data-parallel ranks that hold the same experts
    Source: Megatron-Core's Megatron-FSDP (``megatron_fsdp/param_and_grad_buffer.py``: parameters grouped by
    ``is_expert_param`` and ``requires_grad``; an expert group's model-weight buffer shards and all-gathers over the
    expert data-parallel group, ``get_fsdp_group(is_expert_parallel=True)``; frozen groups get no gradient or main
    weight buffer); DeepSpeed AutoEP with ZeRO-3 (``runtime/engine.py`` ``_resolve_zero3_param_placement``: expert
    parameters partition over the expert data-parallel group, the rest over the data-parallel one).
    """
    return where(zero >= 3, (frozen - experts) / d + experts / edp, frozen)


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
    """Bytes of QLoRA's dequantized copy of the largest linear weight, alive while its GEMM runs (one GPU); an MoE
    layer's are one expert's (each expert's projections are separate ``Linear4bit`` modules) and the shared
    experts'."""
    kv: Any = model.kv_heads   # resolved specs: set
    d: Any = model.head_dim
    ffn: Any = model.ffn_hidden
    if model.moe_layers:
        f_e: Any = model.expert_ffn
        widest = maximum(f_e, model.shared_experts * (model.shared_expert_ffn or 0))
        ffn = maximum(widest, ffn) if model.moe_layers < model.layers else widest
    if model.mla:   # MLA's projections beside the MLP's
        mlp = _finetune.largest_linear(model.hidden, 0, 0, d, ffn, "fused", t)
        return r.weights * maximum(_finetune.mla_largest_linear(*_mla(model), t), mlp)
    return r.weights * _finetune.largest_linear(model.hidden, model.heads, kv, d, ffn, model.qkv_projection, t)


def lora_layout(plan: Any) -> str:
    """How tensor parallelism splits the adapters (:mod:`dse.formulas.finetune.tensor_parallel`): as Megatron-Bridge's
    ``ParallelLinearAdapter`` on the megatron stack (what runs LoRA on Megatron-Core), as Hugging Face PEFT's
    ``LoraParallelLinear`` on the pytorch and compiled stacks (single GPU, FSDP, DeepSpeed: PEFT's adapters)."""
    return "megatron" if getattr(plan, "stack", "megatron") == "megatron" else "peft"


def kernel_inputs(model: ModelSpec, plan: Plan) -> dict[str, Any] | None:
    """The fine-tuning keywords of :func:`dse.formulas.kernels.layer_kernels` (None: full training).

    An MoE model's adapters hold the dense layer's rows and the MoE layer's (each table takes its own); QLoRA's
    ``moe_linear_params`` and ``moe_linears`` are an MoE layer's linear weights and modules on one GPU.
    """
    if plan.finetune == "full":
        return None
    ffn: Any = model.ffn_hidden       # resolved specs: set
    targets = plan.lora_targets or "all"
    adapters = dense_adapters(model, targets)
    if model.moe_layers:
        adapters = {**adapters, **_moe_adapters(model, targets)}
    out: dict[str, Any] = {"adapters": adapters, "rank": plan.lora_rank, "lora_dropout": plan.lora_dropout,
                           "layout": lora_layout(plan)}
    if model.moe_layers and folded(plan):   # the experts' adapters split over etp (MoE Parallel Folding)
        out["etp"] = expert_tp(plan)
    if plan.finetune == "qlora":
        # int8: d_in ~ h
        out["quantized_bytes"] = _finetune.quantized_bytes_per_param(plan.quantization or "nf4", model.hidden)
        out["layer_linear_params"] = _linear_parameters(model, ffn, plan.tp)
        out["linears"] = _attention_linears(model) + (3 if model.ffn_type in _finetune.GATED else 2)
        if model.moe_layers:
            E: Any = model.experts
            out["moe_linear_params"] = (_linear_parameters(model, 0, plan.tp)
                                        + _moe_linears(model, plan.tp, plan.ep, out.get("etp")))
            out["moe_linears"] = _attention_linears(model) + _finetune.moe_linear_count(
                E, model.ffn_type, bool(model.shared_experts), model.shared_expert_gate, plan.ep)
    return out
