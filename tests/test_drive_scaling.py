"""What limits the first drives of a storage-offloaded step (issue 17): DeepSpeed's aio queue (Little's law),
each drive's switch port, and ZeRO-3's gradient round trip over the GPU<->host link."""

import dataclasses
import json

import numpy as np
import pytest

from dse.estimate import offload_time
from dse.formulas import offload as O
from dse.validate import smart_infinity as SI

MiB = 2**20


def mva_throughput(customers: int, delay: float, service: float) -> float:
    """Exact mean-value analysis of a closed network: one pure delay (latency) and one FIFO server (transfer).

    Reiser & Lavenberg (1980): R(n) = D (1 + Q(n-1)), X(n) = n / (Z + R(n)), Q(n) = X(n) R(n). [requests/s]
    """
    q = 0.0
    x = 0.0
    for n in range(1, customers + 1):
        r = service * (1 + q)
        x = n / (delay + r)
        q = x * r
    return x


# ---------------------------------------------------------------- Little's law, closed forms


def test_one_request_in_flight_is_exactly_size_over_response_time():
    s, L, B = 512 * 1024, 85e-6, 3e9
    assert O.queue_limited_bandwidth(s, s, L, B) == pytest.approx(s / (L + s / B))
    assert O.queue_limited_bandwidth(s, s, L, B) == pytest.approx(s * mva_throughput(1, L, s / B))


def test_queue_limited_bandwidth_bounds_the_exact_closed_network():
    s, L, B = 512 * 1024, 85e-6, 3e9
    for k in (1, 2, 3, 5, 8, 16, 64, 256):
        exact = s * mva_throughput(k, L, s / B)
        bound = O.queue_limited_bandwidth(k * s, s, L, B)
        assert exact <= bound * (1 + 1e-12)            # the asymptotic bound is an upper bound
        if k >= 64:
            assert exact == pytest.approx(B, rel=0.01) and bound == B


def test_no_latency_or_deep_queue_gives_the_drive_rate():
    assert O.queue_limited_bandwidth(MiB, MiB, 0.0, 3e9) == 3e9
    assert O.queue_limited_bandwidth(MiB, MiB, 0.0, 3e9, overlap_events=False) == pytest.approx(3e9)
    assert O.queue_limited_bandwidth(64 * MiB, MiB, 85e-6, 3e9) == 3e9


def test_batched_submission_pays_the_latency_once_per_batch():
    B, L = 3e9, 100e-6
    q = B * L                                           # in flight = bandwidth-delay product: half the rate
    assert O.queue_limited_bandwidth(q, q, L, B, overlap_events=False) == pytest.approx(B / 2)
    q = np.array([0.1, 1, 10, 1000]) * B * L
    x = O.queue_limited_bandwidth(q, MiB, L, B, overlap_events=False)
    assert np.all(np.diff(x) > 0) and x[-1] == pytest.approx(B, rel=2e-3)


def test_inflight_bytes_and_request_size():
    assert O.aio_inflight_bytes() == 8 * MiB                              # DeepSpeed default: 1 x 8 x 1 MiB
    assert O.aio_inflight_bytes(MiB, 16, 4) == 64 * MiB                   # Smart-Infinity's ds_config
    assert O.drive_request_bytes(MiB, 1) == MiB                           # one drive: no md
    assert O.drive_request_bytes(MiB, np.array([2, 10])).tolist() == [O.RAID_CHUNK] * 2
    assert O.drive_request_bytes(128 * 1024, 4) == 128 * 1024


# ---------------------------------------------------------------- the estimate's drive array


def _system(name="smart-infinity-a5000", **device):
    s = SI.system(name)
    st = s.node.storage
    storage = dataclasses.replace(st, device=dataclasses.replace(st.device, **device))
    return dataclasses.replace(s, node=dataclasses.replace(s.node, storage=storage))


def test_smart_infinity_aio_never_limits_its_drives():
    sysm = SI.system("smart-infinity-a5000")
    assert sysm.node.storage.device.read_latency == pytest.approx(85e-6)   # PM983 datasheet
    for n in (1, 2, 4, 10):
        _h, up, r, w = offload_time.bandwidths(sysm, n, O, SI.plan_for("BASE", n))
        assert r == pytest.approx(min(n * 3.0e9, up)) and w == pytest.approx(min(n * 2.6e9, up))


def test_a_shallow_queue_caps_many_drives_below_the_uplink():
    sysm = _system()
    sysm = dataclasses.replace(sysm, node=dataclasses.replace(
        sysm.node, storage=dataclasses.replace(sysm.node.storage, uplink=None)))
    n = 10
    plan = SI.plan_for("BASE", n, aio_queue_depth=1, aio_thread_count=1)   # 1 MiB in flight over 10 drives
    _h, _u, r, _w = offload_time.bandwidths(sysm, n, O, plan)
    per_drive = (MiB / n) / (85e-6 + O.RAID_CHUNK / 3.0e9)
    assert r == pytest.approx(n * per_drive) and r < 0.5 * n * 3.0e9
    deep = SI.plan_for("BASE", n)                                          # 64 MiB: the drives' rate
    assert offload_time.bandwidths(sysm, n, O, deep)[2] == pytest.approx(n * 3.0e9)


def test_switch_port_caps_one_drive():
    s = SI.system("plain-nvme-a5000")
    fast = dataclasses.replace(s.node.storage.device, read_bandwidth=7e9, write_bandwidth=5e9)
    s = dataclasses.replace(s, node=dataclasses.replace(s.node, storage=dataclasses.replace(
        s.node.storage, device=fast)))
    port = s.node.storage.port.bandwidth * s.node.storage.port.efficiency      # Gen3 x4: 3.5 GB/s
    _h, _u, r, w = offload_time.bandwidths(s, 2, O, SI.plan_for("BASE", 2))
    assert port == pytest.approx(3.5066e9, rel=1e-3)
    assert r == pytest.approx(2 * port) and w == pytest.approx(2 * port)


# ---------------------------------------------------------------- ZeRO-3's gradient round trip


def test_round_trip_bytes_closed_form():
    P = 4e9
    assert O.gradient_round_trip_bytes(P) == (2 * P, 4 * P)                  # back up fp16, down fp32
    up, down = O.gradient_round_trip_bytes(P, 2, 4, micro_batches=4)
    assert (up, down) == (8 * P, 4 * P)                                     # the trip back is per micro-batch
    up, down = O.gradient_round_trip_bytes(P, 2, 4, compression=0.02)
    assert up == pytest.approx(4 * P) and down == pytest.approx((2 + 0.08) * P)   # top-k: fp16 buffer to the GPU


def test_baseline_moves_eight_bytes_per_parameter_over_the_gpu_link():
    m = SI.model("gpt2-4.0b")
    r = SI.estimate(m, "BASE", 6)
    P = r["model"]["params"]
    g = r["offload"]["links"]["gpu_host"]
    fetch = 3 * 2 * P                                       # fp16 params: forward, recompute, backward
    assert g["bytes_to_gpu"] == pytest.approx(fetch + 2 * P, rel=1e-6)
    assert g["bytes_from_gpu"] == pytest.approx(2 * P + 4 * P, rel=1e-6)


def test_first_drives_scale_sublinearly_and_the_knee_matches_fig3b():
    sp = {n: SI.fig3b_speedup(n) for n in (2, 4, 6, 10)}
    assert sp[2] < 1.8 and abs(sp[2] / SI.FIG3B[2] - 1) < 0.05            # 1.77 vs 1.70 published
    assert all(abs(sp[n] / SI.FIG3B[n] - 1) < 0.03 for n in (4, 6, 10))


# ---------------------------------------------------------------- ds_config aio section


def test_deepspeed_aio_section_round_trips(tmp_path):
    from dse.frameworks import deepspeed as DS

    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": True},
                               "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}},
                               "aio": {"block_size": 524288, "queue_depth": 16, "thread_count": 4,
                                       "single_submit": False, "overlap_events": False}}))
    imp = DS.read(str(cfg))
    got = {k: imp.plan[k] for k in ("aio_block_size", "aio_queue_depth", "aio_thread_count", "aio_overlap_events")}
    assert got == {"aio_block_size": 524288.0, "aio_queue_depth": 16, "aio_thread_count": 4,
                   "aio_overlap_events": False}
    m = SI.model("gpt2-4.0b")
    plan = SI.plan_for("BASE", 2, aio_block_size=524288, aio_queue_depth=16, aio_thread_count=4,
                       aio_overlap_events=False).resolved(m)
    text, _warn = DS.emit(m, SI.system("smart-infinity-a5000"), plan)
    aio = json.loads(text)["aio"]
    assert (aio["block_size"], aio["queue_depth"], aio["thread_count"], aio["overlap_events"]) == (524288, 16, 4,
                                                                                                  False)
