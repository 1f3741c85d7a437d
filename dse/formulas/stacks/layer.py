"""A software stack's element-wise kernels and saved tensors on a layer's kernel table.

Part of :mod:`dse.formulas.stacks` (the op format and the symbols are there).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num
from dse.formulas.stacks.amounts import Op, Row, Sizes, Table, amount, qk_sizes
from dse.formulas.stacks.rows import _elementwise, _enabled, _norm, _packed, _scaled, _twice

__all__ = ["apply_layer"]

def apply_layer(table: Table, ops: dict[str, Op], size: Sizes, choices: dict[str, Any], *,
                bytes_per_element: Num = 2, grad_bytes: Num = 2) -> Table:
    """A layer's kernel table (built without recomputation) with a stack's element-wise kernels and saved tensors.

    Formula: each element-wise row's bytes, kernels and saved bytes from the stack op that names it (norm1, norm2:
    ``norm``; the QK-norm: ``qk_norm`` over :func:`qk_sizes`, where it has a weight; the residual adds:
    ``residual``; ``activation``; ``rotary``); the attention core's saved bytes and its
    copies from ``flash`` or ``math`` (eager attention's dropout: ``score_dropout``, where the table has the
    ``attn_dropout`` row); added rows (``dropout``: x b/2 for the choice ``branch_dropouts`` b, default 2,
    ``kv_copy``, ``kv_repeat``, ``qkv_inputs``, ``qkv_grads``, ``rotary_grads``, ``query_scale``, ``bias_grads``,
    ``grad_accumulate``, eager attention's logit soft-capping ``softcap``, Granite's branch scale ``residual_scale``,
    OLMo 2's fp32 rotary ``rotary_fp32`` (Cohere's upcast q and k: ``rotary_upcast``), a fused projection's gradient
    cat under grouped eager attention ``qkv_grad_cat``, GPT-J's MLP-only biases ``mlp_bias_grads``, Q/K/V-only
    ``qkv_bias_grads``, attention-only ``attn_bias_grads``, GPT-Neo's out_proj and MLP biases ``out_bias_grads``,
    per-layer rotary tables ``rotary_tables``, and Phi-3's slices of its fused projection ``qkv_slices``) where
    enabled; no ``rotary_grads`` copies where the rotary runs before the heads are transposed (GPT-J:
    ``rotary_before_transpose``)
    Source: the framework's op trace, as recorded in the stack file (stacks/*.yaml).

    GEMM rows keep their shapes and what they save (their inputs); fc2's input is counted by ``activation``. MoE: the
    expert and shared activations are ``activation`` over their own elements (T k F_e / t, T S F_s / t; the experts'
    ``expert_glu`` where given); routing, permute, unpermute the stack's ``moe_*`` (saved bytes kept), the expert GEMMs
    then ``grouped_mm`` (Transformers' experts). Gemma 2's extra norms are its ``norm``.

    Returns:
        kernel name -> row [dict]

    >>> from dse.formulas.stacks import sizes
    >>> z = sizes(1024, 1, 1600, 25, 25, 64, 6400, 50257)
    >>> gelu = {"forward": {"kernels": 8, "moves": {"f": 18}}, "backward": {"kernels": 11, "moves": {"f": 28}},
    ...         "saved": {"f": 5}}
    >>> t = apply_layer({"activation": {"kind": "elementwise", "bytes": 1, "saved": 1}}, {"activation": gelu}, z, {})
    >>> t["activation"]["bytes"] / (2 * 1024 * 6400), t["activation"]["kernels_backward"]   # passes; kernels
    (18.0, 11)
    """
    e, g = bytes_per_element, grad_bytes
    out: Table = {}
    for name, row in table.items():
        if name in ("norm1", "norm2", "post_attn_norm", "post_mlp_norm") and "norm" in ops:
            out[name] = _elementwise(_norm(ops["norm"], choices), size, e, g)
        elif name == "qk_norm" and "qk_norm" in ops and choices.get("qk_norm_weight", True):
            out[name] = _twice(_elementwise(_norm(ops["qk_norm"], choices),
                                            qk_sizes(size, choices.get("qk_norm_full", False)), e, g))
        elif name in ("attn_residual", "mlp_residual") and "residual" in ops:
            out[name] = _elementwise(ops["residual"], size, e, g)
        elif name in ("activation", "rotary") and name in ops:
            out[name] = _elementwise(ops[name], size, e, g)
        elif name in ("expert_activation", "shared_activation") and "activation" in ops:   # T k F_e elements
            routed = name[0] == "e" and "permute" in table        # the experts of a routed layer (E > 1)
            op = ops.get("expert_glu", ops["activation"]) if routed else ops["activation"]
            out[name] = _scaled(_elementwise(op, size, e, g), row["elements"] / size["f"])
        elif name in ("routing", "permute", "unpermute") and "moe_" + name in ops:   # Transformers' MoE block
            out[name] = _elementwise(ops["moe_" + name], size, e, g, saved=row["saved"])
        elif name in ("expert_fc1", "expert_fc2") and "moe_permute" in ops and "permute" in table:   # grouped_mm
            out[name] = {**row, "grouped_mm": True}
        elif name == "fc2" and "activation" in ops:
            out[name] = {**row, "saved": 0}
        elif name == "attention" and "flash" in ops:       # a fused kernel: its saved tensors, then its copies
            out[name] = {**row, "saved": amount(ops["flash"].get("saved", {}), size, e, g),
                         **_packed(ops["flash"], size, e, g)}
            out["attention_copies"] = _elementwise(ops["flash"], size, e, g, saved=0, pack=False)
        elif name in ("score", "context") and "math" in ops:
            out[name] = {**row, "saved": 0}
        elif name == "softmax" and "math" in ops:
            out[name] = {**_elementwise(ops["math"], size, e, g), "selective": True}
        elif name == "attn_dropout" and "math" in ops:      # the stack's own score dropout, where enabled
            if "score_dropout" in ops and _enabled(ops["score_dropout"], choices):
                out[name] = {**_elementwise(ops["score_dropout"], size, e, g), "selective": True}
        else:
            out[name] = row
    for name in ("dropout", "kv_copy", "kv_repeat", "qkv_inputs", "qkv_grads", "rotary_grads", "query_scale",
                 "bias_grads", "grad_accumulate", "softcap", "residual_scale", "rotary_fp32", "rotary_upcast",
                 "qkv_grad_cat", "mlp_bias_grads", "rotary_tables", "qkv_bias_grads", "attn_bias_grads",
                 "out_bias_grads", "qkv_slices"):
        if name in ops and _enabled(ops[name], choices):
            out[name] = _elementwise(ops[name], size, e, g)
            if name == "softcap":         # part of the attention core: selective recompute runs it again
                out[name]["selective"] = True
    if "dropout" in out and choices.get("branch_dropouts", 2) != 2:   # the stack's row: two branch dropouts
        out["dropout"] = _branches(out["dropout"], choices.get("branch_dropouts", 2))
        if not out["dropout"]["kernels"]:
            del out["dropout"]
    if "qkv_grad_cat" in out and "softmax" in out:
        _repeat_kv_fused(out, size, e, choices)
    if choices.get("rotary_before_transpose"):   # GPT-J: the q, k gradients leave rotary in the projections' layout
        out.pop("rotary_grads", None)
    return out


def _branches(row: Row, n: Num) -> Row:
    """A stack's ``dropout`` row (one dropout on each of the two branch outputs) for ``n`` branch dropouts per layer:
    every amount and kernel count x n / 2 (StableLM drops its MLP output only, a parallel Falcon layer one sum)."""
    return {k: v * n / 2 if k != "kind" and isinstance(v, (int, float)) and not isinstance(v, bool) else v
            for k, v in row.items()}


def _repeat_kv_fused(out: Table, size: Sizes, e: Num, choices: dict[str, Any]) -> None:
    """A fused projection under grouped eager attention (GPTBigCode multi-query), in place: no K and V gradient copies
    (repeat_kv's backward sums them contiguous; the fp32 variant's kv: 4 backward passes, 2 kernels), and the K/V copies
    are the cache's only (not run without it, not saved: the matmuls save repeat_kv's, counted by ``math``).
    Source: the aten trace of GPTBigCodeForCausalLM (scripts/trace_stack.py gpt_bigcode, eager runs)."""
    row = out["softmax"]
    out["softmax"] = {**row, "bytes_backward": row["bytes_backward"] - 4 * e * size["kv"],
                      "kernels_backward": row["kernels_backward"] - 2}
    if "kv_copy" in out:
        if choices.get("kv_cache"):
            out["kv_copy"] = {**out["kv_copy"], "saved": 0, "packed": 0}
        else:
            del out["kv_copy"]

