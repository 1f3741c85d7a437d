"""Activation bytes: what a layer, the head and the embedding save for backward, the working sets, the in-flight factor.

The recompute and backward working sets; the interleaved schedule's in-flight factor.

Part of :mod:`dse.formulas.transformer` (the symbols are there).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, where

__all__ = ["activation_terms", "activation_bytes_per_layer", "recompute_working_bytes", "backward_working_bytes",
           "head_activation_bytes", "embedding_activation_bytes", "interleave_factor"]


def activation_terms(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, *, tp: Num = 1,
                     sequence_parallel: bool = False, recompute: str = "none", attention: str = "flash",
                     ffn_type: str = "gelu", norm: str = "layernorm", position: str = "learned", dropout: bool = True,
                     bytes_per_element: Num = 2, score_dropout: bool = True, branch_dropouts: int = 2) -> dict[str, Num]:
    """Bytes one layer keeps for backward, per GPU and micro-batch, tensor by tensor.

    Formula: sum of the terms below; for GPT with dropout, math attention and no
    recompute it is s b h (10 + 24/t + 5 a s/(h t)) without sequence parallelism and
    s b h (34/t + 5 a s/(h t)) with it; full recompute keeps only the layer input, 2 s b h (/t with SP)
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, Eqs. 2 and 4, refined tensor by tensor against
    PyTorch's saved tensors (tests/test_activations_torch.py, within 3 %).

    The accounting is what autograd holds in a Megatron-core layer, counted as unique
    buffers (a view keeps its whole buffer alive), and is checked against PyTorch's
    saved tensors within 3 % by tests/test_activations_torch.py. ``r`` = 1/t for
    tensors that sequence parallelism shards, else 1; TP-split tensors are /t.

    - layer input, saved by the first norm: e·sbh·r, plus fp32 statistics (8 B/row
      LayerNorm mean + rstd, 4 B/row RMSNorm rstd); the second norm likewise;
    - QKV GEMM input e·sbh·r (with SP the GEMM saves the un-gathered shard);
    - the fused QKV output, (a + 2kv)·d, in Megatron-core's grouped layout; it stays
      alive while core attention keeps any of Q, K, V as a view of it;
    - ``query_copy`` e·a d: Q is a tensor of its own when it is rotated (rotary) or
      when kv < a, where reshaping the grouped layout to a heads copies it;
    - ``rotary_key`` e·kv d: the rotated K (rotary);
    - math attention: with kv < a, Megatron-core repeats K and V to a heads inside core
      attention (``gqa_expanded_kv``, 2 e·a d); QK^T and PV then keep the copies, so the
      fused QKV buffer and the rotated K are freed. Softmax output e·a s^2 b/t, and with
      dropout its 1-byte mask and the dropout output e·a s^2 b/t;
    - flash attention: Q, K, V (as above, kv heads: GQA is native), the output O and the
      fp32 log-sum-exp (4·a·s b/t). O is counted once, as the out-projection input: the
      kernel writes it in Q's [s, b, a, d] memory layout, so the view to [s, b, h] needs
      no copy (measured with PyTorch's CPU flash kernel; flash-attn 2 allocates O with
      empty_like(Q), which keeps that layout when Q is a dense tensor, i.e. rotated or
      copied for GQA; for a strided Q view of the fused buffer, learned positions with
      kv = a and b > 1, Megatron would add a transposed copy, e·a d, not counted here);
    - selective recompute: core attention saves only its inputs Q, K, V (the repeat to a
      heads, the s^2 terms, O and LSE are recomputed);
    - out-projection input e·a d·sb/t; two residual dropout masks sbh·r (1 B each);
    - with dropout, the attention's mask and output only with ``score_dropout`` (math attention) and one residual
      mask per ``branch_dropouts`` (the MLP's first): the places the model drops (Megatron-Core's
      ``attention_dropout`` and ``hidden_dropout``; Transformers' per-family dropouts, dse.specs.hf);
    - MLP: fc1 input e·sbh·r; GeLU keeps its input and output (2 e F), ReLU its output
      (e F), SwiGLU its 2F input and F output (3 e F), all /t.

    Returns:
        dict tensor name -> bytes [bytes]

    >>> t = activation_terms(2048, 1, 4096, 32, 32, 128, 11008, ffn_type="swiglu", norm="rmsnorm", position="rotary",
    ...                      dropout=False)   # Llama-2-7B layer, flash attention
    >>> t["mlp_activation"] / 2**20, round(sum(t.values()) / 2**20, 2)   # MiB
    (129.0, 289.27)
    """
    e = bytes_per_element
    sb = s * b
    r = 1 / tp if sequence_parallel else 1
    stats = 8 if norm == "layernorm" else 4
    if recompute == "full":
        return {"layer_input": e * sb * h * r}
    hd_q = heads * head_dim / tp
    hd_kv = kv_heads * head_dim / tp
    grouped = where(kv_heads < heads, 1, 0)
    rotary = 1 if position == "rotary" else 0
    math_kept = attention == "math" and recompute != "selective"
    expanded = grouped if math_kept else 0          # K, V repeated to a heads are what QK^T, PV keep
    t = {}
    t["norm1_input"] = e * sb * h * r + stats * sb * r
    t["qkv_input"] = e * sb * h * r
    t["qkv_output"] = e * sb * (hd_q + 2 * hd_kv) * (1 - expanded)
    t["query_copy"] = e * sb * hd_q * where(rotary + grouped > 0, 1, 0)
    if rotary:
        t["rotary_key"] = e * sb * hd_kv * (1 - expanded)
    if math_kept:
        a_loc = heads / tp
        t["gqa_expanded_kv"] = 2 * e * sb * hd_q * grouped
        t["softmax_output"] = e * a_loc * s * s * b
        if dropout and score_dropout:
            t["attn_dropout_mask"] = a_loc * s * s * b
            t["attn_dropout_output"] = e * a_loc * s * s * b
    elif recompute != "selective":
        t["flash_lse"] = 4 * sb * heads / tp
    t["out_proj_input"] = e * sb * hd_q
    if dropout and branch_dropouts >= 2:
        t["attn_residual_dropout_mask"] = sb * h * r
    t["norm2_input"] = e * sb * h * r + stats * sb * r
    t["fc1_input"] = e * sb * h * r
    f_loc = ffn / tp
    if ffn_type in ("swiglu", "geglu"):
        t["mlp_activation"] = 3 * e * sb * f_loc
    elif ffn_type == "relu":
        t["mlp_activation"] = e * sb * f_loc
    else:
        t["mlp_activation"] = 2 * e * sb * f_loc
    if dropout and branch_dropouts >= 1:
        t["mlp_residual_dropout_mask"] = sb * h * r
    return t


def activation_bytes_per_layer(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num,
                               **options: Any) -> Num:
    """Total of :func:`activation_terms` (same arguments).

    Formula: sum over the tensors of activation_terms(...) for the given options (e.g. GPT, no recompute, math attention, no SP: s b h (10 + 24/t + 5 a s / (h t)); flash attention drops the 5 a s / (h t) score terms)
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) Eq. 2 and Table 2; activation_terms' per-tensor sources.

    Returns:
        bytes per layer, GPU and micro-batch [bytes]

    >>> activation_bytes_per_layer(2048, 1, 12288, 96, 96, 128, 49152, tp=8, attention="math",
    ...     norm="layernorm", dropout=True) / (2048 * 12288)  # GPT-3 layer, t = 8 (note V2): 10 + 3 + 10, + stats
    23.001302083333332
    >>> import numpy as np
    >>> activation_bytes_per_layer(2048, np.array([1, 2, 4]), 12288, 96, 96, 128, 49152, tp=8,
    ...     recompute="full") / 2**20   # full recompute keeps the layer input, 2 sbh: MiB
    array([ 48.,  96., 192.])
    """
    total: Num = 0
    for v in activation_terms(s, b, h, heads, kv_heads, head_dim, ffn, **options).values():
        total = total + v
    return total


def recompute_working_bytes(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num,
                            **options: Any) -> Num:
    """Bytes of the one layer being recomputed during backward (full recompute only).

    Formula: activation_bytes_per_layer(..., recompute="none") when recompute = full, else 0
    Source: Chen et al. 2016 (arXiv 1604.06174): a checkpointed segment is re-run forward, holding its activations.

    Returns:
        bytes [bytes]

    >>> recompute_working_bytes(2048, 1, 12288, 96, 96, 128, 49152, tp=8, recompute="full", attention="math") / 2**20
    552.03125
    """
    if options.get("recompute") != "full":
        return 0 * s
    return activation_bytes_per_layer(s, b, h, heads, kv_heads, head_dim, ffn, **{**options, "recompute": "none"})


def backward_working_bytes(s: Num, b: Num, h: Num, ffn: Num, *, tp: Num = 1, sequence_parallel: bool = False,
                           ffn_type: str = "gelu", bytes_per_element: Num = 2) -> Num:
    """Gradient buffers alive together at the worst point of one layer's backward (an estimate).

    Formula: W = e s b (h r + n F / t), n = 2 for GeLU/ReLU, 3 for SwiGLU
    Source: read off the op order of a Megatron-LM MLP backward (gradients of the fc2 input and of the activation
    input, F wide (SwiGLU: F and 2F), beside the incoming [s, b, h] gradient); not measured.

    The saved tensors freed meanwhile are not subtracted.
    Offloading leaves W unchanged; it is part of what an allocator-peak measurement (SSDTrain's "activation
    peak": max_memory_allocated minus model states) sees besides the saved activations. The base estimate
    counts it in the GPU's ``buffers``.

    Returns:
        bytes [bytes]

    >>> backward_working_bytes(4096, 1, 4096, 11008, ffn_type="swiglu") / 2**20   # MiB
    290.0
    """
    r = 1 / tp if sequence_parallel else 1
    n = 3 if ffn_type in ("swiglu", "geglu") else 2
    return bytes_per_element * s * b * (h * r + n * ffn / tp)


def head_activation_bytes(s: Num, b: Num, h: Num, vocab: Num, *, tp: Num = 1, sequence_parallel: bool = False,
                          norm: str = "layernorm", final_norm: bool = True, bytes_per_element: Num = 2) -> Num:
    """Bytes the output side keeps per micro-batch: final norm, LM-head input, fp32 loss softmax.

    Formula: e·sbh·r (norm input, + norm statistics) + e·sbh·r (head input) + 4 s b V / t (fp32 softmax)
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) §4.3: 4sbv/t for the vocab-parallel cross-entropy.

    Matches PyTorch's saved tensors within 0.5 % (tests/test_activations_torch.py); left
    out: the loss's bool target mask and int64 masked targets, 9 B per token.

    Args:
        final_norm: a norm before the LM head [bool]
    Returns:
        bytes per micro-batch [bytes]

    >>> head_activation_bytes(2048, 1, 4096, 32000, norm="rmsnorm") / 2**20   # Llama-2-7B: MiB
    282.0078125
    """
    e = bytes_per_element
    r = 1 / tp if sequence_parallel else 1
    stats = 8 if norm == "layernorm" else 4
    n = (e * s * b * h + stats * s * b) * r if final_norm else 0
    return n + e * s * b * h * r + 4 * s * b * vocab / tp


def embedding_activation_bytes(s: Num, b: Num, h: Num, *, tp: Num = 1, sequence_parallel: bool = False,
                               dropout: bool = True, position: str = "learned") -> Num:
    """Bytes the input side keeps per micro-batch: int64 ids, the vocab-range mask, the dropout mask.

    Formula: 8 s b (token ids) + 8 s b (position ids, learned positions only) + s b (out-of-shard mask, t > 1)
    + s b h r (1-byte embedding-dropout mask)
    Source: Megatron-LM VocabParallelEmbedding; Korthikanti et al. 2022 (arXiv 2205.05198) §4.3 (sbhp/t over p
    micro-batches in flight); measured with PyTorch in tests/test_activations_torch.py.

    Returns:
        bytes per micro-batch [bytes]

    >>> embedding_activation_bytes(1024, 1, 1600)   # GPT-2 XL: ids 16 KiB + dropout mask
    1654784
    """
    r = 1 / tp if sequence_parallel else 1
    ids = 16 * s * b if position == "learned" else 8 * s * b
    return ids + where(tp > 1, s * b, 0 * s) + where(dropout, s * b * h * r, 0 * s)


def interleave_factor(pp: Num, virtual_stages: Num = 1) -> Num:
    """Extra activation memory of the interleaved 1F1B schedule on the first stage.

    Formula: 1 + (p - 1) / (p v)
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) §4.2.3.

    Args:
        pp: p, pipeline stages [count]
        virtual_stages: v, model chunks per stage [count]
    Returns:
        factor on the 1F1B activation memory [1]

    >>> interleave_factor(8, 4)
    1.21875
    """
    return 1 + (pp - 1) / (pp * virtual_stages)
