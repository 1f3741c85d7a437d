"""dse.measure.timeline: a profiled step's kernels on one time line, the GPU's idle split into waiting for the host and
the rest (what ``dse measure --profile`` writes under a profile row's ``timeline``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dse.measure.timeline import JUST_IN_TIME_NS, kineto_kernels, summarise


def test_the_parts_add_up_to_the_window():
    """busy + lead-in + host wait + other idle + tail = the step's window, for any kernels of one stream."""
    ks = [(100, 400, 90, "gemm"), (450, 460, 440, "norm"), (470, 480, 465, "norm"), (2_000, 9_000, 300, "gemm"),
          (9_500, 9_600, 9_490, "add")]
    s = summarise(ks, 0, 10_000)
    parts = s["busy_s"] + s["lead_in_s"] + s["host_wait_s"] + s["other_idle_s"] + s["tail_s"]
    assert parts == pytest.approx(s["span_s"])
    assert s["busy_s"] == pytest.approx((300 + 10 + 10 + 7_000 + 100) / 1e9)
    # the gaps before the norms and the add: launched after the GPU ran dry; the one before the second gemm: launched
    # at 300 ns, long before, so the GPU waited for something else
    assert s["host_wait_s"] == pytest.approx((50 + 10 + 500) / 1e9)
    assert s["other_idle_s"] == pytest.approx(1_520 / 1e9)
    assert sum(s["idle_by_decile_s"]) == pytest.approx(s["host_wait_s"] + s["other_idle_s"])
    assert s["largest_gaps"][0] == [pytest.approx(1_520 / 1e9), "norm", "gemm"]


def test_overlapping_streams_count_once_and_queue_delay():
    """Two streams' kernels overlapping: the busy time is their union; a kernel queued long behind others has a large
    queue delay, one issued just in time a small one."""
    ks = [(0, 1_000, None, "a"), (500, 1_500, None, "b"), (1_500, 2_000, 1_495, "c"), (2_000, 30_000, 100, "d")]
    s = summarise(ks, 0, 30_000)
    assert s["busy_s"] == pytest.approx(30_000 / 1e9) and s["host_wait_s"] == 0 and s["other_idle_s"] == 0
    assert s["linked"] == 2 and s["kernels"] == 4
    assert s["queue_delay_s"][0.1] == pytest.approx(5 / 1e9) and s["queue_delay_s"][0.9] == pytest.approx(1.9e-6)
    assert s["just_in_time_share"] == 1.0          # both delays under JUST_IN_TIME_NS
    late = summarise([(0, 10, 0, "x"), (JUST_IN_TIME_NS + 50, JUST_IN_TIME_NS + 60, 40, "y")], 0, 20_000)
    assert late["just_in_time_share"] == 0.5


def test_no_kernels():
    assert summarise([], 0, 100) == {"kernels": 0, "span_s": 1e-7, "linked": 0}


@dataclass
class Ev:
    _name: str
    _dev: str
    _start: int
    _end: int
    _corr: int

    def name(self):
        return self._name

    def device_type(self):
        return f"DeviceType.{self._dev}"

    def start_ns(self):
        return self._start

    def end_ns(self):
        return self._end

    def correlation_id(self):
        return self._corr


def test_kineto_events_link_kernels_to_their_launch():
    """A device event is matched to the runtime call with its correlation id (cudaLaunchKernel, cudaMemcpyAsync...);
    CPU operators are not launches; the window spans every event."""
    evs = [Ev("aten::mm", "CPU", 0, 50, 7), Ev("cudaLaunchKernel", "CPU", 10, 20, 11),
           Ev("cudaMemsetAsync", "CPU", 30, 35, 12), Ev("sm90_xmma_gemm", "CUDA", 25, 80, 11),
           Ev("Memset (Device)", "CUDA", 80, 90, 12), Ev("orphan_kernel", "CUDA", 95, 99, 99)]
    kernels, t0, t1 = kineto_kernels(evs)
    assert (t0, t1) == (0, 99)
    assert sorted(kernels) == [(25, 80, 20, "sm90_xmma_gemm"), (80, 90, 35, "Memset (Device)"),
                               (95, 99, None, "orphan_kernel")]
    assert kineto_kernels([Ev("aten::add", "CPU", 5, 6, 1)]) == ([], 5, 6)


def test_cpu_smoke_profile_has_an_empty_timeline(tmp_path):
    """On the CPU there is no device time line: the profile row says so with an empty ``timeline``."""
    pytest.importorskip("torch")
    import json

    from dse.cli import main

    out = tmp_path / "m.jsonl"
    assert main(["measure", "--device", "cpu", "--smoke", "--no-micro", "--profile", "--out", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    prof = [r for r in rows if r["kind"] == "profile"]
    assert prof and all(r["timeline"] == {} for r in prof)
