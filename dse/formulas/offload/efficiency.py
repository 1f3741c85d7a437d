"""ZeRO-Infinity's efficiency analysis: arithmetic intensity of each tensor class, and the bandwidth it needs.

Part of :mod:`dse.formulas.offload` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num

__all__ = ["arithmetic_intensity", "offload_efficiency", "required_bandwidth"]

def arithmetic_intensity(tensor_class: str, seq: Num, batch: Num, hidden: Num | None = None, ci: Num = 1) -> Num:
    """FLOPs per byte moved for a tensor class.

    Formula: params & grads: seq x bsz; optimizer states: seq x bsz / 4; activation checkpoints: 24 x hd x ci
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1 (2 x 4 x bsz x seq x P FLOPs against 2 x 4 x P bytes of
    parameter loads and gradient stores, 2 x 16 x P bytes of optimizer state, and 4 L/ci hd seq bsz bytes of
    checkpoints); research note storage_offload.md §3.2.

    Args:
        tensor_class: params, gradients, params_grads, optimizer, optimizer_states, activations or
            activation_checkpoints [choice]
        hidden: hd, hidden size (activation checkpoints only) [count]
        ci: transformer blocks between activation checkpoints [count]
    Returns:
        arithmetic intensity [FLOP/byte]

    >>> arithmetic_intensity("params", 1024, 1), arithmetic_intensity("optimizer", 2048, 1)
    (1024, 512.0)
    >>> arithmetic_intensity("activations", 1024, 1, hidden=2048)
    49152
    """
    if tensor_class in ("params", "gradients", "params_grads"):
        return seq * batch
    if tensor_class in ("optimizer", "optimizer_states"):
        return seq * batch / 4
    if tensor_class in ("activations", "activation_checkpoints"):
        if hidden is None:
            raise ValueError("activation checkpoints need the hidden size")
        return 24 * hidden * ci
    raise ValueError(f"tensor_class must be params, gradients, optimizer or activations, got {tensor_class!r}")


def offload_efficiency(ait: Num, bandwidth: Num, peak_flops: Num) -> Num:
    """Compute efficiency when a tensor class streams over a link without overlap.

    Formula: efficiency = ait x bw / (ait x bw + peak_tp)
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1 and Fig. 3: params/grads at bsz x seq = 1024, 70 TFLOP/s,
    68 GB/s give 50 %.

    Returns:
        efficiency [fraction]

    >>> round(offload_efficiency(1024, 68.36e9, 70e12), 3)
    0.5
    >>> import numpy as np
    >>> np.round(offload_efficiency(1024, np.array([10e9, 70e9, 700e9]), 70e12), 3)
    array([0.128, 0.506, 0.911])
    """
    return ait * bandwidth / (ait * bandwidth + peak_flops)


def required_bandwidth(efficiency: Num, ait: Num, peak_flops: Num) -> Num:
    """Bandwidth a tensor class needs for a target efficiency (inverse of :func:`offload_efficiency`).

    Formula: bw = eff x peak_tp / (ait x (1 - eff))
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1, Fig. 3: optimizer states at 90 %, 2048 tokens, 70 TFLOP/s
    need 1.23 TB/s ("nearly 1.5 TB/s").

    Returns:
        bandwidth [bytes/s]

    >>> round(required_bandwidth(0.9, arithmetic_intensity("optimizer", 2048, 1), 70e12) / 1e12, 2)
    1.23
    """
    return efficiency * peak_flops / (ait * (1 - efficiency))
