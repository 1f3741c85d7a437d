"""MoE mechanics against brute force: the nodes a token's experts lie on, and the bytes a hierarchical all-to-all
moves across nodes and over NVLink, counted on simulated routings."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from dse.formulas import parallelism as P


def _enumerated_nodes(E: int, k: int, N: int, G: int, M: int) -> Fraction:
    """Expected distinct nodes of a token's k experts: M of G groups uniformly, then k of their experts uniformly."""
    node_of = [e * N // E for e in range(E)]
    group_of = [e * G // E for e in range(E)]
    total, count = Fraction(0), 0
    for chosen in itertools.combinations(range(G), M):
        pool = [e for e in range(E) if group_of[e] in chosen]
        picks = list(itertools.combinations(pool, k))
        for pick in picks:   # every (groups, experts) pair: equally likely within a group choice
            total += Fraction(len({node_of[e] for e in pick}), len(picks))
        count += 1
    return total / count


@pytest.mark.parametrize("E, k, N, G, M", [
    (8, 2, 2, 8, 8),      # no group limit
    (8, 2, 4, 4, 2),      # one group a node
    (12, 3, 3, 6, 2),     # two groups a node
    (8, 2, 4, 2, 1),      # a group spans two nodes
    (16, 4, 4, 8, 3),
    (12, 4, 2, 4, 2),
    (6, 1, 3, 3, 1),      # top-1 of one group: one node
])
def test_nodes_per_token_match_enumeration(E, k, N, G, M):
    exact = _enumerated_nodes(E, k, N, G, M)
    assert P.expert_nodes_per_token(E, k, N, G, M) == pytest.approx(float(exact), rel=1e-12)
    assert P.expert_nodes_per_token(E, k, N, G, M) <= min(N, k, M * max(N // G, 1)) + 1e-12


def test_nodes_per_token_broadcast_over_nodes():
    nodes = np.array([1, 2, 4, 8])
    got = P.expert_nodes_per_token(256, 8, nodes, 8, 4)
    assert got == pytest.approx([P.expert_nodes_per_token(256, 8, int(n), 8, 4) for n in nodes], rel=1e-12)
    assert got[0] == 1.0 and np.all(np.diff(got) > 0)


def _simulated_bytes(E, k, ep, q, G, M, tokens, seed=0):
    """Per GPU: (bytes over the network with one copy per destination node, bytes over NVLink, copies to other
    ranks) of one dispatch, in units of one token's hidden vector, from ``tokens`` random routings per rank."""
    rng = np.random.default_rng(seed)
    w = E // G
    net = nvl = flat = 0
    for src in range(ep):
        src_node, src_local = divmod(src, q)
        for _ in range(tokens):
            groups = rng.choice(G, M, replace=False)
            pool = (groups[:, None] * w + np.arange(w)).ravel()
            experts = rng.choice(pool, k, replace=False)
            ranks = experts // (E // ep)
            net += len(set((ranks // q).tolist()) - {src_node})   # once per destination node (DeepEP)
            for r in ranks.tolist():                      # every copy: where it arrives, where it must go
                node = r // q
                arrive = src if node == src_node else node * q + src_local
                nvl += r != arrive
                flat += r != src
    return net / ep / tokens, nvl / ep / tokens, flat / ep / tokens


@pytest.mark.parametrize("E, k, ep, q, G, M", [
    (16, 4, 8, 4, 16, 16),    # two nodes, no group limit
    (16, 4, 8, 2, 4, 2),      # four nodes, one group a node, two groups a token
    (32, 8, 16, 4, 8, 2),     # four nodes of two groups
])
def test_hierarchical_alltoall_bytes_match_a_simulation(E, k, ep, q, G, M):
    net, nvl, flat = _simulated_bytes(E, k, ep, q, G, M, tokens=3000)
    N = ep // q
    # per token: the dispatch message holds k copies, so the formulas' shares times k are copies per token
    assert net == pytest.approx(k * P.internode_share(E, k, N, G, M), rel=0.03)
    assert nvl == pytest.approx(k * (q - 1) / q, rel=0.03)
    assert flat == pytest.approx(k * (ep - 1) / ep, rel=0.03)     # the pairwise all-to-all's bytes


def test_hierarchical_alltoall_in_one_node_is_the_pairwise_one():
    for S, n in ((64e6, 8), (1e6, 4), (3e7, 2)):
        assert P.hierarchical_alltoall_time(S, n, n, 0.0, 50e9, 150e9, 1e-6) == pytest.approx(
            P.alltoall_time(S, n, 150e9, 1e-6), rel=1e-12)
    assert P.hierarchical_alltoall_time(64e6, 1, 1, 0.0, 50e9, 150e9) == 0.0


def test_group_limits_cut_the_network_bytes():
    free = P.internode_share(256, 8, 8)
    limited = P.internode_share(256, 8, 8, 8, 4)
    assert limited < free
    assert P.internode_share(256, 8, 8, 8, 1) == pytest.approx(7 / 8 / 8, rel=1e-12)   # one node a token
