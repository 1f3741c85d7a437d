"""The defaults a plan filled in: what the user did not choose but the answer depends on.

``dse estimate`` prints them under its header (``defaults: seq 4096 (training length; model max 32768),
global batch 8 = b·dp, ...``) and ``--json`` carries them as ``defaults``: ``{field: {"value": v, "rule":
text}}``, one entry per plan field the caller left unset whose value shapes the estimate. Which fields a
plan fills and how is :func:`dse.specs.plan._derived` (and the field defaults of :class:`~dse.specs.plan.Plan`);
this module only names them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dse.specs.hardware import GPU_SYSTEM
from dse.specs.model import TRAINING_SEQ_LEN

Defaults = dict[str, dict[str, Any]]


def _seq_rule(model: Any, seq: int) -> str:
    natural = min(TRAINING_SEQ_LEN, model.max_seq_len)
    if seq != natural:
        return f"the model's training length; model max {model.max_seq_len}"
    if model.max_seq_len > TRAINING_SEQ_LEN:
        return f"training length; model max {model.max_seq_len}"
    return "the model's maximum"


def _batch_rule(plan: Any) -> str:
    return "b·dp" if plan.pp == 1 else "b·dp·4·pp"


def filled(model: Any, system: Any, plan: Any, given: Any) -> Defaults:
    """The plan fields not in ``given`` (the fields the caller set) that shape the estimate, with their rules."""
    gpu = getattr(system, "kind", GPU_SYSTEM) == GPU_SYSTEM
    offload = plan.offload_optimizer != "gpu" or plan.offload_params != "gpu"
    out: Defaults = {}

    def add(field: str, rule: str, when: bool = True, value: Any = None) -> None:
        if when and field not in given:
            out[field] = {"value": getattr(plan, field) if value is None else value, "rule": rule}

    add("seq_len", _seq_rule(model, plan.seq_len))
    add("global_batch", _batch_rule(plan))
    if gpu:
        per_node = system.node.gpus_per_node
        cp = getattr(plan, "cp", 1)
        add("dp", f"fills one {per_node}-GPU node" if plan.tp * plan.pp * plan.dp * cp == per_node
            else "one replica (tp·pp does not divide a node)" if cp == 1
            else "one replica (tp·cp·pp does not divide a node)")
        add("zero", "distributed optimizer, Megatron's default" if plan.zero == 1
            else "ZeRO stage")
    add("precision", "mixed precision recipe")
    add("grad_dtype", "gradients accumulated and reduced in this dtype")
    add("recompute", "activation recomputation")
    add("attention", "ALiBi: the model's only attention is eager" if getattr(model, "alibi", False)
        else "Transformers has no SDPA path for this model: eager" if getattr(model, "eager_attention", False)
        else "attention kernel", when=gpu)      # a chiplet package runs fused attention
    add("stack", "software stack (kernels)", when=gpu)
    add("optimizer", "optimizer")
    add("schedule", "pipeline schedule", when=plan.pp > 1)
    if gpu:
        add("overlap_grad_reduce", "data-parallel communication exposed (Megatron's default)",
            when=plan.dp * getattr(plan, "cp", 1) > 1 and not plan.overlap_grad_reduce)
    if gpu and (offload or plan.offload_activations == "ssd"):
        from dse.estimate.offload import drives_used

        add("ssds", "every drive of a node", value=int(drives_used(system, plan)))
    add("sub_group_size", "DeepSpeed sub-group (elements)", when=offload)
    return out


_SHORT: dict[str, Callable[[Any], str]] = {
    "seq_len": lambda v: f"seq {v}", "global_batch": lambda v: f"global batch {v}", "dp": lambda v: f"dp {v}",
    "zero": lambda v: f"ZeRO-{v}", "precision": str, "grad_dtype": lambda v: f"{v} gradients",
    "recompute": lambda v: f"recompute {v}", "attention": lambda v: f"{v} attention",
    "stack": lambda v: f"{v} stack", "optimizer": str, "schedule": lambda v: f"{v} schedule",
    "overlap_grad_reduce": lambda v: "no DP overlap", "ssds": lambda v: f"{v} drives",
    "sub_group_size": lambda v: f"sub-group {v:g}",
}
# fields whose rule is worth printing beside the value (the others are the value's own name)
_EXPLAINED = ("seq_len", "global_batch", "dp")


def line(defaults: Defaults) -> str:
    """One line for the console: ``defaults: seq 4096 (training length; model max 32768), global batch 8 = b·dp...``."""
    bits = []
    for field, d in defaults.items():
        short = _SHORT.get(field)
        text = short(d["value"]) if short is not None else f"{field} {d['value']}"
        if field == "global_batch":
            text += f" = {d['rule']}"
        elif field in _EXPLAINED:
            text += f" ({d['rule']})"
        bits.append(text)
    return "defaults: " + ", ".join(bits) if bits else ""


def input_warnings(model: Any, plan: Any, system: Any = None) -> list[str]:
    """What the estimate prices approximately because the model has it and dse does not model it.

    The notes of the model's source (:attr:`~dse.specs.model.ModelSpec.unmodelled`, e.g. a ``config.json``'s
    quantization); ``grad_accumulation_fusion`` false on a stack other than megatron or on a chiplet package
    (ignored). Sliding-window and chunked attention are priced on GPU systems (docs/attention.md); a chiplet
    package's attention is full causal, so a window or chunk shorter than the sequence is a warning there.
    """
    out = list(model.unmodelled)
    stack = getattr(plan, "stack", "megatron")
    chiplet = system is not None and getattr(system, "kind", GPU_SYSTEM) != GPU_SYSTEM
    if not getattr(plan, "grad_accumulation_fusion", True) and (stack != "megatron" or chiplet):
        out.append("grad_accumulation_fusion false: ignored on a chiplet package (its own dataflow)" if chiplet else
                   f"grad_accumulation_fusion false: ignored on the {stack} stack, which never fuses the gradient "
                   "accumulation (its grad_accumulate row prices AccumulateGrad's add either way)")
    if system is not None and getattr(system, "kind", GPU_SYSTEM) != GPU_SYSTEM:
        n = model.attention_layers
        short = [f"{name} {v}" for name, v, k in (("sliding_window", model.sliding_window, "sliding"),
                                                 ("attention_chunk", model.attention_chunk, "chunked"))
                 if n[k] and v < plan.seq_len]
        if short:
            out.append(f"{model.name}: {', '.join(short)} shorter than the sequence ({plan.seq_len}); a chiplet "
                       "package's attention is priced as full causal (an upper bound)")
    return out
