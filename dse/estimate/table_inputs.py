"""What a layer's kernel table is built from besides its shapes: a software stack's ops, sizes and choices, the
MoE and multi-head-latent-attention options and the attention's share of the score matrix
(:func:`dse.estimate.kernel_table.kernel_tables` reads them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dse.estimate import context as _context, mtp as _mtp
from dse.formulas import kernels as _kernels, stacks as _stacks
from dse.formulas.parallelism.dispatch import FP8_DISPATCH_BYTES
from dse.specs.plan import expert_tp, folded

if TYPE_CHECKING:
    from dse.formulas._array import Num
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan
    from dse.specs.stack import StackSpec


def moe_options(model: ModelSpec, plan: Plan) -> dict[str, Any]:
    """The MoE keyword arguments of :func:`dse.formulas.kernels.layer_kernels` (``moe``) of an MoE model."""
    return {"experts": model.experts, "experts_per_token": model.experts_per_token, "expert_ffn": model.expert_ffn,
            "shared_experts": model.shared_experts, "shared_ffn": model.shared_expert_ffn or 0,
            "shared_gate": model.shared_expert_gate, "imbalance": model.expert_imbalance,
            "ep": getattr(plan, "ep", 1), "capacity": getattr(plan, "expert_capacity", None),
            "pad": getattr(plan, "pad_to_capacity", False), "bias": model.bias,
            "gemm_per_expert": getattr(plan, "stack", "megatron") == "megatron",
            "glu_clamp": model.glu_limit is not None and getattr(plan, "stack", "megatron") == "megatron",
            "dispatcher": getattr(plan, "moe_dispatcher", None) or ("alltoall" if getattr(plan, "pad_to_capacity",
                                                                                          False) else None),
            **({"etp": expert_tp(plan)} if folded(plan) else {}),
            **({"dispatch_bytes_per_element": FP8_DISPATCH_BYTES}
               if getattr(plan, "moe_dispatch_dtype", "bf16") == "fp8" else {})}


def mean_layer(model: ModelSpec, plan: Plan, of_layer: Callable[[dict[str, Any] | None], Any]) -> Any:
    """``of_layer(moe)`` of the mean layer: of an MoE layer (``moe`` = :func:`moe_options`) for an MoE model, of a
    dense one (None) for a dense model, and the layer-weighted mean of both for a model with dense and MoE layers
    (as the kernel table's sums: :func:`dse.estimate.kernel_table.kernel_tables`)."""
    n_moe = model.moe_layers
    if not n_moe:
        return of_layer(None)
    moe = of_layer(moe_options(model, plan))
    if n_moe == model.layers:
        return moe
    share = n_moe / model.layers
    return moe * share + of_layer(None) * (1 - share)


def mla_options(model: ModelSpec) -> dict[str, Any] | None:
    """The multi-head latent attention keyword arguments of :func:`dse.formulas.kernels.layer_kernels` (``mla``), or
    None for standard attention."""
    if not model.mla:
        return None
    return {"q_lora": model.q_lora_rank or 0, "kv_lora": model.kv_lora_rank, "nope": model.qk_nope_head_dim,
            "rope": model.qk_rope_head_dim, "v_dim": model.v_head_dim}


def stack_spec(name: str) -> StackSpec:
    """A catalog stack (stacks/NAME.yaml), loaded once."""
    from dse.specs.stack import load

    return load(name)


def stack_inputs(model: ModelSpec, plan: Plan, stack: str) -> tuple[Any, Any, Any]:
    """The resolved ops of a non-Megatron stack, the tensor sizes its amounts name, and the plan's choices."""
    if stack == "megatron":
        return None, None, None
    from dse.formulas import transformer as T

    spec = stack_spec(stack)
    # BLOOM's ALiBi attention: its own math variant; Phi-3's Q, K and V slices of one projection reach the attention,
    # the rotary and their gradients' copies as separate tensors, as the separate projections' do (where the stack
    # traces the slices apart: eager; torch.compile's fused kernels keep the fused layout's rows)
    slices = model.projection_slices and "qkv_slices" in spec.rows
    ops = spec.ops(model.norm_kind, model.activation_kind, "separate" if slices else model.qkv_projection,
                   "alibi" if model.alibi else model.softmax_dtype)
    t = plan.tp
    kv: Any = model.kv_heads          # resolved specs: set (Optional only before resolution)
    d: Any = model.head_dim
    ffn: Any = model.ffn_hidden
    s: Any = _context.local_seq(plan)
    from dse.estimate.parameters import layer_counts

    lc = layer_counts(model, T)   # the MoE layer's where the model has them (the table is an MoE layer's)
    p_layer, p_rep = (lc["moe"], lc["moe_rep"]) if lc["moe_layers"] else (lc["dense"], lc["dense_rep"])
    size = _stacks.sizes(s, plan.micro_batch, model.hidden, model.heads, kv, d, ffn, model.vocab, tp=t,
                         sequence_parallel=plan.sequence_parallel,
                         layer_params=(p_layer - p_rep) / t + p_rep, param_tensors=model.layer_param_tensors)
    if model.experts:   # an MoE layer's routed copies (T k h), their ids and weights (T k), the router scores (T E)
        k: Any = model.experts_per_token
        size.update(routed=size["h"] * k, picks=size["h"] * k / model.hidden, probs=size["h"] * model.experts
                    / model.hidden)
    choices = {"attention": plan.attention, "recompute": plan.recompute, "bias": bool(model.bias),
               "dropout": model.dropout > 0, "branch_dropouts": model.branch_dropouts, "qkv": model.qkv_projection,
               "grouped": kv < model.heads,
               "scale_query": model.scale_query, "rotary": model.position == "rotary",
               "frozen": plan.finetune != "full", "softcap": model.attn_softcap is not None,
               "logit_softcap": model.logit_softcap is not None, "embedding_scale": model.embedding_scale,
               "kv_cache": plan.recompute != "full" if plan.kv_cache is None else bool(plan.kv_cache),
               "qk_norm_weight": model.qk_norm_weight, "residual_scale": model.residual_scale,
               "logit_scale": model.logit_scale, "rotary_fp32": model.rotary_fp32, "qk_norm_full": model.qk_norm_full,
               "rotary_upcast": model.rotary_upcast,
               "mlp_bias": bool(model.bias if model.mlp_bias is None else model.mlp_bias),
               "rotary_before_transpose": model.rotary_before_transpose,
               "qkv_bias": bool(model.bias if model.qkv_bias is None else model.qkv_bias),
               "slices": slices}
    return ops, size, choices


def attention_shares(model: ModelSpec, plan: Plan, stack: str) -> tuple[Any, Any]:
    """(model share, executed share) of the s x s score matrix per layer (:func:`dse.formulas.transformer.
    attention_share`), or (None, None) where every layer is full causal attention over the whole sequence.

    The model's share (its FLOPs, what MFU counts) is the windowed work; the flash kernel executes it where the
    stack's kernel skips the tiles outside the window (``flash_window``: Megatron / Transformer Engine
    ``window_size``), else the whole matrix of each windowed layer (SDPA with an explicit mask: pytorch, compiled).
    Eager (math) attention always computes the whole matrix: its GEMMs' shapes set its time.
    """
    n = model.attention_layers
    if model.architecture != "decoder" or n["full"] == model.layers:
        return None, None
    s: Any = plan.seq_len                     # the window counts positions of the whole sequence (cp: global)
    w, c = model.sliding_window, model.attention_chunk
    if not ((n["sliding"] and _below(w, s)) or (n["chunked"] and _below(c, s))):
        return None, None
    from dse.formulas import transformer as T

    share = T.attention_share(s, n["full"], n["sliding"], n["chunked"], w, c)
    skips = stack == "megatron" or stack_spec(stack).flash_window
    return share, (share if skips else T.attention_share(s, n["full"], n["sliding"], n["chunked"], w, c, skips=False))


def _below(x: Any, s: Any) -> bool:
    """Some sequence length of ``s`` (a number or an array of them) is longer than ``x``."""
    return bool(x < s) if isinstance(s, (int, float)) else bool((x < s).any())


#: the sums of table_sums that belong to the embedding and the head; the others belong to one layer (a mixed
#: dense/MoE model averages those over its layers)
END_SUMS = ("a_head", "a_emb", "flops_head", "flops_backward_head", *_mtp.END_SUMS)


def table_sums(tables: dict[str, Any], recompute: str, K: Any = _kernels) -> dict[str, Num]:
    """What the estimate reads off the kernel tables besides time: activation bytes, FLOPs, TP message bytes.

    Per micro-batch on one GPU: bytes each table saves for backward (and the layer holds while recomputed; and
    what saved-tensor hooks pack of a layer, ``a_packed``), forward FLOPs of a layer and of the ends (the
    embedding's only where it projects: OPT-350m's project_in), the FLOPs recomputation repeats, and the
    tensor-parallel message bytes of a layer.
    """
    layer = tables["layer"]
    return {"a_layer": K.saved_bytes(layer), "a_packed": K.packed_bytes(layer),
            "flops_backward_layer": K.backward_flops(layer),
            # the embedding's GEMMs (OPT-350m's project_in; none elsewhere) are counted with the head's
            "flops_backward_head": K.backward_flops(tables["head"]) + K.backward_flops(tables["embedding"]),
            "a_work": K.rerun_bytes(layer) if recompute == "full" else 0,
            "a_head": K.saved_bytes(tables["head"]) + _stacks.transient_bytes(tables["head"]),
            "a_emb": K.saved_bytes(tables["embedding"]),
            "flops_layer": K.forward_flops(layer),
            "flops_head": K.forward_flops(tables["head"]) + K.forward_flops(tables["embedding"]),
            "flops_recompute": K.recomputed_flops(layer, recompute),
            **{f"{g}_messages": K.message_bytes(layer, g, recompute) for g in ("tp", "ep", "etp")}}
