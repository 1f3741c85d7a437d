"""The compute-to-communication ratio of a layer (FLOP per NoP byte per die), the weak-scaling metric.

Part of :mod:`dse.formulas.chiplet` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num
from dse.formulas.chiplet.gemms import layer_gemm_flops, layer_gemms
from dse.formulas.chiplet.nop import layer_nop

__all__ = ["compute_to_communication", "worked_check_ratio"]

def compute_to_communication(scheme: str, tokens: Num, micro_batch: Num, h: Num, heads: Num, kv_heads: Num,
                             head_dim: Num, ffn: Num, ffn_type: str, rows: Num, cols: Num, bytes_per_element: Num = 2,
                             regather: bool = True) -> Num:
    """FLOP per NoP byte per die for one layer, forward + backward (the weak-scaling metric).

    Formula: (6 T sum k n / N) / (NoP bytes received per die, fwd + bwd)
    Source: research note chiplet.md §2d (GEMM FLOPs only, as in its worked table); Hecaton (arXiv 2407.05784)
    abstract: the ratio "remains nearly constant" as workload and hardware grow together.

    Returns:
        ratio [FLOP/byte]

    >>> import numpy as np
    >>> q = np.array([4, 8, 16])   # Llama-2-70B, T = 4096: 1D falls as 1/N, 2D as 1/sqrt(N)
    >>> np.round(compute_to_communication("megatron-1d", 4096, 1, 8192, 64, 8, 128, 28672, "swiglu", q, q))
    array([2089.,  497.,  123.])
    >>> np.round(compute_to_communication("hecaton-2d", 4096, 1, 8192, 64, 8, 128, 28672, "swiglu", q, q))
    array([2579., 1105.,  516.])
    """
    gemms = layer_gemms(h, heads, kv_heads, head_dim, ffn, ffn_type)
    flops = 3 * layer_gemm_flops(tokens, gemms) / (rows * cols)
    nop = layer_nop(scheme, tokens, micro_batch, h, heads, kv_heads, head_dim, ffn, ffn_type, rows, cols,
                    bytes_per_element, regather)
    ratio: Num = flops / (nop["forward"] + nop["backward"])
    return ratio


def worked_check_ratio(scheme: str, layer_params: Num, h: Num, ffn: Num, group: Num, dies: Num,
                       bytes_per_element: Num = 2) -> Num:
    """The note's worked compute/communication table, with the note's own conventions (§2d).

    Formula: 1D: 6 P / (8 (N-1) h e); 2D: 6 P / N / (3 e [(6 + 2/g) h + 3 f] / sqrt(N))
    Source: research note chiplet.md §2d worked check: 621.7 / 779.5 (Llama2-70B, N = 64) and 306.6 / 792.9
    (Llama3.1-405B, N = 239).

    1D: four ring all-reduces of T h e per layer, no re-gather; 2D: large-N volume, backward = 2 x forward.
    The exact per-collective accounting of :func:`compute_to_communication` differs: the 2D volume
    carries (R-1)/R factors and its backward adds one all-gather per GEMM (re-gather of X), not a
    whole forward, so the note's 2D column is conservative by about 1.3x at these sizes.

    Args:
        layer_params: P, weight elements of one layer [count]
        group: g = heads / kv_heads [count]
    Returns:
        ratio [FLOP/byte]

    >>> round(worked_check_ratio("megatron-1d", 855638016, 8192, 28672, 8, 64), 1)
    621.7
    >>> round(worked_check_ratio("hecaton-2d", 855638016, 8192, 28672, 8, 64), 1)
    779.5
    """
    e = bytes_per_element
    if scheme == "megatron-1d":
        return 6 * layer_params / (8 * (dies - 1) * h * e)
    sum_kn = (6 + 2 / group) * h + 3 * ffn
    return 6 * layer_params / dies / (3 * e * sum_kn / dies ** 0.5)
