"""Host (CPU) time per launched op of eager PyTorch: the provenance of the stacks' ``dispatch`` (stacks/*.yaml).

A GPU runs what the host issues; the host issues a kernel per op after Python, the module call, autograd and the
dispatcher have run. When a layer's kernels are shorter than that issue time the GPU waits (dse prices a layer as
max(GPU time, host time)). This script measures the host side on the CPU build of torch with tensors so small that
the CPU kernels themselves take a negligible share: what remains is the framework's issue cost per op. It is a
host-side measurement: it does not contain the CUDA driver's cudaLaunchKernel, the caching allocator's CUDA path
or the NCCL enqueue, which the stack files add from their published figures.

What it times (the fastest of repeats of an inner loop, after warm-up; one thread):
- ``aten_op``: ``y = x * x`` on a one-element tensor, without and with autograd recording (pytorch/pytorch#41383
  reports 2 and 7 us on a 2020 CPU for the same loop);
- ``linear_module``: an ``nn.Linear`` call on a (4, 8) input (module call, F.linear, autograd node);
- ``megatron_layer``: a Megatron-LM GPT layer as megatron/model/transformer.py (microsoft/Megatron-DeepSpeed) writes
  it -- fused-LayerNorm, column-parallel QKV linear behind the identity autograd function of the tensor-parallel
  region, baddbmm scores, the scaled causal masked softmax, dropout, bmm context, permute + contiguous, row-parallel
  output linear behind the all-reduce autograd function (identity here: one process), bias-dropout-add, the MLP with
  bias-GeLU -- in forward, in the backward of a reentrant checkpoint (the recompute and the backward, as
  Megatron's ``mpu.checkpoint`` runs them), at hidden 64, 4 heads, sequence 16: each pass's host time, and the aten
  ops it dispatched (TorchDispatchMode, a separate run: its own overhead is not in the times);
- ``gpt2_block``: the same for Transformers' GPT2Block (the ``pytorch`` stack), without checkpointing.

``--device cuda`` runs the same loops with the tensors on the GPU (tiny kernels: the host still sets the pace), so
the times include the CUDA driver's launch and the caching allocator's CUDA path, and adds ``gpt2_block``'s step
under Transformers' gradient checkpointing (torch.utils.checkpoint, non-reentrant).

Usage:  python scripts/measure_host.py [--repeats N] [--device cuda] > data/host_dispatch_cpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dse.measure.host import best_us, count_ops, cpu_model, gpt2_block, layer_passes  # noqa: E402

SYNC = [lambda: None]     # torch.cuda.synchronize with --device cuda: a repeat ends when its kernels have run


def _best_us(fn, inner: int, repeats: int) -> float:
    return best_us(fn, inner, repeats, SYNC[0])


def megatron_layer(h: int = 64, heads: int = 4):
    """A Megatron-LM GPT layer (microsoft/Megatron-DeepSpeed megatron/model/transformer.py, mpu/layers.py), tp = 1."""
    import torch
    import torch.nn.functional as F

    class _Region(torch.autograd.Function):
        # mpu.mappings._CopyToModelParallelRegion (identity forward, all-reduce backward) and
        # _ReduceFromModelParallelRegion (all-reduce forward, identity backward): identity both ways on one process,
        # the Python autograd function's host cost is what remains
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    class Column(torch.nn.Module):
        def __init__(self, i, o, skip_bias):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(o, i) * 0.02)
            self.bias = torch.nn.Parameter(torch.zeros(o))
            self.skip = skip_bias

        def forward(self, x):
            x = _Region.apply(x)
            out = F.linear(x, self.weight, None if self.skip else self.bias)
            return out, (self.bias if self.skip else None)

    class Row(torch.nn.Module):
        def __init__(self, i, o):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(o, i) * 0.02)
            self.bias = torch.nn.Parameter(torch.zeros(o))

        def forward(self, x):
            return _Region.apply(F.linear(x, self.weight)), self.bias

    def bias_dropout_add(x, bias, residual, prob):
        return residual + F.dropout(x + bias, p=prob, training=True)

    def bias_gelu(y, bias):
        x = bias + y
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(h)
            self.qkv = Column(h, 3 * h, skip_bias=False)
            self.dense = Row(h, h)
            self.ln2 = torch.nn.LayerNorm(h)
            self.fc1 = Column(h, 4 * h, skip_bias=True)
            self.fc2 = Row(4 * h, h)
            self.drop = torch.nn.Dropout(0.1)
            self.d = h // heads

        def forward(self, x, mask):
            s, b, _ = x.shape
            y = self.ln1(x)
            mixed, _ = self.qkv(y)
            mixed = mixed.view(s, b, heads, 3 * self.d)
            q, k, v = torch.split(mixed, self.d, dim=-1)
            q = q.reshape(s, b * heads, self.d)
            k = k.reshape(s, b * heads, self.d)
            buf = torch.empty(b * heads, s, s, dtype=x.dtype, device=x.device)
            scores = torch.baddbmm(buf, q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2), beta=0.0,
                                   alpha=1.0 / math.sqrt(self.d))
            scores = scores.view(b, heads, s, s)
            probs = torch.softmax(scores.masked_fill(mask, -10000.0), dim=-1)   # the fused kernel: one op on CUDA
            probs = self.drop(probs)
            v = v.reshape(s, b * heads, self.d)
            ctx = torch.bmm(probs.view(b * heads, s, s), v.transpose(0, 1))
            ctx = ctx.view(b, heads, s, self.d).permute(2, 0, 1, 3).contiguous().view(s, b, h)
            out, bias = self.dense(ctx)
            x = bias_dropout_add(out, bias.expand_as(x), x, 0.1)
            y = self.ln2(x)
            inter, b1 = self.fc1(y)
            inter = bias_gelu(inter, b1)
            out, bias = self.fc2(inter)
            return bias_dropout_add(out, bias.expand_as(x), x, 0.1)

    return Layer()


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--seq", type=int, default=4)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cuda = args.device == "cuda"
    if cuda:
        SYNC[0] = torch.cuda.synchronize
    torch.set_default_device(args.device)
    what = ("host time of eager PyTorch per op, tiny tensors on the GPU: framework, CUDA launch and allocator" if cuda
            else "host-side (CPU) time of eager PyTorch per op, tiny tensors on the CPU build of torch; no CUDA "
                 "driver, allocator or NCCL time")
    out = {"what": what, "cpu": cpu_model(), "torch": torch.__version__, "python": platform.python_version(),
           "threads": 1, "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
    x = torch.ones(1)
    xg = torch.ones(1, requires_grad=True)
    out["aten_op_us"] = _best_us(lambda: x * x, 2000, args.repeats)
    out["aten_op_grad_us"] = _best_us(lambda: xg * xg, 2000, args.repeats)
    lin = torch.nn.Linear(8, 8)
    inp = torch.randn(4, 8)
    out["linear_module_us"] = _best_us(lambda: lin(inp), 1000, args.repeats)

    s, b, h = args.seq, 1, args.hidden
    layer = megatron_layer(h, heads=2)
    xs = torch.randn(s, b, h, requires_grad=True)
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    fwd, step = layer_passes(layer, xs, mask, checkpoint=True)
    t_f = _best_us(fwd, 50, args.repeats)
    t_step = _best_us(step, 20, args.repeats)
    n_f, n_step = count_ops(fwd), count_ops(step)
    out["megatron_layer"] = {"forward_us": t_f, "checkpointed_step_us": t_step, "forward_ops": n_f,
                             "checkpointed_step_ops": n_step, "us_per_op_forward": t_f / n_f,
                             "us_per_op_step": t_step / n_step}
    out["gpt2_block"] = gpt2_block(args.device, args.repeats, sync=SYNC[0], hidden=h, seq=s)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
