"""Communication of tensor, pipeline and data parallelism; the pipeline bubble.

Collective costs use the bandwidth-optimal ring algorithms (Patarasuk & Yuan
2009; NCCL): an all-reduce of S bytes over n ranks moves 2 (n-1)/n S bytes
through every rank in 2 (n-1) steps; all-gather and reduce-scatter move half
that. Their latency is NCCL's, per protocol, with the fastest protocol for the
size (:mod:`~dse.formulas.parallelism.nccl`; the default path has none:
bandwidth only), plus any extra alpha per step. Group bandwidths follow from
where a group's ranks sit: tensor-parallel
ranks are adjacent, data-parallel ranks are ``tp`` apart, pipeline neighbours
``tp * dp`` apart (Megatron-LM's default rank order, tp fastest).

The shared symbols are in the package docstring (:mod:`dse.formulas.parallelism`).
"""

from __future__ import annotations

from dse.formulas._array import Num, clip, floor, maximum, minimum, where
from dse.formulas.parallelism.nccl import BANDWIDTH_ONLY, Path, fastest_time, send_time

__all__ = ["allreduce_time", "allgather_time", "alltoall_time", "expert_nodes_per_token", "internode_share",
           "hierarchical_alltoall_time", "p2p_time", "group_bandwidth",
           "pipeline_bubble_fraction", "pipeline_time", "dualpipe_pair_time", "dualpipe_bubble"]


def allreduce_time(nbytes: Num, n: Num, bandwidth: Num, latency: Num = 0.0, path: Path = BANDWIDTH_ONLY) -> Num:
    """Ring all-reduce time.

    Formula: 2 (n-1)/n S / B at NCCL's fastest protocol: min_p [L_p + 2 (n-1)/n S / (f_p B)] + 2 (n-1) alpha, L_p
    over 2 (n-1) steps (:func:`fastest_time`, k = 2); 0 when n = 1
    Source: Patarasuk & Yuan 2009 (J. Parallel Distrib. Comput. 69(2)), bandwidth-optimal ring all-reduce; NCCL
    2.30.7 src/graph/tuning.cc for the latency and the protocol.

    Returns:
        time [s]

    >>> round(allreduce_time(1e9, 8, 150e9) * 1e3, 3)   # 1 GB over 8 GPUs at 150 GB/s: ms
    11.667
    >>> import numpy as np
    >>> np.round(allreduce_time(1e9, np.array([1, 2, 8]), 150e9) * 1e3, 3)
    array([ 0.   ,  6.667, 11.667])
    """
    return _ring(nbytes, n, bandwidth, latency, path, 2)


def _ring(nbytes: Num, n: Num, bandwidth: Num, latency: Num, path: Path, passes: int, p2p: bool = False,
          transfer: Num | None = None) -> Num:
    """k ring passes over n ranks: NCCL's fastest protocol plus k (n-1) alpha; 0 when n = 1."""
    if transfer is None:
        transfer = passes * (n - 1) / maximum(n, 1) * nbytes / bandwidth
    t = fastest_time(transfer, n, path, passes, p2p)
    if not (type(latency) in (int, float) and latency == 0):
        t = t + passes * (n - 1) * latency
    return where(n > 1, t, 0 * nbytes)


def allgather_time(nbytes: Num, n: Num, bandwidth: Num, latency: Num = 0.0, path: Path = BANDWIDTH_ONLY) -> Num:
    """Ring all-gather (or reduce-scatter) of a full tensor of S bytes.

    Formula: min_p [L_p + (n-1)/n S / (f_p B)] + (n-1) alpha, L_p over n-1 steps
    (:func:`fastest_time`, k = 1); 0 when n = 1
    Source: Patarasuk & Yuan 2009; half of the ring all-reduce (which is a reduce-scatter then an all-gather);
    NCCL 2.30.7 src/graph/tuning.cc for the latency and the protocol.

    Returns:
        time [s]

    >>> round(allgather_time(1e9, 8, 150e9) * 1e3, 3)   # ms
    5.833
    """
    return _ring(nbytes, n, bandwidth, latency, path, 1)


def alltoall_time(nbytes: Num, n: Num, bandwidth: Num, latency: Num = 0.0, path: Path = BANDWIDTH_ONLY) -> Num:
    """All-to-all of S bytes per rank over n ranks (each rank sends S/n to every other rank).

    Formula: min_p [L_p + (n-1)/n S / (f_p B)] + (n-1) alpha, L_p over n-1 steps, p LL or Simple (NCCL's p2p
    protocols); 0 when n = 1 (the S/n a rank keeps never leaves it)
    Source: pairwise-exchange all-to-all, n-1 steps of S/n bytes each (Thakur, Rabenseifner & Gropp 2005,
    "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), §3.5); NCCL implements
    all-to-all as n-1 ncclSend/ncclRecv pairs of S/n bytes in one group (NCCL docs, "Point-to-point
    communication: all-to-all"); the MoE token dispatch and combine of Megatron-Core's alltoall dispatcher and
    DeepSpeed-MoE (Rajbhandari et al. 2022, arXiv 2201.05596 §5) use it. B is the per-rank bandwidth of the group
    (:func:`group_bandwidth`): a group that spans nodes runs at its NIC share (no hierarchical all-to-all).
    ASSUMPTION: NCCL's tuning model has no all-to-all; its n-1 sends are priced as the ring all-gather's steps.

    Returns:
        time [s]

    >>> round(alltoall_time(64e6, 8, 150e9) * 1e6, 1)   # 64 MB per GPU over 8 NVLink ranks: us
    373.3
    >>> alltoall_time(64e6, 1, 150e9)
    0.0
    """
    return _ring(nbytes, n, bandwidth, latency, path, 1, True)   # (n-1)/n S and n-1 steps, as a ring all-gather


def _ratio_of_combinations(a: Num, b: Num, k: int) -> Num:
    """C(a, k) / C(b, k) = prod_{i<k} (a - i)/(b - i) for integer-valued a <= b (0 when a < k)."""
    out: Num = 1.0
    for i in range(k):
        out = out * maximum(a - i, 0) / (b - i)
    return out


def _combinations(a: Num, m: int) -> Num:
    """C(a, m) = prod_{i<m} (a - i)/(i + 1) for integer-valued a >= 0 (0 when a < m)."""
    out: Num = 1.0
    for i in range(m):
        out = out * maximum(a - i, 0) / (i + 1)
    return out


def expert_nodes_per_token(experts: int, experts_per_token: int, nodes: Num, groups: int = 0,
                           groups_per_token: int = 0) -> Num:
    """Expected number of nodes a token's top-k routed experts lie on (uniform, independent routing).

    Formula: the E experts lie in order on the N nodes, u = E/N per node. Without group limits the k experts are
    k of E drawn uniformly: P0 = C(E - u, k)/C(E, k) is the chance a node holds none, D = N (1 - P0).
    Group-limited routing (G groups of w = E/G consecutive experts, M groups drawn uniformly, then the k experts
    uniformly among their M w): a node meets a = max(u/w, 1) groups and holds c = min(u, w) experts of each, so
    P0 = sum_{m=0}^{min(a, M)} C(a, m) C(G - a, M - m)/C(G, M) C(M w - m c, k)/C(M w, k) (hypergeometric in
    the m chosen groups it meets) and D = N (1 - P0) <= min(N, M a). Used where groups and nodes nest (G a multiple
    of N or N of G); otherwise the unlimited count.
    Source: DeepSeek-V3 (Liu et al. 2024, arXiv 2412.19437) §2.1.2 and §3.2 (node-limited routing: each token's
    experts on at most M = 4 nodes, M groups chosen by affinity, then top-k within them); uniform routing stands
    for balanced load (its auxiliary-loss-free balancing); counting by hypergeometric sums (this tool's derivation,
    checked by enumeration in tests/test_moe_mechanics.py).

    Returns:
        expected nodes per token [count]

    >>> round(expert_nodes_per_token(256, 8, 8), 2)            # DeepSeek-V3's experts over 8 nodes, no limit
    5.29
    >>> round(expert_nodes_per_token(256, 8, 8, 8, 4), 2)      # ... node-limited to 4 groups of 32 (one a node)
    3.63
    """
    u = experts / nodes
    unlimited = 1 - _ratio_of_combinations(experts - u, experts, experts_per_token)
    if not groups or groups_per_token >= groups:
        return nodes * unlimited
    w = experts / groups
    a, c, chosen = maximum(u / w, 1.0), minimum(u, w), groups_per_token * w
    none: Num = 0.0
    for m in range(groups_per_token + 1):
        pick = _combinations(a, m) * _combinations(groups - a, groups_per_token - m) / _combinations(groups,
                                                                                                    groups_per_token)
        none = none + pick * _ratio_of_combinations(chosen - m * c, chosen, experts_per_token)
    nests = (floor(u / w) * w == u) | (floor(w / u) * u == w)
    return nodes * where(nests, 1 - none, unlimited)


def internode_share(experts: int, experts_per_token: int, nodes: Num, groups: int = 0,
                    groups_per_token: int = 0) -> Num:
    """Share of a GPU's routed-token bytes that leave its node when each token goes once to each other node.

    Formula: x = D (N - 1)/(N k), D = :func:`expert_nodes_per_token`: a token of h e bytes crosses to the
    D (N-1)/N other nodes it has experts on, against the k copies of it in the dispatch message; 0 for N = 1
    Source: DeepEP's normal (NVLink + RDMA forwarding) kernels: a token is sent over RDMA once per destination
    node, to the GPU of the same local index, which forwards it over NVLink (deepseek-ai/DeepEP README, "Normal
    kernels with NVLink and RDMA forwarding"; DeepSeek-V3 arXiv 2412.19437 §3.2.2); the combine returns the same
    bytes the other way (reduced within the node first).

    Returns:
        share of the dispatch message [fraction]

    >>> round(internode_share(256, 8, 8, 8, 4), 3)   # DeepSeek-V3 over 8 nodes: 3.63 * 7/8 of 8 copies
    0.397
    >>> internode_share(8, 2, 1)
    0.0
    """
    return expert_nodes_per_token(experts, experts_per_token, nodes, groups, groups_per_token) * (nodes - 1) / (
        nodes * experts_per_token)


def hierarchical_alltoall_time(nbytes: Num, n: Num, per_node: Num, share: Num, network_bandwidth: Num,
                               intra_bandwidth: Num, latency: Num = 0.0, path: Path = BANDWIDTH_ONLY,
                               intra_share: Num | None = None) -> Num:
    """The MoE dispatch (or combine) all-to-all of S bytes of routed copies per GPU over n ranks, q per node.

    Formula: min_p [L_p + max(x S / B_net, y S / B_intra) / f_p] + (n-1) alpha, y = (q-1)/q unless given, L_p over
    n-1 steps, p LL or Simple (:func:`fastest_time`); 0 when n = 1. The network stage sends the
    x S bytes that leave the node (:func:`internode_share`) at the GPU's own share of the node's NICs B_net (every
    GPU of the node runs its group's all-to-all at once); the NVLink stage moves every copy that does not land on
    the GPU it arrives at, (q-1)/q of S (a copy from another node arrives at the GPU of its sender's local index;
    one on this node starts here): the two stages are pipelined (chunks forwarded as they arrive). In one node
    (q = n, x = 0) it is :func:`alltoall_time`. x and y per dispatcher (NCCL's all-to-all, DeepEP's forwarding):
    :func:`dse.formulas.parallelism.dispatch_shares`.
    Source: DeepEP normal kernels (NVLink and RDMA forwarding, pipelined; deepseek-ai/DeepEP README: on H800 the
    internode dispatch runs at 43-58 GB/s "RDMA bottleneck bandwidth" against a ~50 GB/s CX7 NIC per GPU); the
    two-level (intra-node, then inter-node) all-to-all of DeepSpeed-MoE (Rajbhandari et al. 2022, arXiv
    2201.05596, §5.2 "hierarchical all-to-all") and Tutel (Hwang et al. 2023, arXiv 2206.03382, §3.3 "2DH
    all-to-all"), which run the two stages one after the other instead.

    Returns:
        time [s]

    >>> round(hierarchical_alltoall_time(64e6, 8, 8, 0.0, 50e9, 150e9) * 1e6, 1)   # one node: alltoall_time
    373.3
    >>> round(hierarchical_alltoall_time(64e6, 64, 8, 0.397, 50e9, 150e9) * 1e6, 1)   # 8 nodes, node-limited: us
    508.2
    """
    y = (per_node - 1) / maximum(per_node, 1) if intra_share is None else intra_share
    stages = maximum(share * nbytes / network_bandwidth, y * nbytes / intra_bandwidth)
    return _ring(nbytes, n, 0.0, latency, path, 1, True, stages)


def p2p_time(nbytes: Num, bandwidth: Num, latency: Num = 0.0, path: Path = BANDWIDTH_ONLY) -> Num:
    """Point-to-point transfer between two ranks of a group (across the network when the group spans nodes).

    Formula: t = min_p [L_p + S / (f_p B)] + alpha, p LL or Simple: NCCL's ring over n = 2 ranks, one step
    (:func:`fastest_time`), on min(N, 2) nodes
    Source: the alpha-beta (Hockney) communication model with NCCL 2.30.7's latencies (src/graph/tuning.cc) and
    its p2p protocols (src/enqueue.cc: LL for small sends, else Simple).

    Returns:
        time [s]

    >>> p2p_time(50e6, 25e9, 5e-6) * 1e3   # 50 MB at 25 GB/s and 5 us: ms
    2.005
    >>> from dse.formulas.parallelism.nccl import path_of
    >>> round(p2p_time(50e6, 25e9, path=path_of(2)) * 1e3, 4), round(p2p_time(4096, 25e9, path=path_of(2)) * 1e6, 1)
    (2.0224, 11.9)
    """
    return send_time(nbytes / bandwidth, path) + latency


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


def dualpipe_pair_time(compute: Num, comm: Num, comm_sm_share: Num) -> Num:
    """Time of a DualPipe forward chunk and backward chunk run together, their communication under the compute.

    Formula: t = max(M, C + sigma M): communication kernels hold a share sigma of the SMs while they run (M), so the
    compute C progresses at 1 - sigma of its rate meanwhile; the pair ends when both are done (C (1 - sigma) >= M:
    C + sigma M; else the communication sets it, M)
    Source: DeepSeek-AI 2024 (DeepSeek-V3, arXiv 2412.19437) §3.2.1 (each forward/backward chunk pair overlaps the
    all-to-all dispatch and combine and the PP communication of one with the compute of the other: "both all-to-all
    and PP communication can be fully hidden") and §3.2.2 (20 of the H800's 132 SMs suffice to drive IB and NVLink:
    the communication kernels' share of the SMs).

    Args:
        compute: C, compute of the two chunks (every kernel but the overlapped communication) [s]
        comm: M, their all-to-alls and pipeline sends at full bandwidth [s]
        comm_sm_share: sigma, share of the SMs the communication kernels hold [fraction]
    Returns:
        time of the pair [s]

    >>> round(dualpipe_pair_time(1.0, 0.5, 20 / 132), 4), dualpipe_pair_time(0.3, 0.5, 20 / 132)   # hidden; comm-bound
    (1.0758, 0.5)
    """
    return maximum(comm, compute + comm_sm_share * comm)


def dualpipe_bubble(pp: Num, paired: Num, backward: Num, weight_backward: Num) -> Num:
    """Idle time of the DualPipe schedule (bidirectional: micro-batches fed from both ends of the pipeline).

    Formula: (p/2 - 1) (F&B + B - 3W) against 1F1B's (p - 1)(F + B)
    Source: DeepSeek-AI 2024 (DeepSeek-V3, arXiv 2412.19437) §3.2.1 Table 2 and github.com/deepseek-ai/DualPipe
    README: F&B the time of a forward and a backward chunk overlapped, B a full backward chunk, W its weight-gradient
    part (deferred into the bubbles, as in zero-bubble pipelining).

    Args:
        pp: p, pipeline ranks (even) [count]
        paired: F&B, a forward and a backward chunk overlapped [s]
        backward: B, a backward chunk [s]
        weight_backward: W, its weight-gradient share [s]
    Returns:
        bubble time per iteration [s]

    >>> round(dualpipe_bubble(16, 1.0, 0.6, 0.3), 6)   # 7 x (1.0 + 0.6 - 0.9)
    4.9
    """
    return (pp / 2 - 1) * maximum(paired + backward - 3 * weight_backward, 0.0)
