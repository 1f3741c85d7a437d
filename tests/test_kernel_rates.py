"""Eager PyTorch's slow element-wise kernels: the non-vectorized (strided) path and the row softmax's element rate.

The rates in the H100/H200 GPU files come from measured kernel profiles (scripts/kernel_rates.py over
data/h200/gpt2_hf.jsonl); the stack rows that name ``strided`` / ``softmax`` parts price them; rows without them and
GPUs without the rates are priced as before.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from dse.catalog import load_system
from dse.errors import InputError
from dse.estimate.kernel_table import cost_of, kernel_time
from dse.formulas import compute as C


def _gpu(system: str):
    return load_system(system).node.gpu


def _rates():
    out = subprocess.run([sys.executable, "scripts/kernel_rates.py", "data/h200/gpt2_hf.jsonl"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def test_gpu_rates_are_the_measured_medians():
    d = _rates()
    per = d["gpt2"]
    assert len(per) == 6 and all(r["clones_per_layer"] == 7 for r in per)   # the traced stack's 7 copies per layer
    h200 = _gpu("dgx-h200").efficiency
    h100 = _gpu("dgx-h100").efficiency
    strided = d["median"]["strided_GBps_median"] * 1e9
    assert h200.memory_strided * 4.8e12 == pytest.approx(strided, rel=0.01)
    unvectorized = d["median"]["unvectorized_GBps_median"] * 1e9                 # the broadcast mask add
    assert h200.memory_unvectorized * 4.8e12 == pytest.approx(unvectorized, rel=0.01)
    for gpu in (h200, h100):
        assert gpu.softmax_rate == pytest.approx(d["median"]["softmax_forward_Gelem_s_median"] * 1e9, rel=0.01)
        assert gpu.softmax_rate_backward == pytest.approx(d["median"]["softmax_backward_Gelem_s_median"] * 1e9,
                                                          rel=0.01)
    # the softmax is element-bound: the fp32 softmax of Llama / Qwen2 runs at the bf16 one's element rate forward
    fam = [r["softmax_forward_Gelem_s"] for r in d["fp32_softmax_families"]]
    assert statistics.median(fam) == pytest.approx(d["median"]["softmax_forward_Gelem_s_median"], rel=0.12)


def _row(**extra):
    return {"kind": "elementwise", "bytes": 8e8, "bytes_backward": 1.2e9, "kernels": 2, "kernels_backward": 2,
            "saved": 0, **extra}


def test_strided_and_softmax_parts_add_their_slower_time():
    gpu = _gpu("dgx-h200")
    hw = cost_of(gpu, 989.5e12)
    plain_f, plain_b = kernel_time(_row(), hw, C)
    f, b = kernel_time(_row(strided=4e8), hw, C)
    assert b == plain_b
    bw = gpu.hbm_bandwidth
    assert f - plain_f == pytest.approx(4e8 / (bw * gpu.efficiency.memory_strided) - 4e8 / (bw * gpu.efficiency.memory))
    # 1e8 elements at 474 G/s (211 us) take longer than 4e8 bytes at 0.902 x 4.8 TB/s (92 us): element-bound
    f, _ = kernel_time(_row(softmax=4e8, softmax_elements=1e8), hw, C)
    assert f - plain_f == pytest.approx(1e8 / gpu.efficiency.softmax_rate - 4e8 / (bw * gpu.efficiency.memory))
    # bytes-bound (fp32 backward: 12 bytes an element): no extra time
    _, b = kernel_time(_row(softmax_backward=1.2e9, softmax_elements_backward=1e8), hw, C)
    assert b == plain_b
    # a GPU without the rates prices the same row as before
    a100 = cost_of(_gpu("dgx-a100-80gb"), 312e12)
    assert kernel_time(_row(strided=4e8, softmax=4e8, softmax_elements=1e8), a100, C) == kernel_time(_row(), a100, C)


def test_stack_parts_must_be_parts_of_moves():
    from dse.specs.stack import parse

    ok = {"name": "x", "rows": {"residual": {"forward": {"kernels": 1, "moves": {"h": 3}, "strided": {"h": 2}}}}}
    parse(ok, "x.yaml")
    bad = {"name": "x", "rows": {"residual": {"forward": {"kernels": 1, "moves": {"h": 3}, "strided": {"h": 4}}}}}
    with pytest.raises(InputError, match=r"x.yaml.rows.residual.forward.strided.h: more passes than moves"):
        parse(bad, "x.yaml")
    bad = {"name": "x", "rows": {"residual": {"forward": {"kernels": 1, "moves": {"h": 3}, "strided": {"h": 2},
                                                          "unvectorized": {"h": 2}}}}}   # disjoint parts: 4 > 3
    with pytest.raises(InputError, match=r"forward.strided.h: more passes than moves"):
        parse(bad, "x.yaml")
    bad = {"name": "x", "rows": {"residual": {"forward": {"kernels": 1, "moves": {"h": 3}, "fast": {"h": 1}}}}}
    with pytest.raises(InputError, match="strided / unvectorized / softmax"):
        parse(bad, "x.yaml")


def test_eager_gpt2_attention_rows_carry_their_rates():
    from dse.catalog import load_model
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.precision import recipe_of
    from dse.specs.plan import Plan

    m = load_model("gpt2-medium", [(["dropout"], 0.0)])
    plan = Plan(tp=1, pp=1, dp=1, seq_len=1024, micro_batch=4, global_batch=4, zero=0, attention="math",
                stack="pytorch").resolved(m)
    layer = kernel_tables(m, plan, recipe_of(plan))["layer"]
    scores = 4 * 16 * 1024 * 1024
    row = layer["softmax"]
    assert row["softmax_elements"] == scores and row["softmax_elements_backward"] == scores
    assert row["strided"] == 4 * 4096 * 1024 * 2                    # two (T, h) copies, bf16
    assert row["unvectorized"] == 2 * scores * 2                     # the mask add (one order, a broadcast mask)
    assert layer["kv_copy"]["strided"] == layer["kv_copy"]["bytes"]


def test_the_h100_carries_its_own_profiles_rates_within_10_percent_of_the_h200s():
    """The H100's strided and unvectorized shares are its own profile's rates (data/h100/gpt2_hf.jsonl, measured at
    the end of the same session) over its bandwidth: within 10 % of the H200's absolute rates (same SMs)."""
    sys.path.insert(0, "scripts")
    import kernel_rates

    rows = [json.loads(x) for x in open("data/h100/gpt2_hf.jsonl")]
    (r,) = kernel_rates.gpt2_rates(rows)
    h100 = _gpu("dgx-h100").efficiency
    measured = statistics.median([r["strided_clone_GBps"], r["strided_cat_GBps"]])
    assert h100.memory_strided * 3.35e12 / 1e9 == pytest.approx(measured, rel=0.01)        # its own profile
    assert h100.memory_unvectorized * 3.35e12 / 1e9 == pytest.approx(r["strided_mask_add_GBps"], rel=0.01)
    h200 = _gpu("dgx-h200").efficiency                                          # the same SMs: within 10 %
    assert h100.memory_strided * 3.35e12 == pytest.approx(h200.memory_strided * 4.8e12, rel=0.10)
    assert h100.memory_unvectorized * 3.35e12 == pytest.approx(h200.memory_unvectorized * 4.8e12, rel=0.10)
    assert h100.softmax_rate / 1e9 == pytest.approx(r["softmax_forward_Gelem_s"], rel=0.05)
