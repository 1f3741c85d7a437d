"""Communication of tensor, pipeline, data, expert and context parallelism; the pipeline bubble.

Four submodules: :mod:`~dse.formulas.parallelism.collectives` (collectives, group bandwidths, the pipeline
bubble, the MoE all-to-all), :mod:`~dse.formulas.parallelism.dispatch` (the MoE token dispatchers: NCCL's
all-to-all and DeepEP's NVLink + RDMA forwarding), :mod:`~dse.formulas.parallelism.context` (context parallelism:
the K/V ring, Ulysses, the hierarchical a2a+p2p and the all-gather variants) and
:mod:`~dse.formulas.parallelism.nccl` (NCCL's cost model of a collective: per-protocol latency, the fastest
protocol per size). Every name is re-exported here:
``from dse.formulas import parallelism as P; P.ring_attention_time(...)``.

Symbols:
    nbytes: S, bytes of the full tensor [bytes]
    n: ranks in the group [count]
    bandwidth: B, per-rank bandwidth of the group [bytes/s]
    latency: alpha, extra latency per step beyond the path's [s]
    path: the group's hops for NCCL's latency model (nodes spanned, per-protocol latencies; default: none) [Path]
    transfer: T, the collective's bandwidth-only time at the group's full (Simple) bandwidth [s]
    ranks: n, ranks in the group [count]
    passes: k, ring passes: all-reduce 2, all-gather or reduce-scatter 1 [count]
    p2p: the transfers are point-to-point sends (NCCL's LL or Simple protocol, not LL128) [bool]
    transport: NCCL's hardware class of a link: nvlink, pci or net [name]
    extra: latency a link adds to each hop beyond NCCL's for its transport [s]
    intra: transport of the node's GPU link (nvlink or pci) [name]
    inter: transport of the network between nodes (net) [name]
    intra_extra: latency the GPU link adds to each hop beyond NCCL's [s]
    inter_extra: latency the network adds to each hop beyond NCCL's [s]
    pp: p, pipeline stages [count]
    micro_batches: m, micro-batches per iteration and pipeline [count]
    virtual_stages: v, model chunks per stage (interleaved 1F1B) [count]
    s: sequence length, the whole sequence [count]
    b: micro-batch size (sequences) [count]
    heads: a, attention (query) heads on this GPU (a / t) [count]
    head_dim: d, head dimension [count]
    kv_dim: key/value width on this GPU, kv d / t [count]
    cp: context-parallel degree (ranks of the ring, or of the whole cp group) [count]
    causal: causal (decoder) attention [bool]
    backward: count the backward pass instead of the forward [bool]
    bytes_per_element: e, bytes per K/V element [bytes]
    step_bytes: bytes one rank sends per ring step [bytes]
    step_compute: attention compute of one ring step, the time a step's transfer hides behind [s]
    experts: E, routed experts of an MoE layer [count]
    experts_per_token: k, routed experts a token runs (top-k) [count]
    nodes: N, nodes a group spans (an expert-parallel group's, a collective's) [count]
    groups: expert groups of group-limited routing (0: none) [count]
    groups_per_token: M, groups a token's experts may lie in [count]
    per_node: q, ranks of the group in one node [count]
    share: x, share of an all-to-all's bytes that leave the node [fraction]
    network_bandwidth: B_net, a GPU's share of its node's network bandwidth [bytes/s]
    intra_bandwidth: B_intra, per-GPU bandwidth inside a node (NVLink) [bytes/s]
    intra_share: y, share of an all-to-all's bytes its NVLink stage moves (default (q-1)/q) [fraction]
    dispatcher: Megatron-Core's token dispatcher, alltoall or flex (DeepEP) [name]
    ep: ranks of the expert-parallel group [count]
    rdma_bytes: bytes a GPU sends over RDMA to other nodes [bytes]
    nvlink_bytes: bytes through a GPU's NVLink stage [bytes]
    window: w, a sliding-window layer's window in tokens (w < s) [count]
"""

from __future__ import annotations

from dse.formulas.parallelism.collectives import (
    allgather_time,
    allreduce_time,
    alltoall_time,
    dualpipe_bubble,
    dualpipe_pair_time,
    expert_nodes_per_token,
    group_bandwidth,
    hierarchical_alltoall_time,
    internode_share,
    p2p_time,
    pipeline_bubble_fraction,
    pipeline_time,
)
from dse.formulas.parallelism.context import (
    allgather_attention_time,
    allgather_buffer_bytes,
    context_parallel_attention_flops,
    context_parallel_kv_bytes,
    context_parallel_window_pairs,
    hierarchical_attention_time,
    ring_attention_time,
    ulysses_alltoall_bytes,
)
from dse.formulas.parallelism.dispatch import (
    DISPATCHERS,
    FP8_DISPATCH_BYTES,
    deepep_bytes,
    deepep_time,
    dispatch_shares,
)
from dse.formulas.parallelism.nccl import (
    BANDWIDTH_ONLY,
    TRANSPORTS,
    Hops,
    Path,
    fastest_time,
    hops,
    path_of,
    send_time,
)

__all__ = ["allreduce_time", "allgather_time", "alltoall_time", "expert_nodes_per_token", "internode_share",
           "hierarchical_alltoall_time", "dispatch_shares", "deepep_bytes", "deepep_time", "DISPATCHERS",
           "FP8_DISPATCH_BYTES", "p2p_time", "group_bandwidth",
           "pipeline_bubble_fraction", "pipeline_time", "dualpipe_pair_time", "dualpipe_bubble",
           "context_parallel_kv_bytes", "context_parallel_attention_flops",
           "ring_attention_time", "ulysses_alltoall_bytes", "hierarchical_attention_time", "allgather_attention_time",
           "allgather_buffer_bytes", "context_parallel_window_pairs",
           "fastest_time", "send_time", "hops", "path_of", "Path", "Hops", "BANDWIDTH_ONLY", "TRANSPORTS"]
