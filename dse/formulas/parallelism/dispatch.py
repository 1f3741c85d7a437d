"""The MoE token dispatchers' bytes on NVLink and on the network: NCCL's all-to-all and DeepEP's forwarding kernels.

Megatron-Core's ``--moe-token-dispatcher-type alltoall`` sends a GPU's T k routed copies (one per routed expert of
each of its T tokens) by NCCL's all-to-all; ``flex`` with DeepEP (``--moe-enable-deepep`` or
``--moe-flex-dispatcher-backend deepep``; NVIDIA's ``hybridep`` backend is the same NVLink + RDMA design) sends each
token once per destination node over RDMA, to the GPU of its own local index, which forwards it over NVLink to the
GPUs of that node whose experts it routes to, once per GPU (deepseek-ai/DeepEP ``docs/legacy.md``, "Normal kernels
with NVLink and RDMA forwarding"; DeepSeek-V3, arXiv 2412.19437 §3.2.2). The shares below are of the dispatch
message S = e T k h of :func:`dse.formulas.kernels.moe_mlp_kernels` (k copies per token), so that the same message
prices either dispatcher in :func:`dse.formulas.parallelism.hierarchical_alltoall_time`. The shared symbols are
in the package docstring (:mod:`dse.formulas.parallelism`).
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum, where
from dse.formulas.parallelism.collectives import expert_nodes_per_token, internode_share

__all__ = ["DISPATCHERS", "FP8_DISPATCH_BYTES", "dispatch_shares", "deepep_bytes", "deepep_time"]

#: Megatron-Core's token dispatchers dse prices with expert parallelism (``plan.moe_dispatcher``)
DISPATCHERS = ("alltoall", "flex")
#: Bytes per element of DeepEP's FP8 dispatch: e4m3 plus one fp32 scale per 128 elements (DeepEP
#: ``per_token_cast_to_fp8``; its tests count ``fp8_factor = (1 + 4 / 128) / 2`` of the bf16 bytes)
FP8_DISPATCH_BYTES = 1 + 4 / 128


def dispatch_shares(dispatcher: str | None, experts: int, experts_per_token: int, ep: Num, per_node: Num,
                    groups: int = 0, groups_per_token: int = 0) -> tuple[Num, Num, Num]:
    """Shares of the dispatch message S = e T k h on the network and on NVLink, per dispatcher.

    Formula: N = ep/q nodes. alltoall (NCCL): x = (N-1)/N, y = z = (q-1)/q. flex (DeepEP): x = D (N-1)/(N k)
    (:func:`internode_share`), y = R/k, z = R (q-1)/(q k), D = :func:`expert_nodes_per_token` over the N nodes,
    R = the same over the ep ranks (distinct GPUs a token goes to). None (dse's default): alltoall where the
    group is in one node (N = 1), flex where it spans nodes (what ``--emit megatron`` writes)
    Source: NCCL all-to-all = n-1 ncclSend/ncclRecv of S/n (NCCL docs, "Point-to-point communication"): every copy
    bound for another node crosses the network, (N-1)/N of S under balanced routing; with PXN (NCCL >= 2.12, on by
    default) a copy for another node first moves over NVLink to the GPU on the destination's rail, so NVLink
    carries the (q-1)/q of S that does not start on that GPU. DeepEP normal kernels (deepseek-ai/DeepEP
    docs/legacy.md; tests/legacy/test_internode.py counts ``num_rdma_token_sent`` = distinct nodes per token and
    ``recv_x`` = distinct tokens per GPU): RDMA once per destination node other than its own, NVLink once per
    destination GPU. y is the NVLink stage's bytes as DeepEP's kernels move them: every received token, the own
    GPU's included (its published bandwidths are "logical", counting local traffic); z the bytes that cross NVLink.

    Args:
        dispatcher: "alltoall", "flex" or None (alltoall in one node, flex across nodes) [name]
    Returns:
        (x network share, y NVLink stage share, z NVLink bytes share) of S [fraction]

    >>> [round(float(v), 3) for v in dispatch_shares("alltoall", 256, 8, 64, 8, 8, 4)]   # DeepSeek-V3, ep 64
    [0.875, 0.875, 0.875]
    >>> [round(float(v), 3) for v in dispatch_shares("flex", 256, 8, 64, 8, 8, 4)]
    [0.397, 0.92, 0.805]
    >>> [round(float(v), 3) for v in dispatch_shares(None, 128, 8, 8, 8)]     # Qwen3-30B-A3B in one node: alltoall
    [0.0, 0.875, 0.875]
    """
    nodes = ep / per_node
    k = experts_per_token
    a2a = ((nodes - 1) / nodes, (per_node - 1) / per_node)
    if dispatcher == "alltoall":
        return a2a[0], a2a[1], a2a[1]
    r = expert_nodes_per_token(experts, k, ep, groups, groups_per_token)
    flex = (internode_share(experts, k, nodes, groups, groups_per_token), r / k, r * (per_node - 1) / (per_node * k))
    if dispatcher == "flex":
        return flex
    inside = nodes <= 1
    return where(inside, a2a[0], flex[0]), where(inside, a2a[1], flex[1]), where(inside, a2a[1], flex[2])


def deepep_bytes(tokens: Num, hidden: Num, bytes_per_element: Num, experts: int, experts_per_token: int, ep: Num,
                 per_node: Num, groups: int = 0, groups_per_token: int = 0) -> tuple[Num, Num]:
    """Bytes one GPU's DeepEP dispatch (or combine) moves: over RDMA, and through its NVLink stage.

    Formula: RDMA = T D (N-1)/N h e (sent once to each other node a token has experts on); NVLink stage = T R h e
    (each token once per GPU it has experts on, the own GPU's included), D and R as in :func:`dispatch_shares`
    Source: deepseek-ai/DeepEP tests/legacy/test_internode.py (``dispatch_bf16_rdma_send_bytes =
    num_rdma_token_sent * hidden * 2`` counts the own node too, ``dispatch_bf16_nvl_recv_bytes = recv_x.numel() *
    2``; the combine moves the same bytes back in bf16); expected values under uniform group-limited routing

    Args:
        tokens: T, tokens a GPU dispatches [count]
        hidden: h, hidden size [count]
        bytes_per_element: e, 2 for bf16, :data:`FP8_DISPATCH_BYTES` for DeepEP's FP8 dispatch [bytes]
    Returns:
        (RDMA bytes, NVLink-stage bytes) per GPU [bytes]

    >>> rdma, nvl = deepep_bytes(4096, 7168, FP8_DISPATCH_BYTES, 256, 8, 64, 8, 8, 4)   # DeepEP's EP 64 test
    >>> round(rdma / 1e6, 1), round(nvl / 1e6, 1)
    (96.1, 222.8)
    """
    nodes = ep / per_node
    d = expert_nodes_per_token(experts, experts_per_token, nodes, groups, groups_per_token)
    r = expert_nodes_per_token(experts, experts_per_token, ep, groups, groups_per_token)
    unit = tokens * hidden * bytes_per_element
    return unit * d * (nodes - 1) / nodes, unit * r


def deepep_time(rdma_bytes: Num, nvlink_bytes: Num, network_bandwidth: Num, intra_bandwidth: Num) -> Num:
    """Time of a DeepEP normal dispatch or combine: its RDMA and NVLink stages pipelined, the slower one sets it.

    Formula: t = max(RDMA / B_net, NVLink / B_intra)
    Source: deepseek-ai/DeepEP docs/legacy.md ("Normal kernels with NVLink and RDMA forwarding": the RDMA senders,
    forwarders and NVLink receivers run as concurrent warps on the same chunks; its table names each row's
    bottleneck, RDMA or NVLink); DeepSeek-V3 arXiv 2412.19437 §3.2.2 (IB sends and NVLink forwarding "fully
    overlapped"). Kernel launch and the notify step are not counted (DeepEP publishes no latency for the normal
    kernels); the published bandwidths were measured with 24 SMs (Megatron-Core's default is 20).

    Returns:
        time [s]

    >>> round(deepep_time(96.1e6, 222.8e6, 47e9, 160e9) * 1e3, 3)   # H800 + CX7 (dse's h800-cluster links): ms
    2.045
    """
    return maximum(rdma_bytes / network_bandwidth, nvlink_bytes / intra_bandwidth)
