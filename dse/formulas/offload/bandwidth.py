"""Bandwidth of a link or a drive array, and the time to move bytes over it.

Part of :mod:`dse.formulas.offload` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num, minimum, where

__all__ = ["AIO_BLOCK_SIZE", "AIO_QUEUE_DEPTH", "AIO_THREAD_COUNT", "RAID_CHUNK", "link_bandwidth", "array_bandwidth",
           "transfer_time", "aio_inflight_bytes", "drive_request_bytes", "queue_limited_bandwidth"]

#: DeepSpeed's ``aio`` defaults (``deepspeed/runtime/swap_tensor/constants.py``): block_size [bytes], queue_depth,
#: thread_count (``intra_op_parallelism`` since 0.15).
AIO_BLOCK_SIZE, AIO_QUEUE_DEPTH, AIO_THREAD_COUNT = 1048576, 8, 1
#: Linux md RAID0 chunk when ``mdadm --create`` is not given ``--chunk`` (mdadm(8): 512 KiB) [bytes].
RAID_CHUNK = 524288

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


def aio_inflight_bytes(block_size: Num = AIO_BLOCK_SIZE, queue_depth: Num = AIO_QUEUE_DEPTH,
                       threads: Num = AIO_THREAD_COUNT) -> Num:
    """Bytes DeepSpeed's swapper keeps in flight on the drives.

    Formula: Q = T x qd x b
    Source: DeepSpeed ``csrc/aio``: each of the T = ``thread_count`` threads takes 1/T of a tensor and keeps up to
    ``queue_depth`` iocbs of ``block_size`` bytes submitted (``do_aio_operation_overlap``), one tensor at a time.

    Args:
        block_size: b, bytes per iocb [bytes]
        queue_depth: qd, iocbs per thread [count]
        threads: T, aio threads [count]
    Returns:
        bytes in flight [bytes]

    >>> aio_inflight_bytes() / 2**20, aio_inflight_bytes(2**20, 16, 4) / 2**20   # default; Smart-Infinity's: MiB
    (8.0, 64.0)
    """
    return threads * queue_depth * block_size


def drive_request_bytes(block_size: Num, drives: Num, chunk: Num = RAID_CHUNK) -> Num:
    """Size of one request a drive of a RAID0 array sees.

    Formula: s = b (one drive); min(b, chunk) (N > 1: md splits a block at chunk boundaries)
    Source: Linux md RAID0 maps each chunk to one member; Smart-Infinity's ``setup/mdadm.sh`` builds md2-md10
    without ``--chunk`` (mdadm default 512 KiB) and runs one drive without md.

    Args:
        block_size: b, bytes per iocb [bytes]
        drives: N, drives in the array [count]
        chunk: RAID0 chunk [bytes]
    Returns:
        bytes per request [bytes]

    >>> drive_request_bytes(2**20, 1) / 2**10, drive_request_bytes(2**20, 4) / 2**10   # KiB
    (1024.0, 512.0)
    """
    return where(drives > 1, minimum(block_size, chunk), block_size)


def queue_limited_bandwidth(inflight: Num, request_bytes: Num, latency: Num, peak: Num,
                            overlap_events: bool = True) -> Num:
    """Bandwidth of one drive that holds only ``inflight`` bytes of requests (Little's law).

    Formula: overlap_events: X = min(B, Q_d / (L + s/B)); without: X = Q_d / (L + Q_d/B)
    Source: Little's law X = (requests in flight) / (response time) and the asymptotic bound X <= 1/D_max
    (Lazowska et al., Quantitative System Performance, 1984, ch. 5); the response time of an unqueued request is
    the drive's access latency L plus its own transfer s/B. With ``overlap_events`` DeepSpeed reaps one completion
    and refills (the queue stays full); without it (``do_aio_operation_sequential``) it submits a batch of qd
    blocks and waits for all of them, so each batch pays L once.

    Args:
        inflight: Q_d, bytes in flight on this drive [bytes]
        request_bytes: s, bytes per request [bytes]
        latency: L, access latency of the drive (datasheet, queue depth 1) [s]
        peak: B, sequential bandwidth of the drive [bytes/s]
        overlap_events: DeepSpeed ``aio.overlap_events`` [bool]
    Returns:
        bandwidth [bytes/s]

    >>> round(queue_limited_bandwidth(2**18, 2**18, 85e-6, 3e9) / 1e9, 2)   # one 256 KiB request in flight: GB/s
    1.52
    >>> queue_limited_bandwidth(64 * 2**20, 2**19, 85e-6, 3e9) / 1e9      # 64 MiB: the drive's rate
    3.0
    """
    if overlap_events:
        return minimum(peak, inflight / (latency + request_bytes / peak))
    return inflight / (latency + inflight / peak)
