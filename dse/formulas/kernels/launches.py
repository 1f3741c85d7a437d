"""Kernels the host launches per row of a kernel table: what a launch floor multiplies by the host time per launch.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, where
from dse.formulas.kernels.rows import Row, Table

__all__ = ["MEGATRON_LAUNCHES", "row_launches", "table_launches"]

#: (forward, backward) kernels Megatron-LM launches for a row of its layer, counted from microsoft/Megatron-DeepSpeed
#: megatron/model/transformer.py (ParallelTransformerLayer, ParallelAttention, ParallelMLP), megatron/mpu/layers.py
#: (Column/RowParallelLinear: F.linear, the bias gradient ``grad_output.sum(0)``), megatron/model/fused_layer_norm.py
#: (apex's fused LayerNorm: one forward kernel; backward cuComputePartGradGammaBeta, cuComputeGradGammaBeta,
#: cuComputeGradInput), fused_bias_gelu.py (one fused kernel each way, and the bias gradient's reduction) and
#: fused_softmax.py (one kernel each way). Rows not listed launch as their kind: a GEMM 1 and 2 (data and weight
#: gradients), a flash kernel 1 and 2, an element-wise kernel 1 and 1, a collective 1 in its own pass.
MEGATRON_LAUNCHES: dict[str, tuple[int, int]] = {
    "norm1": (1, 3), "norm2": (1, 3), "post_attn_norm": (1, 3), "post_mlp_norm": (1, 3),
    "qkv": (1, 3),            # QKV linear with its bias: addmm; dgrad, wgrad, the bias gradient's column sum
    "context": (2, 3),        # bmm, then the [b, np, s, hn] -> [s, b, np, hn] permute's contiguous copy (and back)
    # the TorchScript-fused bias-dropout-add: one kernel forward; backward the dropout mask's product, the bias
    # gradient's column sum, and the add of the two gradients of the residual stream
    "attn_residual": (1, 3), "mlp_residual": (1, 3),
    "activation": (1, 2),     # bias-GeLU (GeLUFunction): one kernel each way, and the fc1 bias gradient's sum
}


def row_launches(name: str, row: Row, launches: dict[str, tuple[int, int]] | None = None,
                 ranks: Num = 2, ep_ranks: Num = 2) -> tuple[Num, Num]:
    """(forward, backward) kernels the host launches for one row.

    Formula: the stack's count for the row where it has one (``launches``; a software stack's element-wise rows:
    their ``kernels``, ``kernels_backward``), else by kind: GEMM (1, 2), flash (1, 2), element-wise (1, 1), a
    collective 1 in its pass when its group has more than one rank (``ranks``; an expert-parallel one: ``ep_ranks``)
    Source: the host issues one launch per CUDA kernel (CUDA C++ Programming Guide, "Asynchronous Concurrent
    Execution"); counts: :data:`MEGATRON_LAUNCHES`, the stack files.

    Returns:
        (forward, backward) launches [count]

    >>> row_launches("qkv", {"kind": "gemm"}, MEGATRON_LAUNCHES), row_launches("out", {"kind": "gemm"})
    ((1, 3), (1, 2))
    >>> row_launches("x", {"kind": "collective", "pass": "backward"}, ranks=8)
    (0, 1)
    """
    kind = row["kind"]
    if kind == "collective":
        n: Any = where((ep_ranks if row.get("group") == "ep" else ranks) > 1, 1, 0)
        return (0, n) if row.get("pass") == "backward" else (n, 0)
    if launches is not None and name in launches and not ("kernels" in row or "bytes_backward" in row):
        return launches[name]
    if kind in ("gemm", "flash"):
        return 1, 2
    return row.get("kernels", 1), row.get("kernels_backward", 1)


def table_launches(table: Table, launches: dict[str, tuple[int, int]] | None = None,
                   ranks: Num = 2, ep_ranks: Num = 2) -> tuple[Num, Num]:
    """(forward, backward) kernels the host launches for a whole table: :func:`row_launches` summed.

    Formula: L_f = sum of the rows' forward launches, L_b = sum of their backward launches
    Source: :func:`row_launches`; what a launch floor multiplies by the host time per launch (a stack's
    ``dispatch``: asynchronous execution keeps the GPU busy only while the host issues kernels faster than they run,
    Horace He, "Making Deep Learning Go Brrrr From First Principles", 2022, "Overhead").

    Returns:
        (forward, backward) launches [count]

    >>> from dse.formulas.kernels import layer_kernels
    >>> t = layer_kernels(2048, 1, 1024, 16, 16, 64, 4096, tp=8, attention="math")   # a GPT layer, math attention
    >>> table_launches(t, MEGATRON_LAUNCHES, ranks=8)
    (16, 32)
    """
    f: Num = 0
    b: Num = 0
    for name, row in table.items():
        rf, rb = row_launches(name, row, launches, ranks, ep_ranks)
        f, b = f + rf, b + rb
    return f, b
