"""dse.formulas.activation_offload: SSDTrain's rules as equations, the note's worked numbers, arrays = scalars."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dse.formulas import activation_offload as AO, transformer as T

GPT_12288 = dict(s=1024, b=16, h=12288, heads=96, kv_heads=96, head_dim=128, ffn=4 * 12288)
TP2_FLASH = dict(tp=2, sequence_parallel=False, attention="flash", dropout=True, bytes_per_element=2)
MIB8 = 8 * 1024 * 1024


# ----------------------------------------------------------------- which tensors are written


def test_large_layer_offloads_everything_but_the_small_tensors():
    saved = T.activation_terms(**GPT_12288, **TP2_FLASH)
    off = AO.offloaded_terms(**GPT_12288, **TP2_FLASH)
    assert set(off) == set(saved)
    sb = 1024 * 16
    # the fp32 log-sum-exp has s b a/t = 786,432 elements: under 8 Mi, stays on the GPU
    assert off["flash_lse"] == 0 and saved["flash_lse"] == 4 * sb * 96 / 2
    # norm inputs: the [s, b, h] input goes, its fp32 statistics (s b rows) stay
    assert off["norm1_input"] == 2 * sb * 12288
    assert saved["norm1_input"] - off["norm1_input"] == 8 * sb
    for name in ("qkv_input", "qkv_output", "out_proj_input", "fc1_input", "mlp_activation",
                 "attn_residual_dropout_mask", "mlp_residual_dropout_mask"):
        assert off[name] == saved[name], name
    total = AO.offloaded_bytes_per_layer(**GPT_12288, **TP2_FLASH)
    assert total == pytest.approx(sum(saved.values()) - saved["flash_lse"] - 2 * 8 * sb)


def test_small_layer_offloads_nothing():
    assert AO.offloaded_bytes_per_layer(s=128, b=1, h=1024, heads=16, kv_heads=16, head_dim=64, ffn=4096) == 0


def test_threshold_counts_elements_not_bytes():
    """A 1-byte dropout mask of 8 Mi elements is written; a bf16 tensor of the same bytes (4 Mi elements) is not."""
    # s b h = 8 Mi: every [s, b, h] tensor sits exactly at the threshold
    off = AO.offloaded_terms(s=1024, b=8, h=1024, heads=16, kv_heads=16, head_dim=64, ffn=4096, dropout=True)
    assert off["attn_residual_dropout_mask"] == MIB8          # 8 Mi one-byte elements: at the threshold, written
    assert off["qkv_input"] == 2 * MIB8                       # 8 Mi bf16 elements
    # halve the batch: masks (4 Mi elements) stay, and so do [s, b, h] bf16 tensors (4 Mi elements)
    off = AO.offloaded_terms(s=1024, b=4, h=1024, heads=16, kv_heads=16, head_dim=64, ffn=4096, dropout=True)
    assert off["attn_residual_dropout_mask"] == 0 and off["qkv_input"] == 0
    assert off["mlp_activation"] == 2 * 2 * 4096 * 4096       # GeLU in+out: F-wide, 16 Mi elements each: written


def test_full_recompute_offloads_the_layer_input():
    off = AO.offloaded_terms(**GPT_12288, **{**TP2_FLASH, "recompute": "full"})
    assert off == {"layer_input": 2 * 1024 * 16 * 12288}


# ----------------------------------------------------------------- the note's worked numbers (V12, V16)


def test_v12_bytes_per_layer_alpha_22_and_autograd_exact():
    saved = T.activation_bytes_per_layer(**GPT_12288, **TP2_FLASH)
    alpha22 = 22 * 1024 * 16 * 12288                           # note §1.4: alpha = 10 + 24/t
    assert alpha22 == pytest.approx(4.43e9, rel=1e-3)
    assert saved / alpha22 - 1 == pytest.approx(0.0, abs=1e-3)   # + LSE and norm statistics: 0.07 %
    assert 3 * saved == pytest.approx(13.3e9, rel=2e-3)


@pytest.mark.parametrize("tflops,gbps", [(100, 14.7), (150, 22.1)])
def test_v12_strict_write_bandwidth(tflops, gbps):
    t_f = AO.layer_forward_time(1024, 16, 12288, 2, tflops * 1e12)
    assert 24 * 16 * 1024 * 12288**2 * (1 + 1024 / (6 * 12288)) / 2 == pytest.approx(30.1e12, rel=2e-3)
    a_off = AO.offloaded_bytes_per_layer(**GPT_12288, **TP2_FLASH)
    assert AO.write_bandwidth_required(a_off, t_f) == pytest.approx(gbps * 1e9, rel=4e-3)
    assert AO.read_bandwidth_required(a_off, 2 * t_f) == pytest.approx(gbps * 1e9 / 2, rel=4e-3)


def test_v16_endurance_and_lifetime():
    tbw = AO.rated_endurance(1.6e12, 100, 5)
    assert tbw == pytest.approx(292e15, rel=1e-9)
    for rate, years in ((1e9, 9.3), (3e9, 3.1), (5e9, 1.85)):
        assert AO.lifetime_years(tbw, rate) == pytest.approx(years, rel=0.01)


# ----------------------------------------------------------------- the adaptive rule


def test_adaptive_rule_closed_form_matches_the_walk_example():
    # 3 layers of 4.43 GB, 0.15 s forward each, micro-batch forward 0.5 s, 18.6 GB/s
    k = AO.adaptive_offload_layers(18.6e9, 4.43e9, 0.15, 0.5, 3)
    assert k == AO.adaptive_first_kept_scope([4.43e9] * 3, [0.15] * 3, 0.5, 18.6e9) == 2
    # the rule's bandwidth for layer index k is what separates the cases
    assert (AO.adaptive_bandwidth_required(1, 4.43e9, 0.15, 0.5) <= 18.6e9
            < AO.adaptive_bandwidth_required(2, 4.43e9, 0.15, 0.5))


@settings(max_examples=300, deadline=None)
@given(layers=st.integers(1, 48), a=st.floats(1e6, 1e10), t=st.floats(1e-4, 1.0), extra=st.floats(0.0, 2.0),
       bw=st.floats(1e7, 1e12))
def test_adaptive_rule_closed_form_equals_scope_walk(layers, a, t, extra, bw):
    t_fwd = layers * t * (1 + extra)               # the head and embedding add forward time
    k = AO.adaptive_offload_layers(bw, a, t, t_fwd, layers)
    walk = AO.adaptive_first_kept_scope([a] * layers, [t] * layers, t_fwd, bw)
    x = (3 * bw * t_fwd - 2 * a) / (a + 2 * bw * t)
    if abs(x - round(x)) > 1e-9 * max(1.0, abs(x)):   # away from floating-point ties
        assert k == walk


@settings(max_examples=200, deadline=None)
@given(layers=st.integers(1, 48), a=st.floats(1e6, 1e10), t=st.floats(1e-4, 1.0), bw=st.floats(1e7, 1e12),
       more=st.floats(1.0, 100.0))
def test_adaptive_rule_offloads_more_with_more_bandwidth(layers, a, t, bw, more):
    t_fwd = 1.2 * layers * t
    assert (AO.adaptive_offload_layers(bw * more, a, t, t_fwd, layers)
            >= AO.adaptive_offload_layers(bw, a, t, t_fwd, layers))


def test_adaptive_rule_limits():
    assert AO.adaptive_offload_layers(1.0, 4e9, 0.1, 1.0, 8) == 0        # no bandwidth: keep everything
    assert AO.adaptive_offload_layers(1e15, 4e9, 0.1, 1.0, 8) == 8       # unlimited: offload every layer


# ----------------------------------------------------------------- timeline, exposure, memory


def test_write_backlog_and_forwarding_bounds():
    assert AO.write_backlog(10e9, 20e9, 1.0) == 0
    assert AO.write_backlog(10e9, 4e9, 1.0) == pytest.approx(6e9)
    assert AO.write_backlog(10e9, 0.0, 1.0) == 10e9
    assert AO.forwarded_bytes(10e9, 4e9, 2.0) == pytest.approx(2e9)
    assert AO.forwarded_bytes(10e9, 4e9, 3.0) == 0


def test_exposed_io_hides_when_bandwidth_suffices_and_grows_when_short():
    kw = dict(written_bytes=12e9, read_bytes=12e9, read_layers=3, layer_read_bytes=4e9, layer_backward_time=0.3,
              window=1.5)
    assert AO.exposed_io_time(write_bandwidth=20e9, read_bandwidth=20e9, **kw) == 0
    short = AO.exposed_io_time(write_bandwidth=10e9, read_bandwidth=10e9, **kw)
    # per-layer reads: 0.4 s for a 0.3 s window -> 3 x 0.1 s; drives busy 2.4 s in a 1.5 s window -> 0.9 s
    assert short == pytest.approx(0.9)


@settings(max_examples=200, deadline=None)
@given(w=st.floats(0, 1e11), a=st.floats(1e6, 1e10), n=st.floats(0, 40), bw=st.floats(1e8, 1e11),
       more=st.floats(1.0, 50.0), tb=st.floats(1e-3, 1.0), window=st.floats(1e-2, 10.0))
def test_exposed_io_never_grows_with_bandwidth(w, a, n, bw, more, tb, window):
    lo = AO.exposed_io_time(w, w, n, a, bw, bw, tb, window)
    hi = AO.exposed_io_time(w, w, n, a, bw * more, bw * more, tb, window)
    assert hi <= lo * (1 + 1e-12) + 1e-15


def _exposed(k, bw_w, bw_r, a, tb, start, window, layers):
    """The estimate's timeline of one micro-batch (dse/estimate/activation_offload.py) with writes at bw_w."""
    w = k * a
    fwd = AO.forwarded_bytes(w, bw_w, start + (layers - k) * tb)
    r = w - fwd
    return AO.exposed_io_time(r, r, r / a, a, bw_w, bw_r, tb, window), fwd


def _exposed_paced(k, bw_w, bw_r, ratio, a, tb, start, window, layers):
    """Full-rate or paced writes, whichever exposes less (what the estimate reports)."""
    full = _exposed(k, bw_w, bw_r, a, tb, start, window, layers)[0]
    paced = _exposed(k, AO.paced_write_bandwidth(bw_w, bw_r, ratio), bw_r, a, tb, start, window, layers)[0]
    return min(full, paced)


TIMELINE = dict(layers=st.integers(1, 48), a=st.floats(1e7, 1e10), tb=st.floats(1e-3, 0.5),
                start=st.floats(1e-3, 5.0), slack=st.floats(1.0, 3.0), bw_w=st.floats(1e8, 1e11),
                bw_r=st.floats(1e8, 1e11))


@settings(max_examples=400, deadline=None)
@given(**TIMELINE)
def test_hidden_layers_every_prefix_hides_and_one_more_does_not(layers, a, tb, start, slack, bw_w, bw_r):
    window = slack * (start + layers * tb)          # the micro-batch's window covers forward and backward
    kh = AO.hidden_offload_layers(bw_w, bw_r, a, tb, start, window, layers)
    assert 0 <= kh <= layers and kh == int(kh)
    for k in range(int(kh) + 1):
        assert _exposed(k, bw_w, bw_r, a, tb, start, window, layers)[0] <= 1e-12 * window
    if kh < layers:   # the next layer exposes I/O, or is past the point where writes keep up (bound uses the top)
        ex, fwd = _exposed(kh + 1, bw_w, bw_r, a, tb, start, window, layers)
        assert ex > 0 or fwd > 0


@settings(max_examples=300, deadline=None)
@given(**TIMELINE, more=st.floats(1.0, 20.0))
def test_hidden_layers_never_fall_with_bandwidth(layers, a, tb, start, slack, bw_w, bw_r, more):
    window = slack * (start + layers * tb)
    kh = AO.hidden_offload_layers(bw_w, bw_r, a, tb, start, window, layers)
    assert AO.hidden_offload_layers(bw_w * more, bw_r, a, tb, start, window, layers) >= kh
    assert AO.hidden_offload_layers(bw_w, bw_r * more, a, tb, start, window, layers) >= kh
    assert AO.hidden_offload_layers(bw_w * more, bw_r * more, a, tb, start, window, layers) >= kh


def test_hidden_layers_limits():
    assert AO.hidden_offload_layers(1e12, 1e12, 4e9, 0.3, 1.0, 10.0, 8) == 8     # fast drives: every layer
    assert AO.hidden_offload_layers(1e12, 10e9, 4e9, 0.3, 1.0, 10.0, 8) == 0     # 0.4 s reads, 0.3 s backward
    assert AO.hidden_offload_layers(1e12, 1e12, 0.0, 0.3, 1.0, 10.0, 8) == 8     # nothing to move


def test_paced_writes_only_below_a_capped_read_side():
    assert AO.paced_write_bandwidth(17.2e9, 28e9, 4.3 / 7) == pytest.approx(17.2e9)   # nothing capped
    assert AO.paced_write_bandwidth(38.4e9, 38.4e9, 4.3 / 7) == pytest.approx(38.4e9 * 4.3 / 7)
    assert AO.paced_write_bandwidth(5e9, 5e9, 1.2) == 5e9                             # writes capped first


@settings(max_examples=400, deadline=None)
@given(**TIMELINE, k=st.integers(0, 48), w=st.floats(1e8, 1e10), rho=st.floats(0.3, 1.5), cap=st.floats(1e9, 1e11),
       n=st.floats(0.05, 8.0), more=st.floats(1.0, 16.0), faster_reads=st.floats(1.0, 4.0))
def test_paced_exposure_never_grows_with_drives_or_read_bandwidth(layers, a, tb, start, slack, bw_w, bw_r, k, w, rho,
                                                                   cap, n, more, faster_reads):
    """An array of n drives (write w, read w/rho each) behind a cap shared by both directions: at any fixed k,
    more drives, faster drives, or faster reads never expose more I/O (with full-rate writes they can: the read
    side caps first, faster writes forward less and read back more)."""
    k = min(k, layers)
    window = slack * (start + layers * tb)

    def exposed(drives, read_boost=1.0):
        r = read_boost * w / rho
        return _exposed_paced(k, min(drives * w, cap), min(drives * r, cap), w / r, a, tb, start, window, layers)

    lo = exposed(n)
    assert exposed(n * more) <= lo * (1 + 1e-9) + 1e-12
    assert exposed(n, faster_reads) <= lo * (1 + 1e-9) + 1e-12


@settings(max_examples=300, deadline=None)
@given(layers=st.integers(1, 32), a=st.floats(1e6, 1e10), frac=st.floats(0.5, 1.0), in_flight=st.integers(1, 16),
       bw=st.floats(1e8, 1e11), t_fwd=st.floats(1e-3, 5.0))
def test_more_offloaded_layers_never_raise_the_gpu_peak(layers, a, frac, in_flight, bw, t_fwd):
    a_off = frac * a
    peaks = [AO.gpu_activation_bytes_offload(layers, k, a, a_off, in_flight, AO.write_backlog(k * a_off, bw, t_fwd))
             for k in range(layers + 1)]
    assert peaks[0] == pytest.approx(in_flight * layers * a)
    for lo, hi in zip(peaks[1:], peaks[:-1]):
        assert lo <= hi * (1 + 1e-12)


def test_rok_peaks_order():
    a, sel, full = 22.0, 22.0, 2.0
    peaks = AO.rok_activation_peaks(4, 1, a, sel, full, offload_layer_kept_bytes=0.1)
    assert peaks["keep"] == 88 and peaks["full"] == 8 + 22 and peaks["offload"] == pytest.approx(0.4 + 22)
    assert peaks["offload"] < peaks["full"] < peaks["keep"]


# ----------------------------------------------------------------- bandwidth per GPU


def test_drives_per_gpu_uses_the_slowest_array():
    assert AO.drives_per_gpu(7, 2) == 3        # SSDTrain: RAID0 of 4 and 3 -> the 3-drive array bounds TP=2
    assert AO.drives_per_gpu(8, 8) == 1
    assert AO.drives_per_gpu(4, 8) == 0.5      # shared


def test_io_paths():
    gds = AO.activation_io_bandwidth(18.6e9, 25.2e9, "gds", 409.6e9, 2)
    bounce = AO.activation_io_bandwidth(18.6e9, 25.2e9, "bounce", 409.6e9, 2)
    assert gds == 18.6e9 and bounce == 18.6e9
    assert AO.activation_io_bandwidth(18.6e9, 25.2e9, "bounce", 60e9, 2) == 15e9    # DRAM crossed twice per GPU
    assert AO.activation_io_bandwidth(float("inf"), 25.2e9, "host", 409.6e9, 8) == 25.2e9
    assert AO.link_bandwidth_left(25e9, 0.0, 1.0) == 25e9
    assert AO.link_bandwidth_left(25e9, 12.5e9, 1.0) == pytest.approx(12.5e9)
    assert 0 < AO.link_bandwidth_left(25e9, 50e9, 1.0) < 1e5


def test_largest_micro_batch_and_pipeline_time():
    assert AO.largest_micro_batch(80e9, 50e9, 1e9) == 30
    assert AO.largest_micro_batch(80e9, 90e9, 1e9) == 0
    assert AO.pipeline_iteration_time(8, 4, 1.0) == 11.0
    assert AO.pipeline_iteration_time(8, 2, 1.0) < AO.pipeline_iteration_time(8, 4, 1.0)


# ----------------------------------------------------------------- endurance falls as the write volume rises


@settings(max_examples=200, deadline=None)
@given(rate=st.floats(1e6, 1e11), more=st.floats(1.0, 100.0), m=st.integers(1, 64), w=st.floats(0, 1e11))
def test_endurance_falls_with_write_volume(rate, more, m, w):
    tbw = AO.rated_endurance(3.84e12, 1, 5)
    assert AO.lifetime_years(tbw, rate * more) <= AO.lifetime_years(tbw, rate)
    assert AO.bytes_written_per_iteration(m + 1, w) >= AO.bytes_written_per_iteration(m, w)
    assert AO.bytes_written_per_iteration(m, w, 2.0) == 2 * AO.bytes_written_per_iteration(m, w)


# ----------------------------------------------------------------- arrays broadcast like scalars


def test_formulas_broadcast_over_arrays():
    bs = np.array([1, 4, 16, 32])
    arr = AO.offloaded_bytes_per_layer(1024, bs, 8192, 64, 64, 128, 32768, tp=2)
    for i, b in enumerate(bs):
        assert arr[i] == AO.offloaded_bytes_per_layer(1024, int(b), 8192, 64, 64, 128, 32768, tp=2)
    bw = np.array([1e9, 1e10, 3e10, 1e12])
    ks = AO.adaptive_offload_layers(bw, 3e9, 0.1, 0.5, 4)
    assert list(ks) == [AO.adaptive_offload_layers(float(x), 3e9, 0.1, 0.5, 4) for x in bw]
    ex = AO.exposed_io_time(9e9, 9e9, 3, 3e9, bw, bw, 0.2, 1.0)
    assert list(ex) == [AO.exposed_io_time(9e9, 9e9, 3, 3e9, float(x), float(x), 0.2, 1.0) for x in bw]
    n = np.array([1, 2, 7, 8, 16])
    assert list(AO.drives_per_gpu(n, 8)) == [AO.drives_per_gpu(int(x), 8) for x in n]
    assert list(AO.lifetime_years(AO.rated_endurance(1.6e12, 100, 5), bw)) == \
        [AO.lifetime_years(292e15, float(x)) for x in bw]
    peaks = AO.gpu_activation_bytes_offload(4, np.array([0, 1, 2, 3, 4]), 3e9, 2.9e9, 1, 0.0)
    assert [float(p) for p in peaks] == [AO.gpu_activation_bytes_offload(4, k, 3e9, 2.9e9, 1, 0.0) for k in range(5)]
    assert all(math.isfinite(float(x)) for x in peaks)
