"""NCCL's cost model of a ring collective: per-protocol latencies and bandwidth shares, the fastest protocol per size.

NCCL chooses, for every collective call, the algorithm and protocol its tuning model predicts to be fastest,
``time = latency + bytes / bandwidth`` per (algorithm, protocol). This module restates that model for the ring
algorithm (the one :mod:`dse.formulas.parallelism` prices) from NCCL 2.30.7, ``src/graph/tuning.cc`` of
github.com/NVIDIA/nccl (commit 5067397; ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``); the constants are
that file's defaults. Its three protocols trade latency against bandwidth:

- LL (low latency): 8-byte stores that carry a 4-byte flag with 4 bytes of data; the model gives it half the
  link's bus bandwidth and the lowest per-hop latency;
- LL128: 128-byte lines with an 8-byte flag, 92 % of the bandwidth (120/128), enabled where NVLink connects
  the GPUs (not over PCI peer paths);
- Simple: plain copies with a fence per chunk, the full bandwidth and the highest per-hop latency.

A ring collective of k passes over n ranks on N nodes (all-reduce: reduce-scatter then all-gather, k = 2;
all-gather or reduce-scatter: k = 1) takes k (n-1) steps, k (N-1) of them across the network. With B the
group's achieved (Simple) bandwidth per rank and T = k (n-1)/n S / B the bandwidth-only time:

    t = min over p of [ L_p + T / f_p ],   L_p = base_p + k (n - N) a_p + k (N - 1) b_p

(``k (n-N)`` = the steps inside a node), f = (0.5, 0.92, 1) for (LL, LL128, Simple), base = (6.6, 14.0, 8.4) us,
a_p the per-hop latency of the node's GPU link (NVLink (0.6, 1.9, 3.4) us, PCI (1.0, 2.5, 5.7) us), b_p the
network's (2.7, 4.0, 14.0) us; with one rank per node the exposed network latency (5.0, 8.5, 14.0) us (the
tree's, which NCCL uses then); across nodes an intra-node hop costs at least the network post overhead (1 us
on an x86 host, 3 us for Simple); a Simple ring all-reduce across nodes pays 1.4x its latency (the ring's
plateau on sm80 and newer, for all but messages under 64 bytes per channel and rank). A point-to-point send
(pipeline stages, a ring-attention step, each of an all-to-all's n-1 sends) uses LL or Simple, as NCCL's p2p
does (``enqueue.cc``: LL up to 16 KiB per channel).

Not modelled: the tree, CollNet, NVLS and PAT algorithms (NCCL's tree all-reduce across many nodes and the
NVLink-SHARP reductions of NVSwitch systems can beat the ring); LL's absolute bandwidth cap per GPU
generation and LL128's per-channel cap (``llMaxBws``, ``perChMaxRingLL128Bws``); fewer channels for small
messages; a tuner plugin's or the user's overrides (``NCCL_ALGO``, ``NCCL_PROTO``).
(Symbols: :mod:`dse.formulas.parallelism`, which re-exports this module.)
"""

from __future__ import annotations

from typing import NamedTuple

from dse.formulas._array import Num, minimum, where

__all__ = ["Hops", "Path", "TRANSPORTS", "BANDWIDTH_ONLY", "hops", "path_of", "fastest_time", "send_time"]


class Hops(NamedTuple):
    """A latency per NCCL protocol (LL, LL128, Simple) [s]."""

    ll: float
    ll128: float
    simple: float


_NONE = Hops(0.0, 0.0, 0.0)


class Path(NamedTuple):
    """What a group's collectives cross: the nodes it spans and the latencies of each protocol."""

    nodes: Num = 1                   # N, nodes the group spans (1: inside one node)
    intra: Hops = _NONE              # per hop inside a node [s]
    inter: Hops = _NONE              # per hop across nodes [s]
    alone: Hops = _NONE              # per hop across nodes with one rank per node [s]
    base: Hops = _NONE               # once per collective [s]
    ll128: bool = True               # NCCL enables LL128 on this path
    overhead: float = 0.0            # network post overhead an intra-node hop costs at least across nodes [s]
    extra: Num = 0.0                 # per intra-node hop of a group inside one node, every protocol [s]


_US = 1e-6
# NCCL 2.30.7 src/graph/tuning.cc, ncclTunerConstantsDefaults, ring algorithm (LL, LL128, Simple), in us
_BASE = Hops(6.6 * _US, 14.0 * _US, 8.4 * _US)              # baseLatencies[Ring]
TRANSPORTS = {"nvlink": Hops(0.6 * _US, 1.9 * _US, 3.4 * _US),   # hwLatencies[NVLINK][Ring]
              "pci": Hops(1.0 * _US, 2.5 * _US, 5.7 * _US),      # hwLatencies[PCI][Ring]
              "net": Hops(2.7 * _US, 4.0 * _US, 14.0 * _US)}     # hwLatencies[NET][Ring]
_NET_ALONE = Hops(5.0 * _US, 8.5 * _US, 14.0 * _US)          # hwLatencies[NET][Tree]: used when ppn = 1
_SHARE = Hops(0.5, 0.92, 1.0)        # busBw x .5 (LL), x .92 = 120/128 (LL128), x 1 (Simple)
_NET_OVERHEAD = 1.0 * _US            # getNetOverhead: x86 Intel 1 us (AMD 2 us); x3 for Simple
_PLATEAU = 1.4                       # Simple ring all-reduce across nodes, compute capability >= 8.0 (1.9 before)

_ALL, _P2P = (0, 1, 2), (0, 2)       # the protocols of a collective; of a point-to-point send (LL, Simple)

#: No latency at all: every collective takes its bandwidth-only time (the Simple protocol at f = 1).
BANDWIDTH_ONLY = Path()


def hops(transport: str, extra: float = 0.0) -> Hops:
    """Per-hop latency of NCCL's ring on one kind of link, for each protocol.

    Formula: a_p = hwLat[transport][ring][p] + extra (net: + 2 extra for Simple, which flushes once more)
    Source: NCCL 2.30.7 src/graph/tuning.cc (github.com/NVIDIA/nccl): ``hwLatencies`` (ring: NVLink 0.6 / 1.9
    / 3.4 us, PCI 1.0 / 2.5 / 5.7 us, network 2.7 / 4.0 / 14.0 us for LL / LL128 / Simple); a network's own
    reported latency (``latencyInter``, 0 for InfiniBand) is added to each network hop, twice for Simple.

    Returns:
        latency per hop [s]

    >>> [round(x * 1e6, 1) for x in hops("nvlink")]   # us
    [0.6, 1.9, 3.4]
    >>> [round(x * 1e6, 1) for x in hops("net", 1e-6)]
    [3.7, 5.0, 16.0]
    """
    h = TRANSPORTS[transport]
    twice = 2.0 if transport == "net" else 1.0
    return Hops(h.ll + extra, h.ll128 + extra, h.simple + twice * extra)


def path_of(nodes: Num, intra: str = "nvlink", inter: str = "net", intra_extra: float = 0.0,
            inter_extra: float = 0.0) -> Path:
    """The :class:`Path` of a group that spans ``nodes`` nodes of GPUs joined by ``intra``, nodes by ``inter``.

    Formula: Path(N, hops(intra), hops(inter), exposed network hops, base latencies, LL128 unless intra is pci,
    network post overhead)
    Source: NCCL 2.30.7 src/graph/tuning.cc: ``baseLatencies`` (ring 6.6 / 14.0 / 8.4 us); with one rank per
    node the tree's network latency (5.0 / 8.5 / 14.0 us); LL128 only where the GPUs' path is NVLink
    (``typeIntra <= PATH_NVB``); ``getNetOverhead`` (1 us on an x86 Intel host).

    Returns:
        the group's path [Path]

    >>> p = path_of(1)
    >>> round(p.base.ll * 1e6, 1), round(p.intra.simple * 1e6, 1), p.ll128
    (6.6, 3.4, True)
    """
    net = hops(inter, inter_extra)
    alone = Hops(*(a + b - c for a, b, c in zip(_NET_ALONE, net, TRANSPORTS[inter]))) if inter == "net" else net
    return Path(nodes, hops(intra, intra_extra), net, alone, _BASE, intra != "pci",
                _NET_OVERHEAD)


def fastest_time(transfer: Num, ranks: Num, path: Path, passes: int = 1, p2p: bool = False) -> Num:
    """Time of a ring collective (or a point-to-point send) under NCCL's model, with its fastest protocol.

    Formula: t = min_p [ L_p + T / f_p ], L_p = base_p + k (n - N) a_p' + k (N - 1) b_p' (x 1.4 for Simple when
    k = 2 and N > 1); a_p' = max(a_p, o_p) across nodes (o = 1 us, 3 us Simple), b_p' = the exposed network
    latency when n = N; p in LL (f 0.5), LL128 (f 0.92, where enabled, not for p2p sends), Simple (f 1). A
    send between two ranks is the ring over n = 2 (one step, across the network when N = 2). A group inside
    one node whose link measures it apart (the path's ``extra``, e) adds k (n - 1) e: e on each protocol's hop.
    Source: NCCL 2.30.7 src/graph/tuning.cc (github.com/NVIDIA/nccl), ``ncclTopoTuneModel``: ring latency
    base + (nsteps - nInterSteps) intraLat + nInterSteps interLat, bus bandwidth x .5 (LL), x .92 (LL128);
    ``ncclTopoGetAlgoTime``: time = latency + bytes / bandwidth, ring all-reduce plateau x 1.4; NCCL picks the
    fastest (algorithm, protocol); src/enqueue.cc: p2p uses LL or Simple.

    Returns:
        time [s]

    >>> p = path_of(1)
    >>> round(fastest_time(2 * 7 / 8 * 64e3 / 230e9, 8, p, 2) * 1e6, 1)   # 64 kB all-reduce, 8 A100s: LL, us
    16.0
    >>> round(fastest_time(2 * 7 / 8 * 256e6 / 230e9, 8, p, 2) * 1e6, 1)  # 256 MB: Simple, 1.95 ms + 56 us
    2003.8
    """
    if path.base == _NONE and path.intra == _NONE and path.inter == _NONE:
        return transfer                  # no latency: the bandwidth-only time (Simple, f = 1)
    nodes = path.nodes
    inner, outer = passes * (ranks - nodes), passes * (nodes - 1)
    across = nodes > 1
    alone = ranks <= nodes
    best: Num | None = None
    for p in _P2P if p2p or not path.ll128 else _ALL:
        a: Num = path.intra[p]
        floor = path.overhead * (3 if p == 2 else 1)
        if a < floor:                    # across nodes an intra-node hop costs the network post overhead
            a = where(across, floor, a)
        b: Num = path.inter[p]
        if path.alone[p] != b:
            b = where(alone, path.alone[p], b)
        lat = path.base[p] + inner * a + outer * b
        if p == 2 and passes == 2:
            lat = where(across, _PLATEAU * lat, lat)
        t = lat + transfer / _SHARE[p]
        best = t if best is None else minimum(best, t)
    assert best is not None
    if not (type(path.extra) in (int, float) and path.extra == 0):
        best = best + inner * path.extra   # inside one node the same for every protocol: min_p unchanged
    return best


def send_time(transfer: Num, path: Path) -> Num:
    """A point-to-point send between two ranks of a group, under NCCL's model.

    Formula: t = min_p [L_p + T / f_p], p LL or Simple: :func:`fastest_time` over n = 2 ranks on min(N, 2) nodes
    (one step, across the network when the group spans nodes)
    Source: NCCL 2.30.7 src/graph/tuning.cc (latencies, bandwidth shares); src/enqueue.cc (p2p: LL for sends up
    to 16 KiB per channel, else Simple).

    Returns:
        time [s]

    >>> round(send_time(4096 / 25e9, path_of(2)) * 1e6, 1), round(send_time(50e6 / 25e9, path_of(2)) * 1e3, 4)
    (11.9, 2.0224)
    """
    return fastest_time(transfer, 2, path._replace(nodes=minimum(path.nodes, 2)), 1, True)
