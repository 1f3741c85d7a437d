"""The H200's efficiency parameters (hwspecs/gpus/h200-sxm-141gb.yaml) come from its measured micro-benchmarks.

Each shipped number is recomputed from data/h200/ (micro.jsonl: CUDA-event GEMMs and HBM copy; gpt2_hf.jsonl's
profiles: the LM head's align1 GEMMs and cuDNN's flash backward), as tests/test_h100_micro.py does for the H100.
"""

from __future__ import annotations

import json

import pytest

from dse.calibrate import micro
from dse.catalog import data_dir, load_system

pytest.importorskip("scipy")

GPU = load_system("h200-vm").node.gpu
PEAK = GPU.peak_flops["bf16"]


def _rows(name, kind):
    with open(data_dir() / "h200" / name) as f:
        return [r for r in map(json.loads, f) if r["kind"] == kind]


def test_the_vm_and_the_dgx_carry_the_same_measured_gpu():
    assert load_system("dgx-h200").node.gpu == GPU


def test_gemm_efficiency_depth_and_overhead_are_the_fit_of_the_cuda_event_gemms():
    (row,) = _rows("micro.jsonl", "micro")
    fit = micro.fit_gemm(row["gemm_tflops"], PEAK)
    eff = GPU.efficiency
    assert fit["gemm"] == pytest.approx(eff.gemm, abs=0.005)
    assert fit["gemm_depth"] == pytest.approx(eff.gemm_depth, abs=2)
    assert fit["gemm_overhead"] == pytest.approx(eff.gemm_overhead, abs=0.05e-6)

    assert max(abs(e) for e in fit["errors"]) < 0.02


def test_memory_efficiency_is_the_measured_copy_rate_over_the_datasheet_bandwidth():
    (row,) = _rows("micro.jsonl", "micro")
    assert micro.memory_efficiency(row["hbm_copy_GBps_rw"] * 1e9, GPU.hbm_bandwidth) == pytest.approx(
        GPU.efficiency.memory, abs=0.001)


def test_lm_head_and_flash_efficiencies_are_the_profiled_kernels_mean_rates():
    dims = {"gpt2-medium": (1024, 16), "gpt2-xl": (1600, 25)}
    head, flash = [], []
    for p in _rows("gpt2_hf.jsonl", "profile"):
        if p["recompute"] != "none":
            continue
        h, a = dims[p["model"]]
        tok, s, d = p["b"] * p["s"], p["s"], h // a
        t_head = sum(t for t, name, _ in p["kernels"] if "align1" in name)    # fwd, dgrad, wgrad: cuBLAS align1
        head.append(3 * 2 * tok * h * 50257 / t_head / PEAK)
        bprop = [(t, n) for t, name, n in p["kernels"] if "flash_bprop" in name]
        if bprop:                                                            # causal: half the scores, 2.5x fwd
            flash.append(2.5 * 4 * s * s * p["b"] * a * d / 2 * bprop[0][1] / bprop[0][0] / PEAK)
    assert (len(head), len(flash)) == (12, 6)
    assert sum(head) / len(head) == pytest.approx(GPU.efficiency.gemm_unaligned, abs=0.001)
    assert sum(flash) / len(flash) == pytest.approx(GPU.efficiency.attention, abs=0.002)


def test_kernel_overhead_is_the_profiles_in_kernel_intercept_plus_the_gap_between_kernels():
    """scripts/kernel_rates.py: the element-wise kernels' per-call intercept between two micro-batches, plus the GPU's
    idle time per kernel in steps it is busy >= 95 % of."""
    import statistics
    import sys

    sys.path.insert(0, "scripts")
    import kernel_rates

    rows = _rows("gpt2_hf.jsonl", "profile") + _rows("gpt2_hf.jsonl", "base") + _rows("hf_families.jsonl", "profile") \
        + _rows("hf_families.jsonl", "base")
    t0 = statistics.median(kernel_rates.kernel_intercepts(rows))
    gaps = kernel_rates.kernel_gaps(rows)
    assert 1e-6 < t0 < 2.5e-6 and len(gaps) >= 10
    assert GPU.efficiency.kernel_overhead == pytest.approx(t0 + statistics.median(gaps), abs=0.01e-6)
