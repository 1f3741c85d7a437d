"""SRAM one die needs while a layer runs, and the smallest SRAM that runs any GEMM.

Part of :mod:`dse.formulas.chiplet` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum
from dse.formulas.chiplet.gemms import gemm_parameters, layer_gemms

__all__ = ["sram_per_die", "gemm_operand_bytes", "min_tile_sram"]

def sram_per_die(scheme: str, tokens: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, ffn_type: str,
                 rows: Num, cols: Num, bytes_per_element: Num = 2, grad_bytes: Num = 4,
                 weight_buffers: Num = 2) -> dict[str, Num]:
    """SRAM one die needs while a layer runs: its weight block, gradient block, activation working set.

    Formula: weights n_buf P e / N + gradients P g / N + max over GEMMs of the operands + T h e / N
    Source: research note chiplet.md §1a, §2c (the 2D method "relieves constraints on SRAM capacity"); this tool's
    accounting.

    weights = n_buf P e / N (the resident block plus the next layer's prefetch);
    gradients = P g / N (accumulated on the die during the backward pass);
    activations = max over GEMMs of the scheme's operands for one micro-batch of T tokens:
    1D column T k e + T n e/N, row T k e/N + T n e (the gathered full-width input or partial
    output every die holds); 2D AG/RS column T k e/R + T n e/C, row T k e/C + T n e/R;
    SUMMA T (k + n) e/q^2 plus double-buffered broadcast blocks 2 (T k + k n) e/q^2;
    plus the sharded layer input kept for the residual, T h e/N.
    The 1D working set grows with h at any N; the 2D one falls as 1/sqrt(N).

    Args:
        weight_buffers: n_buf, weight blocks held at once [count]
    Returns:
        dict weights, gradients, activations, buffers, total [bytes]

    >>> {s: round(sram_per_die(s, 4096, 8192, 64, 8, 128, 28672, "swiglu", 8, 8)["total"] / 2**20)
    ...  for s in ("megatron-1d", "summa-2d", "hecaton-2d")}   # MiB per die
    {'megatron-1d': 174, 'summa-2d': 141, 'hecaton-2d': 167}
    """
    e = bytes_per_element
    dies = rows * cols
    gemms = layer_gemms(h, heads, kv_heads, head_dim, ffn, ffn_type)
    p = gemm_parameters(gemms)
    act: Num = 0.0
    buffers: Num = 0.0
    for _, k, n, kind in gemms:
        ops = gemm_operand_bytes(scheme, tokens, k, n, kind, rows, cols, e)
        act = maximum(act, ops["operands"])
        buffers = maximum(buffers, ops["buffers"])
    act = act + tokens * h * e / dies
    weights = weight_buffers * p * e / dies
    grads = p * grad_bytes / dies
    return {"weights": weights, "gradients": grads, "activations": act, "buffers": buffers,
            "total": weights + grads + act + buffers}


def gemm_operand_bytes(scheme: str, tokens: Num, k: Num, n: Num, kind: str, rows: Num, cols: Num,
                       bytes_per_element: Num = 2) -> dict[str, Num]:
    """Activation bytes one die holds while one GEMM of one micro-batch runs: its input and output operands.

    Formula: 1D column T k e + T n e/N, row T k e/N + T n e; 2D AG/RS column T k e/R + T n e/C, row
    T k e/C + T n e/R; SUMMA T (k + n) e/q^2 with broadcast buffers 2 (T k + k n) e/q^2
    Source: this tool's accounting of the layouts of :func:`~dse.formulas.chiplet.megatron_1d_gemm_bytes`,
    :func:`~dse.formulas.chiplet.hecaton_2d_gemm_passes` and :func:`~dse.formulas.chiplet.summa_2d_gemm_bytes`
    (the gathered input and the partial output each die holds).

    Returns:
        dict operands, buffers [bytes]

    >>> gemm_operand_bytes("hecaton-2d", 4096, 8192, 57344, "column", 8, 8)["operands"] / 2**20   # MiB
    64.0
    """
    e = bytes_per_element
    dies = rows * cols
    if scheme == "megatron-1d":
        ops = tokens * k * e + tokens * n * e / dies if kind == "column" else tokens * k * e / dies + tokens * n * e
        return {"operands": ops, "buffers": 0 * ops}
    if scheme == "hecaton-2d":
        ops = (tokens * k * e / rows + tokens * n * e / cols if kind == "column"
               else tokens * k * e / cols + tokens * n * e / rows)
        return {"operands": ops, "buffers": 0 * ops}
    return {"operands": tokens * (k + n) * e / dies, "buffers": 2 * (tokens * k + k * n) * e / dies}


def min_tile_sram(tile: Num, bytes_per_element: Num = 2) -> Num:
    """Smallest SRAM that can run any GEMM: double-buffered input, weight and output tiles of the MAC array.

    Formula: 2 x 3 t^2 e
    Source: double buffering of the three operand tiles of an output-stationary array (this tool's bound).

    Returns:
        bytes [bytes]

    >>> min_tile_sram(128)   # bytes
    196608
    """
    return 6 * tile * tile * bytes_per_element
