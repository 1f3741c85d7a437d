"""Near-storage update (Smart-Infinity, HPCA'24): the optimizer step runs beside each drive.

Source: Jang et al., "Smart-Infinity: Fast Large Language Model Training using
Near-Storage Processing on a Real System", HPCA 2024 (arXiv 2403.06664), Sec. IV-V,
Table I, Figs. 5, 9, 14; the released code (AIS-SNU/Smart-Infinity) for the transfer
handler's buffers and the compression format. Numbers: ``docs/reference/storage_offload.md``.

SmartUpdate splits the flattened parameters equally over N computational storage
drives (CSDs). Each CSD's accelerator reads its share of the optimizer state and
gradients from its own drive over the device-internal link, updates, writes the
state back, and returns the updated parameters. The optimizer state never crosses
the host's shared link: only gradients go down and parameters come up (Table I),
so the shared-link traffic drops from 32P to 8P bytes while the aggregate internal
bandwidth grows with N. SmartComp sends top-k gradients (values + indices) and the
accelerator scatters them into a dense buffer before the update.

Per-drive times are per parameter share P/N; all CSDs work in lock-step rounds of
one sub-group each (a thread sync after every round, released ``stage3.py``), and
each round's parameter upload shares the uplink, so the upload adds to the
per-drive time. All functions broadcast over numpy arrays.

Symbols:
    params: P, parameters [count]
    devices: N, computational storage drives (CSDs) [count]
    state_bytes: optimizer-state bytes per parameter incl. the fp32 master copy (Adam 12) [bytes]
    grad_bytes: g, bytes per gradient element sent to the drives [bytes]
    param_bytes: p, bytes per updated parameter returned to the host [bytes]
    grad_bytes_on_drive: g_d, gradient bytes per parameter stored on the drive (c x g with compression) [bytes]
    compression: c, bytes sent / dense bytes of the gradients (1 = dense) [fraction]
    value_bytes: bytes per kept gradient value [bytes]
    index_bytes: bytes per kept gradient index [bytes]
    dense_bytes: bytes per dense gradient element [bytes]
    overlap: o, share of the write/read overlap the transfer handler reaches (0 naive, 1 ideal) [fraction]
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum, minimum

__all__ = ["TOPK_SORT_BYTES_PER_ELEMENT", "share", "link_bytes", "internal_bytes", "compression_ratio",
           "kept_fraction", "topk_time", "kernel_time", "device_update_time", "update_time", "handler_buffer_bytes",
           "upload_bandwidth"]

# Bytes of GPU memory traffic per gradient element for the released code's top-k:
# ``grad.abs().sort(descending=True)`` on fp16 values with int64 indices. abs: read 2 +
# write 2; index arange: write 8; radix-sort histogram pass: read 2; two 8-bit digit
# passes over (key 2 + value 8) read and written: 2 x 20 = 40. Total 54 B/element.
#: GPU memory traffic per gradient element of the released code's top-k by full sort [bytes].
TOPK_SORT_BYTES_PER_ELEMENT = 54


def share(params: Num, devices: Num) -> Num:
    """Parameters each CSD owns (the flattened parameters split equally).

    Formula: P / N
    Source: Smart-Infinity (arXiv 2403.06664) Sec. IV-D: the flattened parameters are split equally over the CSDs.

    Returns:
        parameters per CSD [count]

    >>> share(4e9, 10)
    400000000.0
    """
    return params / devices


def link_bytes(params: Num, grad_bytes: Num = 4, param_bytes: Num = 4, compression: Num = 1.0) -> dict[str, Num]:
    """Shared-link bytes per iteration of SmartUpdate: {"down": gradients, "up": updated params}.

    Formula: down = c x g x P, up = p x P
    Source: Smart-Infinity (arXiv 2403.06664) Table I: gradients 2M written, updated weights 2M read with the
    paper's fp32 exchange; the released code exchanges fp16 (g = p = 2).

    Returns:
        dict down, up [bytes]

    >>> link_bytes(1e9, compression=0.02)
    {'down': 80000000.0, 'up': 4000000000.0}
    """
    return {"down": compression * grad_bytes * params, "up": param_bytes * params}


def internal_bytes(params: Num, devices: Num, state_bytes: Num = 12, grad_bytes_on_drive: Num = 4) -> dict[str, Num]:
    """Drive <-> accelerator bytes inside one CSD per iteration: {"read", "write"}.

    Formula: read = (state + g_d) P / N, write = state x P / N
    Source: Smart-Infinity (arXiv 2403.06664) Sec. IV-A: "SSD->FPGA (4P + 12P)/N, FPGA->SSD 12P/N" for Adam with
    fp32 gradients.

    Returns:
        dict read, write per CSD [bytes]

    >>> internal_bytes(4e9, 10)
    {'read': 6400000000.0, 'write': 4800000000.0}
    """
    per = params / devices
    return {"read": (state_bytes + grad_bytes_on_drive) * per, "write": state_bytes * per}


def compression_ratio(kept_fraction: Num, value_bytes: Num = 4, index_bytes: Num = 4, dense_bytes: Num = 4) -> Num:
    """Bytes sent / dense bytes for top-k with explicit indices.

    Formula: c = k (value + index) / dense
    Source: Smart-Infinity (arXiv 2403.06664) Sec. VII-A: 2 % is top-1 % with one index per value (c = 2k); the
    released code stores int32 index + fp16 value = 6 B per kept element (research note §1.5).

    Args:
        kept_fraction: k, share of gradient elements kept [fraction]
    Returns:
        compression ratio c [fraction]

    >>> compression_ratio(0.01), compression_ratio(0.01, value_bytes=2, index_bytes=4, dense_bytes=2)
    (0.02, 0.03)
    """
    return kept_fraction * (value_bytes + index_bytes) / dense_bytes


def kept_fraction(ratio: Num, value_bytes: Num = 4, index_bytes: Num = 4, dense_bytes: Num = 4) -> Num:
    """Share of gradient elements kept for a compression ratio (inverse of :func:`compression_ratio`).

    Formula: k = c x dense / (value + index)
    Source: Smart-Infinity (arXiv 2403.06664) Sec. VII-A.

    Args:
        ratio: c, bytes sent / dense bytes [fraction]
    Returns:
        kept share k [fraction]

    >>> kept_fraction(0.02)
    0.01
    """
    return ratio * dense_bytes / (value_bytes + index_bytes)


def topk_time(elements: Num, hbm_bandwidth: Num, efficiency: Num = 1.0,
              bytes_per_element: Num = TOPK_SORT_BYTES_PER_ELEMENT) -> Num:
    """GPU time to pick the top-k gradients by a full sort (released code).

    Formula: t = n x B_sort / (B_hbm x eta_mem), B_sort = 54 B/element
    Source: the released code (AIS-SNU/Smart-Infinity ``optimizer_utils.py``: ``grad.abs().sort()``): abs, index,
    two radix passes over fp16 keys + int64 values (see TOPK_SORT_BYTES_PER_ELEMENT); memory-bound.

    Args:
        elements: n, gradient elements sorted [count]
        hbm_bandwidth: B_hbm, GPU memory bandwidth [bytes/s]
        efficiency: eta_mem, achieved share of it [fraction]
        bytes_per_element: B_sort, bytes moved per element [bytes]
    Returns:
        time [s]

    >>> round(topk_time(4e9, 768e9, 0.8), 3)   # GPT-2 4.0B on an RTX A5000
    0.352
    """
    return elements * bytes_per_element / (hbm_bandwidth * efficiency)


def kernel_time(nbytes: Num, throughput: Num) -> Num:
    """Accelerator kernel time.

    Formula: t = bytes read / throughput
    Source: Smart-Infinity (arXiv 2403.06664) Fig. 14: FPGA Adam 8.2 GB/s, decompress + Adam 2.9 GB/s.

    Args:
        nbytes: bytes the kernel reads [bytes]
        throughput: kernel throughput [bytes/s]
    Returns:
        time [s]

    >>> round(kernel_time(6.4e9, 8.2e9), 3)
    0.78
    """
    return nbytes / throughput


def device_update_time(read_time: Num, kernel_time_: Num, write_time: Num, overlap: Num = 0.0) -> Num:
    """One CSD's update time for its share, between serial and fully pipelined.

    Formula: t = t_serial - o (t_serial - t_ideal), t_serial = t_read + t_kernel + t_write,
    t_ideal = max(t_read + t_kernel, t_write)
    Source: Smart-Infinity (arXiv 2403.06664) Sec. IV-B: naive SmartUpdate loads, computes and writes back each
    sub-group; the transfer handler hides the writes of sub-group i under the loads of i+1. o = 0 for SU; for SU+O
    it is calibrated on the published SU vs SU+O times (benchmarks/calibrate_offload.py).

    Args:
        read_time: t_read, reading the share's states and gradients [s]
        kernel_time_: t_kernel, the accelerator's update [s]
        write_time: t_write, writing the states back [s]
    Returns:
        time [s]

    >>> device_update_time(2.0, 0.8, 3.0), device_update_time(2.0, 0.8, 3.0, overlap=1.0)
    (5.8, 3.0)
    """
    serial = read_time + kernel_time_ + write_time
    ideal = maximum(read_time + kernel_time_, write_time)
    return serial - overlap * (serial - ideal)


def update_time(params: Num, devices: Num, *, state_bytes: Num = 12, grad_bytes_on_drive: Num = 4,
                param_bytes: Num = 4, read_bandwidth: Num = 3.0e9, write_bandwidth: Num = 1.6e9,
                kernel_throughput: Num = 8.2e9, upload_bandwidth: Num = 8e9, overlap: Num = 0.0) -> Num:
    """SmartUpdate update phase: every CSD updates its share, then the parameters go up.

    Formula: T = device_update_time(r, k, w, o) + p x P / B_up, r = (state + g_d) P / (N B_r),
    k = (state + g_d) P / (N B_kernel), w = state x P / (N B_w)
    Source: Smart-Infinity (arXiv 2403.06664) Sec. IV-A/B and Table I; the device part shrinks as 1/N while the
    upload over the shared uplink does not (research note storage_offload.md §1.3, fit of Fig. 9).

    Args:
        read_bandwidth: B_r, one drive's read bandwidth [bytes/s]
        write_bandwidth: B_w, one drive's write bandwidth [bytes/s]
        kernel_throughput: B_kernel, the accelerator's update throughput [bytes/s]
        upload_bandwidth: B_up, bandwidth of the updated-parameter upload (:func:`upload_bandwidth`) [bytes/s]
    Returns:
        time [s]

    >>> import numpy as np
    >>> np.round(update_time(4e9, np.array([1, 2, 6, 10])), 2)   # GPT-2 4.0B, naive SU: seconds
    array([61.14, 31.57, 11.86,  7.91])
    """
    per = params / devices
    read_b = (state_bytes + grad_bytes_on_drive) * per
    t_read = read_b / read_bandwidth
    t_kernel = read_b / kernel_throughput
    t_write = state_bytes * per / write_bandwidth
    return device_update_time(t_read, t_kernel, t_write, overlap) + param_bytes * params / upload_bandwidth


def handler_buffer_bytes(sub_group: Num, state_bytes: Num = 12, grad_bytes: Num = 4, param16_bytes: Num = 0,
                         kept: Num = 0.0, kept_bytes: Num = 6) -> Num:
    """Accelerator DRAM the transfer handler preallocates per CSD (constant in P).

    Formula: (state + g + p16) x largest sub-group + kept x (index + value)
    Source: Smart-Infinity (arXiv 2403.06664) Sec. IV-B; released code ``cpu_adam.cpp``: param, exp_avg, exp_avg_sq
    (4 B each), grad (2 B) and param16 (2 B) = 16 B x sub-group; SmartComp adds int32 index + fp16 value buffers
    (research note §1.4).

    Args:
        sub_group: elements in the largest sub-group [count]
        param16_bytes: p16, bytes of the fp16 parameter copy (released code: 2) [bytes]
        kept: elements kept by top-k compression per sub-group [count]
        kept_bytes: bytes per kept element (index + value) [bytes]
    Returns:
        accelerator DRAM [bytes]

    >>> handler_buffer_bytes(4e7, grad_bytes=2, param16_bytes=2) / 1e6   # released code at sub_group_size 4e7: MB
    640.0
    """
    return (state_bytes + grad_bytes + param16_bytes) * sub_group + kept * kept_bytes


def upload_bandwidth(devices: Num, device_link: Num, shared_link: Num = float("inf"), concurrent: bool = True) -> Num:
    """Bandwidth of the updated-parameter upload from N CSDs to the host.

    Formula: concurrent: min(N x B_device, B_uplink); serial: min(B_device, B_uplink)
    Source: Smart-Infinity (arXiv 2403.06664) Sec. IV-B and Fig. 9 (the SU -> SU+O gap does not shrink with N).

    With the transfer handler (SU+O) every CSD's thread returns its parameters as soon as
    its step ends, so the uploads share the uplink; without it (naive SU) they come back
    one CSD after another at one device link's rate. This is what the published SU vs
    SU+O gap shows: it does not shrink with N (Fig. 9: 0.1-0.3 ns per parameter at both 6
    and 10 drives), so it is not a per-drive (1/N) effect but a shared one.

    Args:
        device_link: B_device, one CSD's link to the switch [bytes/s]
        shared_link: B_uplink, the switch's uplink to the host [bytes/s]
        concurrent: uploads overlap (transfer handler) [bool]
    Returns:
        bandwidth [bytes/s]

    >>> upload_bandwidth(10, 3.2e9, 12.8e9) / 1e9, upload_bandwidth(10, 3.2e9, 12.8e9, concurrent=False) / 1e9
    (12.8, 3.2)
    """
    if concurrent:
        return minimum(devices * device_link, shared_link)
    return minimum(device_link, shared_link)
