"""A stack op turned into a kernel-table row: its bytes, kernels, saved and packed bytes, where it runs.

Part of :mod:`dse.formulas.stacks` (the op format and the symbols are there). Private helpers of
:mod:`dse.formulas.stacks.layer` and :mod:`dse.formulas.stacks.ends`.
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num
from dse.formulas.stacks.amounts import Op, Row, Sizes, amount

__all__: list[str] = []

def _enabled(op: Op, choices: dict[str, Any]) -> bool:
    """Whether an added row runs: any of its ``when`` conditions holds (no ``when``: always).

    A condition maps a choice (``attention``, ``recompute``, ``bias``) to a value or a list of values; all must match.
    """
    when = op.get("when")
    if not when:
        return True
    for cond in when:
        if all(choices.get(k) in (v if isinstance(v, list) else [v]) for k, v in cond.items()):
            return True
    return False


def _elementwise(op: Op, size: Sizes, e: Num, g: Num, saved: Num | None = None, pack: bool = True) -> Row:
    """One element-wise row of a stack op: forward and backward bytes and kernels, saved and packed bytes."""
    fwd, bwd = op.get("forward", {}), op.get("backward", {})

    def count(x: Any) -> Any:
        return size[x] if isinstance(x, str) else x

    return {"kind": "elementwise", "bytes": amount(fwd.get("moves", {}), size, e, g),
            "bytes_backward": amount(bwd.get("moves", {}), size, e, g),
            "kernels": count(fwd.get("kernels", 0)), "kernels_backward": count(bwd.get("kernels", 0)),
            "saved": amount(op.get("saved", {}), size, e, g) if saved is None else saved,
            **(_packed(op, size, e, g) if pack else {}), **_rated(fwd, "", size, e, g), **_rated(bwd, "_backward", size,
                                                                                            e, g)}


def _rated(side: dict[str, Any], suffix: str, size: Sizes, e: Num, g: Num) -> Row:
    """The parts of a pass's moves that run below the plain element-wise rate, where the stack names them.

    ``strided``: bytes of kernels on PyTorch's non-vectorized element-wise path with operands in different orders
    (a transposed view: ``elementwise_kernel``); ``unvectorized``: bytes of kernels whose operands share one order
    but cannot take 16-byte accesses (a broadcast operand or a slice: ``elementwise_kernel``; a dtype-converting
    copy: ``unrolled_elementwise_kernel``); each with ``..._passes``, the same passes at the activation's width
    whatever their dtype: those paths are bound per element (offset and cast arithmetic), not per byte -- an fp32
    pass costs what a bf16 one does (scripts/trace_paths.py, scripts/kernel_rates.py);
    ``softmax``: bytes of the row softmax kernel, and ``softmax_elements`` the elements it processes (each
    element of each named tensor once, whatever its passes and dtype).
    """
    out: Row = {}
    for part in ("strided", "unvectorized"):
        if side.get(part):
            out[part + suffix] = amount(side[part], size, e, g)
            even: dict[str, Any] = {}
            for k, n in side[part].items():
                even[k.partition(":")[0]] = even.get(k.partition(":")[0], 0) + n
            out[part + "_passes" + suffix] = amount(even, size, e, g)
    if side.get("softmax"):
        out["softmax" + suffix] = amount(side["softmax"], size, e, g)
        out["softmax_elements" + suffix] = amount({k.partition(":")[0]: 1 for k in side["softmax"]}, size, 1, 1)
    return out


def _packed(op: Op, size: Sizes, e: Num, g: Num) -> Row:
    """``{"packed": bytes}`` where the op packs other than what it keeps (its ``packed`` amount), else nothing.

    What saved-tensor hooks see (``torch.autograd.graph.save_on_cpu``): every tensor each autograd node saves,
    once per node and at the tensor's own size -- where ``saved`` counts each buffer alive once.
    """
    return {"packed": amount(op["packed"], size, e, g)} if "packed" in op else {}


def _scaled(row: Row, ratio: Num) -> Row:
    """An element-wise row over ``ratio`` times the elements: bytes and saved bytes scale, the kernels do not."""
    return {k: v * ratio if k in _SCALED else v for k, v in row.items()}


_SCALED = ("bytes", "bytes_backward", "saved", "packed", "strided", "strided_backward", "strided_passes",
           "strided_passes_backward", "unvectorized", "unvectorized_backward", "unvectorized_passes",
           "unvectorized_passes_backward", "softmax", "softmax_backward", "softmax_elements",
           "softmax_elements_backward")


def _norm(op: Op, choices: dict[str, Any]) -> Op:
    """A norm op, or what it keeps instead with frozen weights (LoRA: its ``frozen`` amounts)."""
    return {**op, **op["frozen"]} if choices.get("frozen") and "frozen" in op else op


def _twice(row: Row) -> Row:
    """A QK-norm row: q_norm and k_norm are two modules, each launching the norm's kernels (its bytes already span
    q and k: :func:`qk_sizes`). Traced (transformers 5.24, CPU, per layer forward with SDPA): Qwen3-0.6B 54 aten ops
    against Llama's 38 (2 x 8 RMSNorm ops), Gemma 3 1B 82; the H200 profiles' recomputed forward per layer
    (data/h200/vm2: full minus none recompute over the layers): Qwen3-0.6B 55, Gemma 3 1B 84.5."""
    return {**row, "kernels": 2 * row["kernels"], "kernels_backward": 2 * row["kernels_backward"]}
