"""CXL memory expanders as an offload tier (``--offload-optimizer cxl``, ``--offload-params cxl``).

Checked against published measurements (Liaw & Chen, "Analysis and Optimized CXL-Attached Memory Allocation for
Long-Context LLM Fine-Tuning", arXiv 2507.03305, whose benchmark results are in the authors' repositories
DandinPower/numa-gpu-xfer-bench and DandinPower/numa-cpu-adam-bench; Micron's CZ120 figure), and by properties:
between DRAM and NVMe offload when the bandwidths order so, infeasible beyond the expanders' capacity, one-line
errors on hardware without CXL memory. docs/storage-offload.md, "CXL memory", has the numbers.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import dse
from dse import catalog
from dse.estimate.offload_cxl import cxl_bandwidths
from dse.formulas import offload as O
from dse.specs.hardware import CXLMemoryArraySpec, CXLMemorySpec

GIB = 2**30
SYSTEM = "hgx-h100-cxl"


def _aic_system(count: int = 1):
    """The benchmark machine's CXL side: one 8-DIMM CXL add-in card on PCIe 5.0 x16 (its 53.5 GiB/s of DMA reads
    exceed an x8 link's 31.5 GB/s, so x16), GPUs on PCIe 5.0 x16 (55.6 GiB/s to local DRAM)."""
    base = catalog.load_system(SYSTEM)
    link = catalog.load_system("dgx-h100").node.host_link                     # pcie5-x16, 0.84 (nvbandwidth)
    # reads: link-bound (the device rate is not the limit); writes: the card's own 37.25 GiB/s (1 GPU, 2 GiB copies)
    dev = CXLMemorySpec(name="cxl-aic-8dimm", capacity=256 * GIB, read_bandwidth=link.bandwidth,
                        write_bandwidth=37.2518 * GIB, link=link)
    return dataclasses.replace(base, node=dataclasses.replace(base.node, cxl=CXLMemoryArraySpec(device=dev,
                                                                                                  count=count)))


def test_two_gpus_share_the_expander_as_measured():
    """numa-gpu-xfer-bench example/one_8dimm_cxl_aic.csv, 2 GiB copies: one GPU reads CXL memory at 53.50 GiB/s,
    two GPUs at once 26.70 GiB/s each; two GPUs write 18.88 GiB/s each. Model: min(B_host, B_cxl / GPUs)."""
    system = _aic_system()
    hl = system.node.host_link
    b_host = O.link_bandwidth(hl.bandwidth, hl.efficiency)
    b_read, b_write = cxl_bandwidths(system)
    one = min(b_host, b_read)
    two = min(b_host, b_read / 2)
    assert one == pytest.approx(53.4963 * GIB, rel=0.10)          # model 52.9 GB/s: -7.8 %
    assert two == pytest.approx(26.7001 * GIB, rel=0.10)          # model 26.5 GB/s: -7.7 %
    assert min(b_host, b_write / 2) == pytest.approx(18.8823 * GIB, rel=0.05)   # the write rate is an input: -1.3 %


def test_cpu_adam_over_cxl_memory_against_the_measured_step():
    """numa-cpu-adam-bench example/qwen2.5-7B_normal_interleave.csv: DeepSpeed CPU-Adam (fp32) over 544,997,376
    elements (Qwen2.5-7B's embedding), one process: 54.83 ms with the tensors in local DRAM (node 0), 228.82 ms in
    CXL memory (node 3, the card above): 4.2x. Model: max(P x 12 / throughput, max(P 16 / B_read, P 12 / B_write)),
    the throughput taken from the DRAM run. The full-duplex bound is 28 % fast (tolerance 35 %): the CXL.mem read
    requests that share the write direction and the card's DRAM turnarounds are not modelled."""
    n = 544_997_376
    host_rate = n * 12 / 54.825270e-3                           # the DRAM run: 119 GB/s of state
    b_read, b_write = cxl_bandwidths(_aic_system())
    r, w = O.cpu_step_bytes(n, 12, 4)
    t = max(O.cpu_optimizer_time(n, 12, host_rate), O.memory_bound_time(r, w, b_read, b_write))
    assert t == pytest.approx(228.824446e-3, rel=0.35)
    assert t < 228.824446e-3                                     # a lower bound of the time
    assert t / 54.825270e-3 == pytest.approx(4.17, rel=0.35)     # slowdown vs DRAM: model 3.0x


def test_cz120_rates_reproduce_microns_mixed_figure():
    """Micron: one CZ120 reaches 36 GB/s with MLC's 2:1 read/write mix. Full duplex, the reads limit it."""
    dev = catalog.load_system(SYSTEM).node.cxl.device
    port = O.link_bandwidth(dev.link.bandwidth, dev.link.efficiency)
    b_read, b_write = min(dev.read_bandwidth, port), min(dev.write_bandwidth, port)
    mixed = 1.0 / O.memory_bound_time(2 / 3, 1 / 3, b_read, b_write)
    assert mixed == pytest.approx(36e9, rel=0.15)                # model 39.8 GB/s: +10 %


@pytest.fixture
def dse_cli(request):
    """conftest's in-process ``dse`` CLI fixture (this module's ``dse`` is the package)."""
    return request.getfixturevalue("dse")


def _est(model, **plan):
    return dse.estimate(model, SYSTEM, micro_batch=plan.pop("micro_batch", 1), **plan)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["llama2-7b", "llama3-8b", "mistral-7b"]), st.sampled_from([1, 2]),
       st.sampled_from([1024, 4096]), st.sampled_from(["full", "selective"]), st.sampled_from(["gpu", "cpu"]))
def test_cxl_optimizer_offload_is_between_dram_and_nvme(model, mb, seq, recompute, params):
    """Host DRAM (no bandwidth limit on the CPU step) >= 8 CZ120 (212 / 148 GB/s) >= 8 NVMe drives (56 / 34 GB/s):
    the iteration orders the same way for the same plan."""
    t = {opt: _est(model, zero=3, offload_optimizer=opt, offload_params=params, micro_batch=mb, seq_len=seq,
                   recompute=recompute)["time"]["iteration"] for opt in ("cpu", "cxl", "nvme")}
    assert t["cpu"] <= t["cxl"] * (1 + 1e-12) and t["cxl"] <= t["nvme"], t


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["llama2-7b", "llama3-8b"]), st.sampled_from([1, 2]), st.sampled_from(["gpu", "cpu"]))
def test_cxl_parameter_offload_is_between_dram_and_nvme(model, mb, opt):
    t = {par: _est(model, zero=3, offload_optimizer=opt, offload_params=par, micro_batch=mb)["time"]["iteration"]
         for par in ("cpu", "cxl", "nvme")}
    assert t["cpu"] <= t["cxl"] * (1 + 1e-12) and t["cxl"] <= t["nvme"], t


def test_states_beyond_the_expanders_capacity_are_infeasible_not_an_error():
    ok = dse.estimate("llama2-70b", SYSTEM, zero=3, offload_optimizer="cxl", micro_batch=1, recompute="full")
    assert ok["feasible"] and ok["memory"]["cxl"]["optimizer"] > ok["memory"]["host"]["capacity"] / 2
    small = dse.estimate("llama2-70b", SYSTEM, zero=3, offload_optimizer="cxl", micro_batch=1, recompute="full",
                         overrides=["hardware.node.cxl.count=2"])
    assert not small["feasible"]
    assert any(v["kind"] == "memory" and v["tier"] == "cxl" for v in small["violation_details"]), small["violations"]
    # the same states in host DRAM do not fit the 1 TiB host: what the expanders are for
    cpu = dse.estimate("llama2-70b", SYSTEM, zero=3, offload_optimizer="cpu", micro_batch=1, recompute="full")
    assert [v["tier"] for v in cpu["violation_details"]] == ["host"]


def test_cxl_on_hardware_without_it_is_one_line_naming_the_flag(dse_cli):
    res = dse_cli("estimate", "--model", "llama3-8b", "--hw", "dgx-h100", "--offload-optimizer", "cxl")
    assert res.code == 2 and res.out == ""
    assert res.err.strip() == ("dse: error: plan: --offload-optimizer cxl: hardware 'dgx-h100' has no CXL memory "
                               "(node.cxl); allowed: gpu, cpu, nvme")
    res = dse_cli("estimate", "--model", "llama3-8b", "--hw", "workstation-rtx5090", "--zero", "3",
                  "--offload-params", "cxl")
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1 and "--offload-params cxl" in res.err


def test_the_expanders_are_priced_and_powered_and_their_link_reported():
    r = dse.estimate("llama2-7b", SYSTEM, zero=3, offload_optimizer="cxl", micro_batch=1)
    plain = dse.estimate("llama2-7b", SYSTEM, zero=3, offload_optimizer="cxl", micro_batch=1,
                         overrides=["hardware.node.cxl.device.price=0", "hardware.node.cxl.device.power=0"])
    assert r["cost"]["cxl_usd"] == 8 * 2000
    assert r["cost"]["capital_usd"] - plain["cost"]["capital_usd"] == pytest.approx(16000)
    assert r["energy"]["power_w"] > plain["energy"]["power_w"]
    link = r["offload"]["links"]["host_cxl"]
    assert link["bytes_read"] > 0 and link["bytes_written"] > 0 and r["traffic"]["host_cxl"] > 0
    assert "host_cxl" not in dse.estimate("llama2-7b", SYSTEM, zero=3, offload_optimizer="cpu")["traffic"]


def test_deepspeed_sees_host_memory(dse_cli):
    res = dse_cli("estimate", "--model", "llama2-7b", "--hw", SYSTEM, "--zero", "3", "--offload-optimizer", "cxl",
                  "--offload-params", "cxl", "--emit", "deepspeed")
    assert res.code == 0
    z = json.loads(res.out)["zero_optimization"]
    assert z["offload_optimizer"]["device"] == "cpu" and z["offload_param"]["device"] == "cpu"
    assert "numactl --membind" in res.err and "CPU-less NUMA node" in res.err


def test_a_tie_between_links_names_the_same_bottleneck_for_scalar_and_array_plans():
    """ZeRO-3 with parameters in CXL: the GPU's host link and the CXL links are equally busy; the scalar estimate
    and an array plan name the same (first listed) link (found by the array-vs-loop property test)."""
    import numpy as np

    import dse

    kw = dict(tp=2, dp=2, seq_len=1024, recompute="none", zero=3, offload_params="cxl", overrides=["model.layers=2"])
    one = dse.estimate("llama3-8b", "hgx-h100-cxl", micro_batch=1, **kw)["offload"]
    many = dse.estimate("llama3-8b", "hgx-h100-cxl", micro_batch=np.array([1, 2, 4]), **kw)["offload"]
    assert one["links"]["gpu_host"]["busy_s"] == one["links"]["host_cxl"]["busy_s"]
    assert list(many["bottleneck_link"]) == [one["bottleneck_link"]] * 3 == ["gpu_host"] * 3
