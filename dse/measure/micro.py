"""Micro-benchmarks of one GPU: the rates ``dse``'s efficiency parameters stand for.

Dense GEMM TFLOP/s at several (m x n x k) shapes (bf16 on a GPU), the device-memory copy rate
(read + write bytes per second), pinned host<->device copy rates (each way and both at once),
an all-reduce bus rate when there are several GPUs, and the time of one fused AdamW step over
fp32 weights. Each is the median of a few timed repeats after a warm-up. Imported only by
``dse measure``.
"""

from __future__ import annotations

import statistics
import time

import torch


def _timed(fn, device: str, repeats: int) -> float:
    """Median seconds of ``fn()`` after one warm-up call."""
    fn()
    out = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def gemm_tflops(shapes, device: str, dtype, repeats: int) -> dict:
    out = {}
    for m, n, k in shapes:
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        out[f"{m}x{n}x{k}"] = 2.0 * m * n * k / _timed(lambda a=a, b=b: a @ b, device, repeats) / 1e12
    return out


def copy_rate(nbytes: int, device: str, repeats: int) -> float:
    """Device-memory copy, read + write bytes per second (GB/s)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2.0 * nbytes / _timed(lambda: dst.copy_(src), device, repeats) / 1e9


def pinned_rates(nbytes: int, repeats: int) -> dict:
    """Pinned host<->device copy rates in GB/s: each way, and both at once on two streams (total)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host2 = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dev2 = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def both():
        with torch.cuda.stream(s1):
            dev.copy_(host, non_blocking=True)
        with torch.cuda.stream(s2):
            host2.copy_(dev2, non_blocking=True)

    return {"pinned_h2d_GBps": nbytes / _timed(lambda: dev.copy_(host, non_blocking=True), "cuda", repeats) / 1e9,
            "pinned_d2h_GBps": nbytes / _timed(lambda: host2.copy_(dev2, non_blocking=True), "cuda", repeats) / 1e9,
            "pinned_bidir_GBps_total": 2 * nbytes / _timed(both, "cuda", repeats) / 1e9}


def allreduce_busbw(nbytes: int, repeats: int) -> dict | None:
    """All-reduce bus bandwidth (GB/s) over every visible GPU, single process (NCCL through torch.cuda.nccl)."""
    n = torch.cuda.device_count()
    if n < 2:
        return None
    try:
        from torch.cuda import nccl

        tensors = [torch.empty(nbytes // 2, dtype=torch.bfloat16, device=f"cuda:{i}") for i in range(n)]

        def run():
            nccl.all_reduce(tensors)
            for i in range(n):
                torch.cuda.synchronize(i)

        t = _timed(run, "cuda", repeats)
    except (RuntimeError, ImportError, AttributeError):   # no NCCL in this build
        return None
    return {"gpus": n, "bytes": nbytes, "busbw_GBps": 2 * (n - 1) / n * nbytes / t / 1e9}


def adamw_step(params: float, device: str, repeats: int) -> float:
    """Seconds of one AdamW step over ``params`` fp32 weights (fused kernel where the build has one)."""
    w = torch.nn.Parameter(torch.zeros(int(params), device=device))
    w.grad = torch.zeros_like(w)
    try:
        opt = torch.optim.AdamW([w], lr=1e-4, fused=True)
        opt.step()
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW([w], lr=1e-4, foreach=True)
    return _timed(opt.step, device, repeats)
