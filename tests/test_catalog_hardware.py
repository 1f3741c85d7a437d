"""The shipped hardware catalog: every system and component loads, validates and parses to SI.

Spot checks compare parsed values with the datasheet numbers cited in the files'
comments (exact, since both are the same decimal or binary quantity).
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

import dse
from dse import catalog
from dse.cli import main
from dse.specs.hardware import GPUEfficiency

COMPONENT_KINDS = sorted(set(catalog.COMPONENT_DIRS.values()) - {"systems"})
COMPONENTS = [(kind, name) for kind in COMPONENT_KINDS for name in catalog.names(catalog.hw_dir(kind))]
SYSTEMS = catalog.names(catalog.hw_dir("systems"))
GiB, MiB = 2**30, 2**20


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def component(name):
    return catalog.find_hardware(name)[1]


def test_catalog_has_the_expected_items():
    assert {"dgx-a100-80gb", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "h100-cluster", "a100-server-nvme",
            "a100-cluster-800g"} <= set(SYSTEMS)
    names = {n for _, n in COMPONENTS}
    assert {"a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-40gb", "a100-pcie-80gb", "h100-sxm-80gb",
            "h200-sxm-141gb"} <= names
    assert {"pcie3-x16", "pcie4-x16", "pcie5-x16", "pcie3-x4", "pcie4-x4", "nvlink3", "nvlink4",
            "ib-hdr-8x200", "ib-ndr-8x400"} <= names
    assert {"dgx-a100-host", "dgx-h100-host", "d7-p5500-3.84tb"} <= names


@pytest.mark.parametrize("kind,name", COMPONENTS)
def test_component_loads_validates_and_cites(kind, name):
    found_kind, spec = catalog.find_hardware(name)
    assert found_kind == kind.rstrip("s")
    assert spec.name == name
    assert spec.source, f"{kind}/{name}: no source"
    assert (catalog.hw_dir(kind) / f"{name}.yaml").read_text().lstrip().startswith("#"), \
        f"{kind}/{name}: the file must open with a comment citing its datasheet"


@pytest.mark.parametrize("name", SYSTEMS)
def test_system_loads_validates_and_cites(name):
    system = catalog.load_system(name)
    assert system.name == name and system.source and system.description
    assert system.gpus == system.nodes * system.node.gpus_per_node
    assert (catalog.hw_dir("systems") / f"{name}.yaml").read_text().lstrip().startswith("#")


def test_gpu_values_parse_to_si():
    a100 = component("a100-sxm-80gb")
    assert a100.hbm_capacity == 80 * GiB
    assert a100.hbm_bandwidth == 2039e9
    assert a100.peak_flops == {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12}
    assert component("a100-sxm-40gb").hbm_capacity == 40 * GiB
    assert component("a100-sxm-40gb").hbm_bandwidth == 1555e9
    assert (component("a100-pcie-40gb").power, component("a100-pcie-80gb").power) == (250, 300)
    assert component("a100-pcie-80gb").hbm_bandwidth == 1935e9
    h100 = component("h100-sxm-80gb")
    assert h100.peak_flops == {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12}
    assert (h100.hbm_capacity, h100.hbm_bandwidth, h100.power) == (81559 * MiB, 3.35e12, 700)
    h200 = component("h200-sxm-141gb")
    assert h200.peak_flops == h100.peak_flops
    assert (h200.hbm_capacity, h200.hbm_bandwidth) == (143771 * MiB, 4.8e12)
    for name in ("a100-sxm-40gb", "a100-pcie-40gb", "a100-pcie-80gb", "h100-sxm-80gb", "h200-sxm-141gb"):
        assert component(name).price > 0, f"{name}: street price estimate missing"


def test_a100_calibration_is_kept_and_carried_over():
    a100 = dataclasses.asdict(component("a100-sxm-80gb").efficiency)
    calibrated = dict(gemm=0.763, gemm_overhead=43e-6, attention=0.6, memory=0.694, layer_overhead=0.0)
    assert {k: a100[k] for k in calibrated} == pytest.approx(calibrated, rel=1e-12)
    # The other GPUs omit the block: they get the GPUEfficiency defaults, which must equal
    # the A100 calibration for the files' comments ("A100 calibration carried over") to hold.
    def close(a, b):
        return a.keys() == b.keys() and all(x == y or (x is not None and y is not None and abs(x - y) <= 1e-12 * abs(y))
                                            for x, y in ((a[k], b[k]) for k in a))

    assert close(dataclasses.asdict(GPUEfficiency()), a100)
    for name in ("a100-sxm-40gb", "a100-pcie-40gb", "a100-pcie-80gb"):
        assert close(dataclasses.asdict(component(name).efficiency), a100)
    # the H100 and the H200 have their own, from their micro-benchmarks (tests/test_h100_micro.py,
    # tests/test_h200_micro.py); the H200 (same die) carries the H100's FP8 GEMM numbers, not measured on it
    h100 = dataclasses.asdict(component("h100-sxm-80gb").efficiency)
    h200 = dataclasses.asdict(component("h200-sxm-141gb").efficiency)
    assert h100["gemm_overhead"] < 10e-6 and h200["gemm_overhead"] < 10e-6
    assert {k: h200[k] for k in ("gemm_fp8", "gemm_fp8_depth")} == {k: h100[k] for k in ("gemm_fp8", "gemm_fp8_depth")}
    # the non-vectorized element-wise paths: nearly the same absolute rate (not share of HBM) on both (same SMs)
    for k in ("memory_strided", "memory_unvectorized"):
        assert h100[k] * 3.35e12 == pytest.approx(h200[k] * 4.8e12, rel=0.10)


def pcie(gts: float, lanes: int) -> float:
    """Per-direction PCIe 3.0+ bandwidth: GT/s x lanes x 128/130 / 8 bits (PCI Express Base Spec.)."""
    return gts * 1e9 * lanes * 128 / 130 / 8


@pytest.mark.parametrize("name,gts,lanes", [("pcie3-x16", 8, 16), ("pcie4-x16", 16, 16), ("pcie5-x16", 32, 16),
                                            ("pcie3-x4", 8, 4), ("pcie4-x4", 16, 4), ("pcie5-x4", 32, 4)])
def test_pcie_bandwidth_follows_the_spec(name, gts, lanes):
    # The files round to 3-4 significant digits ("15.75 GB/s"); 0.1 % covers that rounding.
    assert component(name).bandwidth == pytest.approx(pcie(gts, lanes), rel=1e-3)


def test_link_values_parse_to_si():
    assert component("nvlink3").bandwidth == 300e9           # 12 links x 25 GB/s
    assert component("nvlink4").bandwidth == 450e9           # 18 links x 25 GB/s
    assert component("ib-hdr-8x200").bandwidth == 200e9      # 8 x 200 Gb/s per node
    assert component("ib-ndr-8x400").bandwidth == 400e9      # 8 x 400 Gb/s per node
    assert component("pcie5-x16").bandwidth == 63.0e9
    # Sourced achievable fractions (see each file): NCCL 230/300, 370/450 GB/s; 192/200 GB/s; 47/50 GB/s.
    assert [component(n).efficiency for n in ("nvlink3", "nvlink4", "ib-hdr-8x200", "ib-ndr-8x400")] == \
        [0.77, 0.82, 0.96, 0.94]
    for _, name in COMPONENTS:
        spec = component(name)
        if hasattr(spec, "efficiency") and isinstance(spec.efficiency, float):
            assert 0 < spec.efficiency <= 1


def test_host_and_storage_values_parse_to_si():
    h = component("dgx-h100-host")
    assert (h.cores, h.dram_capacity, h.dram_bandwidth) == (112, 2 * 2**40, 614.4e9)
    ssd = component("d7-p5500-3.84tb")
    assert (ssd.capacity, ssd.read_bandwidth, ssd.write_bandwidth) == (3.84e12, 7.0e9, 4.3e9)
    assert (ssd.dwpd, ssd.warranty_years, ssd.power) == (1, 5, 20)
    assert ssd.price > 0


def test_systems_are_composed_as_documented():
    a = catalog.load_system("dgx-a100-80gb")
    assert (a.nodes, a.gpus, a.node.gpu.name, a.node.gpu_link.name, a.node.network.name) == \
        (1, 8, "a100-sxm-80gb", "nvlink3", "ib-hdr-8x200")
    assert (a.node.host.dram_capacity, a.node.storage.count, a.node.storage.device.name) == \
        (2 * 2**40, 8, "d7-p5500-3.84tb")
    b = catalog.load_system("dgx-a100-40gb")
    assert (b.node.gpu.name, b.node.host.dram_capacity, b.node.storage.count) == ("a100-sxm-40gb", 2**40, 4)
    for name, gpu in (("dgx-h100", "h100-sxm-80gb"), ("dgx-h200", "h200-sxm-141gb")):
        s = catalog.load_system(name)
        assert (s.nodes, s.node.gpu.name, s.node.gpu_link.name, s.node.host_link.name, s.node.network.name) == \
            (1, gpu, "nvlink4", "pcie5-x16", "ib-ndr-8x400")
    cluster = catalog.load_system("h100-cluster")
    assert (cluster.nodes, cluster.gpus) == (32, 256)
    assert cluster.gpus >= 8 * 16 * 2     # llama3.1-405b at tp 8, pp 16, dp 2 (see the file's comment)
    server = catalog.load_system("a100-server-nvme")
    assert (server.nodes, server.node.network, server.node.storage.count) == (1, None, 4)
    assert server.node.storage.count * server.node.storage.device.capacity == 4 * 3.84e12


def test_list_hardware_and_components(capsys):
    code, out, err = run(capsys, "list", "hardware", "--json")
    assert code == 0, err
    names = {item["name"] for item in json.loads(out)}
    assert set(SYSTEMS) <= names
    assert {n for n in names if "chiplet" not in n} == set(SYSTEMS)   # plus the chiplet packages
    code, out, err = run(capsys, "list", "hardware")
    assert code == 0, err
    for name in SYSTEMS:
        assert name in out
    code, out, err = run(capsys, "list", "components", "--json")
    assert code == 0, err
    assert {item["name"] for item in json.loads(out)} == {f"{k}/{n}" for k, n in COMPONENTS}


@pytest.mark.parametrize("name", SYSTEMS)
def test_show_hardware_system_json(capsys, name):
    code, out, err = run(capsys, "show", "hardware", name, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["kind"], data["name"]) == ("gpu-system", name)
    assert data["node"]["gpu"]["hbm_capacity"] == dataclasses.asdict(catalog.load_system(name))["node"]["gpu"][
        "hbm_capacity"]


@pytest.mark.parametrize("kind,name", COMPONENTS)
def test_show_hardware_component_json(capsys, kind, name):
    code, out, err = run(capsys, "show", "hardware", name, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["kind"], data["name"]) == (kind.rstrip("s"), name)


def test_show_hardware_values_are_si(capsys):
    code, out, _ = run(capsys, "show", "hardware", "nvlink3", "--json")
    assert code == 0 and json.loads(out)["bandwidth"] == 300e9
    code, out, _ = run(capsys, "show", "hardware", "a100-sxm-80gb", "--json")
    assert code == 0 and json.loads(out)["hbm_capacity"] == 80 * GiB


def test_estimate_with_no_flags_uses_the_shipped_defaults(capsys):
    code, out, err = run(capsys, "estimate", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["hardware"]["name"] == "dgx-a100-80gb"
    assert data["model"]["name"] == "llama2-7b" and data["model"]["params"] == 6_738_415_616
    code, out, err = run(capsys, "estimate")
    assert code == 0, err
    assert "dse: error" not in err


# The 2025-26 catalog (issue 16): each GPU's dense bf16 peak (TFLOP/s), memory (bytes), memory bandwidth
# (B/s) and board power (W), as cited in its file's header comment.
GB, TB = 1e9, 1e12
NEW_GPUS = {
    "b200-sxm-180gb": (2250, 180 * GB, 8 * TB, 1000),   # HGX B200: 4,500 sparse; DGX B200 1,440 GB / 8
    "gb200-186gb": (2500, 186 * GB, 8 * TB, 1200),      # GB200 at 1,200 W: 5,000 sparse; NVL72 13.4 TB / 72
    "rtx-4090": (165.2, 24564 * MiB, 1008 * GB, 450),   # Ada whitepaper, BF16 with FP32 accumulate
    "rtx-5090": (209.5, 32109 * MiB, 1792 * GB, 575),   # RTX Blackwell whitepaper (not verified)
    "l40s": (366.5, 48 * GB, 864 * GB, 350),            # L40S datasheet: 733 with sparsity
    "mi300x": (1307.4, 192 * GB, 5.3 * TB, 750),         # AMD data sheet
    "mi325x": (1307.4, 256 * GB, 6 * TB, 1000),          # AMD data sheet
    "h20": (148, 96 * GB, 4.0 * TB, 400),                # secondary reports (not verified)
}
NEW_SYSTEMS = {  # system: (gpu, gpus per node, gpu link or None)
    "dgx-b200": ("b200-sxm-180gb", 8, "nvlink5"),
    "gb200-nvl72": ("gb200-186gb", 72, "nvlink5"),
    "workstation-rtx4090-x2": ("rtx-4090", 2, "pcie4-x16-gpu-peer"),
    "workstation-rtx5090": ("rtx-5090", 1, None),
    "server-l40s-x8": ("l40s", 8, "pcie4-x16-gpu-peer"),
    "mi300x-platform": ("mi300x", 8, "xgmi-mi300x"),
    "mi325x-platform": ("mi325x", 8, "xgmi-mi300x"),
    "hgx-h20": ("h20", 8, "nvlink4"),
}


@pytest.mark.parametrize("name", sorted(NEW_GPUS))
def test_new_gpus_match_their_datasheets(name):
    bf16, capacity, bandwidth, power = NEW_GPUS[name]
    gpu = component(name)
    assert gpu.peak_flops["bf16"] == pytest.approx(bf16 * 1e12, rel=1e-12)
    assert gpu.peak_flops["fp16"] == gpu.peak_flops["bf16"]
    # FP8 at twice the 16-bit rate; the whitepapers round each figure separately (330.3 vs 2 x 165.2)
    assert gpu.peak_flops["fp8"] == pytest.approx(2 * gpu.peak_flops["bf16"], rel=1e-3)
    assert (gpu.hbm_capacity, gpu.hbm_bandwidth, gpu.power) == pytest.approx((capacity, bandwidth, power), rel=1e-12)
    assert gpu.price > 0, f"{name}: street price estimate missing"


@pytest.mark.parametrize("name", sorted(NEW_GPUS))
def test_new_gpus_efficiency_is_no_more_optimistic_than_the_h100s(name):
    # Nothing was measured on these GPUs: their blocks are assumptions, bounded by the H100's measurements.
    h100, eff = component("h100-sxm-80gb").efficiency, component(name).efficiency
    for field in ("gemm", "attention", "memory", "gemm_unaligned"):
        assert getattr(eff, field) <= getattr(h100, field), f"{name}: {field}"
    for field in ("gemm_overhead", "kernel_overhead", "gemm_depth", "layer_overhead"):
        assert getattr(eff, field) >= getattr(h100, field), f"{name}: {field}"
    assert "ASSUMPTION" in (catalog.hw_dir("gpus") / f"{name}.yaml").read_text()


def test_new_links_parse_to_si():
    assert component("nvlink5").bandwidth == 900e9            # 18 links x 50 GB/s (DGX B200: 14.4 TB/s / 8 / 2)
    assert component("xgmi-mi300x").bandwidth == 448e9        # 7 links x 64 GB/s per direction
    assert component("xgmi-mi300x").efficiency == 0.75        # RCCL: 48 of 64 GB/s per link (ROCm/rccl#1210)
    assert component("pcie4-x16-gpu-peer").bandwidth == component("pcie4-x16").bandwidth
    assert component("pcie4-x16-gpu-peer").efficiency < component("pcie4-x16").efficiency
    assert component("dgx-b200-host").cores == 112 and component("dgx-b200-host").dram_capacity == 2 * 2**40


@pytest.mark.parametrize("name", sorted(NEW_SYSTEMS))
def test_new_systems_are_composed_as_documented(name):
    gpu, per_node, link = NEW_SYSTEMS[name]
    s = catalog.load_system(name)
    assert (s.nodes, s.node.gpu.name, s.node.gpus_per_node) == (1, gpu, per_node)
    # a multi-GPU box must name its GPU link: without one the estimate takes it as infinitely fast
    assert (s.node.gpu_link.name if s.node.gpu_link else None) == link
    assert per_node == 1 or s.node.gpu_link is not None


def _finite(tree) -> bool:
    if isinstance(tree, dict):
        return all(_finite(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return all(_finite(v) for v in tree)
    return not isinstance(tree, float) or math.isfinite(tree)


@pytest.mark.parametrize("name,model,plan,fits", [
    ("dgx-b200", "llama3-8b", dict(dp=8, micro_batch=1, seq_len=4096, zero=1), True),
    ("gb200-nvl72", "llama3-8b", dict(dp=8, micro_batch=1, seq_len=4096, zero=1), True),
    ("mi300x-platform", "llama3-8b", dict(dp=8, micro_batch=1, seq_len=4096, zero=1), True),
    ("mi325x-platform", "llama3-8b", dict(dp=8, micro_batch=1, seq_len=4096, zero=1), True),
    ("hgx-h20", "llama3-8b", dict(dp=8, micro_batch=1, seq_len=4096, zero=1), True),
    ("server-l40s-x8", "llama3-8b", dict(dp=8, micro_batch=1, seq_len=4096, zero=3, recompute="selective"), True),
    ("workstation-rtx4090-x2", "gpt2-xl", dict(dp=2, micro_batch=2, seq_len=1024, zero=1, recompute="full"), True),
    ("workstation-rtx4090-x2", "llama3-8b", dict(dp=2, micro_batch=1, seq_len=2048, zero=1), False),
    ("workstation-rtx5090", "gpt2-xl", dict(dp=1, micro_batch=1, seq_len=1024, recompute="full"), True),
])
def test_an_estimate_runs_on_each_new_system(name, model, plan, fits):
    r = dse.estimate(model, name, **plan)
    assert _finite(r["time"]) and _finite(r["memory"]) and _finite(r["throughput"])
    assert r["time"]["iteration"] > 0 and 0 < r["throughput"]["mfu"] < 1
    assert r["feasible"] is fits
    if not fits:  # full training of an 8 B model on a 24 GB card: said plainly, with the numbers
        assert r["violations"] == ["gpu memory: needs 101 GiB per GPU, has 24.0 GiB"]


def test_new_systems_listed_and_shown(capsys):
    code, out, _ = run(capsys, "list", "hardware")
    assert code == 0 and all(name in out for name in NEW_SYSTEMS)
    code, out, _ = run(capsys, "show", "hardware", "workstation-rtx4090-x2", "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["node"]["gpu"]["peak_flops"]["bf16"] == pytest.approx(165.2e12)
    assert shown["node"]["gpu_link"]["name"] == "pcie4-x16-gpu-peer"
