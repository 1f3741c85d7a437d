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

Behaviour taken from the code (research note reference/activation_offload.md §1.2-1.4):

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
  (``solve_num_adaptive_keep_layers``, :func:`adaptive_offload_layers`).

Every function broadcasts over numpy arrays (use :mod:`dse.formulas._array`).
"""

from __future__ import annotations

from dse.formulas._array import clip, floor, maximum, minimum, where
from dse.formulas.cost import SECONDS_PER_YEAR
from dse.formulas.transformer import activation_terms, backward_working_bytes  # noqa: F401 (re-exported)

SMALL_TENSOR_ELEMENTS = 8 * 1024 * 1024   # FlashTrain tensor_cache.py: skip_small_tensors threshold
DAYS_PER_YEAR = 365                       # drive ratings: DWPD x 365 x warranty years


def _element_bytes(name: str, bytes_per_element):
    """Bytes per element of one saved tensor of :func:`activation_terms` (masks 1 B, the fp32 LSE 4 B)."""
    if "mask" in name:
        return 1
    if name == "flash_lse":
        return 4
    return bytes_per_element


def offloaded_terms(s, b, h, heads, kv_heads, head_dim, ffn, *, min_elements=SMALL_TENSOR_ELEMENTS, tp=1,
                    sequence_parallel=False, bytes_per_element=2, **options):
    """Bytes of each saved tensor of one layer that SSDTrain writes to the drives (0 when skipped).

    Formula: A_off = sum over tensors i of bytes_i [elements_i >= 8 Mi]; elements_i = bytes_i / element size
    (K-Wu/FlashTrain tensor_cache.py ``skip_small_tensors``: tensors under 8*1024*1024 elements stay on the GPU).

    The tensors are those of :func:`dse.formulas.transformer.activation_terms` (same arguments): unique
    buffers, which is what deduplication writes (a tensor saved by several ops is written once). The
    norm-input terms hold two tensors, the [s, b, h] input and its fp32 statistics (s b rows each), and
    are tested separately: the statistics are always far below the threshold in practice. Dropout masks
    have 1-byte elements, the flash-attention log-sum-exp 4-byte elements. The fused QKV output is one
    buffer (Q, K and V are views of it). Returns a dict name -> bytes, like ``activation_terms``.
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


def offloaded_bytes_per_layer(s, b, h, heads, kv_heads, head_dim, ffn, **options):
    """Bytes of one layer SSDTrain writes per micro-batch per GPU: the sum of :func:`offloaded_terms`.

    Formula: A_off = sum_i bytes_i [elements_i >= 8 Mi] (FlashTrain tensor_cache.py).
    """
    total = 0
    for v in offloaded_terms(s, b, h, heads, kv_heads, head_dim, ffn, **options).values():
        total = total + v
    return total


# ------------------------------------------------------------------ overlap conditions


def layer_forward_time(s, b, h, tp, achieved_flops):
    """Forward GEMM time of one GPT layer at an achieved FLOP rate (the research note's §1.4 model).

    Formula: t_f = 24 b s h^2 (1 + s/6h) / (t F_eff) (Narayanan et al. 2021 App. A; note §1.4).
    """
    return 24 * b * s * h * h * (1 + s / (6 * h)) / (tp * achieved_flops)


def write_bandwidth_required(layer_bytes, layer_forward_time):
    """Write bandwidth one GPU needs for a layer's writes to hide behind that layer's forward.

    Formula: BW_w,req = A_off / t_f (the strict per-layer overlap condition; research note §1.4).
    """
    return layer_bytes / layer_forward_time


def read_bandwidth_required(layer_bytes, layer_backward_time):
    """Read bandwidth one GPU needs for a layer's prefetch to hide behind one layer's backward.

    Formula: BW_r,req = A_off / t_b (prefetch one layer ahead of backward; research note §1.2, §1.4).
    """
    return layer_bytes / layer_backward_time


def prefix_write_bandwidth_required(offloaded_layers, layer_bytes, layer_forward_time):
    """Write bandwidth at which the cumulative writes of the first k layers keep up with their forward.

    Formula: BW = sum_{j<=k} A_j / sum_{j<=k} t_f,j = A_off / t_f for identical layers (research note §1.4,
    relaxed prefix condition without slack); 0 when k = 0.
    """
    k = offloaded_layers
    return where(k > 0, k * layer_bytes / maximum(k * layer_forward_time, 1e-300), 0 * layer_bytes)


def adaptive_bandwidth_required(layer_index, layer_bytes, layer_forward_time, forward_time):
    """Bandwidth SSDTrain's adaptive rule asks for before it also offloads layer ``layer_index`` (0-based).

    Formula: BW_k = (sum_{j<k} A_j + 2 A_k) / (3 T_f - 2 sum_{j<k} t_j) = (k + 2) A_off / (3 T_f - 2 k t_f)
    for identical layers (K-Wu/FlashTrain tensor_cache.py ``solve_num_adaptive_keep_layers``: offload volume
    plus one write and read of layer k, over the time until layer k is needed back; backward = 2 x forward).
    """
    k = layer_index
    return (k + 2) * layer_bytes / (3 * forward_time - 2 * k * layer_forward_time)


def adaptive_offload_layers(bandwidth, layer_bytes, layer_forward_time, forward_time, layers):
    """How many leading layers SSDTrain offloads at a given write bandwidth (the rest stay in GPU memory).

    Formula: the first kept layer is the smallest k with (k + 2) A_off / (3 T_f - 2 k t_f) > BW, i.e.
    k = clip(floor((3 BW T_f - 2 A_off) / (A_off + 2 BW t_f)) + 1, 0, l) (closed form of FlashTrain's
    ``solve_num_adaptive_keep_layers`` walk for l identical layers; ``T_f`` is the micro-batch's whole
    forward time on the stage). The code also tracks attention and MLP sub-scopes, so it may stop inside a
    layer; this closed form counts whole layers (see :func:`adaptive_first_kept_scope` for any scope list).

    >>> adaptive_offload_layers(18.6e9, 4.43e9, 0.15, 0.5, 3)   # 3 layers of 4.43 GB at 18.6 GB/s: keep the last
    2.0
    """
    a = maximum(layer_bytes, 1e-300)
    x = (3 * bandwidth * forward_time - 2 * a) / (a + 2 * bandwidth * layer_forward_time)
    return clip(floor(x) + 1, 0, layers)


def adaptive_first_kept_scope(scope_bytes, scope_times, forward_time, bandwidth):
    """SSDTrain's adaptive-keep walk over an explicit list of scopes (scalars; reference for the closed form).

    Formula: first k with (sum_{j<k} A_j + 2 A_k) / (3 T_f - 2 sum_{j<k} t_j) > BW; all scopes before k are
    offloaded, k and after are kept; returns len(scopes) when none needs keeping
    (K-Wu/FlashTrain tensor_cache.py ``solve_num_adaptive_keep_layers``).
    """
    done_bytes, done_time = 0.0, 0.0
    for k, (a, t) in enumerate(zip(scope_bytes, scope_times)):
        if (done_bytes + 2 * a) / (3 * forward_time - 2 * done_time) > bandwidth:
            return k
        done_bytes += a
        done_time += t
    return len(scope_bytes)


# ------------------------------------------------------------------ timeline of one micro-batch


def write_backlog(offloaded_bytes, write_bandwidth, forward_time):
    """Offloaded bytes still waiting to be written (so still in GPU memory) when the forward pass ends.

    Formula: U = clip(W - BW_w T_f, 0, W), W = k A_off (fluid model: writes start with the forward pass
    and drain at BW_w; a tensor's GPU copy is freed when its write completes, FlashTrain tensor_cache.py).
    """
    return clip(offloaded_bytes - write_bandwidth * forward_time, 0 * offloaded_bytes, offloaded_bytes)


def forwarded_bytes(offloaded_bytes, write_bandwidth, time_to_first_reload):
    """Offloaded bytes whose writes have not finished when backward first needs them: used in place, not read.

    Formula: F = clip(W - BW_w D, 0, W), D = time from the start of the forward pass until backward reaches
    the last offloaded layer. Writes drain in forward order, so the unwritten tail belongs to the layers
    backward reaches first; SSDTrain returns those from GPU memory (forwarding) and skips their pending
    writes (``async_save_tensor``, adaptive keep passive), so they are neither written nor read.
    """
    return clip(offloaded_bytes - write_bandwidth * time_to_first_reload, 0 * offloaded_bytes, offloaded_bytes)


def exposed_io_time(written_bytes, read_bytes, read_layers, layer_read_bytes, write_bandwidth, read_bandwidth,
                    layer_backward_time, window):
    """Time per micro-batch that compute waits for the drives (0 when the I/O hides).

    Formula: max(n_r max(0, A_off/BW_r - t_b),  W/BW_w + R/BW_r - T_mb,  0): each of the n_r reloaded layers
    has one layer's backward to arrive (prefetch depth); and the drives, serving the micro-batch's writes and
    reads one after the other, must finish within the stage's time per micro-batch ``window`` (steady state).
    Writes alone never stall compute in SSDTrain (forwarding keeps late tensors in GPU memory), so the write
    side appears only through the shared drive time.
    """
    per_layer = maximum(layer_read_bytes / read_bandwidth - layer_backward_time, 0.0)
    latency = read_layers * per_layer
    occupancy = written_bytes / write_bandwidth + read_bytes / read_bandwidth - window
    return maximum(maximum(latency, occupancy), 0.0)


def activation_peak_extra(layers, offloaded_layers, layer_bytes, layer_offloaded_bytes, backlog):
    """Bytes above the kept steady state that the micro-batch turning from forward to backward holds.

    Formula: max(U, [k > 0] (A_off - (l - k) A), 0): at the end of forward the write backlog U is still
    resident; during backward of the offloaded layers one reloaded layer (A_off) is resident while the kept
    layers of this micro-batch (l - k) A have already been freed.
    """
    k = offloaded_layers
    reload = where(k > 0, layer_offloaded_bytes - (layers - k) * layer_bytes, 0 * layer_bytes)
    return maximum(maximum(backlog, reload), 0.0)


def gpu_activation_bytes_offload(layers, offloaded_layers, layer_bytes, layer_offloaded_bytes, in_flight, backlog,
                                 other_bytes=0.0):
    """GPU activation peak of a stage with the first k of its l layers offloaded.

    Formula: M = n_fl (l A - k A_off) + extra + M_other, extra = :func:`activation_peak_extra`; n_fl
    micro-batches in flight (1F1B: p on the first stage, Korthikanti et al. 2022 §4.2.3), each keeping its
    l - k last layers and the small tensors of the offloaded ones; M_other = embedding, head, recompute
    working set (never offloaded). k = 0 gives the keep-in-GPU peak n_fl l A + M_other.
    """
    extra = activation_peak_extra(layers, offloaded_layers, layer_bytes, layer_offloaded_bytes, backlog)
    return in_flight * (layers * layer_bytes - offloaded_layers * layer_offloaded_bytes) + extra + other_bytes


def rok_activation_peaks(layers, in_flight, keep_layer_bytes, selective_layer_bytes, full_layer_bytes,
                         offload_layer_kept_bytes, other_bytes=0.0):
    """GPU activation peak of the four recompute-offload-keep (ROK) strategies, per GPU.

    Formula: keep n_fl l A; selective n_fl l A_sel; full n_fl l A_full + A (the layer being recomputed);
    offload n_fl l A_kept + A (one layer reloaded), each + M_other (Korthikanti et al. 2022 Table 2;
    SSDTrain's ROK curve, arXiv 2408.10013 v1 abstract). ``offload_layer_kept_bytes`` is what an offloaded
    layer leaves on the GPU (A - A_off). Returns a dict keep/selective/full/offload.
    """
    base = in_flight * layers
    return {"keep": base * keep_layer_bytes + other_bytes,
            "selective": base * selective_layer_bytes + other_bytes,
            "full": base * full_layer_bytes + keep_layer_bytes + other_bytes,
            "offload": base * offload_layer_kept_bytes + keep_layer_bytes + other_bytes}


# ------------------------------------------------------------------ bandwidth over PCIe


def drives_per_gpu(drives, gpus):
    """Drives that serve one GPU when a node's drives are split into per-GPU RAID0 arrays.

    Formula: floor(N / G) when N >= G (the slowest GPU's array: SSDTrain's 7 drives for 2 GPUs are arrays of
    4 and 3, and a tensor-parallel step waits for the slower rank), else N / G (GPUs share the drives).
    """
    return where(drives >= gpus, floor(drives / maximum(gpus, 1)), drives / maximum(gpus, 1))


def link_bandwidth_left(link_bandwidth, other_bytes, window):
    """Bandwidth of a link left for activations after other traffic that must cross it in the same time.

    Formula: B_left = B max(1 - X / (B T), 1e-6), X = other bytes per window T (time sharing; the floor keeps
    a saturated link finite: the exposed time then dominates the estimate instead of dividing by zero).
    """
    share = maximum(1 - other_bytes / (link_bandwidth * window), 1e-6)
    return link_bandwidth * share


def activation_io_bandwidth(array_bandwidth, gpu_link_bandwidth, path="gds", host_dram_bandwidth=float("inf"),
                            gpus_on_host=1):
    """Bandwidth one GPU gets between its HBM and its drives, in one direction.

    Formula: GPUDirect Storage (``gds``): min(B_array, B_pcie); bounce through host memory (``bounce``):
    min(B_array, B_pcie, B_dram / (2 G)), every byte crossing host DRAM twice (in from one device, out to
    the other) and the G GPUs of a host sharing it. ``host`` target (pinned host memory, no drives):
    min(B_pcie, B_dram / G). SSDTrain uses GDS (kvikio with KVIKIO_COMPAT_MODE=0; research note §1.2).
    """
    if path == "host":
        return minimum(gpu_link_bandwidth, host_dram_bandwidth / gpus_on_host)
    if path == "bounce":
        return minimum(minimum(array_bandwidth, gpu_link_bandwidth), host_dram_bandwidth / (2 * gpus_on_host))
    return minimum(array_bandwidth, gpu_link_bandwidth)


# ------------------------------------------------------------------ capacity and endurance


def ssd_capacity_needed(in_flight, written_per_micro_batch):
    """Drive bytes one GPU needs for the activations of every micro-batch in flight.

    Formula: C = n_fl W_mb, W_mb = k A_off minus forwarded bytes (1F1B keeps p micro-batches in flight on the
    first stage, Narayanan et al. 2021 §2.2; SSDTrain keeps one tensor cache per in-flight micro-batch,
    FlashTrain pipeline_tensor_cache.py).
    """
    return in_flight * written_per_micro_batch


def bytes_written_per_iteration(micro_batches, written_per_micro_batch, write_amplification=1.0):
    """Bytes the drives absorb per iteration (per GPU) including the drive's write amplification.

    Formula: W_iter = WAF m W_mb (research note §1.6). WAF = 1 for large sequential file writes (default).
    """
    return write_amplification * micro_batches * written_per_micro_batch


def rated_endurance(capacity, dwpd, warranty_years):
    """Bytes a drive is rated to absorb over its warranty (TBW).

    Formula: TBW = capacity x DWPD x 365 x warranty years (research note §1.6; e.g. P5800X 1.6 TB, 100 DWPD,
    5 years: 292 PB).

    >>> rated_endurance(1.6e12, 100, 5) / 1e15   # Optane P5800X 1.6 TB, PB
    292.0
    """
    return capacity * dwpd * DAYS_PER_YEAR * warranty_years


def lifetime_years(endurance_bytes, write_rate):
    """Years until a drive reaches its rated endurance when written at a sustained average rate.

    Formula: years = TBW / (rate x 3.156e7 s) (research note §1.6; 292 PB at 3 GB/s: 3.1 years). A rate
    below 1e-30 B/s counts as 1e-30 (no writes: about 1e40 years, i.e. never).

    >>> round(lifetime_years(292e15, 3e9), 2)   # P5800X at a sustained 3 GB/s
    3.08
    """
    return endurance_bytes / (maximum(write_rate, 1e-30) * SECONDS_PER_YEAR)


# ------------------------------------------------------------------ what the freed memory buys


def largest_micro_batch(budget_bytes, fixed_bytes, bytes_per_sample):
    """Largest micro-batch whose activations fit beside everything else on the GPU.

    Formula: b_max = floor((M_gpu - M_fixed) / M_sample), M_sample = activation bytes per sequence (activation
    memory is linear in b: Korthikanti et al. 2022 Table 2); 0 when nothing fits.
    """
    return maximum(floor((budget_bytes - fixed_bytes) / bytes_per_sample), 0.0)


def pipeline_iteration_time(micro_batches, stages, stage_time, virtual_stages=1):
    """Iteration time of a pipeline with m micro-batches over p stages, bubble included.

    Formula: t = (m + (p - 1)/v) t_stage, m = B / (b d) (Narayanan et al. 2021 §2.2); the bubble fraction
    (p - 1)/(v m) shrinks with fewer stages (freed memory lets each hold more layers) or more micro-batches.
    """
    return (micro_batches + (stages - 1) / virtual_stages) * stage_time
