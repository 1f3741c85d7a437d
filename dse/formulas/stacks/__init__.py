"""A software stack as data on the kernel table: the element-wise kernels, saved tensors and loss of a framework.

The kernel table (:mod:`dse.formulas.kernels`) is built with Megatron-LM's fused kernels. Another
stack (``stacks/*.yaml`` in the catalog) replaces, per table row, what the row's element-wise
kernels move and what the row saves for backward, and adds rows the framework runs that Megatron
does not (copies, bias-gradient reductions, gradient accumulation). An amount is a number of
*passes* over a tensor -- one read or one write of each of its elements -- keyed by the tensor's
size (:func:`sizes`) and dtype; :func:`amount` turns it into bytes.

A stack op (one entry of the file, already resolved to the model's variant) is a dict:
``forward``/``backward``: ``{"kernels": n, "moves": {key: passes}}``; ``saved``, ``packed`` and ``transient``:
``{key: tensors}``; ``when``: a list of conditions, any of which enables an added row; ``frozen``: the ``saved``
and ``packed`` that replace the op's when its weights are frozen (LoRA; the choice ``frozen``). A key is
``size`` (the activation dtype) or ``size:dtype`` (``fp32`` 4 bytes, ``byte`` 1, ``grad`` the
gradient dtype).

The concern is split by what each part holds: :mod:`~dse.formulas.stacks.amounts` (sizes, dtypes, an amount's
bytes), :mod:`~dse.formulas.stacks.rows` (a stack op as a table row), :mod:`~dse.formulas.stacks.layer` (a layer's
table) and :mod:`~dse.formulas.stacks.ends` (the embedding's and the head's tables).

Symbols:
    s: sequence length [count]
    b: micro-batch size [count]
    h: hidden size [count]
    heads: a, attention heads [count]
    kv_heads: kv, key/value heads [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    vocab: V, vocabulary size [count]
    tp: t, tensor-parallel degree [count]
    sequence_parallel: Megatron sequence parallelism (layer-wide tensors sharded over t) [bool]
    layer_params: parameters of one layer on this GPU [count]
    param_tensors: parameter tensors of one layer [count]
    size: element counts of the tensors a stack names, as :func:`sizes` returns [dict]
    passes: passes per tensor, keyed size or size:dtype [dict]
    bytes_per_element: e, bytes per activation element [bytes]
    grad_bytes: bytes per gradient element [bytes]
    table: kernel name -> row, as dse.formulas.kernels builds it [dict]
    ops: the stack's ops resolved for the model: entry -> op (dse.specs.stack.StackSpec.ops) [dict]
    choices: the plan's attention, recompute, bias and dropout [dict]
    op: one stack op [dict]
    n: a GEMM dimension [count]
"""

from __future__ import annotations

from dse.formulas.stacks.amounts import DTYPE_BYTES, amount, qk_sizes, sizes
from dse.formulas.stacks.ends import aligned, apply_embedding, apply_head, transient_bytes
from dse.formulas.stacks.layer import apply_layer

__all__ = ["DTYPE_BYTES", "sizes", "amount", "apply_layer", "apply_head", "apply_embedding", "aligned",
           "transient_bytes", "qk_sizes"]
