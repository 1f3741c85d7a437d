"""The optimizers: their states, the bytes they keep and the bytes their step moves.

One table, :data:`OPTIMIZERS`, read by memory (model-state bytes per ZeRO stage, the
placement of master weights and states on offload tiers) and by time (the GPU step in the
base estimate, the CPU and computational-storage steps of storage offload), so that both
follow ``plan.optimizer``. Bytes per state come from the precision recipe
(:mod:`dse.formulas.precision`) unless the optimizer fixes them (8-bit Adam: 1 byte per state plus its
block-wise quantization constants).

========================  ========================  ==========================================
optimizer                 states per parameter      source
========================  ========================  ==========================================
adam, adamw               momentum m, variance v    Kingma & Ba 2015, Alg. 1; Loshchilov &
                                                    Hutter 2019 (decoupled weight decay)
adam-8bit                 momentum m, variance v,   Dettmers et al. 2021 (8-bit Optimizers via
                          8 bits each               Block-wise Quantization, arXiv 2110.02861);
                                                    bitsandbytes Adam8bit / paged_adamw_8bit
sgd-momentum              momentum                  Sutskever et al. 2013; PyTorch SGD
adagrad                   sum of squared gradients  Duchi et al. 2011
sgd                       none                      plain gradient descent
========================  ========================  ==========================================

The step is memory-bound (a handful of FLOPs per element against tens of bytes), so its
time is bytes / bandwidth on every device that runs it; no FLOP count is needed.

Symbols:
    optimizer: adam, adamw, adam-8bit, sgd-momentum, adagrad or sgd [choice]
    params: P, parameters the step updates [count]
    recipe: the precision recipe giving bytes per tensor class (default: bf16 mixed precision) [Recipe]
    grad_bytes: g, bytes per gradient the step reads (default: the recipe's gradients) [bytes]
    needed: GPU memory the step needs with every state on the GPU [bytes]
    capacity: GPU memory there is [bytes]
    pageable: bytes of the paged optimizer's states on the GPU (not its master weights) [bytes]
"""

from __future__ import annotations

from dataclasses import dataclass

from dse.formulas._array import Num, maximum, minimum
from dse.formulas.precision import Recipe, recipe as _recipe

__all__ = ["Optimizer", "OPTIMIZERS", "BLOCKWISE_8BIT", "state_bytes_per_param", "step_bytes_per_param", "step_bytes",
           "model_state_bytes_per_param", "paged_state_bytes", "paged_evicted_bytes"]


@dataclass(frozen=True)
class Optimizer:
    """One optimizer: the names of its per-parameter states and, if fixed, their bytes.

    Fields:
        name: the ``plan.optimizer`` value
        states: state tensors per parameter, by tensor-class name (``momentum``, ``variance``)
        state_bytes: bytes per state element; None = the precision recipe's ``optimizer_states``
    """

    name: str
    states: tuple[str, ...] = ()
    state_bytes: float | None = None


#: Bytes per element of an 8-bit optimizer state: the 1-byte code plus its block's fp32 absmax, one per block of
#: 2,048 values, 1 + 4 / 2048 (Dettmers et al. 2021, arXiv 2110.02861, §2: block-wise quantization, B = 2048;
#: bitsandbytes keeps tensors under 4,096 values in 32 bits: a LoRA adapter of rank 16 already has 65,536).
BLOCKWISE_8BIT = 1 + 4 / 2048

#: Every optimizer, by ``plan.optimizer`` name (AdaGrad's sum of squares is the "variance" class).
OPTIMIZERS = {o.name: o for o in (
    Optimizer("adam", ("momentum", "variance")),
    Optimizer("adamw", ("momentum", "variance")),
    Optimizer("adam-8bit", ("momentum", "variance"), BLOCKWISE_8BIT),
    Optimizer("sgd-momentum", ("momentum",)),
    Optimizer("adagrad", ("variance",)),
    Optimizer("sgd", ()),
)}


def _get(optimizer: str) -> Optimizer:
    try:
        return OPTIMIZERS[optimizer]
    except KeyError:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}") from None


def _moments(opt: Optimizer, r: Recipe) -> float:
    return len(opt.states) * (r.optimizer_states if opt.state_bytes is None else opt.state_bytes)


def state_bytes_per_param(optimizer: str = "adam", recipe: Recipe | None = None) -> float:
    """Bytes per parameter the optimizer keeps: its master copy plus its states.

    Formula: o = master + n_states x s (mixed precision: Adam 4 + 2 x 4 = 12, SGD-momentum and AdaGrad 8, SGD 4;
    pure bf16: Adam 0 + 2 x 2 = 4)
    Source: Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054) §3.1: "K = 12" for mixed-precision Adam; ZeRO-Infinity
    (arXiv 2104.07857) Sec. 3; Smart-Infinity (arXiv 2403.06664) Sec. VII-F (SGD-momentum and AdaGrad: 3/4 of Adam).

    Returns:
        optimizer bytes per parameter [bytes]

    >>> state_bytes_per_param("adam"), state_bytes_per_param("sgd-momentum"), state_bytes_per_param("sgd")
    (12, 8, 4)
    >>> state_bytes_per_param("adam-8bit")   # fp32 master + two 8-bit states with their block constants
    6.00390625
    """
    r = recipe or _recipe()
    return r.master_weights + _moments(_get(optimizer), r)


def step_bytes_per_param(optimizer: str = "adam", recipe: Recipe | None = None, grad_bytes: Num | None = None) -> Num:
    """Bytes one optimizer step reads and writes per parameter (a fused, memory-bound kernel).

    Formula: g + 2 u + 2 n_states s + w_copy, u = master (or the weights when there is none), w_copy = w when a
    master exists (the working copy is rewritten from it), else 0. Mixed-precision Adam: g + 8 + 16 + 2 = 26 + g
    Source: the operands of Adam (Kingma & Ba 2015, Algorithm 1) in mixed precision (Micikevicius et al. 2018):
    each state and the master copy read and written once, the gradient read once, the half-precision weight written.

    Returns:
        bytes per parameter [bytes]

    >>> step_bytes_per_param("adam"), step_bytes_per_param("sgd-momentum"), step_bytes_per_param("adagrad")
    (30, 22, 22)
    """
    r = recipe or _recipe()
    g = r.gradients if grad_bytes is None else grad_bytes
    rewrite = r.weights if r.master_weights else 0
    return g + 2 * r.updated_copy + 2 * _moments(_get(optimizer), r) + rewrite


def step_bytes(params: Num, optimizer: str = "adam", recipe: Recipe | None = None,
               grad_bytes: Num | None = None) -> Num:
    """Bytes the optimizer step moves over ``params`` parameters.

    Formula: P x step_bytes_per_param
    Source: :func:`step_bytes_per_param`.

    Returns:
        bytes [bytes]

    >>> step_bytes(1e9, "adam") / 1e9, step_bytes(1e9, "sgd-momentum") / 1e9   # GB
    (30.0, 22.0)
    >>> import numpy as np
    >>> step_bytes(np.array([1e9, 7e9]), "adagrad") / 1e9   # GB
    array([ 22., 154.])
    """
    return params * step_bytes_per_param(optimizer, recipe, grad_bytes)


def model_state_bytes_per_param(optimizer: str = "adam", recipe: Recipe | None = None) -> dict[str, float]:
    """Bytes per trainable parameter of each model-state class: weights, gradients, optimizer.

    Formula: weights = w; gradients = g; optimizer = :func:`state_bytes_per_param` (FP8's derived copies of the
    linear weights, ``recipe.weight_copies``, are held for the linear weights only: :mod:`dse.formulas.fp8`)
    Source: Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054) §3.1: 2 Psi + 2 Psi + K Psi, K = 12, for
    mixed-precision Adam with fp16 gradients.

    Returns:
        dict weights, gradients, optimizer [bytes]

    >>> from dse.formulas.precision import recipe
    >>> model_state_bytes_per_param("adam", recipe("fp16", "half"))   # ZeRO's 2 + 2 + 12
    {'weights': 2, 'gradients': 2, 'optimizer': 12}
    """
    r = recipe or _recipe()
    return {"weights": r.weights, "gradients": r.gradients, "optimizer": state_bytes_per_param(optimizer, r)}


def paged_state_bytes(optimizer: str = "adam", recipe: Recipe | None = None) -> float:
    """Bytes per parameter a paged optimizer allocates in unified memory: its states, not the master copy.

    Formula: n_states x s (Adam 8, Adam 8-bit 2.0039; the fp32 master weights are the model's parameters)
    Source: bitsandbytes' paged optimizers (``paged_adamw_32bit``, ``paged_adamw_8bit``) allocate only the state
    buffers with ``cudaMallocManaged`` (QLoRA, Dettmers et al. 2023, arXiv 2305.14314, §3 "Paged Optimizers").

    Returns:
        bytes per parameter [bytes]

    >>> paged_state_bytes("adam"), paged_state_bytes("adam-8bit")
    (8, 2.00390625)
    """
    return _moments(_get(optimizer), recipe or _recipe())


def paged_evicted_bytes(needed: Num, capacity: Num, pageable: Num) -> Num:
    """Bytes of paged optimizer state that live in CPU memory when the GPU runs short: E.

    Formula: E = min(max(needed - capacity, 0), pageable); each step moves 2 E over the GPU<->host link (the step
    prefetches the evicted pages, the next forward's allocations evict them again)
    Source: QLoRA (Dettmers et al. 2023, arXiv 2305.14314) §3: "automatic page-to-page transfers between the CPU
    and GPU ... the optimizer states ... are automatically evicted to CPU RAM when the GPU runs out-of-memory and
    paged back into GPU memory when the memory is needed in the optimizer update step"; NVIDIA unified memory.

    Returns:
        bytes [bytes]

    >>> paged_evicted_bytes(48.7, 44.7, 1.6), paged_evicted_bytes(48.7, 44.7, 8.0), paged_evicted_bytes(40, 44.7, 8)
    (1.6, 4.0, 0.0)
    """
    return minimum(maximum(needed - capacity, 0.0), pageable)
