"""The sizes and dtypes a stack's amounts are keyed by, and the bytes of an amount.

Part of :mod:`dse.formulas.stacks` (the op format and the symbols are there).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num

__all__ = ["DTYPE_BYTES", "sizes", "amount", "qk_sizes"]

#: Bytes per element of the dtypes a stack names explicitly (``act`` and ``grad`` come from the precision recipe).
DTYPE_BYTES = {"fp32": 4, "byte": 1, "int64": 8}

Op = dict[str, Any]
Row = dict[str, Any]
Table = dict[str, Row]
Sizes = dict[str, Num]


def sizes(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, vocab: Num, *, tp: Num = 1,
          sequence_parallel: bool = False, layer_params: Num = 0, param_tensors: Num = 0) -> dict[str, Num]:
    """Element counts of the tensors a stack's amounts are keyed by, on one GPU for one micro-batch.

    Formula: tok = s b; h = s b h r (r = 1/t with SP, else 1); q = s b a d / t; kv = s b kv d / t; qkv = q + 2 kv;
    f = s b F / t; scores = b (a/t) s^2; heads = s b a / t; logits = s b V / t; table = V h / t; rope = s d (one
    rotary cos or sin table: positions x head dimension, shared by the micro-batch's sequences)
    Source: the shapes of a transformer layer's tensors under Megatron-LM tensor parallelism (Shoeybi et al. 2019,
    arXiv 1909.08053 §3).

    Returns:
        size name -> elements [dict]

    >>> z = sizes(1024, 4, 1600, 25, 25, 64, 6400, 50257)   # GPT-2 XL, micro-batch 4
    >>> z["h"], z["f"], z["scores"], z["logits"]
    (6553600, 26214400, 104857600, 205852672)
    >>> import numpy as np
    >>> sizes(1024, np.array([1, 8]), 1600, 25, 25, 64, 6400, 50257)["h"]   # micro-batches 1 and 8
    array([ 1638400, 13107200])
    """
    def per_gpu(x: Num) -> Num:      # x / t, an integer stays one when the layer is not split
        return x if type(tp) is int and tp == 1 else x / tp

    tok = s * b
    r = 1 / tp if sequence_parallel else 1
    q = per_gpu(tok * heads * head_dim)
    kv = per_gpu(tok * kv_heads * head_dim)
    return {"tok": tok, "h": tok * h * r, "q": q, "kv": kv, "qkv": q + 2 * kv, "f": per_gpu(tok * ffn),
            "scores": per_gpu(b * heads * s * s), "heads": per_gpu(tok * heads), "logits": per_gpu(tok * vocab),
            "table": per_gpu(vocab * h), "rope": s * head_dim + 0 * tok, "params": layer_params,
            "param_tensors": param_tensors}


def amount(passes: dict[str, Num], size: Sizes, bytes_per_element: Num = 2, grad_bytes: Num = 2) -> Num:
    """Bytes of a stack amount: passes over tensors of the named sizes and dtypes.

    Formula: sum over keys of passes x elements(size) x bytes(dtype); dtype act = e, grad = the gradient dtype,
    fp32 = 4, byte = 1
    Source: the bytes an element-wise kernel reads and writes in HBM (Williams et al. 2009, roofline: a
    memory-bound kernel's time is its bytes over the bandwidth).

    Returns:
        bytes [bytes]

    >>> z = sizes(1024, 4, 1600, 25, 25, 64, 6400, 50257)
    >>> round(amount({"logits": 1, "logits:fp32": 5}, z) / 2**30, 4)   # logits.float() and log_softmax: GiB
    4.2177
    """
    total: Num = 0
    for key, n in passes.items():
        name, _, dtype = key.partition(":")
        per = bytes_per_element if dtype == "" else (grad_bytes if dtype == "grad" else DTYPE_BYTES[dtype])
        total = total + n * size[name] * per
    return total

def qk_sizes(size: Sizes, full: bool = False) -> Sizes:
    """The sizes a QK-norm's amounts read: the norm over head_dim of each query and key head.

    Formula: h -> q + kv (the normed elements), tok -> (q + kv) / d = (q + kv) heads / q (one row per head and token);
    ``full`` (OLMo 2: the norm over the whole query and key projections): tok -> 2 tok (one row each per token)
    Source: Qwen3 / Gemma 3 q_norm and k_norm (transformers 5.24: the layer's RMSNorm module over head_dim); OLMo 2's
    Olmo2Attention (q_norm over a d, k_norm over kv d).

    Args:
        full: the QK-norm spans the whole query and key projections (OLMo 2) [bool]
    Returns:
        size name -> elements, as :func:`sizes` [dict]

    >>> z = sizes(1024, 2, 1152, 4, 1, 256, 6912, 262144)       # Gemma 3 1B: 4 query heads, 1 K/V head of 256
    >>> q = qk_sizes(z); q["h"] == 2048 * 5 * 256, q["tok"] == 2048 * 5
    (True, True)
    """
    rows = 2 * size["tok"] if full else (size["q"] + size["kv"]) * size["heads"] / size["q"]
    return {**size, "h": size["q"] + size["kv"], "tok": rows}
