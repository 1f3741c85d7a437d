"""Bytes per iteration: parameter fetches, gradient offload, optimizer-state swaps, the shared link.

Part of :mod:`dse.formulas.offload` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num, where

__all__ = ["fetch_passes", "param_fetch_bytes", "gradient_offload_bytes", "gradient_round_trip_bytes", "swap_in_bytes",
           "swap_out_bytes", "shared_link_traffic"]

def fetch_passes(recompute: str = "full") -> int:
    """How many times ZeRO-3 brings every fp16 parameter to the GPU per micro-batch.

    Formula: 3 with full activation recomputation (forward, recompute, backward), else 2
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1: "parameters are loaded three times".

    Args:
        recompute: none, selective or full [choice]
    Returns:
        passes [count]

    >>> fetch_passes("full"), fetch_passes("none")
    (3, 2)
    """
    return 3 if recompute == "full" else 2


def param_fetch_bytes(params: Num, weight_bytes: Num = 2, passes: Num = 1) -> Num:
    """Bytes of fp16 parameters moved to the GPU.

    Formula: passes x w x P
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1.

    Args:
        passes: fetches per micro-batch (:func:`fetch_passes`) [count]
    Returns:
        bytes [bytes]

    >>> param_fetch_bytes(4e9, passes=3) / 1e9   # GB
    24.0
    """
    return passes * weight_bytes * params


def gradient_offload_bytes(params: Num, grad_bytes: Num = 4, compression: Num = 1.0) -> Num:
    """Gradient bytes written toward the optimizer's tier in backward.

    Formula: c x g x P
    Source: Smart-Infinity (arXiv 2403.06664) Table I ("c% x 2M"); g = 4 is ZeRO-Infinity's fp32 swap dtype.

    Returns:
        bytes [bytes]

    >>> gradient_offload_bytes(4e9) / 1e9, gradient_offload_bytes(4e9, compression=0.02) / 1e9   # GB
    (16.0, 0.32)
    """
    return compression * grad_bytes * params


def gradient_round_trip_bytes(params: Num, grad_bytes: Num = 2, final_bytes: Num = 4, micro_batches: Num = 1,
                              compression: Num = 1.0) -> tuple[Num, Num]:
    """Extra GPU<->host bytes of ZeRO-3's gradient hand-off to an offloaded optimizer (beyond the first copy down).

    Formula: dense: h2d = m x g16 x P, d2h = g x P;  top-k (c < 1): h2d = (m + 1) x g16 x P, d2h = (g16 + c x g) x P
    Source: DeepSpeed ``runtime/zero/stage3.py::partition_grads`` (0.9.3 as forked by Smart-Infinity, and
    master 2025-02): the fp16 partition is copied into the host gradient buffer (the first copy, counted
    elsewhere), brought back with ``grad_buffer.to(device)`` for the inf/nan check and the norm (every
    micro-batch), converted on the GPU (``.float()`` for the CPU optimizer) and copied down again, once per
    iteration, into the swap buffer (``swap_tensor/optimizer_utils.py::_swap_out_gradients``,
    ``AsyncTensorSwapper.insert_tensor``: ``copy_``) or the fp32 gradient partition. Smart-Infinity's top-k
    (c < 1, released code) copies the fp16 gradients into an fp16 swap buffer, moves it back to the GPU
    (``gradient_tensors[0].to('cuda')``), sorts it there and copies the kept values and indices down
    (``.to('cpu')``: c x g bytes per element of the dense exchange dtype g).

    Args:
        params: P, parameters whose gradients the GPU hands off [count]
        grad_bytes: g16, bytes per element of the gradient partition (fp16: 2) [bytes]
        final_bytes: g, bytes per element the optimizer gets (fp32: 4; a CSD: the exchange dtype) [bytes]
        micro_batches: m, micro-batches per iteration [count]
        compression: c, bytes sent / dense bytes (1 = dense) [fraction]
    Returns:
        (bytes host -> GPU, bytes GPU -> host) [bytes]

    >>> [b / 1e9 for b in gradient_round_trip_bytes(4e9)]   # dense: GB up, GB down again
    [8.0, 16.0]
    >>> [round(b / 1e9, 2) for b in gradient_round_trip_bytes(4e9, compression=0.02)]   # top-k: one more trip
    [16.0, 8.32]
    """
    topk = compression < 1
    h2d = micro_batches * grad_bytes * params + where(topk, grad_bytes * params, 0.0)
    return h2d, where(topk, grad_bytes + compression * final_bytes, final_bytes) * params


def swap_in_bytes(params: Num, state_bytes: Num = 12, grad_bytes: Num = 4) -> Num:
    """Bytes read from the drives by the CPU optimizer step.

    Formula: P (state + g)
    Source: Smart-Infinity (arXiv 2403.06664) Table I: 6M + 2M read (M = 2P).

    Returns:
        bytes [bytes]

    >>> swap_in_bytes(1e9) / 1e9   # GB
    16.0
    """
    return params * (state_bytes + grad_bytes)


def swap_out_bytes(params: Num, state_bytes: Num = 12) -> Num:
    """Bytes written back to the drives after the CPU step.

    Formula: P x state
    Source: Smart-Infinity (arXiv 2403.06664) Table I: 6M written (M = 2P).

    Returns:
        bytes [bytes]

    >>> swap_out_bytes(1e9) / 1e9   # GB
    12.0
    """
    return params * state_bytes


def shared_link_traffic(params: Num, mode: str = "baseline", state_bytes: Num = 12, grad_bytes: Num = 4,
                        param_bytes: Num = 4, compression: Num = 1.0) -> dict[str, Num]:
    """Bytes per iteration on the host <-> drives shared link, by tensor class and direction.

    Formula: baseline: 2 x state x P + 2 x g x P = 32P; SmartUpdate: c x g x P down + p x P up = 8P, 4P (1 + c)
    Source: Smart-Infinity (arXiv 2403.06664) Table I, in M = 2P: 6M + 6M + 2M + 2M vs 2M + 2M.

    Args:
        mode: baseline (ZeRO-Infinity, CPU update) or smartupdate (update on the drives) [choice]
    Returns:
        dict states_read, states_write, gradients_write, gradients_read, params_read, total [bytes]

    >>> shared_link_traffic(1.0, "baseline")["total"], shared_link_traffic(1.0, "smartupdate")["total"]
    (32.0, 8.0)
    >>> round(shared_link_traffic(1.0, "smartupdate", compression=0.02)["total"], 2)
    4.08
    >>> import numpy as np
    >>> shared_link_traffic(1.0, "smartupdate", compression=np.array([1.0, 0.1, 0.02]))["total"]
    array([8.  , 4.4 , 4.08])
    """
    if mode == "baseline":
        out = {"states_read": state_bytes * params, "states_write": state_bytes * params,
               "gradients_write": grad_bytes * params, "gradients_read": grad_bytes * params,
               "params_read": 0 * params}
    elif mode == "smartupdate":
        out = {"states_read": 0 * params, "states_write": 0 * params,
               "gradients_write": compression * grad_bytes * params, "gradients_read": 0 * params,
               "params_read": param_bytes * params}
    else:
        raise ValueError(f"mode must be 'baseline' or 'smartupdate', got {mode!r}")
    out["total"] = sum(out.values())
    return out
