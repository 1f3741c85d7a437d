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

__all__ = ["allreduce_time", "allgather_time", "nccl_ring_time", "p2p_time", "group_bandwidth",
           "pipeline_bubble_fraction", "pipeline_time"]

#: NCCL's own cost model of a ring inside a node over NVLink, per protocol (LL, LL128, Simple): the base latency of
#: one collective [s], the latency of each ring step [s] and the share of the bus bandwidth the protocol carries
#: (LL: 8-byte stores of 4 data + 4 flag bytes; LL128: 120 of every 128 bytes; Simple: all). NVIDIA/nccl
#: src/graph/tuning.cc (commit 5067397, 2026-06): baseLatencies (Ring), hwLatencies[NVLINK] (Ring) and the
#: "model refinements" busBw x .5 (LL) and x .92 (LL128).
NCCL_RING_NVLINK = ((6.6e-6, 0.6e-6, 0.5), (14.0e-6, 1.9e-6, 0.92), (8.4e-6, 3.4e-6, 1.0))


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


def nccl_ring_time(nbytes: Num, n: Num, bandwidth: Num, passes: Num = 2) -> Num:
    """A ring collective inside a node as NCCL prices it, on the protocol it picks (the fastest by its model).

    Formula: t = min over protocols p of L_p + P (n-1) l_p + P (n-1)/n S / (f_p B); 0 when n = 1
    Source: NVIDIA/nccl src/graph/tuning.cc (ncclTopoTuneModel: a collective's time is its latency plus bytes over
    its bus bandwidth, per algorithm and protocol; the enqueue picks the minimum), constants in
    :data:`NCCL_RING_NVLINK`; P = 2 passes for an all-reduce (2 (n-1) steps), 1 for an all-gather or
    reduce-scatter.

    The ring algorithm only (NCCL's tree and NVLink SHARP are not modelled); B is the per-rank bus bandwidth
    NCCL reaches with the Simple protocol on large messages (the link's bandwidth x efficiency). NCCL's caps of
    the LL and LL128 bandwidths per channel are not applied (they bind above ~175 GB/s per rank for LL).

    Args:
        passes: P, ring passes: 2 all-reduce, 1 all-gather or reduce-scatter [count]
    Returns:
        time [s]

    >>> round(nccl_ring_time(8, 8, 150e9) * 1e6, 1)       # 8 bytes on 8 GPUs: LL, 6.6 + 14 x 0.6 us
    15.0
    >>> round(nccl_ring_time(4 * 2**20, 8, 150e9) * 1e6, 1)   # 4 MiB: LL128, 40.6 us + 1.75 x 4 MiB at 138 GB/s
    93.8
    >>> round(nccl_ring_time(1e9, 8, 150e9) * 1e3, 3)     # 1 GB: Simple at the full bandwidth (+ 56 us)
    11.723
    """
    best: Num = float("inf")
    steps = passes * (n - 1)
    for base, step, share in NCCL_RING_NVLINK:
        best = minimum(best, base + steps * step + steps / maximum(n, 1) * nbytes / (share * bandwidth))
    return where(n > 1, best, 0 * nbytes)


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
