"""Which tensors SSDTrain writes: the saved tensors of one layer that are large enough to offload.

Part of :mod:`dse.formulas.activation_offload` (notation and symbols there): FlashTrain's
``skip_small_tensors`` threshold applied to the unique buffers of
:func:`dse.formulas.transformer.activation_terms` (deduplication writes each once).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, where
from dse.formulas.activation_offload.moe import ELEMENT_BYTES, moe_layer_terms
from dse.formulas.transformer import activation_terms

__all__ = ["SMALL_TENSOR_ELEMENTS", "offloaded_terms", "offloaded_bytes_per_layer"]

#: Tensors with fewer elements stay on the GPU (FlashTrain tensor_cache.py ``skip_small_tensors``).
SMALL_TENSOR_ELEMENTS = 8 * 1024 * 1024


def _element_bytes(name: str, bytes_per_element: Num) -> Num:
    """Bytes per element of one saved tensor of :func:`activation_terms` (masks 1 B, the fp32 LSE 4 B; an MoE
    layer's fp32 router probabilities 4 B, int64 top-k indices 8 B)."""
    if name in ELEMENT_BYTES:
        return ELEMENT_BYTES[name]
    if "mask" in name:
        return 1
    if name == "flash_lse":
        return 4
    return bytes_per_element


def offloaded_terms(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, *,
                    min_elements: Num = SMALL_TENSOR_ELEMENTS, tp: Num = 1, sequence_parallel: bool = False,
                    bytes_per_element: Num = 2, moe: dict[str, Any] | None = None, **options: Any) -> dict[str, Num]:
    """Bytes of each saved tensor of one layer that SSDTrain writes to the drives (0 when skipped).

    Formula: A_off = sum over tensors i of bytes_i [elements_i >= 8 Mi]; elements_i = bytes_i / element size
    Source: K-Wu/FlashTrain tensor_cache.py ``skip_small_tensors`` (tensors under 8*1024*1024 elements stay on the
    GPU); SSDTrain (arXiv 2408.10013); research note activation_offload.md §1.2.

    The tensors are those of :func:`dse.formulas.transformer.activation_terms` (same arguments): unique
    buffers, which is what deduplication writes (a tensor saved by several ops is written once). The
    norm-input terms hold two tensors, the [s, b, h] input and its fp32 statistics (s b rows each), and
    are tested separately: the statistics are always far below the threshold in practice. Dropout masks
    have 1-byte elements, the flash-attention log-sum-exp 4-byte elements. The fused QKV output is one
    buffer (Q, K and V are views of it).

    Args:
        min_elements: tensors with fewer elements are not offloaded [count]
        moe: an MoE layer's options (None: a dense MLP) [dict]
    Returns:
        dict tensor name -> bytes written (like ``activation_terms``) [bytes]

    >>> t = offloaded_terms(1024, 16, 12288, 96, 96, 128, 49152, tp=2)   # SSDTrain's h = 12288 GPT layer
    >>> t["flash_lse"], round(sum(t.values()) / 1e9, 3)   # the fp32 LSE is too small to offload; GB
    (0.0, 4.429)
    """
    e = bytes_per_element
    terms = activation_terms(s, b, h, heads, kv_heads, head_dim, ffn, tp=tp, sequence_parallel=sequence_parallel,
                             bytes_per_element=e, **options)
    terms = moe_layer_terms(terms, moe, s, b, h, tp=tp, sequence_parallel=sequence_parallel, bytes_per_element=e,
                            **options)
    r = 1 / tp if sequence_parallel else 1
    rows = s * b * r
    out = {}
    for name, nbytes in terms.items():
        if name in ("norm1_input", "norm2_input", "layer_input"):
            main = e * rows * h
            stats = nbytes - main
            out[name] = (where(rows * h >= min_elements, main, 0 * main)
                         + where(rows >= min_elements, stats, 0 * stats))
        else:
            elements = nbytes / _element_bytes(name, e)
            out[name] = where(elements >= min_elements, nbytes, 0 * nbytes)
    return out


def offloaded_bytes_per_layer(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num,
                              **options: Any) -> Num:
    """Bytes of one layer SSDTrain writes per micro-batch per GPU: the sum of :func:`offloaded_terms`.

    Formula: A_off = sum_i bytes_i [elements_i >= 8 Mi]
    Source: K-Wu/FlashTrain tensor_cache.py; research note activation_offload.md §1.2, §1.4 (4.43 GB per layer for
    SSDTrain's h = 12288 configuration).

    Returns:
        bytes per layer, micro-batch and GPU [bytes]

    >>> import numpy as np
    >>> np.round(offloaded_bytes_per_layer(1024, np.array([1, 4, 16]), 12288, 96, 96, 128, 49152, tp=2) / 1e9, 3)
    array([0.264, 1.107, 4.429])
    """
    total: Num = 0
    for v in offloaded_terms(s, b, h, heads, kv_heads, head_dim, ffn, **options).values():
        total = total + v
    return total
