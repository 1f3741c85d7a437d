"""Megatron-LM's gradient accumulation without the fused weight-gradient GEMM: one element-wise add per parameter.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there).
"""

from __future__ import annotations

from dse.formulas._array import Num
from dse.formulas.kernels.rows import Table

__all__ = ["unfused_grad_accumulation"]


def unfused_grad_accumulation(params: Num, tensors: Num, *, passes: Num = 1, bytes_per_element: Num = 2,
                              grad_bytes: Num = 4, name: str = "grad_accum") -> Table:
    """The weight gradients of one micro-batch added into the accumulated ones, unfused, on one GPU.

    Formula: backward bytes = a P (e + 2 g), backward kernels = a n, nothing forward or saved: each of the ``tensors``
    n parameter tensors' new gradient (e bytes an element, written by its weight-gradient GEMM) is read and added into
    the accumulated one (read and written, g bytes an element) by its own element-wise kernel; a = ``passes``, the
    adds per micro-batch: 1 into Megatron's main-grad buffer (zeroed once an iteration, every micro-batch adds:
    ``param.main_grad.add_(param.grad.data)``, e + 2 g = 2 + 4 + 4 = 10 B with fp32 main grads), or (m - 1)/m into
    ``.grad`` itself (the 2021 code without contiguous buffers: the optimizer's ``zero_grad(set_to_none=True)``
    leaves ``.grad`` None, the first micro-batch's gradient is stored as is, each later one is added by autograd's
    AccumulateGrad, ``variable_grad += new_grad``: 2 + 2 + 2 = 6 B in fp16)
    Source: NVIDIA/Megatron-LM at de7dc40f88 (2021-08-10, examples/sc21/run_table_1.sh): megatron/model/distributed.py
    ``_make_param_hook`` (``param.main_grad.add_(param.grad.data)``, then ``param.grad = None``), used only with
    ``--use-contiguous-buffers-in-ddp``; without it ``allreduce_gradients`` sets ``param.main_grad = param.grad``;
    megatron/training.py ``train_step`` (``optimizer.zero_grad()``), megatron/optimizer/optimizer.py
    ``zero_grad(set_to_none=True)``; PyTorch torch/csrc/autograd/functions/accumulate_grad.h (the in-place add).
    Commit 83b1e42f30 (2022-02-13, "gradient accumulation fusion") fuses the add into the weight-gradient GEMM of
    the layers' linears and the LM head (``wgrad_gemm_accum_fp32``,
    megatron/fused_kernels/fused_weight_gradient_dense.cu, called from megatron/mpu/layers.py; apex's
    ``fused_weight_gradient_mlp_cuda`` later), the default since; ``--no-gradient-accumulation-fusion`` turns it off.

    Args:
        params: P, the parameters on this GPU whose gradients a micro-batch accumulates [count]
        tensors: n, the parameter tensors they are held in (one add kernel each) [count]
        passes: a, accumulation adds per micro-batch, mean over the iteration's micro-batches [count]
        bytes_per_element: e, bytes of a new gradient element (the weights' 16-bit dtype) [bytes]
        grad_bytes: g, bytes of an accumulated gradient element [bytes]
        name: the row's name [str]
    Returns:
        kernel name -> row [dict]

    >>> t = unfused_grad_accumulation(1e6, 12)["grad_accum"]   # fp32 main grads: 10 B a parameter
    >>> t["bytes_backward"], t["kernels_backward"], t["bytes"]
    (10000000.0, 12, 0.0)
    >>> unfused_grad_accumulation(1e6, 12, passes=3 / 4, grad_bytes=2)["grad_accum"]["bytes_backward"]   # fp16, m 4
    4500000.0
    """
    e, g = bytes_per_element, grad_bytes
    return {name: {"kind": "elementwise", "bytes": 0 * params, "bytes_backward": passes * params * (e + 2 * g),
                   "kernels": 0, "kernels_backward": passes * tensors, "saved": 0}}
