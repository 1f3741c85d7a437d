"""NCCL's cost model of the collectives (dse.formulas.parallelism.nccl): protocol choice, limits, monotonicity,
the link specs' transport and latency fields, and where the estimate prices it."""

from __future__ import annotations

import numpy as np
import pytest

from dse.errors import InputError
from dse.formulas import parallelism as P
from dse.formulas.parallelism import nccl as N

US = 1e-6
B = 230e9                       # an A100's NVLink as NCCL achieves it (nvlink3: 300 GB/s x 0.77)
NODE = N.path_of(1)             # one node, NVLink
NV, NET = N.TRANSPORTS["nvlink"], N.TRANSPORTS["net"]


def _candidates(nbytes, n, path, passes=2):
    """Each protocol's time by hand (LL, LL128, Simple), for a group inside one node."""
    t = passes * (n - 1) / n * nbytes / B
    steps = passes * (n - 1)
    return [path.base[p] + steps * path.intra[p] + t / share for p, share in enumerate((0.5, 0.92, 1.0))]


def test_the_constants_are_nccls_ring_defaults():
    assert [round(x / US, 1) for x in N.path_of(1).base] == [6.6, 14.0, 8.4]
    assert [round(x / US, 1) for x in NV] == [0.6, 1.9, 3.4]
    assert [round(x / US, 1) for x in N.TRANSPORTS["pci"]] == [1.0, 2.5, 5.7]
    assert [round(x / US, 1) for x in NET] == [2.7, 4.0, 14.0]
    assert not N.path_of(1, "pci").ll128 and N.path_of(1).ll128      # LL128 only over NVLink


@pytest.mark.parametrize("nbytes, protocol", [(1024, 0), (16 * 1024, 0), (256 * 1024, 0), (8 * 2**20, 1),
                                              (64 * 2**20, 2), (2**30, 2)])
def test_the_fastest_protocol_switches_with_the_size(nbytes, protocol):
    """8 GPUs on NVLink: LL for kB messages, LL128 for MB, Simple from tens of MB (NCCL's own crossovers)."""
    cand = _candidates(nbytes, 8, NODE)
    assert int(np.argmin(cand)) == protocol
    assert P.allreduce_time(nbytes, 8, B, path=NODE) == pytest.approx(min(cand), rel=1e-12)


def test_small_messages_pay_nccls_latency_not_the_bandwidth():
    t = P.allreduce_time(4096, 8, B, path=NODE)
    assert t == pytest.approx((6.6 + 14 * 0.6) * US + 2 * 7 / 8 * 4096 / (0.5 * B), rel=1e-12)   # LL: ~15 us
    assert 14 * US < t < 16 * US


@pytest.mark.parametrize("n, path, bw", [(8, NODE, B), (16, N.path_of(2), 25e9), (64, N.path_of(8), 25e9),
                                         (8, N.path_of(8), 25e9)])    # across nodes: a GPU's 200 Gb/s NIC
def test_large_messages_take_the_bandwidth_time(n, path, bw):
    for fn in (P.allreduce_time, P.allgather_time, P.alltoall_time):
        bw_only = fn(2**30, n, bw)
        assert fn(2**30, n, bw, path=path) == pytest.approx(bw_only, rel=0.03)
        assert fn(2**30, n, bw, path=path) > bw_only


def test_bandwidth_only_path_is_the_old_formula():
    assert P.allreduce_time(1e9, 8, 150e9) == pytest.approx(2 * 7 / 8 * 1e9 / 150e9)
    assert P.allreduce_time(1e9, 8, 150e9, 5e-6) == pytest.approx(2 * 7 / 8 * 1e9 / 150e9 + 14 * 5e-6)
    assert P.p2p_time(50e6, 25e9) == pytest.approx(50e6 / 25e9)


def test_monotone_in_bytes_and_ranks():
    sizes = np.logspace(0, 10.5, 400)
    for path, ranks in ((NODE, [2, 3, 4, 6, 8]), (N.path_of(4), [32]), (N.path_of(4), [4])):
        for n in ranks:
            for fn in (P.allreduce_time, P.allgather_time, P.alltoall_time):
                assert np.all(np.diff(fn(sizes, n, B, path=path)) > 0)
            assert np.all(np.diff(P.p2p_time(sizes, B, path=path)) > 0)
    for S in (1e3, 1e6, 1e9):
        inside = P.allreduce_time(S, np.arange(1, 9), B, path=NODE)
        assert np.all(np.diff(inside) > 0) and inside[0] == 0
        nodes = np.arange(2, 129)
        across = P.allreduce_time(S, 8 * nodes, B, path=N.path_of(nodes))    # 8 ranks a node
        alone = P.allreduce_time(S, nodes, B, path=N.path_of(nodes))          # one rank a node
        assert np.all(np.diff(across) > 0) and np.all(np.diff(alone) > 0)


def test_across_nodes_the_network_hops_and_one_rank_per_node():
    S = 1024
    t = P.allreduce_time(S, 16, B, path=N.path_of(2))   # 2 nodes x 8: 28 NVLink steps (>= 1 us), 2 network steps
    ll = (6.6 + 28 * max(0.6, 1.0) + 2 * 2.7) * US + 2 * 15 / 16 * S / (0.5 * B)
    assert t == pytest.approx(ll, rel=1e-12)
    t = P.allreduce_time(S, 4, B, path=N.path_of(4))    # 4 nodes x 1: the exposed (tree) network latency
    assert t == pytest.approx((6.6 + 6 * 5.0) * US + 2 * 3 / 4 * S / (0.5 * B), rel=1e-12)
    big = P.allreduce_time(2**30, 16, B, path=N.path_of(2))   # Simple's ring plateau: 1.4 x its latency
    assert big == pytest.approx(1.4 * (8.4 + 28 * 3.4 + 2 * 14.0) * US + 2 * 15 / 16 * 2**30 / B, rel=1e-12)


def test_pipeline_send_uses_ll_or_simple():
    assert P.p2p_time(4096, B, path=NODE) == pytest.approx((6.6 + 0.6) * US + 4096 / (0.5 * B), rel=1e-12)
    assert P.p2p_time(2**28, 25e9, path=N.path_of(2)) == pytest.approx((8.4 + 14.0) * US + 2**28 / 25e9, rel=1e-12)


def test_a_link_latency_adds_to_each_hop():
    extra = N.path_of(2, inter_extra=2 * US)
    assert [round(x / US, 1) for x in extra.inter] == [4.7, 6.0, 18.0]        # Simple flushes: twice
    assert P.allreduce_time(1024, 16, B, path=extra) > P.allreduce_time(1024, 16, B, path=N.path_of(2))


def test_link_specs_name_their_transport():
    from dse import catalog
    from dse.specs._schema import build
    from dse.specs.hardware import LinkSpec

    a100, rtx = catalog.load_hardware("dgx-a100-80gb"), catalog.load_hardware("workstation-rtx4090-x2")
    assert (a100.node.gpu_link.transport, a100.node.network.transport, rtx.node.gpu_link.transport) == (
        "nvlink", "net", "pci")
    measured = {"nvlink3-vtrain"}   # fitted to its node's nccl-tests table (tests/test_nccl_a100.py)
    for f in sorted((catalog.hw_dir("links")).glob("*.yaml")):   # every shipped link loads; none keeps a guess
        link = build(LinkSpec, catalog.read_yaml(f), str(f))
        assert link.latency is None or f.stem in measured, f
    assert all((catalog.hw_dir("links") / f"{name}.yaml").is_file() for name in measured)


def test_an_old_link_latency_without_transport_is_refused():
    from dse.specs._schema import build
    from dse.specs.hardware import LinkSpec

    with pytest.raises(InputError, match=r"my-link.yaml.latency: .*set transport \(nvlink, pci, net\)"):
        build(LinkSpec, {"name": "x", "bandwidth": "100 GB/s", "latency": "5 us"}, "my-link.yaml")
    with pytest.raises(InputError, match="transport: 'infiniband' is not one of nvlink, pci, net"):
        build(LinkSpec, {"name": "x", "bandwidth": "100 GB/s", "transport": "infiniband"}, "my-link.yaml")
    ok = build(LinkSpec, {"name": "x", "bandwidth": "100 GB/s", "transport": "net", "latency": "1 us"}, "l.yaml")
    assert ok.latency == pytest.approx(1e-6)


def test_the_estimate_prices_a_small_tp_allreduce_with_nccls_latency():
    from dse.estimate import base, kernel_table, resolve

    m, s, p = resolve("gpt2-medium", "dgx-a100-80gb", tp=8, micro_batch=1, seq_len=128)
    c = base.compose(m, s, p)
    row = c["terms"].kernels["layer"]["attn_allreduce"]
    link = base.links(s, p)["tp"]
    assert link.path.nodes == 1 and link.path.intra == NV
    t = kernel_table.collective_time(row, link, P)
    assert row["comm"] < 2**20 and t == pytest.approx(min(_candidates_at(row["comm"], 8, link.bandwidth)), rel=1e-12)
    assert t < 14 * 5 * US      # below the old 2 (n-1) x 5 us guess


def _candidates_at(nbytes, n, bw):
    t = 2 * (n - 1) / n * nbytes / bw
    return [NODE.base[p] + 14 * NODE.intra[p] + t / share for p, share in enumerate((0.5, 0.92, 1.0))]


def test_arrays_give_the_scalar_times():
    sizes, ranks, nodes = np.array([1e3, 1e6, 1e9]), np.array([8, 16, 64]), np.array([1, 2, 64])
    path = N.path_of(nodes)
    for fn in (P.allreduce_time, P.allgather_time, P.alltoall_time):
        got = fn(sizes[:, None], ranks, 25e9, path=path)
        want = [[fn(float(s), int(n), 25e9, path=N.path_of(int(k))) for n, k in zip(ranks, nodes)] for s in sizes]
        assert np.allclose(got, want, rtol=1e-12, atol=0)
    got = P.p2p_time(sizes[:, None], 25e9, path=path)
    assert np.allclose(got, [[P.p2p_time(float(s), 25e9, path=N.path_of(int(k))) for k in nodes] for s in sizes])
