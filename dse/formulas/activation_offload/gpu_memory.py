"""GPU memory with activations offloaded, and what the freed memory buys.

Part of :mod:`dse.formulas.activation_offload` (notation and symbols there): the activation peak of
a stage with its first k layers offloaded, the four recompute-offload-keep (ROK) strategies, the
largest micro-batch that fits and the pipeline time with fewer stages.
"""

from __future__ import annotations

from dse.formulas._array import Num, floor, maximum, where

__all__ = ["activation_peak_extra", "gpu_activation_bytes_offload", "rok_activation_peaks", "largest_micro_batch",
           "pipeline_iteration_time"]


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
