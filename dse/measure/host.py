"""The host's own dispatch speed: what ``dse calibrate`` derives a host's ``dispatch_scale`` from.

Eager PyTorch issues one kernel per op after Python, the module call, autograd and the dispatcher have run; a step
whose kernels are shorter than that waits for the host (dse prices a layer pass as max(GPU, host)). These loops
time the host side with tensors so small that the device work is negligible (on a GPU the kernels run while the
host issues the next; each repeat ends with a synchronisation):

- ``aten_op_us``: ``y = x * x`` on a one-element tensor, without and with autograd recording (``aten_op_grad_us``);
- ``launch_us``: the host time per launch of back-to-back tiny ops (``x.add_(1)`` on a one-element tensor, no
  autograd): the framework's dispatch and, on CUDA, ``cudaLaunchKernel``;
- ``gpt2_block``: Transformers' ``GPT2Block`` (hidden 16, 2 heads, sequence 4, SDPA; needs transformers) --
  its forward, its forward + backward step, and the step under Transformers' gradient checkpointing
  (``torch.utils.checkpoint``, non-reentrant), with the aten ops each dispatched (TorchDispatchMode, a separate
  run). The step is what a host's ``dispatch_scale`` is defined on: that host's GPT2Block step over the reference
  host's priced one (:func:`dse.calibrate.host.host_scales`).

The fastest of ``repeats`` repeats of an inner loop after two warm-up calls (the machine may be shared).
``scripts/measure_host.py`` runs the same loops (and Megatron-LM's layer) as a standalone script; its output
(``data/h200/host_dispatch_cuda.json``, ``data/h100/host_dispatch_cuda.json``) has this block's fields.
Imported only by ``dse measure`` and that script: torch is an optional dependency.
"""

from __future__ import annotations

import time

GPT2_BLOCK = {"hidden": 16, "heads": 2, "seq": 4}


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform module says."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def best_us(fn, inner: int, repeats: int, sync=lambda: None) -> float:
    """Microseconds per call of ``fn()``: the fastest of ``repeats`` timed loops of ``inner`` calls, each loop
    ending with ``sync()`` (torch.cuda.synchronize on a GPU: a loop ends when its kernels have run)."""
    fn()
    fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / inner)
    return min(times) * 1e6


def layer_passes(layer, x, mask, checkpoint: bool, reentrant: bool = True):
    """Callables for the forward pass and for forward + backward (with a checkpoint when asked)."""
    import torch
    from torch.utils.checkpoint import checkpoint as ckpt

    def fwd():
        with torch.no_grad() if checkpoint else torch.enable_grad():
            return layer(x, mask) if mask is not None else layer(x)

    def step():
        if checkpoint:
            y = ckpt(layer, x, mask, use_reentrant=True) if reentrant else ckpt(layer, x, use_reentrant=False)
        else:
            y = layer(x, mask) if mask is not None else layer(x)
        y = y[0] if isinstance(y, tuple) else y
        y.sum().backward()

    return fwd, step


_VIEWS = ("detach.default", "t.default", "transpose.int", "expand.default", "permute.default", "split.Tensor",
          "split_with_sizes.default", "_unsafe_view.default", "unsqueeze.default", "empty.memory_format",
          "alias.default", "slice.Tensor", "select.int")


def count_ops(fn) -> int:
    """Aten ops (non-view) dispatched by fn()."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not getattr(func, "is_view", False) and "view" not in func.__name__ and func.__name__ not in _VIEWS:
                Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n


def gpt2_block(device: str, repeats: int, inner: tuple[int, int] = (50, 20), sync=lambda: None,
               hidden: int = GPT2_BLOCK["hidden"], seq: int = GPT2_BLOCK["seq"]) -> dict | None:
    """Transformers' GPT2Block's host times (forward, step, checkpointed step) and ops; None without transformers."""
    import torch

    try:
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    except ImportError:
        return None
    h, s = hidden, seq
    cfg = GPT2Config(n_embd=h, n_head=GPT2_BLOCK["heads"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        blk = GPT2Block(cfg).to(device).train()
        xb = torch.randn(1, s, h, requires_grad=True, device=device)
    fwd, step = layer_passes(blk, xb, None, checkpoint=False)
    t_f, t_s = best_us(fwd, inner[0], repeats, sync), best_us(step, inner[1], repeats, sync)
    n_f, n_s = count_ops(fwd), count_ops(step)
    out = {"forward_us": t_f, "step_us": t_s, "forward_ops": n_f, "step_ops": n_s, "us_per_op_forward": t_f / n_f,
           "us_per_op_step": t_s / n_s}
    _, ck = layer_passes(blk, xb, None, checkpoint=True, reentrant=False)   # as Transformers checkpoints
    t_c, n_c = best_us(ck, inner[1], repeats, sync), count_ops(ck)
    out.update(checkpointed_step_us=t_c, checkpointed_step_ops=n_c, us_per_op_checkpointed_step=t_c / n_c)
    return out


def host_block(torch, device: str, smoke: bool) -> dict:
    """The micro row's ``host`` block: this host's dispatch speed with tensors on ``device`` (one thread)."""
    repeats = 2 if smoke else 15
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = torch.ones(1, device=device)
        xg = torch.ones(1, device=device, requires_grad=True)
        loops = (50, 20) if not smoke else (3, 2)
        out = {"device": device, "cpu": cpu_model(), "threads": 1,
               "aten_op_us": best_us(lambda: x * x, 20 if smoke else 2000, repeats, sync),
               "aten_op_grad_us": best_us(lambda: xg * xg, 20 if smoke else 2000, repeats, sync),
               "launch_us": best_us(lambda: x.add_(1), 20 if smoke else 2000, repeats, sync),
               "gpt2_block": gpt2_block(device, repeats, loops, sync)}
    finally:
        torch.set_num_threads(threads)
    return out
