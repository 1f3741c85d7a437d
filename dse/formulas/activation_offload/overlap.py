"""Overlap conditions: the write and read bandwidth one GPU needs for a layer's I/O to hide behind compute.

Part of :mod:`dse.formulas.activation_offload` (notation and symbols there): the strict per-layer
conditions (writes behind the layer's forward, prefetched reads behind one layer's backward) and
the relaxed prefix condition of the research note (activation_offload.md §1.4).
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum, where

__all__ = ["layer_forward_time", "write_bandwidth_required", "read_bandwidth_required",
           "prefix_write_bandwidth_required"]


def layer_forward_time(s: Num, b: Num, h: Num, tp: Num, achieved_flops: Num) -> Num:
    """Forward GEMM time of one GPT layer at an achieved FLOP rate (the research note's §1.4 model).

    Formula: t_f = 24 b s h^2 (1 + s/6h) / (t F_eff)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A; research note activation_offload.md §1.4.

    Args:
        achieved_flops: F_eff, FLOP rate one GPU achieves [FLOP/s]
    Returns:
        time [s]

    >>> round(layer_forward_time(1024, 16, 12288, 2, 100e12) * 1e3, 1)   # ms
    301.0
    """
    return 24 * b * s * h * h * (1 + s / (6 * h)) / (tp * achieved_flops)


def write_bandwidth_required(layer_bytes: Num, layer_forward_time: Num) -> Num:
    """Write bandwidth one GPU needs for a layer's writes to hide behind that layer's forward.

    Formula: BW_w,req = A_off / t_f
    Source: the strict per-layer overlap condition, research note activation_offload.md §1.4 (14.7 GB/s for
    SSDTrain's h = 12288 layer at 100 TFLOP/s).

    Args:
        layer_bytes: A_off, bytes of one layer written to the drives [bytes]
    Returns:
        bandwidth [bytes/s]

    >>> round(write_bandwidth_required(4.429e9, 0.301) / 1e9, 1)   # GB/s
    14.7
    """
    return layer_bytes / layer_forward_time


def read_bandwidth_required(layer_bytes: Num, layer_backward_time: Num) -> Num:
    """Read bandwidth one GPU needs for a layer's prefetch to hide behind one layer's backward.

    Formula: BW_r,req = A_off / t_b
    Source: prefetch one layer ahead of backward, research note activation_offload.md §1.2, §1.4.

    Args:
        layer_bytes: A_off, bytes of one layer read back [bytes]
    Returns:
        bandwidth [bytes/s]

    >>> round(read_bandwidth_required(4.429e9, 0.602) / 1e9, 2)   # backward = 2 x forward: GB/s
    7.36
    """
    return layer_bytes / layer_backward_time


def prefix_write_bandwidth_required(offloaded_layers: Num, layer_bytes: Num, layer_forward_time: Num) -> Num:
    """Write bandwidth at which the cumulative writes of the first k layers keep up with their forward.

    Formula: BW = sum_{j<=k} A_j / sum_{j<=k} t_f,j = A_off / t_f for identical layers; 0 when k = 0
    Source: research note activation_offload.md §1.4 (relaxed prefix condition, without slack).

    Returns:
        bandwidth [bytes/s]

    >>> import numpy as np
    >>> prefix_write_bandwidth_required(np.array([0, 1, 3]), 4e9, 0.25) / 1e9   # GB/s
    array([ 0., 16., 16.])
    """
    k = offloaded_layers
    return where(k > 0, k * layer_bytes / maximum(k * layer_forward_time, 1e-300), 0 * layer_bytes)
