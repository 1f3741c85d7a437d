"""Device time of one training step by kernel, and by PyTorch operator, from ``torch.profiler``.

What ``kind: profile`` rows of ``dse measure --profile`` hold (the format of the shared H100 file's
profile rows, with the kernels and operators listed): device seconds per kernel category (GEMM,
attention, element-wise; the category from the kernel's name), kernel counts, the top kernels
by device time, and the top operators (``aten::bmm``, ``aten::softmax``...) by device time with
their host time, so that a row of ``dse``'s kernel table can be put beside the kernels that ran
for it. On the CPU (the smoke mode) there are no device times: the operators' host times stand in.
Imported only by ``dse measure``.
"""

from __future__ import annotations

GEMM_MARKS = ("gemm", "nvjet", "cutlass", "xmma", "cublas", "sm90_", "sm80_")
ATTENTION_MARKS = ("flash", "fmha", "attention", "attn")


def category(kernel: str) -> str:
    """gemm, attention or elementwise, from a CUDA kernel's name (flash/fmha kernels are attention).

    >>> category("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64>>")
    'attention'
    >>> category("nvjet_sm90_tst_192x192_64x4_1x2_h_bz_coopB_TNN"), category("void at::native::reduce_kernel<512>")
    ('gemm', 'elementwise')
    """
    low = kernel.lower()
    if any(m in low for m in ATTENTION_MARKS):
        return "attention"
    if any(m in low for m in GEMM_MARKS):
        return "gemm"
    return "elementwise"


def profile_step(torch, step, device: str, top: int = 60) -> dict:
    """Profile one call of ``step()`` (a forward and backward pass) and summarise it.

    Returns device_s_by_category, kernels_by_category, kernels ([seconds, name, count], largest first),
    ops ([device seconds, host seconds, name, count]), host_s (the step's host wall time) and, on a GPU,
    timeline: when the GPU waited for the host (:func:`dse.measure.timeline.summarise`).
    """
    import time
    import warnings

    profile, ProfilerActivity = torch.profiler.profile, torch.profiler.ProfilerActivity
    cuda = device == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with warnings.catch_warnings():
        # torch.profiler warns at every profile's end that it clears its events each cycle (its schedule's
        # behaviour, not this one-cycle use): one line per profiled configuration, nothing to act on
        warnings.filterwarnings("ignore", message=r".*Profiler clears events at the end of each cycle")
        with profile(activities=acts) as prof:
            t0 = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize()
            host = time.perf_counter() - t0
    by_cat: dict[str, float] = {}
    counts: dict[str, int] = {}
    kernels, ops = [], []
    for e in prof.key_averages():
        dev = float(getattr(e, "self_device_time_total", 0.0) or 0.0) / 1e6
        if e.key.startswith("aten::") or e.key.startswith("autograd::"):
            ops.append([float(getattr(e, "device_time_total", 0.0) or 0.0) / 1e6, e.cpu_time_total / 1e6, e.key,
                        e.count])
        elif dev > 0:
            cat = "memcpy" if e.key.lower().startswith(("memcpy", "memset")) else category(e.key)
            by_cat[cat] = by_cat.get(cat, 0.0) + dev
            counts[cat] = counts.get(cat, 0) + e.count
            kernels.append([dev, e.key[:160], e.count])
    kernels.sort(key=lambda r: -r[0])
    ops.sort(key=lambda r: (-r[0], -r[1]))
    from dse.measure.timeline import timeline

    return {"device_s_by_category": by_cat, "kernels_by_category": counts, "kernels": kernels[:top],
            "ops": ops[:top], "host_s": host, "timeline": timeline(prof) if cuda else {}}
