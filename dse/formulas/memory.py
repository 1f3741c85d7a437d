"""Model-state bytes per tensor class, per GPU, for each ZeRO stage.

Tensor classes (Rajbhandari et al. 2020, ZeRO, arXiv 1910.02054, §3.1; Megatron-LM
``theoretical_memory_usage.py``): half-precision weights (2 B/param), gradients
(2 B, or 4 B when accumulated in fp32 as Megatron does for bf16), and the optimizer
(fp32 master copy 4 B + Adam moments 8 B). Adam with bf16 weights and fp32 grads is
18 B/param, the "18" of Megatron; fp16 grads give ZeRO's 16 B/param.
"""

from __future__ import annotations

from dse.formulas._array import where

OPTIMIZER_STATE_BYTES = {"adam": 8, "adamw": 8, "sgd-momentum": 4, "adagrad": 4, "sgd": 0}


def optimizer_bytes_per_param(optimizer: str = "adam", master_bytes: int = 4):
    """Bytes per parameter of optimizer state including the fp32 master copy.

    Formula: master (4) + moments (Adam 8: m and v; SGD-momentum 4; AdaGrad 4).
    """
    return master_bytes + OPTIMIZER_STATE_BYTES[optimizer]


def model_state_bytes(params, dp=1, zero=0, weight_bytes=2, grad_bytes=4, optimizer_bytes=12):
    """Per-GPU bytes of weights, gradients and optimizer state under ZeRO.

    Formula: weights P w / (dp if zero = 3); grads P g / (dp if zero >= 2);
    optimizer P o / (dp if zero >= 1) (ZeRO paper §5, Fig. 1). ``params`` is the
    parameter count held by this GPU's tensor/pipeline shard.

    >>> model_state_bytes(1e9, dp=8, zero=1)   # 2 + 4 + 12/8 = 7.5 B/param (Megatron distributed optimizer)
    {'weights': 2000000000.0, 'gradients': 4000000000.0, 'optimizer': 1500000000.0}
    """
    w = params * weight_bytes / where(zero >= 3, dp, 1)
    g = params * grad_bytes / where(zero >= 2, dp, 1)
    o = params * optimizer_bytes / where(zero >= 1, dp, 1)
    return {"weights": w, "gradients": g, "optimizer": o}


def zero3_gather_bytes(layer_params, weight_bytes=2, prefetch_layers=2):
    """Working buffer of ZeRO-3: gathered (full) weights of the layers in flight.

    Formula: prefetch_layers x layer_params x w (DeepSpeed stage3 prefetch / live parameters).
    """
    return prefetch_layers * layer_params * weight_bytes
