"""How many layers to offload: SSDTrain's adaptive-keep rule, this tool's hiding bound and write pacing.

Part of :mod:`dse.formulas.activation_offload` (notation and symbols there). SSDTrain keeps the last
layers in GPU memory when the drives cannot keep up (:func:`adaptive_offload_layers`, the closed form
of FlashTrain's ``solve_num_adaptive_keep_layers``); the estimate's ``auto`` offloads no more than
:func:`hidden_offload_layers`, and may pace the writes (:func:`paced_write_bandwidth`).
"""

from __future__ import annotations

from dse.formulas._array import Num, clip, floor, maximum, minimum, where

__all__ = ["adaptive_bandwidth_required", "adaptive_offload_layers", "adaptive_first_kept_scope",
           "hidden_offload_layers", "paced_write_bandwidth"]


def adaptive_bandwidth_required(layer_index: Num, layer_bytes: Num, layer_forward_time: Num,
                                forward_time: Num) -> Num:
    """Bandwidth SSDTrain's adaptive rule asks for before it also offloads layer ``layer_index`` (0-based).

    Formula: BW_k = (sum_{j<k} A_j + 2 A_k) / (3 T_f - 2 sum_{j<k} t_j) = (k + 2) A_off / (3 T_f - 2 k t_f)
    Source: K-Wu/FlashTrain tensor_cache.py ``solve_num_adaptive_keep_layers`` (offload volume plus one write and
    read of layer k, over the time until layer k is needed back; backward = 2 x forward); note §1.3.

    Args:
        layer_index: k, the layer considered (0-based) [count]
        layer_bytes: A_off, bytes one layer offloads [bytes]
    Returns:
        bandwidth [bytes/s]

    >>> import numpy as np
    >>> np.round(adaptive_bandwidth_required(np.arange(3), 4.43e9, 0.15, 0.5) / 1e9, 2)   # GB/s
    array([ 5.91, 11.08, 19.69])
    """
    k = layer_index
    return (k + 2) * layer_bytes / (3 * forward_time - 2 * k * layer_forward_time)


def adaptive_offload_layers(bandwidth: Num, layer_bytes: Num, layer_forward_time: Num, forward_time: Num,
                            layers: Num) -> Num:
    """How many leading layers SSDTrain offloads at a given write bandwidth (the rest stay in GPU memory).

    Formula: k = clip(floor((3 BW T_f - 2 A_off) / (A_off + 2 BW t_f)) + 1, 0, l): the first kept layer is the
    smallest k with (k + 2) A_off / (3 T_f - 2 k t_f) > BW
    Source: closed form of K-Wu/FlashTrain tensor_cache.py ``solve_num_adaptive_keep_layers`` for l identical
    layers; research note activation_offload.md §1.3.

    ``T_f`` is the micro-batch's whole forward time on the stage. The code also tracks attention and MLP
    sub-scopes, so it may stop inside a layer; this closed form counts whole layers (see
    :func:`adaptive_first_kept_scope` for any scope list).

    The rule is SSDTrain's by design: one bandwidth, measured on the forward pass's writes
    (``dedup_activation_bytes / forward_IO_time``), prices the offload volume plus one write and read of layer
    k, and the reads of the earlier layers are assumed to keep pace with backward. With reads one layer ahead
    of backward (SSDTrain's prefetch) a layer that reads back slower than its backward stalls it, so the
    estimate's ``auto`` offloads min(this, :func:`hidden_offload_layers`) layers.

    Args:
        layer_bytes: A_off, bytes one layer offloads [bytes]
    Returns:
        layers offloaded [count]

    >>> adaptive_offload_layers(18.6e9, 4.43e9, 0.15, 0.5, 3)   # 3 layers of 4.43 GB at 18.6 GB/s: keep the last
    2.0
    """
    a = maximum(layer_bytes, 1e-300)
    x = (3 * bandwidth * forward_time - 2 * a) / (a + 2 * bandwidth * layer_forward_time)
    return clip(floor(x) + 1, 0, layers)


def adaptive_first_kept_scope(scope_bytes: list[float], scope_times: list[float], forward_time: float,
                              bandwidth: float) -> int:
    """SSDTrain's adaptive-keep walk over an explicit list of scopes (scalars; reference for the closed form).

    Formula: first k with (sum_{j<k} A_j + 2 A_k) / (3 T_f - 2 sum_{j<k} t_j) > BW; scopes before k are offloaded
    Source: K-Wu/FlashTrain tensor_cache.py ``solve_num_adaptive_keep_layers``.

    Returns len(scopes) when none needs keeping. Scalars only (a Python loop, like the original).

    Args:
        scope_bytes: A_j, bytes each scope saves, in forward order [bytes]
        scope_times: t_j, forward time of each scope [s]
    Returns:
        index of the first kept scope [count]

    >>> adaptive_first_kept_scope([4.43e9] * 3, [0.15] * 3, 0.5, 18.6e9)   # same as adaptive_offload_layers
    2
    """
    done_bytes, done_time = 0.0, 0.0
    for k, (a, t) in enumerate(zip(scope_bytes, scope_times)):
        if (done_bytes + 2 * a) / (3 * forward_time - 2 * done_time) > bandwidth:
            return k
        done_bytes += a
        done_time += t
    return len(scope_bytes)


def hidden_offload_layers(write_bandwidth: Num, read_bandwidth: Num, layer_bytes: Num, layer_backward_time: Num,
                          backward_start: Num, window: Num, layers: Num) -> Num:
    """Largest k such that the I/O of the first k' layers hides behind compute for every k' <= k.

    Formula: k = 0 if A_off/BW_r > t_b, else l if A_off min(k_a, l) q <= T_mb, else floor(T_mb / (A_off q));
    q = 1/BW_w + 1/BW_r, k_a = (B + l t_b) / (A_off/BW_w + t_b)
    Source: this tool's hiding conditions for SSDTrain's prefetch (reads one layer ahead of backward, FlashTrain
    tensor_cache.py ``CHUNK_PREFETCH_ONLY_AT_CHUNK_END``; research note activation_offload.md §1.2, §1.4) in the
    timeline of :func:`forwarded_bytes` and :func:`exposed_io_time`.

    The conditions under which :func:`exposed_io_time` is 0 for k offloaded layers: each layer read back
    arrives within one layer's backward (A_off/BW_r <= t_b, per layer and so for every prefix), and the
    micro-batch's writes and reads together fit in its window, R (1/BW_w + 1/BW_r) <= T_mb. The bytes written
    and read, R = min(k A_off, BW_w D_k) with D_k = B + (l - k) t_b (what is not yet written when backward
    needs it is forwarded), grow with k up to k_a, where the writes stop keeping up, and shrink after; the
    bound uses their largest value, so every k' <= k hides. SSDTrain's own rule
    (:func:`adaptive_offload_layers`) sizes the offload by one bandwidth and assumes reads keep pace with
    backward; the estimate's ``auto`` offloads the smaller of the two while the GPU has room (no exposed
    I/O, and more bandwidth, which only raises this bound, never makes it slower), and more only when the
    GPU is full (dse/estimate/activation_offload.py).

    Args:
        layer_bytes: A_off, bytes one layer offloads [bytes]
        layer_backward_time: t_b, backward time of one layer (recompute included) [s]
    Returns:
        layers [count]

    >>> import numpy as np   # 3 layers of 4 GB, t_b = 0.3 s: reads at 10 GB/s miss backward; 2 fit the window
    >>> hidden_offload_layers(18e9, np.array([10e9, 21e9, 21e9]), 4e9, 0.3, 0.6, np.array([1.6, 0.9, 1.6]), 3)
    array([0., 2., 3.])
    """
    a = layer_bytes
    q = 1 / write_bandwidth + 1 / read_bandwidth
    k_a = (backward_start + layers * layer_backward_time) / (a / write_bandwidth + layer_backward_time)
    most = a * minimum(k_a, layers) * q
    k_occ = where(most <= window, layers + 0 * most, floor(window / maximum(a * q, 1e-300)))
    return where(a / read_bandwidth <= layer_backward_time, clip(k_occ, 0, layers), 0 * k_occ)


def paced_write_bandwidth(write_bandwidth: Num, read_bandwidth: Num, write_read_ratio: Num) -> Num:
    """Write rate that keeps the drives' own write:read balance when the array's read side is capped.

    Formula: BW_w,paced = min(BW_w, rho BW_r), rho = drive write bandwidth / drive read bandwidth
    Source: this tool's assumption (not in SSDTrain): an array can always run as a smaller one, e.g. a
    RAID0 of fewer drives (K-Wu/FlashTrain configs.py builds per-GPU arrays of 3 and 4 of 7 drives).

    Writes and reads of a drive array grow together with its drives until a shared cap (the GPU's PCIe
    link, host DRAM on the bounce path, a switch uplink) stops one side; drives read faster than they write,
    so the read side stops first. Beyond that point faster writes free tensors that slower writes would
    still hold and forward (:func:`forwarded_bytes`), and they come back through the capped read side, so
    a bigger array could be slower at a fixed number of offloaded layers. Writing at rho BW_r is what the
    largest array whose reads are not capped does; the estimate takes whichever of that and full-rate
    writes exposes less I/O for the whole stage offloaded. Equal to BW_w when nothing caps the reads.

    Args:
        write_read_ratio: rho, the drives' own write over read bandwidth (1 for host memory) [1]
    Returns:
        bandwidth [bytes/s]

    >>> round(paced_write_bandwidth(38.4e9, 38.4e9, 4.3 / 7) / 1e9, 2)   # DRAM-capped bounce path, 4.3/7 GB/s drives
    23.59
    >>> round(paced_write_bandwidth(17.2e9, 28e9, 4.3 / 7) / 1e9, 2)      # four drives, nothing capped: unchanged
    17.2
    """
    return minimum(write_bandwidth, write_read_ratio * read_bandwidth)
