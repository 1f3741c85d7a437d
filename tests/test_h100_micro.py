"""The H100's efficiency parameters (hwspecs/gpus/h100-sxm-80gb.yaml) come from its measured micro-benchmarks.

Each shipped number is recomputed here from data/h100_hf_training.jsonl (kind micro and profile), so a
reader can see where it comes from and a change to either side is caught.
"""

from __future__ import annotations

import json

import pytest

from dse.calibrate import micro
from dse.catalog import data_dir, load_system
from dse.errors import InputError

pytest.importorskip("scipy")


def _rows(kind):
    with open(data_dir() / "h100_hf_training.jsonl") as f:
        return [r for r in map(json.loads, f) if r["kind"] == kind]


GPU = load_system("dgx-h100").node.gpu
PEAK = GPU.peak_flops["bf16"]


def test_gemm_efficiency_depth_and_overhead_are_the_fit_of_the_measured_gemms():
    fit = micro.fit_gemm(_rows("micro")[0]["gemm_tflops"], PEAK)
    eff = GPU.efficiency
    assert fit["gemm"] == pytest.approx(eff.gemm, abs=0.005)
    assert fit["gemm_depth"] == pytest.approx(eff.gemm_depth, abs=2)
    assert fit["gemm_overhead"] == pytest.approx(eff.gemm_overhead, abs=0.05e-6)
    assert max(abs(e) for e in fit["errors"]) < 0.04          # the model reproduces every shape within 4 %


def test_the_fit_without_varying_k_drops_the_depth_and_refuses_too_few_shapes():
    two_k = {"8192x8192x4096": 750.0, "4096x4096x4096": 740.0, "8192x1024x4096": 600.0}
    assert micro.fit_gemm(two_k, PEAK)["gemm_depth"] == 0.0
    with pytest.raises(InputError, match="cannot determine"):
        micro.fit_gemm({"8192x8192x8192": 790.0, "1024x1024x1024": 300.0}, PEAK)
    with pytest.raises(InputError, match="MxNxK"):
        micro.gemm_shapes({"8192x8192": 1.0})


def test_memory_efficiency_is_the_measured_copy_rate_over_the_nominal_bandwidth():
    rate = _rows("micro")[0]["hbm_copy_GBps_rw"] * 1e9
    assert micro.memory_efficiency(rate, GPU.hbm_bandwidth) == pytest.approx(GPU.efficiency.memory, abs=0.001)


def _lm_head_and_flash_rates():
    """(LM-head GEMM rate, cuDNN flash backward rate) / bf16 peak in each profile: from the named kernels."""
    dims = {"gpt2-medium": (1024, 16), "gpt2-xl": (1600, 25)}
    out = []
    for p in _rows("profile"):
        h, a = dims[p["model"]]
        tok, s, d = p["b"] * p["s"], p["s"], h // a
        head = sum(t for t, name, _ in p["top"] if "align1" in name)          # fwd, dgrad, wgrad: cuBLAS align1
        head_flops = 3 * 2 * tok * h * 50257
        bprop = [(t, n) for t, name, n in p["top"] if "flash_bprop" in name]
        flash_bwd = 2.5 * 4 * s * s * p["b"] * a * d / 2                      # causal: half the scores, 2.5x fwd
        out.append((head_flops / head / PEAK, flash_bwd * bprop[0][1] / bprop[0][0] / PEAK))
    return out


def test_unaligned_lm_head_and_flash_attention_efficiencies_are_the_profiled_kernels_rates():
    rates = _lm_head_and_flash_rates()
    assert len(rates) == 2
    head = sum(r[0] for r in rates) / 2
    flash = sum(r[1] for r in rates) / 2
    assert head == pytest.approx(GPU.efficiency.gemm_unaligned, abs=0.003)
    assert flash == pytest.approx(GPU.efficiency.attention, abs=0.01)


def test_kernel_overhead_is_the_h200_intercept_plus_the_gap_between_kernels_in_the_h100_profiles():
    """scripts/kernel_rates.py: the H200's in-kernel intercept (same GH100 die) plus the GPU's idle time per kernel in
    the H100 steps it is busy >= 95 % of."""
    import statistics
    import sys

    sys.path.insert(0, "scripts")
    import kernel_rates

    data = data_dir()
    h200 = [json.loads(x) for name in ("gpt2_hf.jsonl", "hf_families.jsonl") for x in open(data / "h200" / name)]
    t0 = statistics.median(kernel_rates.kernel_intercepts(h200))
    gaps = kernel_rates.kernel_gaps(kernel_rates.h100_rows(str(data)))
    assert len(gaps) == 4 and all(1.5e-6 < g < 3.1e-6 for g in gaps)
    assert GPU.efficiency.kernel_overhead == pytest.approx(t0 + statistics.median(gaps), abs=0.01e-6)
