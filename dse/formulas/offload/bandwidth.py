"""Bandwidth of a link or a drive array, and the time to move bytes over it.

Part of :mod:`dse.formulas.offload` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num, minimum

__all__ = ["link_bandwidth", "array_bandwidth", "transfer_time"]

def link_bandwidth(nominal: Num, efficiency: Num = 1.0) -> Num:
    """Achievable bandwidth of a link.

    Formula: B = B_nominal x efficiency
    Source: definition; link efficiencies are in the hardware spec files, each with its measurement.

    Args:
        nominal: B_nominal, datasheet bandwidth [bytes/s]
        efficiency: achieved share [fraction]
    Returns:
        bandwidth [bytes/s]

    >>> link_bandwidth(16e9, 0.8) / 1e9   # PCIe 3.0 x16 at 80 %: GB/s
    12.8
    """
    return nominal * efficiency


def array_bandwidth(drives: Num, per_drive: Num, shared_link: Num = float("inf")) -> Num:
    """Bandwidth of N drives striped (RAID0) behind one shared link (PCIe switch uplink).

    Formula: min(N x B_drive, B_link)
    Source: Smart-Infinity (arXiv 2403.06664) Sec. III, Fig. 3b: RAID0 stops scaling after ~4 drives.

    Args:
        drives: N, drives in the array [count]
        per_drive: B_drive, bandwidth of one drive [bytes/s]
        shared_link: B_link, the uplink all drives share [bytes/s]
    Returns:
        bandwidth [bytes/s]

    >>> import numpy as np
    >>> array_bandwidth(np.array([1, 2, 4, 8]), 3e9, 8e9) / 1e9   # GB/s
    array([3., 6., 8., 8.])
    """
    return minimum(drives * per_drive, shared_link)


def transfer_time(nbytes: Num, bandwidth: Num) -> Num:
    """Time to move bytes at a bandwidth.

    Formula: t = S / B
    Source: definition.

    Args:
        nbytes: S, bytes [bytes]
    Returns:
        time [s]

    >>> transfer_time(16e9, 8e9)
    2.0
    """
    return nbytes / bandwidth
