"""The timeline of one micro-batch: write backlog, forwarded tensors and the I/O time compute waits for.

Part of :mod:`dse.formulas.activation_offload` (notation and symbols there): a fluid model of
FlashTrain's tensor cache, writes draining at ``BW_w`` from the start of forward, reads one layer
ahead of backward, unfinished writes forwarded from GPU memory.
"""

from __future__ import annotations

from dse.formulas._array import Num, clip, maximum

__all__ = ["write_backlog", "forwarded_bytes", "exposed_io_time"]


def write_backlog(offloaded_bytes: Num, write_bandwidth: Num, forward_time: Num) -> Num:
    """Offloaded bytes still waiting to be written (so still in GPU memory) when the forward pass ends.

    Formula: U = clip(W - BW_w T_f, 0, W), W = k A_off
    Source: fluid model of FlashTrain tensor_cache.py: writes start with the forward pass and drain at BW_w; a
    tensor's GPU copy is freed when its write completes.

    Returns:
        bytes [bytes]

    >>> write_backlog(12e9, 10e9, 1.0) / 1e9, write_backlog(12e9, 20e9, 1.0) / 1e9   # GB
    (2.0, 0.0)
    """
    return clip(offloaded_bytes - write_bandwidth * forward_time, 0 * offloaded_bytes, offloaded_bytes)


def forwarded_bytes(offloaded_bytes: Num, write_bandwidth: Num, time_to_first_reload: Num) -> Num:
    """Offloaded bytes whose writes have not finished when backward first needs them: used in place, not read.

    Formula: F = clip(W - BW_w D, 0, W)
    Source: SSDTrain's tensor forwarding (FlashTrain tensor_cache.py ``async_save_tensor``, adaptive keep passive).

    D = time from the start of the forward pass until backward reaches
    the last offloaded layer. Writes drain in forward order, so the unwritten tail belongs to the layers
    backward reaches first; SSDTrain returns those from GPU memory (forwarding) and skips their pending
    writes (``async_save_tensor``, adaptive keep passive), so they are neither written nor read.

    Forwarding only ever saves reads, but faster writes forward less and so read more: where the read side
    does not grow with the writes (a capped link) the estimate may run the writes at
    :func:`paced_write_bandwidth` instead, whichever exposes less I/O.

    Args:
        time_to_first_reload: D [s]
    Returns:
        bytes [bytes]

    >>> forwarded_bytes(12e9, 10e9, 1.1) / 1e9   # GB
    1.0
    """
    return clip(offloaded_bytes - write_bandwidth * time_to_first_reload, 0 * offloaded_bytes, offloaded_bytes)


def exposed_io_time(written_bytes: Num, read_bytes: Num, read_layers: Num, layer_read_bytes: Num,
                    write_bandwidth: Num, read_bandwidth: Num, layer_backward_time: Num, window: Num) -> Num:
    """Time per micro-batch that compute waits for the drives (0 when the I/O hides).

    Formula: max(n_r max(0, A_off/BW_r - t_b), W/BW_w + R/BW_r - T_mb, 0)
    Source: this tool's model of SSDTrain's prefetch (one layer ahead, research note §1.2) and steady-state drive
    occupancy; forwarding (FlashTrain tensor_cache.py) means writes alone never stall compute.

    Each of the n_r reloaded layers has one layer's backward to arrive (prefetch depth); and the drives,
    serving the micro-batch's writes and reads one after the other, must finish within the stage's time per
    micro-batch ``window`` (steady state); the write side appears only through the shared drive time.

    Args:
        written_bytes: W, bytes written per micro-batch [bytes]
        read_bytes: R, bytes read back per micro-batch [bytes]
        read_layers: n_r, layers read back [count]
        layer_read_bytes: A_off, bytes read per layer [bytes]
        window: T_mb, the stage's time per micro-batch [s]
    Returns:
        time [s]

    >>> exposed_io_time(12e9, 12e9, 3, 4e9, 10e9, 10e9, 0.5, 3.0)   # drives busy 2.4 s of 3 s, reads beat backward
    0.0
    >>> round(exposed_io_time(12e9, 12e9, 3, 4e9, 10e9, 10e9, 0.3, 3.0), 2)   # a 0.4 s read behind a 0.3 s backward
    0.3
    >>> round(exposed_io_time(12e9, 12e9, 3, 4e9, 5e9, 5e9, 0.5, 3.0), 2)   # at 5 GB/s: 4.8 s of drive time
    1.8
    """
    per_layer = maximum(layer_read_bytes / read_bandwidth - layer_backward_time, 0.0)
    latency = read_layers * per_layer
    occupancy = written_bytes / write_bandwidth + read_bytes / read_bandwidth - window
    return maximum(maximum(latency, occupancy), 0.0)
