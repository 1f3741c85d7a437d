"""Near-storage update (Smart-Infinity, HPCA'24): the optimizer step runs beside each drive.

Source: Jang et al., "Smart-Infinity: Fast Large Language Model Training using
Near-Storage Processing on a Real System", HPCA 2024 (arXiv 2403.06664), Sec. IV-V,
Table I, Figs. 5, 9, 14; the released code (AIS-SNU/Smart-Infinity) for the transfer
handler's buffers and the compression format. Numbers: ``reference/storage_offload.md``.

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
"""

from __future__ import annotations

from dse.formulas._array import maximum, minimum

# Bytes of GPU memory traffic per gradient element for the released code's top-k:
# ``grad.abs().sort(descending=True)`` on fp16 values with int64 indices. abs: read 2 +
# write 2; index arange: write 8; radix-sort histogram pass: read 2; two 8-bit digit
# passes over (key 2 + value 8) read and written: 2 x 20 = 40. Total 54 B/element.
TOPK_SORT_BYTES_PER_ELEMENT = 54


def share(params, devices):
    """Parameters each CSD owns (the flattened parameters split equally). Formula: P / N."""
    return params / devices


def link_bytes(params, grad_bytes=4, param_bytes=4, compression=1.0):
    """Shared-link bytes per iteration of SmartUpdate: {"down": gradients, "up": updated params}.

    Formula: down = c x g x P, up = p x P (Table I: gradients 2M write, updated weights 2M
    read with fp32 exchange; the released code exchanges fp16: g = p = 2).
    """
    return {"down": compression * grad_bytes * params, "up": param_bytes * params}


def internal_bytes(params, devices, state_bytes=12, grad_bytes_on_drive=4):
    """Drive <-> accelerator bytes inside one CSD per iteration: {"read", "write"}.

    Formula: read = (state + g_d) P / N, write = state x P / N (Smart-Infinity Sec. IV-A:
    "SSD->FPGA (4P + 12P)/N, FPGA->SSD 12P/N" for Adam with fp32 gradients; g_d = c x g
    with compression).
    """
    per = params / devices
    return {"read": (state_bytes + grad_bytes_on_drive) * per, "write": state_bytes * per}


def compression_ratio(kept_fraction, value_bytes=4, index_bytes=4, dense_bytes=4):
    """Bytes sent / dense bytes for top-k with explicit indices.

    Formula: c = k (value + index) / dense. The paper's 2 % is top-1 % with one index per
    value (c = 2k, Sec. VII-A); the released code stores int32 index + fp16 value = 6 B per
    kept element, c = 3k against fp16 and 1.5k against fp32 gradients (note section 1.5).

    >>> compression_ratio(0.01), compression_ratio(0.01, value_bytes=2, index_bytes=4, dense_bytes=2)
    (0.02, 0.03)
    """
    return kept_fraction * (value_bytes + index_bytes) / dense_bytes


def kept_fraction(ratio, value_bytes=4, index_bytes=4, dense_bytes=4):
    """Share of gradient elements kept for a compression ratio. Formula: k = c x dense / (value + index)."""
    return ratio * dense_bytes / (value_bytes + index_bytes)


def topk_time(elements, hbm_bandwidth, efficiency=1.0, bytes_per_element=TOPK_SORT_BYTES_PER_ELEMENT):
    """GPU time to pick the top-k gradients by a full sort (released code).

    Formula: n x B_sort / (B_hbm x eta_mem), B_sort = 54 B/element (abs, index, two radix
    passes over fp16 keys + int64 values; see TOPK_SORT_BYTES_PER_ELEMENT). Memory-bound.
    """
    return elements * bytes_per_element / (hbm_bandwidth * efficiency)


def kernel_time(nbytes, throughput):
    """Accelerator kernel time. Formula: bytes read / throughput (Fig. 14: Adam 8.2 GB/s, decompress+Adam 2.9 GB/s)."""
    return nbytes / throughput


def device_update_time(read_time, kernel_time_, write_time, overlap=0.0):
    """One CSD's update time for its share, between serial and fully pipelined.

    Formula: t = t_serial - o (t_serial - t_ideal), t_serial = t_read + t_kernel + t_write
    (naive SmartUpdate: each sub-group loads, computes, writes back), t_ideal =
    max(t_read + t_kernel, t_write) (the writes of sub-group i hide under the loads of
    i+1, Sec. IV-B); o is the share of that overlap the transfer handler reaches on the
    device (0 for SU; calibrated from the published SU vs SU+O times for SU+O).
    """
    serial = read_time + kernel_time_ + write_time
    ideal = maximum(read_time + kernel_time_, write_time)
    return serial - overlap * (serial - ideal)


def update_time(params, devices, *, state_bytes=12, grad_bytes_on_drive=4, param_bytes=4,
                read_bandwidth=3.0e9, write_bandwidth=1.6e9, kernel_throughput=8.2e9,
                upload_bandwidth=8e9, overlap=0.0):
    """SmartUpdate update phase: every CSD updates its share, then the parameters go up.

    Formula: T = device_update_time(r, k, w, o) + p x P / B_up with r = (state + g_d) P /
    (N B_r), k = (state + g_d) P / (N B_kernel), w = state x P / (N B_w) (inside each CSD,
    so this part shrinks as 1/N) and B_up = the shared uplink (does not grow with N).
    """
    per = params / devices
    read_b = (state_bytes + grad_bytes_on_drive) * per
    t_read = read_b / read_bandwidth
    t_kernel = read_b / kernel_throughput
    t_write = state_bytes * per / write_bandwidth
    return device_update_time(t_read, t_kernel, t_write, overlap) + param_bytes * params / upload_bandwidth


def handler_buffer_bytes(sub_group, state_bytes=12, grad_bytes=4, param16_bytes=0, kept=0.0, kept_bytes=6):
    """Accelerator DRAM the transfer handler preallocates per CSD (constant in P).

    Formula: (state + g + p16) x largest sub-group + kept x (index + value). Released code:
    param, exp_avg, exp_avg_sq (4 B each), grad (2 B) and param16 (2 B) = 16 B x
    sub-group (640 MB of 4 GB at sub_group_size 4e7); the paper's fp32 exchange: 12 + 4 = 16 B.
    SmartComp adds int32 index + fp16 value buffers for the kept elements (Sec. IV-B, note 1.4).
    """
    return (state_bytes + grad_bytes + param16_bytes) * sub_group + kept * kept_bytes


def upload_bandwidth(devices, device_link, shared_link=float("inf"), concurrent: bool = True):
    """Bandwidth of the updated-parameter upload from N CSDs to the host.

    Formula: concurrent: min(N x B_device, B_uplink); serial: min(B_device, B_uplink).
    With the transfer handler (SU+O) every CSD's thread returns its parameters as soon as
    its step ends, so the uploads share the uplink; without it (naive SU) they come back
    one CSD after another at one device link's rate. This is what the published SU vs
    SU+O gap shows: it does not shrink with N (Fig. 9: 0.1-0.3 ns per parameter at both 6
    and 10 drives), so it is not a per-drive (1/N) effect but a shared one.
    """
    if concurrent:
        return minimum(devices * device_link, shared_link)
    return minimum(device_link, shared_link)
