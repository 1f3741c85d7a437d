"""Communication of tensor, pipeline and data parallelism; the pipeline bubble.

Collective costs use the bandwidth-optimal ring algorithms (Patarasuk & Yuan
2009; NCCL): an all-reduce of S bytes over n ranks moves 2 (n-1)/n S bytes
through every rank in 2 (n-1) steps; all-gather and reduce-scatter move half
that. Group bandwidths follow from where a group's ranks sit: tensor-parallel
ranks are adjacent, data-parallel ranks are ``tp`` apart, pipeline neighbours
``tp * dp`` apart (Megatron-LM's default rank order, tp fastest).
"""

from __future__ import annotations

from dse.formulas._array import clip, floor, maximum, minimum, where


def allreduce_time(nbytes, n, bandwidth, latency=0.0):
    """Ring all-reduce time. Formula: 2 (n-1)/n S / B + 2 (n-1) alpha; 0 when n = 1."""
    return where(n > 1, 2 * (n - 1) / maximum(n, 1) * nbytes / bandwidth + 2 * (n - 1) * latency, 0 * nbytes)


def allgather_time(nbytes, n, bandwidth, latency=0.0):
    """Ring all-gather (or reduce-scatter) of a full tensor of S bytes. Formula: (n-1)/n S / B + (n-1) alpha."""
    return where(n > 1, (n - 1) / maximum(n, 1) * nbytes / bandwidth + (n - 1) * latency, 0 * nbytes)


def p2p_time(nbytes, bandwidth, latency=0.0):
    """Point-to-point transfer. Formula: S / B + alpha."""
    return nbytes / bandwidth + latency


def group_bandwidth(n, stride, gpus_per_node, intra_bandwidth, node_bandwidth):
    """Per-rank bandwidth of a ring over ``n`` ranks placed ``stride`` apart.

    Formula: with m = clip(floor(G / stride), 1, n) members per node (G GPUs per node):
    intra if the group fits in a node (n <= m and stride*n <= G), else
    min(intra, B_node * m / G) — a node's NICs are shared by the G/m groups that
    span it, and NCCL spreads each ring over all of them.
    """
    members = clip(floor(gpus_per_node / stride), 1, n)
    inside = (stride * n) <= gpus_per_node
    return where(inside, intra_bandwidth, minimum(intra_bandwidth, node_bandwidth * members / gpus_per_node))


def pipeline_bubble_fraction(pp, micro_batches, virtual_stages=1):
    """Idle fraction added by the pipeline fill and drain.

    Formula: (p - 1) / (v m) (Narayanan et al. 2021, §2.2; interleaved: /v).
    """
    return (pp - 1) / (virtual_stages * micro_batches)


def pipeline_time(micro_batches, pp, stage_max, stage_mean, virtual_stages=1):
    """Time of all micro-batches through a p-stage pipeline (1F1B/GPipe, optionally interleaved).

    Formula: m t_max + (p - 1) t_mean / v; uniform stages give (m + (p-1)/v) t
    (Narayanan et al. 2021, §2.2).
    """
    return micro_batches * stage_max + (pp - 1) * stage_mean / virtual_stages
