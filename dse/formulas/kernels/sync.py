"""A launch pipeline restarted by a host synchronisation: what the wait costs a layer pass.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there). The host issues a pass's kernels in
order to one CUDA stream and runs ahead of the GPU while it issues them faster than they run; a synchronisation
(``cudaEventSynchronize``, ``.cpu()``, ``.item()``, ``nonzero``) drains the queue, so the host's lead is lost and the
host work issued after it cannot hide behind GPU work issued before it. :func:`stream_time` is the completion time
of such a restarted pipeline, :func:`restart_exposed_time` what it adds to a pass priced max(GPU time, host time), and
:func:`moe_sync_row` where Megatron-Core's MoE dispatcher restarts it.
"""

from __future__ import annotations

from collections.abc import Sequence

from dse.formulas._array import Num, maximum, where
from dse.formulas.kernels.rows import Table

__all__ = ["stream_time", "restart_exposed_time", "moe_sync_row"]


def stream_time(host: Sequence[Num], gpu: Sequence[Num], kernels: Sequence[Num]) -> Num:
    """Completion time of rows of kernels issued in order to one stream that is empty when the host starts (just
    after a synchronisation), the host spending ``host`` per row on its kernels, the GPU ``gpu``.

    Formula: with kernel j issued at H_j (the host time up to and including its launch) and running g_j, kernel j
    finishes at f_j = max(f_(j-1), H_j) + g_j, so the last one at T = max_j (H_j + sum_(i>=j) g_i). A row r of n_r
    kernels of equal host time h_r / n_r and GPU time g_r / n_r is linear in j inside the row, so its extremes are
    its first and its last kernel: T = max_r max(H_(<r) + h_r/n_r + g_r + G_(>r), H_(<r) + h_r + g_r/n_r + G_(>r)),
    with H_(<r) the rows' host time before r and G_(>r) their GPU time after r (a row of no kernels: n_r = 1, its
    GPU time issued with the previous row). Limits: host-light (h << g): T = h_1/n_1 + sum g (one launch more than
    the GPU); host-heavy: T = sum h + g_last/n_last; always max(sum h, sum g) <= T <= sum h + sum g.
    Source: CUDA C++ Programming Guide, "Asynchronous Concurrent Execution" (kernel launches return to the host at
    once, a stream runs its kernels in issue order, ``cudaStreamSynchronize``/``cudaEventSynchronize`` block the host
    until the preceding work is done); Horace He, "Making Deep Learning Go Brrrr From First Principles", 2022,
    "Overhead" (the GPU idles whenever the host falls behind).

    Args:
        host: host time of each row's kernels, in issue order [s]
        gpu: GPU time of each row [s]
        kernels: kernels each row launches [count]
    Returns:
        time from the host's restart to the last kernel's end [s]

    >>> stream_time([1, 1, 1], [5, 5, 5], [1, 1, 1])      # GPU-bound: one launch, then the GPU
    16.0
    >>> stream_time([5, 5, 5], [1, 1, 1], [1, 1, 1])      # host-bound: the host, then the last kernel
    16.0
    >>> stream_time([1, 6], [6, 1], [1, 6]), stream_time([6, 1], [1, 6], [6, 1])   # GPU-heavy row first, or last
    (8.0, 13.0)
    """
    hs: Num = 0.0
    for h in host:
        hs = hs + h
    tail: Num = 0.0                  # GPU time of the rows after r, walked from the last row back
    t: Num = 0.0
    for h, g, n in zip(reversed(list(host)), reversed(list(gpu)), reversed(list(kernels))):
        hs = hs - h                  # host time of the rows before r
        k = where(n > 0, n, 1)
        first = hs + h / k + g + tail
        last = hs + h + g / k + tail
        t = maximum(t, maximum(first, last))
        tail = tail + g
    return t


def restart_exposed_time(host: Sequence[Num], gpu: Sequence[Num], kernels: Sequence[Num]) -> Num:
    """Time a synchronisation adds to a pass that is otherwise priced max(GPU time, host time): the pass's rows in
    the order the host issues them after the wait (:func:`stream_time`), less that maximum.

    Formula: t = T - max(sum h, sum g), T = :func:`stream_time` of the rows from the one after the wait, round to the
    wait again (for a layer with one wait a pass: its rows after the wait, then its rows before it, as the next layer
    runs them). GPU-bound: t = h_1 / n_1, the launch after the wait (the drained GPU idles while the host issues
    it); host-bound throughout: t = g_last / n_last; between, up to min(sum h, sum g) when the host-heavy rows come
    right after the wait and the GPU-heavy ones right before it: the host's work after the wait cannot hide behind
    GPU work issued before it.
    Source: :func:`stream_time`; a layer pass priced max(GPU, host): :func:`dse.formulas.kernels.host_pass_time`.

    Args:
        host: host time of each row's kernels, from the row after the wait [s]
        gpu: GPU time of each row [s]
        kernels: kernels each row launches [count]
    Returns:
        exposed time per pass [s]

    >>> round(restart_exposed_time([13.5e-6, 0.3e-3], [0.5e-3, 2e-3], [1, 20]) * 1e6, 1)   # GPU-bound: one launch
    13.5
    >>> round(restart_exposed_time([2e-3, 0.1e-3], [0.5e-3, 1e-3], [100, 5]) * 1e6, 1)   # host after, GPU before
    920.0
    """
    hs: Num = 0.0
    gs: Num = 0.0
    for h, g in zip(host, gpu):
        hs, gs = hs + h, gs + g
    return stream_time(host, gpu, kernels) - maximum(hs, gs)


def moe_sync_row(table: Table) -> str | None:
    """The first row of an MoE layer's table the host issues after Megatron-Core's token dispatcher has waited for
    the per-expert token counts (None: no routed experts).

    Formula: the expert-parallel dispatch (``ep_dispatch``) where the table has one, else the expert-TP all-gather
    (``expert_allreduce``) where it has one, else the first expert GEMM (``expert_fc1``); none without a router.
    Source: Megatron-Core megatron/core/transformer/moe/token_dispatcher.py: ``MoEAlltoAllTokenDispatcher`` waits at
    ``cuda_sync_point`` ``before_ep_alltoall`` when ep or tp > 1 (NCCL's all-to-all takes its split sizes on the
    host; the counts were copied at ``before_permutation_1`` on a side stream, so the wait drains the GPU up to the
    first permutation; its ``tp_size`` is the expert-TP group's, and the all-gather over it runs after the all-to-all,
    in ``dispatch_postprocess``: so with ep = 1 and expert TP > 1 the wait comes before that all-gather),
    ``before_finish`` otherwise (the grouped GEMM's ``m_splits``); ``MoEAllGatherTokenDispatcher``
    calls ``.cpu()`` on the counts after its all-gather; the flex dispatcher's DeepEP backend busy-waits on the host
    for the received counts inside ``buffer.dispatch`` (megatron/core/transformer/moe/fused_a2a.py, "the CPU will
    wait for GPU's signal to arrive") and HybridEP does so (``non_blocking`` False) unless ``num_permuted_tokens``
    is given (drop-and-pad), before the tokens move. Whether the layer waits at all: :func:`moe_host_syncs`.

    Args:
        table: an MoE layer's kernel table, in issue order [dict]
    Returns:
        the row's name, or None [str]

    >>> moe_sync_row({"router": {}, "permute": {}, "ep_dispatch": {}, "expert_fc1": {}})
    'ep_dispatch'
    >>> moe_sync_row({"router": {}, "expert_allreduce": {}, "expert_fc1": {}})    # ep 1, expert TP > 1
    'expert_allreduce'
    >>> moe_sync_row({"router": {}, "expert_fc1": {}}), moe_sync_row({"fc1": {}})
    ('expert_fc1', None)
    """
    if "router" not in table:
        return None
    return next((r for r in ("ep_dispatch", "expert_allreduce", "expert_fc1") if r in table), None)
