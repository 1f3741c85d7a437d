"""Model-state bytes per tensor class, per GPU, for each ZeRO stage.

Tensor classes (Rajbhandari et al. 2020, ZeRO, arXiv 1910.02054, §3.1; Megatron-LM
``theoretical_memory_usage.py``): half-precision weights (2 B/param), gradients
(2 B, or 4 B when accumulated in fp32 as Megatron does for bf16), and the optimizer
(fp32 master copy 4 B + Adam moments 8 B). Adam with bf16 weights and fp32 grads is
18 B/param, the "18" of Megatron; fp16 grads give ZeRO's 16 B/param.

Symbols:
    params: P, parameters held by this GPU's tensor/pipeline shard [count]
    dp: d, data-parallel replicas [count]
    zero: ZeRO stage, 0 to 3 [count]
    weight_bytes: w, bytes per stored weight (2 for bf16/fp16) [bytes]
    grad_bytes: g, bytes per gradient (4 fp32, 2 half) [bytes]
    optimizer_bytes: o, optimizer bytes per parameter including the fp32 master copy [bytes]
"""

from __future__ import annotations

from dse.formulas._array import Num, where
from dse.formulas.optimizer import OPTIMIZERS, state_bytes_per_param
from dse.formulas.precision import RECIPES

__all__ = ["OPTIMIZER_STATE_BYTES", "optimizer_bytes_per_param", "model_state_bytes", "zero3_gather_bytes"]

#: Optimizer-state bytes per parameter in mixed precision, moments only (the fp32 master copy is added by
#: :func:`optimizer_bytes_per_param`): Adam m and v 8, SGD momentum 4, AdaGrad's sum of squares 4. A view of
#: :data:`dse.formulas.optimizer.OPTIMIZERS` (the one definition), kept for existing callers.
OPTIMIZER_STATE_BYTES = {name: state_bytes_per_param(name, RECIPES["bf16"]) - RECIPES["bf16"].master_weights
                         for name in OPTIMIZERS}


def optimizer_bytes_per_param(optimizer: str = "adam", master_bytes: float = 4) -> float:
    """Bytes per parameter of optimizer state including the fp32 master copy.

    Formula: o = master (4) + moments (Adam 8: m and v; SGD-momentum 4; AdaGrad 4).
    Source: Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054) §3.1: "K = 12" for mixed-precision Adam.

    The moments come from :data:`dse.formulas.optimizer.OPTIMIZERS` (fp32 states); for another precision use
    :func:`dse.formulas.optimizer.state_bytes_per_param` with its recipe.

    Args:
        optimizer: adam, adamw, sgd-momentum, adagrad or sgd [choice]
        master_bytes: bytes of the fp32 master copy [bytes]
    Returns:
        optimizer bytes per parameter [bytes]

    >>> optimizer_bytes_per_param("adam"), optimizer_bytes_per_param("sgd-momentum")
    (12, 8)
    """
    return master_bytes + OPTIMIZER_STATE_BYTES[optimizer]


def model_state_bytes(params: Num, dp: Num = 1, zero: Num = 0, weight_bytes: Num = 2, grad_bytes: Num = 4,
                      optimizer_bytes: Num = 12) -> dict[str, Num]:
    """Per-GPU bytes of weights, gradients and optimizer state under ZeRO.

    Formula: weights P w / (d if zero = 3); grads P g / (d if zero >= 2); optimizer P o / (d if zero >= 1)
    Source: Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054) §5 and Fig. 1; Megatron-LM distributed optimizer
    (6 + 12/d bytes per parameter, docs/user-guide/features/dist_optimizer.md).

    Returns:
        dict weights, gradients, optimizer [bytes]

    >>> model_state_bytes(1e9, dp=8, zero=1)   # 2 + 4 + 12/8 = 7.5 B/param (Megatron distributed optimizer)
    {'weights': 2000000000.0, 'gradients': 4000000000.0, 'optimizer': 1500000000.0}
    >>> import numpy as np
    >>> model_state_bytes(1e9, dp=8, zero=np.array([0, 1, 2, 3]))["gradients"] / 1e9   # ZeRO-2 shards gradients
    array([4. , 4. , 0.5, 0.5])
    """
    w = params * weight_bytes / where(zero >= 3, dp, 1)
    g = params * grad_bytes / where(zero >= 2, dp, 1)
    o = params * optimizer_bytes / where(zero >= 1, dp, 1)
    return {"weights": w, "gradients": g, "optimizer": o}


def zero3_gather_bytes(layer_params: Num, weight_bytes: Num = 2, prefetch_layers: Num = 2) -> Num:
    """Working buffer of ZeRO-3: gathered (full) weights of the layers in flight.

    Formula: n_prefetch x P_layer x w
    Source: DeepSpeed stage3 prefetch and live-parameter buffers (deepspeed/runtime/zero/stage3.py,
    ``stage3_prefetch_bucket_size``, ``stage3_max_live_parameters``); the layer count is an assumption.

    Args:
        layer_params: P_layer, parameters of one layer on this GPU [count]
        prefetch_layers: n_prefetch, layers gathered at once (the current and the prefetched one) [count]
    Returns:
        bytes of gathered weights [bytes]

    >>> zero3_gather_bytes(2e8) / 1e9   # a 200M-parameter layer in bf16, two in flight: GB
    0.8
    """
    return prefetch_layers * layer_params * weight_bytes
