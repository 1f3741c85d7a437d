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
    """Seconds per call of ``fn()``: on a GPU, CUDA events around ``repeats`` back-to-back calls after a warm-up
    call (the host's launch and synchronisation latency stay out while the GPU work is longer than its launch);
    on the CPU, the median of ``repeats`` timed calls."""
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / 1e3 / repeats
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


def expert_gemm_tflops(hidden: int, ffn: int, experts: int, tokens: int, device: str, dtype, repeats: int) -> dict:
    """TFLOP/s of one MoE layer's expert GEMMs on this GPU: ``experts`` local experts, ``tokens`` rows each.

    fc1 is (tokens x hidden)(hidden x 2 ffn) (a gated expert's fused gate and up projection), fc2
    (tokens x ffn)(ffn x hidden). For each: forward, data gradient and weight gradient as a loop of
    one GEMM per expert (how TransformerEngine's GroupedLinear runs them without a grouped kernel),
    ``grouped`` forward through ``torch._grouped_mm`` where this build has it (one kernel for every
    expert), and ``dense``: one GEMM of all experts' rows against one weight (the rate the same
    FLOPs reach as a single large GEMM). The ratio loop / dense is the small-expert penalty.
    """
    return {name: _expert_rates(tokens, k, n, experts, device, dtype, repeats)
            for name, k, n in (("fc1", hidden, 2 * ffn), ("fc2", ffn, hidden))}


def _expert_rates(tokens: int, k: int, n: int, experts: int, device: str, dtype, repeats: int) -> dict:
    x = [torch.randn(tokens, k, device=device, dtype=dtype) for _ in range(experts)]
    w = [torch.randn(k, n, device=device, dtype=dtype) for _ in range(experts)]
    dy = [torch.randn(tokens, n, device=device, dtype=dtype) for _ in range(experts)]
    flops = 2.0 * tokens * k * n * experts
    r = {"fwd": flops / _timed(lambda: [a @ b for a, b in zip(x, w)], device, repeats) / 1e12,
         "dgrad": flops / _timed(lambda: [g @ b.t() for g, b in zip(dy, w)], device, repeats) / 1e12,
         "wgrad": flops / _timed(lambda: [a.t() @ g for a, g in zip(x, dy)], device, repeats) / 1e12}
    big = torch.cat(x)
    r["dense"] = flops / _timed(lambda: big @ w[0], device, repeats) / 1e12
    if hasattr(torch, "_grouped_mm") and device == "cuda":
        try:
            wt = torch.stack([b.t().contiguous() for b in w]).transpose(-2, -1)   # (E, k, n), column-major
            offs = torch.arange(1, experts + 1, device=device, dtype=torch.int32) * tokens
            r["grouped"] = flops / _timed(lambda: torch._grouped_mm(big, wt, offs=offs), device, repeats) / 1e12
        except (RuntimeError, TypeError, ValueError) as exc:   # shape or build limits: say which
            r["grouped_error"] = str(exc).splitlines()[0][:200]
    return r


def permute_rates(tokens: int, hidden: int, top_k: int, experts: int, device: str, dtype, repeats: int) -> dict:
    """GB/s (bytes read + written) of an MoE layer's token permutation and un-permutation.

    Permute: each token's ``top_k`` copies gathered into expert order (``index_select`` by a sort of the
    routing); un-permute: the copies scaled by their probabilities and summed back per token
    (``index_add_``); the routing itself (softmax over ``experts``, top-k, argsort) timed as ``route_s``.
    """
    x = torch.randn(tokens, hidden, device=device, dtype=dtype)
    logits = torch.randn(tokens, experts, device=device, dtype=torch.float32)

    def route():
        p, idx = torch.softmax(logits, -1).topk(top_k, -1)
        return p, idx.flatten().argsort()

    p, order = route()
    src = order // top_k
    y = x.index_select(0, src)
    out = torch.zeros_like(x)
    moved = 2.0 * tokens * top_k * hidden * x.element_size()
    return {"route_s": _timed(route, device, repeats),
            "permute_GBps": moved / _timed(lambda: x.index_select(0, src), device, repeats) / 1e9,
            "unpermute_GBps": (moved + tokens * hidden * x.element_size()) / _timed(
                lambda: out.index_add_(0, src, y * p.flatten()[order, None].to(y.dtype)), device, repeats) / 1e9}
