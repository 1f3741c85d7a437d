"""Time of the three segments of an offloaded iteration: forward, backward with gradient offload, update.

Part of :mod:`dse.formulas.offload` (notation, symbols and why the segments add there).
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum

__all__ = ["cpu_optimizer_time", "swap_update_time", "forward_phase_time", "backward_phase_time"]

def cpu_optimizer_time(params: Num, state_bytes: Num = 12, throughput: Num = 16e9) -> Num:
    """CPU optimizer step over P parameters.

    Formula: t = P x state / throughput
    Source: DeepSpeed CPU-Adam streams the fp32 state; the maintainers' estimate is ~16 GB/s of state
    (deepspeedai/DeepSpeed#6695).

    Args:
        throughput: optimizer-state bytes the CPU processes per second [bytes/s]
    Returns:
        time [s]

    >>> cpu_optimizer_time(4e9)
    3.0
    """
    return params * state_bytes / throughput


def swap_update_time(read_time: Num, compute_time: Num, write_time: Num, pipelined: bool = False) -> Num:
    """Update phase of ZeRO-Infinity with NVMe-offloaded optimizer state.

    Formula: serial: t_read + t_cpu + t_write; pipelined: max(t_read + t_write, t_cpu)
    Source: DeepSpeed ``offload_optimizer.pipeline_read/pipeline_write`` (default off: serial per sub-group);
    the drives' reads and writes share the same flash and link, the CPU step hides behind them.

    Args:
        read_time: t_read, reading states and gradients from the drives [s]
        compute_time: t_cpu, the CPU optimizer step [s]
        write_time: t_write, writing the states back [s]
        pipelined: DeepSpeed's pipelined swap [bool]
    Returns:
        time [s]

    >>> swap_update_time(8.0, 3.0, 6.0), swap_update_time(8.0, 3.0, 6.0, pipelined=True)
    (17.0, 14.0)
    """
    if pipelined:
        return maximum(read_time + write_time, compute_time)
    return read_time + compute_time + write_time


def forward_phase_time(compute: Num, fetch: Num) -> Num:
    """Forward segment of an offloaded iteration.

    Formula: t = max(t_compute, t_fetch)
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 6 (overlap-centric design: ZeRO-3 prefetches the next layer's
    parameters while the current one computes).

    Args:
        compute: t_compute, forward compute [s]
        fetch: t_fetch, moving the fp16 parameters to the GPU [s]
    Returns:
        time [s]

    >>> forward_phase_time(0.6, 0.9)
    0.9
    """
    return maximum(compute, fetch)


def backward_phase_time(compute: Num, fetch: Num, gradient_transfer: Num, gradient_offload: Num,
                        compression: Num = 0.0) -> Num:
    """Backward + gradient offload segment.

    Formula: t = max(t_compute, t_fetch) + t_grad(GPU->host) + t_grad(host->tier) + t_compress
    Source: DeepSpeed ``swap_out_gradients`` blocks on the aio handle in the backward hooks, so the gradient copies
    add to compute (Smart-Infinity, arXiv 2403.06664, Fig. 9 "BW + grad offload" segment).

    Args:
        compute: t_compute, backward (and recompute) compute [s]
        fetch: t_fetch, moving the fp16 parameters to the GPU [s]
        gradient_transfer: t_grad(GPU->host) [s]
        gradient_offload: t_grad(host->tier) [s]
        compression: t_compress, the GPU's top-k selection [s]
    Returns:
        time [s]

    >>> backward_phase_time(1.2, 0.9, 0.5, 2.0)
    3.7
    """
    return maximum(compute, fetch) + gradient_transfer + gradient_offload + compression
