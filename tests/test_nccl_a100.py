"""The intra-node all-reduce of the Megatron A100 system against the data source's own nccl-tests table.

data/a100_allreduce_nccl_tests.csv: all_reduce_perf on one A100 node (vTrain's trace/a100 LUTs), the table vTrain's
predictor prices the tensor-parallel all-reduces of the measured runs with. dse prices them as a ring over the
system's GPU link (hwspecs/systems/a100-cluster-800g.yaml: nvlink3-vtrain, 300 GB/s x 0.76 = 228 GB/s of NCCL bus
bandwidth and 1.76 us per ring step beyond NCCL's hop latency, both fitted to that table's 8-GPU rows; a group of 2
or 4 GPUs takes the same fit to its own rows, the link's ``ranks``) with NCCL's own latency model
(dse.formulas.parallelism.nccl).
"""

from __future__ import annotations

import csv
import dataclasses
import math

import pytest

from dse.catalog import data_dir, load_system
from dse.errors import InputError
from dse.estimate.links import links
from dse.formulas import parallelism as P
from dse.specs.plan import Plan

MiB = 2 ** 20


def _measured() -> dict[tuple[int, int], float]:
    """(GPUs, bytes) -> out-of-place time [s]."""
    with open(data_dir() / "a100_allreduce_nccl_tests.csv", newline="") as f:
        return {(int(r["gpus"]), int(r["bytes"])): float(r["out_of_place_time_us"]) * 1e-6 for r in csv.DictReader(f)}


def _dse(system, n: int, nbytes: int) -> float:
    """The time the estimate gives one all-reduce of ``nbytes`` over a tensor-parallel group of ``n`` GPUs."""
    link = links(system, Plan(tp=n, dp=1, pp=1))["tp"]
    return float(P.allreduce_time(nbytes, n, link.bandwidth, path=link.path))


def _log_errors(system, n: int, smallest: int) -> list[float]:
    return [math.log(_dse(system, g, s) / t) for (g, s), t in _measured().items() if g == n and s >= smallest]


def test_table_is_the_source_and_its_bus_bandwidth():
    m = _measured()
    assert len(m) == 51 and {g for g, _ in m} == {2, 4, 8}
    assert m[(8, 24 * MiB)] == pytest.approx(265.3e-6)         # trace/a100/AR_GPU8_1M_1024M_LUT, 25165824 B
    busbw = 2 * 7 / 8 * 1024 * MiB / m[(8, 1024 * MiB)]        # nccl-tests' bus bandwidth: 2 (n-1)/n S / t
    assert busbw == pytest.approx(229.2e9, rel=1e-3)


def test_eight_gpu_allreduce_matches_the_measured_table():
    """8 GPUs, 4 MiB to 1 GiB (the tensor-parallel messages of the measured runs are 24 MiB to 1.2 GiB): mean |log
    error| 3 %, every row within 13 %. NCCL's constants alone on nvlink3 (231 GB/s) give 8 %; the former link
    (nvlink-150, vTrain's config value, which its predictor uses only for groups larger than a node) made every
    all-reduce from 48 MiB up 40-54 % too slow."""
    system = load_system("a100-cluster-800g")
    err = _log_errors(system, 8, 4 * MiB)
    assert len(err) == 15 and sum(map(abs, err)) / len(err) < 0.035 and max(map(abs, err)) < 0.13
    plain = _log_errors(load_system("a100-cluster-800g", [(["node", "gpu_link"], "nvlink3")]), 8, 4 * MiB)
    assert sum(map(abs, plain)) / len(plain) > 0.07
    old = load_system("a100-cluster-800g", [(["node", "gpu_link"], "nvlink-150")])
    assert all(1.39 < _dse(old, 8, s) / t < 1.54 for (g, s), t in _measured().items() if g == 8 and s >= 48 * MiB)


def test_the_24_mib_message_of_the_3p6b_micro_batch_2_runs():
    """2 x 2048 x 3072 x 2 bytes: measured 265 us on 8 GPUs, dse within 4 %."""
    system = load_system("a100-cluster-800g")
    assert _dse(system, 8, 24 * MiB) / _measured()[(8, 24 * MiB)] == pytest.approx(1.03, abs=0.01)


def test_two_and_four_gpus_match_their_own_rows():
    """The link's ``ranks`` entries, NCCL's ring model fitted to the 2- and 4-GPU rows from 4 MiB up as the link's
    own values are to the 8-GPU rows: mean |log error| 2.0 % (2 GPUs) and 2.5 % (4 GPUs), every row within 6 %
    (and within 15 % down to 1 MiB). With the 8-GPU values both were optimistic throughout: 2 GPUs 26 % on average
    (0.87 of the measured time at 1 GiB, 0.6-0.75 at 8-32 MiB), 4 GPUs 9 %."""
    system = load_system("a100-cluster-800g")
    m = _measured()
    for n, mean in ((2, 0.021), (4, 0.027)):
        err = _log_errors(system, n, 4 * MiB)
        assert len(err) == 15 and sum(map(abs, err)) / len(err) < mean and max(map(abs, err)) < 0.06
        assert all(abs(e) < 0.15 for e in _log_errors(system, n, MiB))
    link = system.node.gpu_link
    assert link is not None
    flat = dataclasses.replace(system, node=dataclasses.replace(system.node,
                                                                gpu_link=dataclasses.replace(link, ranks={})))
    assert _dse(flat, 2, 1024 * MiB) / m[(2, 1024 * MiB)] == pytest.approx(0.87, abs=0.02)
    assert all(0.6 < _dse(flat, 2, s) / m[(2, s)] < 0.75 for s in (8 * MiB, 16 * MiB, 24 * MiB, 32 * MiB))
    assert sum(map(abs, _log_errors(flat, 4, 4 * MiB))) / 15 > 0.08


def test_the_extra_latency_of_a_whole_all_reduce_is_about_the_same_at_each_size():
    """2 (n-1) ring steps x the fitted extra latency per step: 26, 25 and 25 us for 2, 4 and 8 GPUs (a fixed cost
    per collective, not per hop, would fit the three sizes as well: stated, not used)."""
    link = load_system("a100-cluster-800g").node.gpu_link
    assert link is not None and link.latency is not None
    per = {2: link.ranks["2"].latency, 4: link.ranks["4"].latency, 8: link.latency}
    assert all(2 * (n - 1) * lat == pytest.approx(25.5e-6, rel=0.05) for n, lat in per.items() if lat is not None)


def test_group_sizes_between_the_measured_ones_take_the_next_size_up():
    """3 GPUs: the 4-GPU entry; 5 to 8: the link's own (8-GPU) values; a group across nodes: the link's own."""
    system = load_system("a100-cluster-800g")
    bw = {t: links(system, Plan(tp=t, dp=1, pp=1))["tp"].bandwidth for t in (2, 3, 4, 6, 8)}
    assert bw[2] == pytest.approx(300e9 * 0.632) and bw[3] == bw[4] == pytest.approx(300e9 * 0.722)
    assert bw[6] == bw[8] == pytest.approx(300e9 * 0.76)
    dp = links(system, Plan(tp=4, dp=2, pp=1))["dp"]   # 2 ranks, 4 apart: inside the node
    assert dp.ranks == 2 and dp.bandwidth == pytest.approx(300e9 * 0.632)


def test_small_messages_on_eight_gpus_are_optimistic_as_documented():
    """Below 4 MiB the 8-GPU table's floor (~93 us) is above NCCL's modelled latency."""
    system = load_system("a100-cluster-800g")
    assert _dse(system, 8, 1 * MiB) / _measured()[(8, 1 * MiB)] == pytest.approx(0.60, abs=0.02)


def test_a_group_size_that_is_not_a_number_of_ranks_is_refused():
    from dse.specs._schema import build
    from dse.specs.hardware import LinkSpec

    with pytest.raises(InputError, match=r"l.yaml.ranks: '1' is not a group size; keys are numbers of ranks >= 2"):
        build(LinkSpec, {"name": "x", "bandwidth": "300 GB/s", "transport": "nvlink",
                         "ranks": {1: {"efficiency": 0.6}}}, "l.yaml")
    with pytest.raises(InputError, match=r"l.yaml.ranks.2.efficiency: must be at most 1"):
        build(LinkSpec, {"name": "x", "bandwidth": "300 GB/s", "ranks": {2: {"efficiency": 1.5}}}, "l.yaml")
