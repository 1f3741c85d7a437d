"""The intra-node all-reduce of the Megatron A100 system against the data source's own nccl-tests table.

data/a100_allreduce_nccl_tests.csv: all_reduce_perf on one A100 node (vTrain's trace/a100 LUTs), the table vTrain's
predictor prices the tensor-parallel all-reduces of the measured runs with. dse prices them as a ring over the
system's GPU link (hwspecs/systems/a100-cluster-800g.yaml: nvlink3-vtrain, 300 GB/s x 0.76 = 228 GB/s of NCCL bus
bandwidth and 1.76 us per ring step beyond NCCL's hop latency, both fitted to that table's 8-GPU rows) with NCCL's
own latency model (dse.formulas.parallelism.nccl).
"""

from __future__ import annotations

import csv
import math

import pytest

from dse.catalog import data_dir, load_system
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


def test_small_groups_and_small_messages_are_optimistic_as_documented():
    """What one bandwidth per link leaves out, pinned so that a change shows: 2 and 4 GPUs reach less bus bandwidth
    than 8 (197 and 222 GB/s at 1 GiB: dse 13 % and 2 % fast there, more at mid sizes), and below 4 MiB the table's
    floor (~93 us on 8 GPUs) is above NCCL's modelled latency."""
    system = load_system("a100-cluster-800g")
    m = _measured()
    assert _dse(system, 2, 1024 * MiB) / m[(2, 1024 * MiB)] == pytest.approx(0.87, abs=0.02)
    assert _dse(system, 4, 1024 * MiB) / m[(4, 1024 * MiB)] == pytest.approx(0.98, abs=0.02)
    assert all(0.6 < _dse(system, 2, s) / m[(2, s)] < 0.75 for s in (8 * MiB, 16 * MiB, 24 * MiB, 32 * MiB))
    assert _dse(system, 8, 1 * MiB) / m[(8, 1 * MiB)] == pytest.approx(0.60, abs=0.02)
