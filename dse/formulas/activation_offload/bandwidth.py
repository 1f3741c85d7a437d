"""Bandwidth one GPU gets to its drives over PCIe: per-GPU drive arrays, shared links, the I/O path.

Part of :mod:`dse.formulas.activation_offload` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num, floor, maximum, minimum, where

__all__ = ["drives_per_gpu", "link_bandwidth_left", "activation_io_bandwidth"]


def drives_per_gpu(drives: Num, gpus: Num) -> Num:
    """Drives that serve one GPU when a node's drives are split into per-GPU RAID0 arrays.

    Formula: floor(N / G) when N >= G, else N / G (GPUs share the drives)
    Source: SSDTrain's set-up (K-Wu/FlashTrain configs.py): 7 drives for 2 GPUs are arrays of 4 and 3, and a
    tensor-parallel step waits for the slower rank (research note §1.5).

    Args:
        drives: N, drives in the node [count]
        gpus: G, GPUs in the node [count]
    Returns:
        drives per GPU [count]

    >>> import numpy as np
    >>> drives_per_gpu(np.array([7, 8, 4]), np.array([2, 8, 8]))
    array([3. , 1. , 0.5])
    """
    return where(drives >= gpus, floor(drives / maximum(gpus, 1)), drives / maximum(gpus, 1))


def link_bandwidth_left(link_bandwidth: Num, other_bytes: Num, window: Num) -> Num:
    """Bandwidth of a link left for activations after other traffic that must cross it in the same time.

    Formula: B_left = B max(1 - X / (B T), 1e-6)
    Source: time sharing of a link (this tool's assumption); the floor keeps a saturated link finite, so the
    exposed time dominates the estimate instead of a division by zero.

    Args:
        link_bandwidth: B, the link's bandwidth [bytes/s]
        other_bytes: X, other bytes that cross it per window [bytes]
        window: T, the window [s]
    Returns:
        bandwidth [bytes/s]

    >>> link_bandwidth_left(25e9, 10e9, 1.0) / 1e9   # GB/s
    15.0
    """
    share = maximum(1 - other_bytes / (link_bandwidth * window), 1e-6)
    return link_bandwidth * share


def activation_io_bandwidth(array_bandwidth: Num, gpu_link_bandwidth: Num, path: str = "gds",
                            host_dram_bandwidth: Num = float("inf"), gpus_on_host: Num = 1) -> Num:
    """Bandwidth one GPU gets between its HBM and its drives, in one direction.

    Formula: gds: min(B_array, B_pcie); bounce: min(B_array, B_pcie, B_dram / (2 G)); host: min(B_pcie, B_dram / G)
    Source: SSDTrain uses GPUDirect Storage (kvikio with KVIKIO_COMPAT_MODE=0; research note §1.2); a bounce
    buffer crosses host DRAM twice (in from one device, out to the other), shared by the host's G GPUs.

    Args:
        array_bandwidth: B_array, the GPU's drive array [bytes/s]
        gpu_link_bandwidth: B_pcie, the GPU's PCIe link [bytes/s]
        path: gds, bounce or host (pinned host memory, no drives) [choice]
        host_dram_bandwidth: B_dram, host memory bandwidth [bytes/s]
        gpus_on_host: G, GPUs sharing the host [count]
    Returns:
        bandwidth [bytes/s]

    >>> activation_io_bandwidth(28e9, 25e9) / 1e9, activation_io_bandwidth(28e9, 25e9, "bounce", 200e9, 8) / 1e9
    (25.0, 12.5)
    """
    if path == "host":
        return minimum(gpu_link_bandwidth, host_dram_bandwidth / gpus_on_host)
    if path == "bounce":
        return minimum(minimum(array_bandwidth, gpu_link_bandwidth), host_dram_bandwidth / (2 * gpus_on_host))
    return minimum(array_bandwidth, gpu_link_bandwidth)
