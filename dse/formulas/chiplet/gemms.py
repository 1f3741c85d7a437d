"""The weight GEMMs of one transformer layer, their parameters and FLOPs (the chiplet model's view of the kernel table).

Part of :mod:`dse.formulas.chiplet` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas import kernels as _kernels
from dse.formulas._array import Num

__all__ = ["layer_gemms", "gemm_parameters", "layer_gemm_flops"]

Gemm = tuple[str, Num, Num, str]     # (name, k, n, kind) of one weight GEMM: Y[T x n] = X[T x k] W[k x n]


def layer_gemms(h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num,
                ffn_type: str = "swiglu") -> tuple[Gemm, ...]:
    """The weight GEMMs of one transformer layer as (name, k, n, kind), Y[T x n] = X[T x k] W[k x n].

    Formula: QKV h -> (a + 2 kv) d (column); O a d -> h (row); FC1 h -> n_g F (column, n_g = 2 for SwiGLU, else 1);
    FC2 F -> h (row)
    Source: Shoeybi et al. 2019 (Megatron-LM, arXiv 1909.08053) §3 for the column/row split; research note
    chiplet.md §2c(3) step 4 (a column GEMM gathers its input along mesh rows in the 2D scheme, a row GEMM along
    columns).

    The weight GEMMs of the kernel table (:func:`dse.formulas.kernels.layer_kernels` unsplit,
    :func:`dse.formulas.kernels.weight_gemms`): the GPU and the chiplet models share one list.

    Returns:
        tuple of (name, k, n, kind) [tuple]

    >>> for gemm in layer_gemms(8192, 64, 8, 128, 28672):   # Llama-2-70B
    ...     print(gemm)
    ('qkv', 8192, 10240, 'column')
    ('out', 8192, 8192, 'row')
    ('fc1', 8192, 57344, 'column')
    ('fc2', 28672, 8192, 'row')
    """
    return _kernels.weight_gemms(_kernels.layer_kernels(1, 1, h, heads, kv_heads, head_dim, ffn, ffn_type=ffn_type))


def gemm_parameters(gemms: tuple[Gemm, ...]) -> Num:
    """Weight elements of the GEMMs.

    Formula: P_layer = sum k n (= 2h^2 + 2h^2/g + 3hF for Llama)
    Source: research note chiplet.md §2b, §3c (Llama-2-70B: 855,638,016; Llama-3.1-405B: 3,187,671,040).

    Returns:
        weight elements [count]

    >>> gemm_parameters(layer_gemms(8192, 64, 8, 128, 28672)), gemm_parameters(layer_gemms(16384, 128, 8, 128, 53248))
    (855638016, 3187671040)
    """
    total: Num = 0
    for _, k, n, _ in gemms:
        total = total + k * n
    return total


def layer_gemm_flops(tokens: Num, gemms: tuple[Gemm, ...]) -> Num:
    """Forward FLOPs of a layer's weight GEMMs for T tokens.

    Formula: sum 2 T k n (training: x3)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A (2 FLOP per multiply-add).

    Returns:
        FLOPs [FLOP]

    >>> layer_gemm_flops(4096, layer_gemms(8192, 64, 8, 128, 28672)) / 1e12   # TFLOP
    7.009386627072
    """
    total: Num = 0
    for _, k, n, _ in gemms:
        total = total + 2 * tokens * k * n
    return total
