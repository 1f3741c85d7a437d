"""Activation offloading to SSDs (or host memory) during training: SSDTrain as equations.

SSDTrain (Wu et al., "SSDTrain: An Activation Offloading Framework to SSDs for Faster
LLM Training", arXiv 2408.10013, DAC'25; code K-Wu/FlashTrain, ``flashtrain/tensor_cache``)
writes the tensors autograd saves for backward to NVMe drives while the forward pass
runs (GPUDirect Storage, kvikio) and prefetches them back during backward. This module
models it per GPU and per micro-batch, for a pipeline stage of ``l`` identical layers of
which the first ``k`` are offloaded and the last ``l - k`` stay in GPU memory.

Notation: ``A`` bytes a layer saves for backward (:func:`dse.formulas.transformer.activation_terms`),
``A_off`` the part SSDTrain writes (:func:`offloaded_terms`), ``t_f``/``t_b`` one layer's
forward/backward time, ``T_f`` the forward time of a whole micro-batch on the stage,
``BW_w``/``BW_r`` the write/read bandwidth one GPU gets from its drives. SI units.

Behaviour taken from the code (research note docs/reference/activation_offload.md §1.2-1.4):

- never offloaded: parameters and model inputs, tensors with fewer than 8 Mi elements,
  the LM head, the loss and the non-transformer part of the model (so the head and
  embedding activations stay), and the last module of the forward pass;
- deduplication: each tensor is written once even when several ops save it; the terms of
  :func:`~dse.formulas.transformer.activation_terms` are already unique buffers, so they are
  the bytes written;
- forwarding: a tensor whose write has not finished when backward needs it is used from
  GPU memory and not read back, and its pending write is skipped ("adaptive keep passive");
- prefetch: reads run one to two sub-layers ahead of backward, modelled as one layer;
- adaptive keep: the last layers stay in GPU memory when the drives cannot keep up
  (``solve_num_adaptive_keep_layers``, :func:`adaptive_offload_layers`). SSDTrain's rule sizes the
  offload with one measured (write) bandwidth and assumes reads keep pace with backward; this tool
  offloads no more layers than :func:`hidden_offload_layers`, the largest k whose writes and reads
  (one layer ahead, and together within the micro-batch) hide for every k' <= k, so while the GPU has
  room ``auto`` exposes no I/O and more bandwidth never makes it slower (on a full GPU it offloads at
  least the fewest layers that fit, dse/estimate/activation_offload.py);
- pacing (this tool's assumption): a drive array whose read side is capped (PCIe link, host DRAM)
  while its writes still grow can run its writes at the drives' own write:read ratio times the
  read rate (:func:`paced_write_bandwidth`), as a smaller array would; the estimate takes whichever
  of that and full-rate writes exposes less I/O with every layer of the stage offloaded (one choice per
  stage, so more offloaded layers never hold more GPU memory). Faster writes free (evict) more tensors that a slower array
  would still hold and forward, and with the read side capped those come back no faster, so without
  this a bigger array could be slower at a fixed k.

Every function broadcasts over numpy arrays (use :mod:`dse.formulas._array`).

Symbols:
    s: sequence length [count]
    b: micro-batch size (sequences) [count]
    h: hidden size [count]
    heads: a, attention heads [count]
    kv_heads: kv, key/value heads [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    tp: t, tensor-parallel degree [count]
    sequence_parallel: Megatron sequence parallelism [bool]
    bytes_per_element: e, bytes per activation element [bytes]
    options: keyword arguments of :func:`dse.formulas.transformer.activation_terms` [dict]
    layers: l, layers on the pipeline stage [count]
    offloaded_layers: k, leading layers of the stage whose activations are offloaded [count]
    layer_bytes: A (or A_off where stated), bytes one layer saves (offloads) per micro-batch [bytes]
    layer_offloaded_bytes: A_off, bytes of one layer written to the drives [bytes]
    layer_forward_time: t_f, forward time of one layer [s]
    layer_backward_time: t_b, backward time of one layer [s]
    forward_time: T_f, forward time of the whole micro-batch on the stage [s]
    offloaded_bytes: W = k A_off, bytes offloaded per micro-batch [bytes]
    write_bandwidth: BW_w, write bandwidth one GPU gets from its drives [bytes/s]
    read_bandwidth: BW_r, read bandwidth one GPU gets from its drives [bytes/s]
    bandwidth: BW, write bandwidth one GPU gets from its drives [bytes/s]
    in_flight: n_fl, micro-batches whose activations are alive at once on the stage [count]
    written_per_micro_batch: W_mb, bytes written per micro-batch and GPU [bytes]
    backward_start: B, time from the start of the forward pass until backward reaches the stage's last layer [s]
    window: T_mb, the stage's time per micro-batch [s]
    write_read_ratio: rho, the drives' own write over read bandwidth (1 for host memory) [1]
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, clip, floor, maximum, minimum, where
from dse.formulas.cost import SECONDS_PER_YEAR
from dse.formulas.transformer import activation_terms, backward_working_bytes  # noqa: F401 (public in transformer)

__all__ = ["SMALL_TENSOR_ELEMENTS", "DAYS_PER_YEAR", "offloaded_terms", "offloaded_bytes_per_layer",
           "layer_forward_time", "write_bandwidth_required", "read_bandwidth_required",
           "prefix_write_bandwidth_required", "adaptive_bandwidth_required", "adaptive_offload_layers",
           "adaptive_first_kept_scope", "hidden_offload_layers", "paced_write_bandwidth", "write_backlog",
           "forwarded_bytes", "exposed_io_time", "activation_peak_extra",
           "gpu_activation_bytes_offload", "rok_activation_peaks", "drives_per_gpu", "link_bandwidth_left",
           "activation_io_bandwidth", "ssd_capacity_needed", "bytes_written_per_iteration", "rated_endurance",
           "lifetime_years", "largest_micro_batch", "pipeline_iteration_time"]

#: Tensors with fewer elements stay on the GPU (FlashTrain tensor_cache.py ``skip_small_tensors``).
SMALL_TENSOR_ELEMENTS = 8 * 1024 * 1024
#: Days per year in drive ratings: TBW = capacity x DWPD x 365 x warranty years.
DAYS_PER_YEAR = 365


def _element_bytes(name: str, bytes_per_element: Num) -> Num:
    """Bytes per element of one saved tensor of :func:`activation_terms` (masks 1 B, the fp32 LSE 4 B)."""
    if "mask" in name:
        return 1
    if name == "flash_lse":
        return 4
    return bytes_per_element


def offloaded_terms(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, *,
                    min_elements: Num = SMALL_TENSOR_ELEMENTS, tp: Num = 1, sequence_parallel: bool = False,
                    bytes_per_element: Num = 2, **options: Any) -> dict[str, Num]:
    """Bytes of each saved tensor of one layer that SSDTrain writes to the drives (0 when skipped).

    Formula: A_off = sum over tensors i of bytes_i [elements_i >= 8 Mi]; elements_i = bytes_i / element size
    Source: K-Wu/FlashTrain tensor_cache.py ``skip_small_tensors`` (tensors under 8*1024*1024 elements stay on the
    GPU); SSDTrain (arXiv 2408.10013); research note activation_offload.md §1.2.

    The tensors are those of :func:`dse.formulas.transformer.activation_terms` (same arguments): unique
    buffers, which is what deduplication writes (a tensor saved by several ops is written once). The
    norm-input terms hold two tensors, the [s, b, h] input and its fp32 statistics (s b rows each), and
    are tested separately: the statistics are always far below the threshold in practice. Dropout masks
    have 1-byte elements, the flash-attention log-sum-exp 4-byte elements. The fused QKV output is one
    buffer (Q, K and V are views of it).

    Args:
        min_elements: tensors with fewer elements are not offloaded [count]
    Returns:
        dict tensor name -> bytes written (like ``activation_terms``) [bytes]

    >>> t = offloaded_terms(1024, 16, 12288, 96, 96, 128, 49152, tp=2)   # SSDTrain's h = 12288 GPT layer
    >>> t["flash_lse"], round(sum(t.values()) / 1e9, 3)   # the fp32 LSE is too small to offload; GB
    (0.0, 4.429)
    """
    e = bytes_per_element
    terms = activation_terms(s, b, h, heads, kv_heads, head_dim, ffn, tp=tp, sequence_parallel=sequence_parallel,
                             bytes_per_element=e, **options)
    r = 1 / tp if sequence_parallel else 1
    rows = s * b * r
    out = {}
    for name, nbytes in terms.items():
        if name in ("norm1_input", "norm2_input", "layer_input"):
            main = e * rows * h
            stats = nbytes - main
            out[name] = (where(rows * h >= min_elements, main, 0 * main)
                         + where(rows >= min_elements, stats, 0 * stats))
        else:
            elements = nbytes / _element_bytes(name, e)
            out[name] = where(elements >= min_elements, nbytes, 0 * nbytes)
    return out


def offloaded_bytes_per_layer(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num,
                              **options: Any) -> Num:
    """Bytes of one layer SSDTrain writes per micro-batch per GPU: the sum of :func:`offloaded_terms`.

    Formula: A_off = sum_i bytes_i [elements_i >= 8 Mi]
    Source: K-Wu/FlashTrain tensor_cache.py; research note activation_offload.md §1.2, §1.4 (4.43 GB per layer for
    SSDTrain's h = 12288 configuration).

    Returns:
        bytes per layer, micro-batch and GPU [bytes]

    >>> import numpy as np
    >>> np.round(offloaded_bytes_per_layer(1024, np.array([1, 4, 16]), 12288, 96, 96, 128, 49152, tp=2) / 1e9, 3)
    array([0.264, 1.107, 4.429])
    """
    total: Num = 0
    for v in offloaded_terms(s, b, h, heads, kv_heads, head_dim, ffn, **options).values():
        total = total + v
    return total


# ------------------------------------------------------------------ overlap conditions


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


# ------------------------------------------------------------------ timeline of one micro-batch


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


def activation_peak_extra(layers: Num, offloaded_layers: Num, layer_bytes: Num, layer_offloaded_bytes: Num,
                          backlog: Num) -> Num:
    """Bytes above the kept steady state that the micro-batch turning from forward to backward holds.

    Formula: max(U, [k > 0] (A_off - (l - k) A), 0)
    Source: this tool's timeline of one SSDTrain micro-batch (research note activation_offload.md §1.2).

    At the end of forward the write backlog U is still resident; during backward of the offloaded layers one
    reloaded layer (A_off) is resident while the kept layers of this micro-batch (l - k) A have already been freed.

    Args:
        backlog: U, write backlog at the end of forward (:func:`write_backlog`) [bytes]
    Returns:
        bytes [bytes]

    >>> activation_peak_extra(3, 3, 4.4e9, 4.4e9, 0.0) / 1e9   # all layers offloaded: one reloaded layer, GB
    4.4
    """
    k = offloaded_layers
    reload = where(k > 0, layer_offloaded_bytes - (layers - k) * layer_bytes, 0 * layer_bytes)
    return maximum(maximum(backlog, reload), 0.0)


def gpu_activation_bytes_offload(layers: Num, offloaded_layers: Num, layer_bytes: Num, layer_offloaded_bytes: Num,
                                 in_flight: Num, backlog: Num, other_bytes: Num = 0.0) -> Num:
    """GPU activation peak of a stage with the first k of its l layers offloaded.

    Formula: M = n_fl (l A - k A_off) + extra + M_other, extra = :func:`activation_peak_extra`
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) §4.2.3 (1F1B keeps p micro-batches in flight on the first
    stage); SSDTrain (arXiv 2408.10013) for what offloading removes.

    Each micro-batch in flight keeps its l - k last layers and the small tensors of the offloaded ones;
    M_other = embedding, head, recompute working set (never offloaded). k = 0 gives the keep-in-GPU peak
    n_fl l A + M_other.

    Args:
        backlog: U, write backlog at the end of forward [bytes]
        other_bytes: M_other, activations never offloaded [bytes]
    Returns:
        bytes [bytes]

    >>> import numpy as np
    >>> gpu_activation_bytes_offload(3, np.arange(4), 4.4e9, 4.4e9, 1, 0.0) / 1e9   # k = 0 (keep) ... 3: GB
    array([13.2,  8.8,  4.4,  4.4])
    """
    extra = activation_peak_extra(layers, offloaded_layers, layer_bytes, layer_offloaded_bytes, backlog)
    return in_flight * (layers * layer_bytes - offloaded_layers * layer_offloaded_bytes) + extra + other_bytes


def rok_activation_peaks(layers: Num, in_flight: Num, keep_layer_bytes: Num, selective_layer_bytes: Num,
                         full_layer_bytes: Num, offload_layer_kept_bytes: Num, other_bytes: Num = 0.0
                         ) -> dict[str, Num]:
    """GPU activation peak of the four recompute-offload-keep (ROK) strategies, per GPU.

    Formula: keep n_fl l A; selective n_fl l A_sel; full n_fl l A_full + A; offload n_fl l A_kept + A; each + M_other
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) Table 2; SSDTrain's ROK curve (arXiv 2408.10013 v1 abstract).

    Full recompute adds the layer being recomputed, offload the layer being reloaded.

    Args:
        keep_layer_bytes: A, bytes one layer saves when kept [bytes]
        selective_layer_bytes: A_sel, with selective recompute [bytes]
        full_layer_bytes: A_full, with full recompute (the layer input) [bytes]
        offload_layer_kept_bytes: A_kept = A - A_off, what an offloaded layer leaves on the GPU [bytes]
        other_bytes: M_other, activations outside the layers [bytes]
    Returns:
        dict keep, selective, full, offload [bytes]

    >>> {k: round(v / 1e9, 2) for k, v in rok_activation_peaks(3, 1, 4.4e9, 2.9e9, 0.4e9, 0.0).items()}   # GB
    {'keep': 13.2, 'selective': 8.7, 'full': 5.6, 'offload': 4.4}
    """
    base = in_flight * layers
    return {"keep": base * keep_layer_bytes + other_bytes,
            "selective": base * selective_layer_bytes + other_bytes,
            "full": base * full_layer_bytes + keep_layer_bytes + other_bytes,
            "offload": base * offload_layer_kept_bytes + keep_layer_bytes + other_bytes}


# ------------------------------------------------------------------ bandwidth over PCIe


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


# ------------------------------------------------------------------ capacity and endurance


def ssd_capacity_needed(in_flight: Num, written_per_micro_batch: Num) -> Num:
    """Drive bytes one GPU needs for the activations of every micro-batch in flight.

    Formula: C = n_fl W_mb, W_mb = k A_off minus forwarded bytes
    Source: Narayanan et al. 2021 (arXiv 2104.04473) §2.2 (1F1B keeps p micro-batches in flight on the first
    stage); FlashTrain pipeline_tensor_cache.py keeps one tensor cache per in-flight micro-batch.

    Returns:
        bytes [bytes]

    >>> ssd_capacity_needed(4, 13.3e9) / 1e9   # GB
    53.2
    """
    return in_flight * written_per_micro_batch


def bytes_written_per_iteration(micro_batches: Num, written_per_micro_batch: Num,
                                write_amplification: Num = 1.0) -> Num:
    """Bytes the drives absorb per iteration (per GPU) including the drive's write amplification.

    Formula: W_iter = WAF m W_mb
    Source: research note activation_offload.md §1.6; WAF = 1 for large sequential file writes (default).

    Args:
        micro_batches: m, micro-batches per iteration [count]
        write_amplification: WAF, flash writes / host writes [1]
    Returns:
        bytes [bytes]

    >>> bytes_written_per_iteration(8, 13.3e9) / 1e9   # GB
    106.4
    """
    return write_amplification * micro_batches * written_per_micro_batch


def rated_endurance(capacity: Num, dwpd: Num, warranty_years: Num) -> Num:
    """Bytes a drive is rated to absorb over its warranty (TBW).

    Formula: TBW = capacity x DWPD x 365 x warranty years
    Source: drive-writes-per-day rating (vendor datasheets); research note activation_offload.md §1.6
    (P5800X 1.6 TB, 100 DWPD, 5 years: 292 PB).

    Args:
        capacity: drive capacity [bytes]
        dwpd: rated drive writes per day [1/day]
        warranty_years: warranty period [years]
    Returns:
        bytes [bytes]

    >>> rated_endurance(1.6e12, 100, 5) / 1e15   # Optane P5800X 1.6 TB, PB
    292.0
    """
    return capacity * dwpd * DAYS_PER_YEAR * warranty_years


def lifetime_years(endurance_bytes: Num, write_rate: Num) -> Num:
    """Years until a drive reaches its rated endurance when written at a sustained average rate.

    Formula: years = TBW / (rate x 3.156e7 s)
    Source: research note activation_offload.md §1.6 (292 PB at 3 GB/s: 3.1 years).

    A rate below 1e-30 B/s counts as 1e-30 (no writes: about 1e40 years, i.e. never).

    Args:
        endurance_bytes: TBW [bytes]
        write_rate: sustained average write rate [bytes/s]
    Returns:
        years [years]

    >>> round(lifetime_years(292e15, 3e9), 2)   # P5800X at a sustained 3 GB/s
    3.08
    >>> import numpy as np
    >>> np.round(lifetime_years(292e15, np.array([1e9, 3e9, 5e9])), 2)   # note §1.6: 9.3 / 3.1 / 1.85 years
    array([9.25, 3.08, 1.85])
    """
    return endurance_bytes / (maximum(write_rate, 1e-30) * SECONDS_PER_YEAR)


# ------------------------------------------------------------------ what the freed memory buys


def largest_micro_batch(budget_bytes: Num, fixed_bytes: Num, bytes_per_sample: Num) -> Num:
    """Largest micro-batch whose activations fit beside everything else on the GPU.

    Formula: b_max = floor((M_gpu - M_fixed) / M_sample); 0 when nothing fits
    Source: activation memory is linear in b (Korthikanti et al. 2022, arXiv 2205.05198, Table 2).

    Args:
        budget_bytes: M_gpu, GPU memory [bytes]
        fixed_bytes: M_fixed, memory that does not grow with b (model states, buffers) [bytes]
        bytes_per_sample: M_sample, activation bytes per sequence [bytes]
    Returns:
        micro-batch size [count]

    >>> largest_micro_batch(80e9, 30e9, 3e9)
    16.0
    """
    return maximum(floor((budget_bytes - fixed_bytes) / bytes_per_sample), 0.0)


def pipeline_iteration_time(micro_batches: Num, stages: Num, stage_time: Num, virtual_stages: Num = 1) -> Num:
    """Iteration time of a pipeline with m micro-batches over p stages, bubble included.

    Formula: t = (m + (p - 1)/v) t_stage, m = B / (b d)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) §2.2.

    The bubble fraction (p - 1)/(v m) shrinks with fewer stages (freed memory lets each hold more layers) or
    more micro-batches: SSDTrain's "fewer pipeline bubbles" argument.

    Args:
        micro_batches: m, micro-batches per iteration [count]
        stages: p, pipeline stages [count]
        stage_time: t_stage, forward + backward of one micro-batch on one stage [s]
        virtual_stages: v, model chunks per stage [count]
    Returns:
        time [s]

    >>> pipeline_iteration_time(16, 4, 0.5), pipeline_iteration_time(16, 2, 1.0)   # freed memory halves the stages
    (9.5, 17.0)
    """
    return (micro_batches + (stages - 1) / virtual_stages) * stage_time
