"""Communication of tensor, pipeline and data parallelism; the pipeline bubble.

Collective costs use the bandwidth-optimal ring algorithms (Patarasuk & Yuan
2009; NCCL): an all-reduce of S bytes over n ranks moves 2 (n-1)/n S bytes
through every rank in 2 (n-1) steps; all-gather and reduce-scatter move half
that. Group bandwidths follow from where a group's ranks sit: tensor-parallel
ranks are adjacent, data-parallel ranks are ``tp`` apart, pipeline neighbours
``tp * dp`` apart (Megatron-LM's default rank order, tp fastest).

Symbols:
    nbytes: S, bytes of the full tensor [bytes]
    n: ranks in the group [count]
    bandwidth: B, per-rank bandwidth of the group [bytes/s]
    latency: alpha, per-step latency [s]
    pp: p, pipeline stages [count]
    micro_batches: m, micro-batches per iteration and pipeline [count]
    virtual_stages: v, model chunks per stage (interleaved 1F1B) [count]
"""

from __future__ import annotations

from dse.formulas._array import Num, clip, floor, maximum, minimum, where

__all__ = ["allreduce_time", "allgather_time", "p2p_time", "group_bandwidth", "pipeline_bubble_fraction",
           "pipeline_time"]


def allreduce_time(nbytes: Num, n: Num, bandwidth: Num, latency: Num = 0.0) -> Num:
    """Ring all-reduce time.

    Formula: 2 (n-1)/n S / B + 2 (n-1) alpha; 0 when n = 1
    Source: Patarasuk & Yuan 2009 (J. Parallel Distrib. Comput. 69(2)), bandwidth-optimal ring all-reduce.

    Returns:
        time [s]

    >>> round(allreduce_time(1e9, 8, 150e9) * 1e3, 3)   # 1 GB over 8 GPUs at 150 GB/s: ms
    11.667
    >>> import numpy as np
    >>> np.round(allreduce_time(1e9, np.array([1, 2, 8]), 150e9) * 1e3, 3)
    array([ 0.   ,  6.667, 11.667])
    """
    return where(n > 1, 2 * (n - 1) / maximum(n, 1) * nbytes / bandwidth + 2 * (n - 1) * latency, 0 * nbytes)


def allgather_time(nbytes: Num, n: Num, bandwidth: Num, latency: Num = 0.0) -> Num:
    """Ring all-gather (or reduce-scatter) of a full tensor of S bytes.

    Formula: (n-1)/n S / B + (n-1) alpha; 0 when n = 1
    Source: Patarasuk & Yuan 2009; half of the ring all-reduce (which is a reduce-scatter then an all-gather).

    Returns:
        time [s]

    >>> round(allgather_time(1e9, 8, 150e9) * 1e3, 3)   # ms
    5.833
    """
    return where(n > 1, (n - 1) / maximum(n, 1) * nbytes / bandwidth + (n - 1) * latency, 0 * nbytes)


def p2p_time(nbytes: Num, bandwidth: Num, latency: Num = 0.0) -> Num:
    """Point-to-point transfer.

    Formula: t = S / B + alpha
    Source: the alpha-beta (Hockney) communication model.

    Returns:
        time [s]

    >>> p2p_time(50e6, 25e9, 5e-6) * 1e3   # 50 MB at 25 GB/s: ms
    2.005
    """
    return nbytes / bandwidth + latency


def group_bandwidth(n: Num, stride: Num, gpus_per_node: Num, intra_bandwidth: Num, node_bandwidth: Num) -> Num:
    """Per-rank bandwidth of a ring over ``n`` ranks placed ``stride`` apart.

    Formula: m = clip(floor(G / stride), 1, n); B = B_intra if stride n <= G, else min(B_intra, B_node m / G)
    Source: this tool's placement model: Megatron-LM rank order (tp fastest); a node's NICs are shared by the G/m
    groups that span it, and NCCL spreads each ring over all of them.

    Args:
        stride: distance between consecutive ranks of the group [count]
        gpus_per_node: G, GPUs per node [count]
        intra_bandwidth: B_intra, per-GPU bandwidth inside a node (NVLink) [bytes/s]
        node_bandwidth: B_node, network bandwidth of a whole node [bytes/s]
    Returns:
        per-rank bandwidth [bytes/s]

    >>> group_bandwidth(8, 1, 8, 150e9, 100e9) / 1e9, group_bandwidth(16, 8, 8, 150e9, 100e9) / 1e9   # GB/s
    (150.0, 12.5)
    """
    members = clip(floor(gpus_per_node / stride), 1, n)
    inside = (stride * n) <= gpus_per_node
    return where(inside, intra_bandwidth, minimum(intra_bandwidth, node_bandwidth * members / gpus_per_node))


def pipeline_bubble_fraction(pp: Num, micro_batches: Num, virtual_stages: Num = 1) -> Num:
    """Idle fraction added by the pipeline fill and drain.

    Formula: (p - 1) / (v m)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) §2.2 (interleaved schedule: §2.2.2).

    Returns:
        bubble time / ideal time [fraction]

    >>> pipeline_bubble_fraction(8, 32), pipeline_bubble_fraction(8, 32, virtual_stages=4)
    (0.21875, 0.0546875)
    """
    return (pp - 1) / (virtual_stages * micro_batches)


def pipeline_time(micro_batches: Num, pp: Num, stage_max: Num, stage_mean: Num, virtual_stages: Num = 1) -> Num:
    """Time of all micro-batches through a p-stage pipeline (1F1B/GPipe, optionally interleaved).

    Formula: m t_max + (p - 1) t_mean / v; uniform stages give (m + (p-1)/v) t
    Source: Narayanan et al. 2021 (arXiv 2104.04473) §2.2; the slowest stage sets the steady state.

    Args:
        stage_max: t_max, forward + backward time of one micro-batch on the slowest stage [s]
        stage_mean: t_mean, the same averaged over the stages [s]
    Returns:
        time [s]

    >>> pipeline_time(32, 8, 0.1, 0.1)   # (32 + 7) x 0.1 s
    3.9000000000000004
    """
    return micro_batches * stage_max + (pp - 1) * stage_mean / virtual_stages
