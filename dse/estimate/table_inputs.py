"""What a layer's kernel table is built from besides its shapes: a software stack's ops, sizes and choices, and
the MoE options (:func:`dse.estimate.kernel_table.kernel_tables` reads them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.estimate import context as _context
from dse.formulas import stacks as _stacks

if TYPE_CHECKING:
    from dse.formulas._array import Num
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan
    from dse.specs.stack import StackSpec


def moe_options(model: ModelSpec, ep: Num = 1) -> dict[str, Any]:
    """The MoE keyword arguments of :func:`dse.formulas.kernels.layer_kernels` (``moe``) of an MoE model."""
    return {"experts": model.experts, "experts_per_token": model.experts_per_token, "expert_ffn": model.expert_ffn,
            "shared_experts": model.shared_experts, "shared_ffn": model.shared_expert_ffn or 0,
            "shared_gate": model.shared_expert_gate, "imbalance": model.expert_imbalance, "ep": ep}


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
    ops = spec.ops(model.norm, model.activation_kind, model.qkv_projection, model.softmax_dtype)
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
    choices = {"attention": plan.attention, "recompute": plan.recompute, "bias": bool(model.bias),
               "dropout": model.dropout > 0, "qkv": model.qkv_projection, "grouped": kv < model.heads,
               "scale_query": model.scale_query, "rotary": model.position == "rotary",
               "frozen": plan.finetune != "full"}
    return ops, size, choices
