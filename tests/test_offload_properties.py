"""Property tests (hypothesis) of storage offload and SmartUpdate."""

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from dse.estimate import resolve, run
from dse.formulas import near_storage as NS

MODEL = "smart-infinity-gpt2-4.0b"
HW = "smart-infinity-a5000"
_CACHE = {}


def scenario(layers, **fields):
    key = (layers, tuple(sorted(fields.items())))
    if key not in _CACHE:
        fields = {"offload_params": "cpu", **fields}
        _CACHE[key] = resolve(MODEL, HW, None, [f"model.layers={layers}"], micro_batch=4, recompute="full", zero=3,
                              precision="fp16", **fields)
    return _CACHE[key]


layers = st.integers(min_value=2, max_value=400)
ratios = st.floats(min_value=1e-4, max_value=1.0, allow_nan=False)
drives = st.integers(min_value=1, max_value=63)
opt = st.sampled_from(["adam", "sgd-momentum", "adagrad"])
dtype = st.sampled_from(["fp32", "fp16"])


@settings(max_examples=60, deadline=None)
@given(layers, drives, ratios, st.booleans(), dtype, opt)
def test_adding_drives_never_slows_smartupdate(nl, n, c, overlap, xd, optimizer):
    m, s, p = scenario(nl, offload_optimizer="csd", transfer_overlap=overlap, exchange_dtype=xd, optimizer=optimizer)
    p = dataclasses.replace(p, gradient_compression=c)
    t_n = run(m, s, dataclasses.replace(p, ssds=n))["time"]
    t_n1 = run(m, s, dataclasses.replace(p, ssds=n + 1))["time"]
    assert t_n1["iteration"] <= t_n["iteration"] * (1 + 1e-12)
    assert t_n1["phase_update"] <= t_n["phase_update"] * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(layers, drives, ratios, ratios, dtype)
def test_compression_never_increases_shared_link_traffic(nl, n, c1, c2, xd):
    lo, hi = sorted((c1, c2))
    m, s, p = scenario(nl, offload_optimizer="csd", exchange_dtype=xd)
    tr = lambda c: run(m, s, dataclasses.replace(p, ssds=n, gradient_compression=c))["traffic"]  # noqa: E731
    dense = tr(1.0)
    assert tr(lo)["host_switch"] <= tr(hi)["host_switch"] * (1 + 1e-12) <= dense["host_switch"] * (1 + 1e-12)
    assert tr(lo)["csd_internal"] <= dense["csd_internal"] * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(layers, drives, st.sampled_from(["nvme", "csd", "cpu"]), st.sampled_from(["cpu", "nvme", "gpu"]), ratios, opt)
def test_traffic_totals_equal_the_sum_of_their_parts(nl, n, where, params, c, optimizer):
    m, s, p = scenario(nl, offload_optimizer=where, offload_params=params, optimizer=optimizer)
    p = dataclasses.replace(p, ssds=n, gradient_compression=c if where == "csd" else 1.0)
    r = run(m, s, p)
    links, tr = r["offload"]["links"], r["traffic"]
    assert tr["gpu_host"] == pytest.approx(links["gpu_host"]["bytes_to_gpu"] + links["gpu_host"]["bytes_from_gpu"])
    if "host_switch" in links:
        hs = links["host_switch"]
        assert tr["host_switch"] == pytest.approx(hs["bytes_down"] + hs["bytes_up"])
        assert tr["switch_drives"] == pytest.approx(links["switch_drives"]["per_drive"] * n)
    else:
        assert tr["host_switch"] == 0
    t = r["time"]
    assert t["phase_forward"] + t["phase_backward"] + t["phase_update"] == pytest.approx(t["iteration"])
    for tier in r["memory"].values():
        assert tier["total"] == pytest.approx(sum(tier[k] for k in ("weights", "gradients", "optimizer", "activations",
                                                                    "buffers")))


@settings(max_examples=200, deadline=None)
@given(st.floats(1e6, 1e13), st.integers(1, 1000), st.floats(0, 16), st.floats(1e8, 1e10), st.floats(1e8, 1e10),
       st.floats(1e8, 1e11), st.floats(1e8, 1e11), st.floats(0, 1))
def test_update_time_formula_is_monotone_in_drives(P, n, g, r, w, k, up, ov):
    kw = dict(grad_bytes_on_drive=g, read_bandwidth=r, write_bandwidth=w, kernel_throughput=k, upload_bandwidth=up,
              overlap=ov)
    assert NS.update_time(P, n + 1, **kw) <= NS.update_time(P, n, **kw) * (1 + 1e-12)
