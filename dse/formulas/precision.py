"""Precision recipes: bytes per tensor class and the dtype each GEMM runs in.

A recipe is one value of :class:`Recipe` (a frozen dataclass); every byte size of a
tensor class the estimate uses — weights, gradients, master weights, optimizer states,
activations, logits, the messages of each collective, the gradients an offloaded
optimizer receives — and the key of ``gpu.peak_flops`` each GEMM class runs at is read
from it. ``plan.precision`` names the recipe, ``plan.grad_dtype`` sets its gradients:

=============  =======  =========  ======  ======  ===========  ===========  ====================
precision      weights  gradients  master  states  activations  GEMMs        source
=============  =======  =========  ======  ======  ===========  ===========  ====================
``bf16``       2        4 (fp32)   4       4       2            bf16 peak    Megatron-LM (bf16 +
                                                                             fp32 main grads)
``fp16``       2        4 or 2     4       4       2            fp16 peak    Micikevicius et al.
                                                                             2018; ZeRO §3.1
``bf16-pure``  2        2 (bf16)   0       2       2            bf16 peak    PyTorch with the model
                                                                             in bf16, no autocast
``fp8``        2 + 2    4 (fp32)   4       4       2 (linear    fp8 peak     Transformer Engine
               (FP8                                inputs 1)    (linears)    (Micikevicius et al.
               copies)                                                       2022, arXiv 2209.05433)
=============  =======  =========  ======  ======  ===========  ===========  ====================

Mixed precision (Micikevicius et al. 2018, arXiv 1710.03740): half-precision weights the
GEMMs read, an fp32 master copy the optimizer updates, fp32 optimizer states; gradients in
fp32 (``grad_dtype: fp32``, Megatron-LM's default main-grad buffer for bf16) or half
(``grad_dtype: half``, ZeRO's 2 + 2 + 12 = 16 B per parameter with Adam, Rajbhandari et al.
2020, arXiv 1910.02054, §3.1). "Pure bf16" keeps no fp32 copy: weights, gradients and the
optimizer's states take the parameters' dtype (``torch.optim.AdamW`` allocates its moments
``zeros_like(param)``); that is how the measured H100 runs of ``data/h100_hf_training.jsonl``
train (bf16 weights and gradients, no master copy).

FP8 training (Transformer Engine, ``precision: fp8``; :mod:`dse.formulas.fp8`): the linear layers'
GEMMs take FP8 operands (E4M3 forward, E5M2 gradients, 1 B each: ``gemm_operands``) and run at the
``fp8`` peak; bf16 working weights, fp32 master weights, optimizer states and gradients as bf16 mixed
precision; ``weight_copies = 2``: the FP8 cast of each linear weight and its transpose, 1 B each, beside
the bf16 copy (TE caches them across micro-batches); attention, LM head, norms and softmax stay in
bf16 (``attention_dtype = head_dtype = "bf16"``). Quantized frozen weights (QLoRA's NF4) set
``frozen_weights`` (about 0.5 B plus the quantization constants).

Symbols:
    precision: recipe name: bf16, fp16 (mixed precision, fp32 master weights), bf16-pure or fp8 [choice]
    grad_dtype: fp32, half, or None for the precision's default (fp32 mixed, half pure) [choice]
    peak_table: dense peak per dtype of one GPU, e.g. {"bf16": 989e12, "fp8": 1979e12} [FLOP/s]
    dtype: key of the peak table a GEMM class runs at [choice]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache
from typing import Any

__all__ = ["Recipe", "RECIPES", "PRECISIONS", "GRAD_DTYPE_BYTES", "DEFAULT_GRAD_DTYPE", "recipe", "recipe_of",
           "peak_flops"]


@dataclass(frozen=True)
class Recipe:
    """Bytes per element of every tensor class, and the peak-table key of every GEMM class.

    Fields (bytes per element unless stated):
        name: the precision it stands for
        weights: the working weight copy the GEMMs read and ZeRO-3 gathers (bf16/fp16: 2)
        weight_copies: derived copies of each linear weight held beside it (FP8 cast + transpose: 1 + 1; else 0)
        frozen_weights: weights that receive no gradient (fine-tuning; NF4: ~0.5)
        gradients: gradients as accumulated and reduced on the GPU (``plan.grad_dtype``)
        master_weights: the copy the optimizer updates (fp32: 4; 0 when the weights are updated in place)
        optimizer_states: each optimizer state (Adam's m, v; fp32: 4)
        activations: activations saved for backward and element-wise kernel operands
        logits: the LM head's logits for softmax and loss (fp32: 4)
        tp_messages: tensor-parallel all-reduce / all-gather / reduce-scatter of activations
        pp_messages: pipeline send/receive of activations
        dp_gradients: data-parallel gradient reduction (all-reduce or reduce-scatter)
        weight_gathers: ZeRO weight all-gathers and parameter fetches from an offload tier
        offload_gradients: gradient partitions copied from the GPU to an offloaded optimizer (fp16: 2)
        offload_master_gradients: gradients the offloaded optimizer keeps and reads (DeepSpeed fp32: 4)
        gemm_operands: bytes of a linear GEMM's operands as it reads them and its input as saved (FP8: 1)
        gemm_dtype: peak-table key of the linear layers' GEMMs
        attention_dtype: peak-table key of attention (score and value GEMMs, flash kernels)
        head_dtype: peak-table key of the LM head GEMM
    """

    name: str
    weights: float = 2
    weight_copies: float = 0
    frozen_weights: float = 2
    gradients: float = 4
    master_weights: float = 4
    optimizer_states: float = 4
    activations: float = 2
    logits: float = 4
    tp_messages: float = 2
    pp_messages: float = 2
    dp_gradients: float = 4
    weight_gathers: float = 2
    offload_gradients: float = 2
    offload_master_gradients: float = 4
    gemm_operands: float = 2
    gemm_dtype: str = "bf16"
    attention_dtype: str = "bf16"
    head_dtype: str = "bf16"

    @property
    def resident_weights(self) -> float:
        """Bytes of weight copies held per linear weight (working copy + derived copies; FP8: 2 + 1 + 1)."""
        return self.weights + self.weight_copies

    @property
    def updated_copy(self) -> float:
        """Bytes of the copy the optimizer reads and writes: the master copy, or the weights themselves."""
        return self.master_weights if self.master_weights else self.weights


#: The recipes ``plan.precision`` names, with fp32 gradients (see :func:`recipe` for ``grad_dtype``).
RECIPES = {
    "bf16": Recipe("bf16"),
    "fp16": Recipe("fp16", gemm_dtype="fp16", attention_dtype="fp16", head_dtype="fp16"),
    "bf16-pure": Recipe("bf16-pure", gradients=2, dp_gradients=2, master_weights=0, optimizer_states=2,
                        offload_master_gradients=2),
    "fp8": Recipe("fp8", weight_copies=2, gemm_operands=1, gemm_dtype="fp8"),
}
PRECISIONS = tuple(RECIPES)
#: Bytes of a gradient per ``plan.grad_dtype`` ("half": the weights' 16-bit dtype).
GRAD_DTYPE_BYTES = {"fp32": 4, "half": 2}
#: ``plan.grad_dtype`` when the plan leaves it unset.
DEFAULT_GRAD_DTYPE = {"bf16": "fp32", "fp16": "fp32", "bf16-pure": "half", "fp8": "fp32"}


def recipe(precision: str = "bf16", grad_dtype: str | None = None) -> Recipe:
    """The recipe of a precision, with its gradients in ``grad_dtype``.

    Formula: bytes(class) from RECIPES[precision]; gradients = dp_gradients = 4 (fp32) or 2 (half)
    Source: Micikevicius et al. 2018 (arXiv 1710.03740) mixed precision; Rajbhandari et al. 2020 (ZeRO,
    arXiv 1910.02054) §3.1 (2 + 2 + 12 B per parameter); Megatron-LM fp32 main grads for bf16.

    Returns:
        the :class:`Recipe` [Recipe]

    >>> r = recipe("fp16", "half")
    >>> r.weights, r.gradients, r.master_weights, r.optimizer_states, r.gemm_dtype
    (2, 2, 4, 4, 'fp16')
    >>> recipe("bf16-pure").gradients, recipe("bf16-pure").master_weights
    (2, 0)
    >>> r = recipe("fp8")   # FP8 linear GEMMs; bf16 weights + FP8 copy and transpose; fp32 master and states
    >>> r.gemm_dtype, r.gemm_operands, r.weights + r.weight_copies, r.master_weights, r.head_dtype
    ('fp8', 1, 4, 4, 'bf16')
    >>> import numpy as np   # a recipe's sizes multiply arrays of parameter counts: fp32 gradients of 1B and 7B, GB
    >>> np.array([1e9, 7e9]) * recipe("bf16").gradients / 1e9
    array([ 4., 28.])
    """
    return _recipe(precision, grad_dtype)


@cache
def _recipe(precision: str, grad_dtype: str | None) -> Recipe:
    try:
        base = RECIPES[precision]
    except KeyError:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}") from None
    g = GRAD_DTYPE_BYTES[grad_dtype or DEFAULT_GRAD_DTYPE[precision]]
    return dataclasses.replace(base, gradients=g, dp_gradients=g)


def recipe_of(plan: Any) -> Recipe:
    """The recipe of a plan: ``recipe(plan.precision, plan.grad_dtype)``.

    Formula: recipe(plan.precision, plan.grad_dtype)
    Source: :func:`recipe`.

    Args:
        plan: a plan (:class:`dse.specs.plan.Plan`, or anything with ``precision`` and ``grad_dtype``) [Plan]
    Returns:
        the :class:`Recipe` [Recipe]

    >>> from types import SimpleNamespace
    >>> recipe_of(SimpleNamespace(precision="bf16", grad_dtype=None)).gradients
    4
    """
    return _recipe(plan.precision, plan.grad_dtype)


def peak_flops(peak_table: dict[str, float], dtype: str = "bf16") -> float:
    """Dense peak a GEMM class runs at: the GPU's peak for its dtype.

    Formula: peak = table[dtype], else table["bf16"], else the largest entry
    Source: the GPU's datasheet (hwspecs ``peak_flops`` per dtype); the fallbacks keep specs that list one dtype.

    Returns:
        peak [FLOP/s]

    >>> peak_flops({"bf16": 312e12, "fp32": 19.5e12}, "fp16")   # an A100 spec without an fp16 entry
    312000000000000.0
    """
    return peak_table.get(dtype) or peak_table.get("bf16") or max(peak_table.values())
