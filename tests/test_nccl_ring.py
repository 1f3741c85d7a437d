"""NCCL's ring inside a node (dse.formulas.parallelism.nccl_ring_time) and where the kernel table uses it."""

from __future__ import annotations

import numpy as np
import pytest

from dse.estimate.kernel_table import Link, collective_time
from dse.formulas import parallelism as P

B = 150e9   # nvlink-150: the measured runs' per-GPU bus bandwidth


def _protocol(nbytes, n, passes=2):
    """(time, protocol index) of each of NCCL's ring protocols, written out from tuning.cc's constants."""
    steps = passes * (n - 1)
    times = [base + steps * step + steps / n * nbytes / (share * B) for base, step, share in P.NCCL_RING_NVLINK]
    return min(times), int(np.argmin(times))


def test_small_messages_pay_the_ll_protocols_latency_and_large_ones_the_simple_bandwidth():
    # 8 bytes on 8 GPUs: LL's 6.6 us base + 14 steps of 0.6 us
    assert P.nccl_ring_time(8, 8, B) == pytest.approx(15.0e-6, rel=1e-3)
    assert _protocol(8, 8)[1] == 0
    # 2 GPUs: 6.6 + 2 x 0.6 us
    assert P.nccl_ring_time(8, 2, B) == pytest.approx(7.8e-6, rel=1e-3)
    # 1 GB: Simple, within its 56 us latency of the bandwidth-only ring
    big = P.nccl_ring_time(1e9, 8, B)
    assert _protocol(1e9, 8)[1] == 2
    assert big - P.allreduce_time(1e9, 8, B) == pytest.approx(8.4e-6 + 14 * 3.4e-6)
    # one GPU: nothing to reduce
    assert P.nccl_ring_time(1e6, 1, B) == 0


@pytest.mark.parametrize("nbytes", [2**10, 2**16, 2**20, 4 * 2**20, 10 * 2**20, 2**27])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_picked_protocol_is_the_fastest_of_the_three(nbytes, n):
    assert P.nccl_ring_time(nbytes, n, B) == pytest.approx(_protocol(nbytes, n)[0])
    assert P.nccl_ring_time(nbytes, n, B, passes=1) == pytest.approx(_protocol(nbytes, n, 1)[0])


def test_medium_messages_cost_less_latency_than_five_microseconds_per_step():
    """1-10 MB on 8 GPUs: LL128's 40.6 us of latency against the old 14 x 5 us = 70 us (nvlink*.yaml)."""
    for mb in (1, 4, 10):
        s = mb * 2**20
        new, old = P.nccl_ring_time(s, 8, B), P.allreduce_time(s, 8, B, 5e-6)
        assert P.allreduce_time(s, 8, B) < new < old


def test_kernel_table_prices_a_collective_inside_a_node_by_nccl_and_across_nodes_by_its_link():
    row = {"op": "allreduce", "comm": 4 * 2**20}
    inside = collective_time(row, Link(8, B, 5e-6, True), P)
    across = collective_time(row, Link(8, B, 10e-6, False), P)
    assert inside == pytest.approx(P.nccl_ring_time(4 * 2**20, 8, B))
    assert across == pytest.approx(P.allreduce_time(4 * 2**20, 8, B, 10e-6))
    both = collective_time(row, Link(np.array([8, 8]), B, np.array([5e-6, 10e-6]), np.array([True, False])), P)
    np.testing.assert_allclose(both, [inside, across])
    gather = collective_time({"op": "allgather", "comm": 4 * 2**20}, Link(8, B, 5e-6, True), P)
    assert gather == pytest.approx(P.nccl_ring_time(4 * 2**20, 8, B, passes=1))
