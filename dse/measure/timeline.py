"""When the GPU waited for the host: a profiled step's kernels on one time line (``dse measure --profile``).

A profile's device time per category says how long the kernels ran, not why the GPU sat idle between them. Put
each kernel's start and end beside the end of the host call that launched it (``cudaLaunchKernel`` and kin, linked
by CUPTI's correlation id) and the idle splits in two: a gap after which the next kernel started as soon as its
launch returned was the GPU **waiting for the host** (the host bounds that stretch); any other gap was something
else (a synchronisation, a copy from the host, a stream wait). The queue delay of a kernel (its start less its
launch's end) says how far the host ran ahead: near zero, the host issued it just in time; large, it was queued
behind earlier kernels. What ``dse``'s pass-wise max(GPU, host) (:func:`dse.estimate.passes.layer_passes`) must
reproduce is the first kind of gap; this summary measures it per profiled step. Imported only by ``dse measure``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: runtime calls that launch device work (CUDA runtime and driver API names)
LAUNCH_MARKS = ("launchkernel", "memcpyasync", "memsetasync", "culaunch", "launchcooperative", "graphlaunch")
#: a kernel that starts within this of its launch's end was issued just in time: the GPU had nothing queued
JUST_IN_TIME_NS = 10_000


def summarise(kernels: Sequence[tuple[int, int, int | None, str]], t0: int, t1: int, top: int = 10) -> dict:
    """Idle, waiting-for-host and queue-delay statistics of one step's device activity.

    ``kernels``: (start ns, end ns, end ns of the launching runtime call or None where unlinked, name) per kernel,
    memcpy or memset; ``t0``, ``t1``: the step's window (ns). Busy time is the union of the kernels' intervals
    (overlapping kernels of several streams count once). A gap before kernel k (after the busy time up to it)
    counts as host wait when k's launch ended at or after the gap began (the GPU had run out of queued work and
    k could not start before its launch returned), else as other idle; ``lead_in`` is the gap before the first
    kernel.

    >>> s = summarise([(10, 20, 5, "a"), (30, 50, 29, "b"), (60, 70, 12, "c")], 0, 70)
    >>> s["busy_s"] * 1e9, s["host_wait_s"] * 1e9, s["other_idle_s"] * 1e9, s["lead_in_s"] * 1e9
    (40.0, 10.0, 10.0, 10.0)
    """
    ks = sorted(kernels)
    out: dict = {"kernels": len(ks), "span_s": (t1 - t0) / 1e9, "linked": sum(k[2] is not None for k in ks)}
    if not ks:
        return out
    busy = host_wait = other = 0.0
    gaps: list[tuple[int, str, str]] = []
    deciles = [0.0] * 10
    end, prev = ks[0][0], ""
    lead_in = max(0, ks[0][0] - t0)
    for start, stop, launched, name in ks:
        if start > end:
            gap = start - end
            if launched is not None and launched >= end:
                host_wait += gap
            else:
                other += gap
            gaps.append((gap, prev, name))
            _spread(deciles, end, start, t0, t1)
        if stop > end:
            busy += stop - max(start, end)
            end = stop
        prev = name
    delays = sorted(max(0, s - q) for s, _e, q, _n in ks if q is not None)
    gaps.sort(key=lambda g: -g[0])
    out.update(busy_s=busy / 1e9, lead_in_s=lead_in / 1e9, host_wait_s=host_wait / 1e9, other_idle_s=other / 1e9,
               tail_s=max(0, t1 - end) / 1e9, idle_by_decile_s=[d / 1e9 for d in deciles],
               largest_gaps=[[g / 1e9, a[:80], b[:80]] for g, a, b in gaps[:top]])
    if delays:
        out.update(queue_delay_s={q: delays[min(len(delays) - 1, int(q * len(delays)))] / 1e9
                                  for q in (0.1, 0.5, 0.9)},
                   just_in_time_share=sum(d < JUST_IN_TIME_NS for d in delays) / len(delays))
    return out


def _spread(deciles: list[float], a: int, b: int, t0: int, t1: int) -> None:
    """Add the interval [a, b) to the tenths of [t0, t1) it overlaps."""
    width = max(1, t1 - t0) / 10
    for i in range(10):
        lo, hi = t0 + i * width, t0 + (i + 1) * width
        deciles[i] += max(0.0, min(b, hi) - max(a, lo))


def kineto_kernels(events: Iterable) -> tuple[list[tuple[int, int, int | None, str]], int, int]:
    """(kernels as :func:`summarise` takes them, window start, window end) from torch.profiler's kineto events
    (``prof.profiler.kineto_results.events()``): device events with their launching runtime call, matched by
    correlation id; the window spans every event of the step. No device events (the CPU smoke mode): ([], ...)."""
    launches: dict[int, int] = {}
    device, t0, t1 = [], None, None
    for e in events:
        start, end = e.start_ns(), e.end_ns()
        t0 = start if t0 is None else min(t0, start)
        t1 = end if t1 is None else max(t1, end)
        if str(e.device_type()).endswith("CPU"):
            if any(m in e.name().lower() for m in LAUNCH_MARKS) and e.correlation_id() > 0:
                launches[e.correlation_id()] = end
        else:
            device.append(e)
    kernels = [(e.start_ns(), e.end_ns(), launches.get(e.correlation_id()), e.name()) for e in device]
    return kernels, t0 or 0, t1 or 0


def timeline(prof, top: int = 10) -> dict:
    """:func:`summarise` of a finished ``torch.profiler.profile``; {} where its kineto events cannot be read."""
    try:
        events = prof.profiler.kineto_results.events()
    except AttributeError:          # a torch without kineto results
        return {}
    kernels, t0, t1 = kineto_kernels(events)
    return summarise(kernels, t0, t1, top)
