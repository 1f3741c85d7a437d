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
    s: sequence length, the whole sequence [count]
    b: micro-batch size (sequences) [count]
    heads: a, attention (query) heads on this GPU (a / t) [count]
    head_dim: d, head dimension [count]
    kv_dim: key/value width on this GPU, kv d / t [count]
    cp: context-parallel degree (ranks of the ring) [count]
    causal: causal (decoder) attention [bool]
    backward: count the backward pass instead of the forward [bool]
    bytes_per_element: e, bytes per K/V element [bytes]
    step_bytes: bytes one rank sends per ring step [bytes]
    step_compute: attention compute of one ring step, the time a step's transfer hides behind [s]

Context parallelism (Megatron-LM ``--context-parallel-size``; Transformer Engine's
``AttnFuncWithCPAndKVP2P``): the sequence is cut into 2 cp chunks of s/(2 cp) tokens and rank i holds chunks
i and 2cp-1-i (the load-balanced causal split), so every rank has the same share of the causal score matrix.
Ring attention (Liu et al. 2023, arXiv 2310.01889) passes each rank's K/V around the ring in cp-1 P2P steps,
each overlapped with the attention of the chunk already received.
"""

from __future__ import annotations

from dse.formulas._array import Num, clip, floor, maximum, minimum, where

__all__ = ["allreduce_time", "allgather_time", "alltoall_time", "p2p_time", "group_bandwidth",
           "pipeline_bubble_fraction", "pipeline_time", "context_parallel_kv_bytes", "context_parallel_attention_flops",
           "ring_attention_time"]


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


def alltoall_time(nbytes: Num, n: Num, bandwidth: Num, latency: Num = 0.0) -> Num:
    """All-to-all of S bytes per rank over n ranks (each rank sends S/n to every other rank).

    Formula: (n-1)/n S / B + (n-1) alpha; 0 when n = 1 (the S/n a rank keeps never leaves it)
    Source: pairwise-exchange all-to-all, n-1 steps of S/n bytes each (Thakur, Rabenseifner & Gropp 2005,
    "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), §3.5); NCCL implements
    all-to-all as n-1 ncclSend/ncclRecv pairs of S/n bytes in one group (NCCL docs, "Point-to-point
    communication: all-to-all"); the MoE token dispatch and combine of Megatron-Core's alltoall dispatcher and
    DeepSpeed-MoE (Rajbhandari et al. 2022, arXiv 2201.05596 §5) use it. B is the per-rank bandwidth of the group
    (:func:`group_bandwidth`): a group that spans nodes runs at its NIC share (no hierarchical all-to-all).

    Returns:
        time [s]

    >>> round(alltoall_time(64e6, 8, 150e9) * 1e6, 1)   # 64 MB per GPU over 8 NVLink ranks: us
    373.3
    >>> alltoall_time(64e6, 1, 150e9)
    0.0
    """
    return allgather_time(nbytes, n, bandwidth, latency)   # the same (n-1)/n S and n-1 steps as a ring all-gather


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


def context_parallel_kv_bytes(s: Num, b: Num, kv_dim: Num, cp: Num, bytes_per_element: Num = 2) -> Num:
    """Bytes of the K and V one context-parallel rank holds, and sends at each forward ring step.

    Formula: S_kv = 2 e (s / cp) b kv_dim   (K and V of the rank's s/cp tokens; kv_dim = kv d / t)
    Source: Transformer Engine ``AttnFuncWithCPAndKVP2P.forward``: ``p2p_comm_buffers[0] = cat(k, v)`` is the
    message of each of the cp-1 ring steps; the backward sends K, V and their gradients dK, dV (2 S_kv).

    Returns:
        bytes per ring step [bytes]

    >>> context_parallel_kv_bytes(131072, 1, 1024, 8) / 2**20   # Llama-3-8B, t = 1, bf16, cp 8: MiB
    64.0
    """
    return 2 * bytes_per_element * (s / cp) * b * kv_dim


def context_parallel_attention_flops(s: Num, b: Num, heads: Num, head_dim: Num, cp: Num, causal: bool = True,
                                     backward: bool = False) -> Num:
    """FLOPs a flash-attention kernel executes per context-parallel rank (load-balanced causal split).

    Formula: F_rank = 4 s^2 b a d (x1/2 causal, x2.5 backward) / cp; with 2 cp chunks of c = s/(2 cp) tokens,
    rank i's rows are chunks i and 2cp-1-i: (2cp-1) c^2 + c^2 = 2 cp c^2 unmasked scores, the same on every rank
    (the causal step on its own chunks, then cp-1 steps of half a block each)
    Source: Megatron-LM context parallelism (docs: "context_parallel", load balancing by 2 cp chunks); Transformer
    Engine ``AttnFuncWithCPAndKVP2P``; FlashAttention-2 FLOP convention (Dao 2023, arXiv 2307.08691 §3).

    Returns:
        FLOPs per rank for one layer [FLOP]

    >>> context_parallel_attention_flops(131072, 1, 32, 128, 8) / 1e12   # Llama-3-8B layer, causal forward: TFLOP
    17.592186044416
    """
    f = 4 * s * s * b * heads * head_dim / cp
    if causal:
        f = f / 2
    return f * 2.5 if backward else f


def ring_attention_time(step_bytes: Num, cp: Num, step_compute: Num, bandwidth: Num, latency: Num = 0.0) -> Num:
    """Exposed time of one ring-attention pass: cp-1 P2P steps, each overlapped with one step's attention.

    Formula: t = (cp - 1) max(0, S / B + alpha - t_step); 0 when cp = 1
    Source: Liu et al. 2023, Ring Attention (arXiv 2310.01889) §3 (the transfer of the next K/V block overlaps
    the attention on the current one); Transformer Engine ``AttnFuncWithCPAndKVP2P`` (step i's send/recv runs
    beside step i's attention, on alternating streams). Per step: the forward sends the local K/V (S_kv),
    the backward K/V and dK/dV (2 S_kv).

    Returns:
        exposed time [s]

    >>> round(ring_attention_time(64 * 2**20, 8, 1e-3, 450e9) * 1e3, 3)   # K/V hidden behind 1 ms steps: ms
    0.0
    >>> round(ring_attention_time(64 * 2**20, 8, 1e-4, 450e9) * 1e3, 3)   # 0.1 ms steps: ms exposed
    0.344
    """
    return where(cp > 1, (cp - 1) * maximum(step_bytes / bandwidth + latency - step_compute, 0.0), 0.0)
