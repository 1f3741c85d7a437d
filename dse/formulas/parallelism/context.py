"""Context parallelism: the sequence of every micro-batch split over cp GPUs (Megatron-LM
``--context-parallel-size``), and the four ways Transformer Engine brings each rank the keys and values it needs
(Megatron ``--cp-comm-type``, TE ``DotProductAttention(cp_comm_type=...)``,
``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``):

- ``p2p`` (``AttnFuncWithCPAndKVP2P``): ring attention (Liu et al. 2023, arXiv 2310.01889): each rank's K/V
  passes around the ring in cp-1 P2P steps, each overlapped with the attention of the chunk already received.
- ``a2a`` (``AttnFuncWithCPAndQKVOA2A``): DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509): all-to-alls
  trade the sequence split for a head split around the attention.
- ``a2a+p2p`` (``AttnFuncWithCPAndKVP2P`` given ``cp_group = [a2a group, p2p group]``): hierarchical (USP, Fang &
  Zhao 2024, arXiv 2405.07719; LongVILA, arXiv 2408.10188): Ulysses over the A ranks of a low-level group, the
  ring over the R = cp/A groups.
- ``all_gather`` (``AttnFuncWithCPAndKVAllGather``): every rank all-gathers the whole sequence's K and V before
  its attention ("not async, and cannot be overlapped", TE's docstring) and reduce-scatters dK, dV after it.

The sequence is cut into 2 cp chunks of s/(2 cp) tokens and rank i holds chunks i and 2cp-1-i (TE's
"DualChunkSwap", the load-balanced causal split), so every rank has the same share of the causal score matrix.
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum, where
from dse.formulas.parallelism.collectives import allgather_time, alltoall_time, p2p_time
from dse.formulas.parallelism.nccl import BANDWIDTH_ONLY, Path

__all__ = ["context_parallel_kv_bytes", "ulysses_alltoall_bytes", "context_parallel_attention_flops",
           "ring_attention_time", "hierarchical_attention_time", "allgather_attention_time",
           "allgather_buffer_bytes", "context_parallel_window_pairs"]


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


def ulysses_alltoall_bytes(s: Num, b: Num, dim: Num, cp: Num, bytes_per_element: Num = 2) -> Num:
    """Bytes of the tensor one context-parallel rank puts into one DeepSpeed-Ulysses all-to-all (Q, K, V or the output).

    Formula: S = e (s / cp) b dim   (the rank's s/cp tokens of all its heads, dim = heads x head dims on one TP
    rank); it keeps the 1/cp in its own head group and sends (cp - 1)/cp S (:func:`alltoall_time`)
    Source: Jacobs et al. 2023, DeepSpeed-Ulysses (arXiv 2309.14509) §3.1-3.2: all-to-alls of Q, K, V before the
    attention and of its output after it, "4Nh/P" per link per layer (N = s b tokens, P = cp); Transformer
    Engine ``AttnFuncWithCPAndQKVOA2A`` (``flash_attn_a2a_communicate``; Megatron-Core ``--cp-comm-type a2a``).

    Args:
        dim: elements per token of the exchanged tensor on one TP rank (Q, K, V: (a + 2 kv) d / t) [count]
    Returns:
        bytes per rank [bytes]

    >>> ulysses_alltoall_bytes(131072, 1, 4096 + 2 * 1024, 8) / 2**20   # Llama-3-8B's Q, K, V, t = 1, cp 8: MiB
    192.0
    """
    return bytes_per_element * (s / cp) * b * dim


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


def ring_attention_time(step_bytes: Num, cp: Num, step_compute: Num, bandwidth: Num, latency: Num = 0.0,
                        path: Path = BANDWIDTH_ONLY) -> Num:
    """Exposed time of one ring-attention pass: cp-1 P2P steps, each overlapped with one step's attention.

    Formula: t = (cp - 1) max(0, t_p2p(S) - t_step), t_p2p = p2p_time on the group's path (S / B + alpha without
    one); 0 when cp = 1
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
    return where(cp > 1, (cp - 1) * maximum(p2p_time(step_bytes, bandwidth, latency, path) - step_compute, 0.0), 0.0)


def hierarchical_attention_time(qkv_bytes: Num, out_bytes: Num, step_bytes: Num, a2a: Num, ring: Num,
                                step_compute: Num, a2a_bandwidth: Num, ring_bandwidth: Num, a2a_latency: Num = 0.0,
                                ring_latency: Num = 0.0, a2a_path: Path = BANDWIDTH_ONLY,
                                ring_path: Path = BANDWIDTH_ONLY) -> Num:
    """Exposed time of one pass of hierarchical context parallelism (``a2a+p2p``): Ulysses inside, a ring outside.

    Formula: t = A2A(S_qkv, A) + A2A(S_o, A) + (R - 1) max(0, S / B_ring + alpha_ring - t_step), A2A(S, A) =
    (A-1)/A S / B_a2a + (A-1) alpha_a2a (:func:`~dse.formulas.parallelism.collectives.alltoall_time`, all exposed:
    the attention waits for its heads) and the ring term :func:`ring_attention_time` over the R = cp/A groups. The
    all-to-alls gather the A ranks' tokens of a/(t A) heads, so the ring's K/V message is the rank's s/R tokens of
    kv/(t A) heads: S = 2 e (s/R) b kv d/(t A), the same bytes as the plain ring's S_kv at cp = A R. Forward: Q, K,
    V in, the output back; backward: dO in, dQ, dK, dV back, ring steps of K, V and dK, dV (2 S). A = 1 is the ring,
    R = 1 Ulysses.
    Source: Transformer Engine ``AttnFuncWithCPAndKVP2P`` with ``cp_group = [a2a_cp_group, p2p_cp_group]``
    (``flash_attn_a2a_communicate`` of Q, K, V before the ring, of the output after it; the backward of dO, and of
    dQ, dK, dV); Megatron-Core ``--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes A R`` (level 0 of
    ``create_hierarchical_groups``: A consecutive cp ranks); USP (Fang & Zhao 2024, arXiv 2405.07719 §3).

    Args:
        qkv_bytes: S_qkv, the rank's Q, K and V (backward: dQ, dK, dV) [bytes]
        out_bytes: S_o, the rank's attention output (backward: its gradient) [bytes]
        step_bytes: S, bytes one rank sends per ring step (forward S_kv, backward 2 S_kv) [bytes]
        a2a: A, ranks of the all-to-all group (consecutive cp ranks) [count]
        ring: R, ranks of the ring (cp / A) [count]
        step_compute: t_step, the rank's attention of one ring step, 1/R of it [s]
        a2a_bandwidth: B_a2a, per-rank bandwidth of the all-to-all group [bytes/s]
        ring_bandwidth: B_ring, per-rank bandwidth of the ring [bytes/s]
        a2a_latency: alpha_a2a, per-step latency of the all-to-all group [s]
        ring_latency: alpha_ring, per-step latency of the ring [s]
        a2a_path: the all-to-all group's hops for NCCL's latency (default: none) [Path]
        ring_path: the ring's hops for NCCL's latency (default: none) [Path]
    Returns:
        exposed time [s]

    >>> mib = 2**20   # Llama-3-8B at 128K, cp 16 = 8 (NVLink, 450 GB/s) x 2 (network, 50 GB/s), 1 ms per ring step
    >>> round(hierarchical_attention_time(96 * mib, 64 * mib, 32 * mib, 8, 2, 1e-3, 450e9, 50e9) * 1e3, 3)   # ms
    0.326
    >>> hierarchical_attention_time(96 * mib, 64 * mib, 32 * mib, 1, 16, 1e-3, 450e9, 50e9) == ring_attention_time(
    ...     32 * mib, 16, 1e-3, 50e9)   # A = 1: the plain ring
    True
    """
    return (alltoall_time(qkv_bytes, a2a, a2a_bandwidth, a2a_latency, a2a_path)
            + alltoall_time(out_bytes, a2a, a2a_bandwidth, a2a_latency, a2a_path)
            + ring_attention_time(step_bytes, ring, step_compute, ring_bandwidth, ring_latency, ring_path))


def allgather_attention_time(step_bytes: Num, cp: Num, bandwidth: Num, latency: Num = 0.0,
                             backward: bool = False, path: Path = BANDWIDTH_ONLY) -> Num:
    """Time of the all-gather context parallelism's collectives in one pass (``all_gather``), all exposed.

    Formula: forward t = (cp-1) S_kv / B + (cp-1) alpha (an all-gather of the cp ranks' K and V, cp S_kv in all:
    :func:`~dse.formulas.parallelism.collectives.allgather_time`, with NCCL's latency on ``path``); backward 2 t
    (the K and V gathered again, then a reduce-scatter of the whole sequence's dK and dV); 0 at cp = 1. A rank sends
    (cp-1) S_kv forward and 2 (cp-1) S_kv backward: the ring's bytes, in collectives the attention waits for.
    Source: Transformer Engine ``AttnFuncWithCPAndKVAllGather`` (forward: ``gather_along_first_dim`` of K and V,
    then the attention of the rank's two chunks against the keys they see; backward: the all-gather again and
    ``reduce_scatter_along_first_dim`` of dK, dV); TE's ``cp_comm_type`` docstring: "The all-gather is not async,
    and cannot be overlapped"; Megatron-Core ``--cp-comm-type all_gather``.

    Args:
        step_bytes: S_kv, the rank's K and V (:func:`context_parallel_kv_bytes`) [bytes]
    Returns:
        time [s]

    >>> round(allgather_attention_time(64 * 2**20, 8, 450e9) * 1e3, 3)   # Llama-3-8B at 128K, cp 8 on NVLink: ms
    1.044
    >>> allgather_attention_time(64 * 2**20, 8, 450e9, backward=True) / allgather_attention_time(64 * 2**20, 8, 450e9)
    2.0
    """
    one = allgather_time(cp * step_bytes, cp, bandwidth, latency, path)
    return 2 * one if backward else one


def allgather_buffer_bytes(step_bytes: Num, cp: Num) -> Num:
    """Bytes the all-gather context parallelism holds while a layer's attention backward runs.

    Formula: 2 cp S_kv: the whole sequence's K and V (cp S_kv, gathered) and their gradients dK, dV (cp S_kv, before
    the reduce-scatter); the forward holds the first half. Independent of cp (2 cp S_kv = 4 e s b kv d / t): the
    one term of a layer that does not shrink with cp.
    Source: Transformer Engine ``AttnFuncWithCPAndKVAllGather.backward`` (``k_ag``, ``v_ag`` of cp x the local
    tokens, ``dk``, ``dv`` allocated at that size).

    Args:
        step_bytes: S_kv, the rank's K and V (:func:`context_parallel_kv_bytes`) [bytes]
    Returns:
        bytes [bytes]

    >>> allgather_buffer_bytes(64 * 2**20, 8) / 2**30   # Llama-3-8B at 128K, cp 8: GiB
    1.0
    """
    return 2 * cp * step_bytes


def _window_prefix(n: Num, window: Num) -> Num:
    """Query-key pairs of the first n positions under a sliding window w: sum_{i<n} min(i+1, w)."""
    return where(n <= window, n * (n + 1) / 2, window * (window + 1) / 2 + (n - window) * window)


def context_parallel_window_pairs(s: Num, window: Num, cp: Num) -> Num:
    """Query-key pairs per head of the busiest rank of a sliding-window layer under the load-balanced split.

    Formula: P = F(s/2 + c) - F(s/2 - c), c = s/(2 cp), F(n) = sum_{i<n} min(i+1, w): rank cp-1's chunks cp-1 and
    cp. The pairs of chunk j, g(j) = F((j+1) c) - F(j c), are concave and non-decreasing in j (min(i+1, w) is), so
    g(i) + g(2cp-1-i) is largest where i and 2cp-1-i meet: the two middle chunks; a window w >= s is the full
    causal layer, s^2/(2 cp) on every rank. The mean over the ranks is :func:`dse.formulas.transformer.
    attention_pairs` / cp; the busiest rank sets the layer's time (the others wait at the next collective).
    Source: the load-balanced split of Transformer Engine's context parallelism (``attn_forward_func_with_cp``
    docstring, DualChunkSwap) with the window of Hugging Face masking_utils.sliding_window_overlay (key j seen by
    query i when i - w < j <= i); TE's ``AttnFuncWithCPAndKVAllGather`` computes each chunk against the keys in its
    window only (``get_kv_seq_info_after_all_gather``); this tool's derivation, checked by enumerating the mask
    (tests/test_cp_variants.py).

    Returns:
        query-key pairs [count]

    >>> context_parallel_window_pairs(131072, 1024, 8) / (131072 / 8)   # Gemma 3 at 128K, cp 8: a full window each
    1024.0
    >>> context_parallel_window_pairs(8192, 4096, 2)   # Mistral at 8K, cp 2: the mean is 12,583,936 (17% less)
    14681088.0
    """
    c = s / (2 * cp)
    busiest = _window_prefix(s / 2 + c, window) - _window_prefix(s / 2 - c, window)
    return where(window >= s, s * s / (2 * cp), busiest)
