"""Transformer training: parameters, FLOPs and the activation bytes saved for backward.

Notation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", arXiv 2205.05198, Table 1): ``s`` sequence length, ``b``
micro-batch, ``h`` hidden, ``a`` heads, ``kv`` key/value heads, ``d`` head
dimension, ``F`` FFN inner size, ``V`` vocabulary, ``L`` layers, ``t`` tensor
parallel size. All functions accept numpy arrays and broadcast.

FLOP convention: a multiply-add is 2 FLOP; attention scores count the full s x s
matrix, as in Narayanan et al. 2021 (arXiv 2104.04473, Eq. 3) and Korthikanti
et al. (Appendix A). Causal kernels that skip the masked half are modelled in
:mod:`dse.formulas.compute`, not here.

Symbols:
    h: hidden size [count]
    s: sequence length (tokens per sequence) [count]
    b: micro-batch size (sequences) [count]
    heads: a, attention (query) heads [count]
    kv_heads: kv, key/value heads (kv < a: grouped-query attention) [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    vocab: V, vocabulary size [count]
    layers: L, transformer layers [count]
    tokens: T, tokens per iteration (global batch x s) [count]
    tp: t, tensor-parallel degree [count]
    sequence_parallel: Megatron sequence parallelism (shards norm/dropout tensors over t) [bool]
    recompute: none, selective or full activation recomputation [choice]
    attention: flash (fused) or math (materialised softmax) [choice]
    ffn_type: gelu, relu or swiglu [choice]
    norm: layernorm or rmsnorm [choice]
    position: learned, rotary or none (position embeddings) [choice]
    dropout: dropout layers present [bool]
    bias: linear layers have biases [bool]
    qkv_bias: the QKV projection has a bias (None: as ``bias``) [bool]
    bytes_per_element: e, bytes per activation element (2 for bf16/fp16) [bytes]
    options: keyword arguments of :func:`activation_terms` [dict]
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, where

__all__ = ["GATED_FFN", "norm_parameters", "ffn_matrices", "layer_parameters", "layer_parameters_replicated",
           "embedding_parameters", "head_parameters", "parameter_count", "layer_gemm_flops_per_token",
           "attention_flops_per_token", "logits_flops_per_token", "model_flops", "recompute_flops",
           "activation_terms", "activation_bytes_per_layer", "recompute_working_bytes", "backward_working_bytes",
           "head_activation_bytes", "embedding_activation_bytes", "interleave_factor"]

#: FFN types with a gate (three h x F matrices instead of two).
GATED_FFN = ("swiglu",)


def norm_parameters(h: Num, norm: str = "layernorm") -> Num:
    """Parameters of one normalisation layer.

    Formula: LayerNorm 2h (weight + bias); RMSNorm h (weight only)
    Source: Ba et al. 2016 (LayerNorm, arXiv 1607.06450); Zhang & Sennrich 2019 (RMSNorm, arXiv 1910.07467).

    Returns:
        parameters [count]

    >>> norm_parameters(4096), norm_parameters(4096, "rmsnorm")
    (8192, 4096)
    """
    return 2 * h if norm == "layernorm" else h


def ffn_matrices(ffn_type: str) -> int:
    """Weight matrices of h x F in the MLP: 3 for gated (SwiGLU), else 2.

    Formula: n_m = 3 (SwiGLU: gate, up, down) or 2 (up, down)
    Source: Shazeer 2020 (GLU variants, arXiv 2002.05202) for the gated form; Vaswani et al. 2017 otherwise.

    Returns:
        matrices [count]

    >>> ffn_matrices("swiglu"), ffn_matrices("gelu")
    (3, 2)
    """
    return 3 if ffn_type in GATED_FFN else 2


def layer_parameters(h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, ffn_type: str = "gelu",
                     norm: str = "layernorm", bias: bool = True, qkv_bias: bool | None = None) -> Num:
    """Parameters of one transformer layer (attention + MLP + two norms).

    Formula: h(a+2kv)d + a d h + n_m h F + biases + 2 norm; n_m = 3 for SwiGLU, 2 otherwise
    Source: Narayanan et al. 2021 (arXiv 2104.04473) Eq. 2 without the embedding term: 12h^2 + 13h for GPT
    (kv = a, d = h/a, F = 4h, biases, LayerNorm); Megatron-LM theoretical_memory_usage.py for GQA and SwiGLU.

    Returns:
        parameters [count]

    >>> layer_parameters(1600, 25, 25, 64, 6400)   # GPT-2 XL: 12h^2 + 13h
    30740800
    >>> layer_parameters(4096, 32, 32, 128, 11008, "swiglu", "rmsnorm", bias=False)   # Llama-2-7B
    202383360
    """
    qkv_bias = bias if qkv_bias is None else qkv_bias
    attn = h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h
    mlp = ffn_matrices(ffn_type) * h * ffn
    biases: Num = 0
    if qkv_bias:
        biases = biases + (heads + 2 * kv_heads) * head_dim
    if bias:
        biases = biases + h + (ffn_matrices(ffn_type) - 1) * ffn + h  # out-proj, fc1 (gate+up), fc2
    return attn + mlp + biases + 2 * norm_parameters(h, norm)


def layer_parameters_replicated(h: Num, ffn_type: str = "gelu", norm: str = "layernorm", bias: bool = True) -> Num:
    """Parameters of one layer that tensor parallelism does not split.

    Formula: 2 norm + (2h if biases: the row-parallel out-proj and fc2 biases)
    Source: Megatron-LM (Shoeybi et al. 2019, arXiv 1909.08053 §3): norms and row-parallel biases are replicated.

    Returns:
        parameters [count]

    >>> layer_parameters_replicated(1600)   # GPT-2 XL: 2 LayerNorms + 2 biases
    9600
    """
    return 2 * norm_parameters(h, norm) + (2 * h if bias else 0)


def embedding_parameters(h: Num, vocab: Num, position_embeddings: Num = 0, token_types: Num = 0,
                         embedding_norm: bool = False, norm: str = "layernorm") -> Num:
    """Input-side parameters: token table, learned positions, segments, embedding norm.

    Formula: V h + P_pos h + n_types h (+ norm)
    Source: Radford et al. 2019 (GPT-2) and Devlin et al. 2019 (BERT) model definitions.

    Args:
        position_embeddings: P_pos, learned position embeddings (0 for rotary) [count]
        token_types: n_types, segment embeddings (BERT: 2) [count]
        embedding_norm: a norm after the embedding (BERT) [bool]
    Returns:
        parameters [count]

    >>> embedding_parameters(1600, 50257, position_embeddings=1024)   # GPT-2 XL
    82049600
    """
    return vocab * h + position_embeddings * h + token_types * h + (norm_parameters(h, norm) if embedding_norm else 0)


def head_parameters(h: Num, vocab: Num, tied: bool = True, final_norm: bool = True, norm: str = "layernorm",
                    pooler: bool = False, mlm_head: bool = False, nsp_head: bool = False) -> Num:
    """Output-side parameters: final norm, untied LM head, BERT pooler/MLM/NSP heads.

    Formula: norm + (V h if untied) + (h^2 + h if pooler) + (h^2 + h + norm + V if MLM) + (2h + 2 if NSP)
    Source: Radford et al. 2019 (GPT-2), Touvron et al. 2023 (Llama 2, untied head), Devlin et al. 2019 (BERT heads).

    Args:
        tied: the LM head shares the token embedding [bool]
        final_norm: a norm after the last layer [bool]
        pooler: BERT pooler [bool]
        mlm_head: BERT masked-LM head (transform + norm + output bias) [bool]
        nsp_head: BERT next-sentence head [bool]
    Returns:
        parameters [count]

    >>> head_parameters(4096, 32000, tied=False, norm="rmsnorm")   # Llama-2-7B: final RMSNorm + LM head
    131076096
    """
    p = norm_parameters(h, norm) if final_norm else 0
    if not tied:
        p = p + vocab * h
    if pooler:
        p = p + h * h + h
    if mlm_head:
        p = p + h * h + h + norm_parameters(h, norm) + vocab
    if nsp_head:
        p = p + 2 * h + 2
    return p


def parameter_count(layers: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, vocab: Num, *,
                    ffn_type: str = "gelu", norm: str = "layernorm", bias: bool = True, qkv_bias: bool | None = None,
                    position_embeddings: Num = 0, token_types: Num = 0, embedding_norm: bool = False,
                    tied: bool = True, final_norm: bool = True, pooler: bool = False, mlm_head: bool = False,
                    nsp_head: bool = False) -> Num:
    """Total trainable parameters of the model.

    Formula: P = embeddings + L * layer + head. GPT: 12Lh^2 + 13Lh + (V + s)h + 2h
    Source: Narayanan et al. 2021 (arXiv 2104.04473) Eq. 2, plus the final LayerNorm.

    Args:
        position_embeddings: learned position embeddings (0 for rotary) [count]
        token_types: segment embeddings (BERT: 2) [count]
        embedding_norm: a norm after the embedding (BERT) [bool]
        tied: the LM head shares the token embedding [bool]
        final_norm: a norm after the last layer [bool]
        pooler: BERT pooler [bool]
        mlm_head: BERT masked-LM head [bool]
        nsp_head: BERT next-sentence head [bool]
    Returns:
        parameters [count]

    >>> parameter_count(48, 1600, 25, 25, 64, 6400, 50257, position_embeddings=1024)  # GPT-2 XL
    1557611200
    >>> import numpy as np
    >>> parameter_count(np.array([32, 40, 80]), np.array([4096, 5120, 8192]), np.array([32, 40, 64]),
    ...     np.array([32, 40, 8]), 128, np.array([11008, 13824, 28672]), 32000, ffn_type="swiglu", norm="rmsnorm",
    ...     bias=False, tied=False) / 1e9   # Llama-2 7B, 13B, 70B
    array([ 6.73841562, 13.01586432, 68.97664819])
    """
    return (embedding_parameters(h, vocab, position_embeddings, token_types, embedding_norm, norm)
            + layers * layer_parameters(h, heads, kv_heads, head_dim, ffn, ffn_type, norm, bias, qkv_bias)
            + head_parameters(h, vocab, tied, final_norm, norm, pooler, mlm_head, nsp_head))


# ----------------------------------------------------------------------------- FLOPs


def layer_gemm_flops_per_token(h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num,
                               ffn_type: str = "gelu") -> Num:
    """Forward FLOP per token of one layer's weight GEMMs (QKV, out-proj, MLP).

    Formula: 2 [h(a+2kv)d + a d h + n_m h F]; = 24 h^2 for GPT
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A (a multiply-add is 2 FLOP).

    Returns:
        FLOP per token [FLOP]

    >>> layer_gemm_flops_per_token(1600, 25, 25, 64, 6400) == 24 * 1600**2
    True
    """
    return 2 * (h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h + ffn_matrices(ffn_type) * h * ffn)


def attention_flops_per_token(s: Num, heads: Num, head_dim: Num) -> Num:
    """Forward FLOP per token of the attention scores and context (QK^T and PV).

    Formula: 4 s a d (full s x s; = 4 s h for d = h/a)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A.

    Returns:
        FLOP per token [FLOP]

    >>> attention_flops_per_token(2048, 96, 128) / 1e9   # GPT-3: GFLOP
    0.100663296
    """
    return 4 * s * heads * head_dim


def logits_flops_per_token(h: Num, vocab: Num) -> Num:
    """Forward FLOP per token of the LM head.

    Formula: 2 h V
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A.

    Returns:
        FLOP per token [FLOP]

    >>> logits_flops_per_token(12288, 51200) / 1e9   # GPT-3: GFLOP
    1.2582912
    """
    return 2 * h * vocab


def model_flops(tokens: Num, layers: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, vocab: Num,
                s: Num, ffn_type: str = "gelu") -> Num:
    """Model FLOPs of one training iteration (forward + backward, no recompute).

    Formula: 3 T [L (gemm + attn) + logits]; GPT: 72 B s L h^2 (1 + s/6h + V/12hL)
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) App. A, Eq. 7; MFU counts these FLOPs.

    Returns:
        FLOPs per iteration [FLOP]

    >>> f = model_flops(2048, 96, 12288, 96, 96, 128, 49152, 51200, 2048)   # GPT-3, one sequence
    >>> round(f / (72 * 2048 * 96 * 12288**2), 5)   # = 1 + s/6h + V/12hL
    1.03139
    """
    per_token = layers * (layer_gemm_flops_per_token(h, heads, kv_heads, head_dim, ffn, ffn_type)
                          + attention_flops_per_token(s, heads, head_dim)) + logits_flops_per_token(h, vocab)
    return 3 * tokens * per_token


def recompute_flops(tokens: Num, layers: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, s: Num,
                    ffn_type: str = "gelu", recompute: str = "none") -> Num:
    """Extra forward FLOPs that activation recomputation adds per iteration.

    Formula: full: T L (gemm + attn); selective: T L attn; none: 0
    Source: Narayanan et al. 2021 (arXiv 2104.04473) Eq. 3 (96 B s L h^2 with one more forward of every layer);
    Korthikanti et al. 2022 (arXiv 2205.05198) App. A (selective: QK^T and PV run again).

    Selective recompute re-runs the forward attention once, 4 B s^2 h per layer, i.e. hardware FLOPs
    1 + s/6h + s/18h; Korthikanti et al. print 1 + s/3h (2.7 % for GPT-3), which counts it three times
    (see dse/validate/formulas.py).

    Returns:
        FLOPs per iteration [FLOP]

    >>> args = (2048, 96, 12288, 96, 96, 128, 49152, 2048)   # GPT-3, one sequence
    >>> round(recompute_flops(*args, recompute="selective") / model_flops(*args[:7], 51200, 2048), 4)   # s/18h
    0.009
    """
    attn = attention_flops_per_token(s, heads, head_dim)
    if recompute == "full":
        return tokens * layers * (layer_gemm_flops_per_token(h, heads, kv_heads, head_dim, ffn, ffn_type) + attn)
    if recompute == "selective":
        return tokens * layers * attn
    return 0 * tokens


# ------------------------------------------------------------------ activation bytes


def activation_terms(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, *, tp: Num = 1,
                     sequence_parallel: bool = False, recompute: str = "none", attention: str = "flash",
                     ffn_type: str = "gelu", norm: str = "layernorm", position: str = "learned", dropout: bool = True,
                     bytes_per_element: Num = 2) -> dict[str, Num]:
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
        if dropout:
            t["attn_dropout_mask"] = a_loc * s * s * b
            t["attn_dropout_output"] = e * a_loc * s * s * b
    elif recompute != "selective":
        t["flash_lse"] = 4 * sb * heads / tp
    t["out_proj_input"] = e * sb * hd_q
    if dropout:
        t["attn_residual_dropout_mask"] = sb * h * r
    t["norm2_input"] = e * sb * h * r + stats * sb * r
    t["fc1_input"] = e * sb * h * r
    f_loc = ffn / tp
    if ffn_type == "swiglu":
        t["mlp_activation"] = 3 * e * sb * f_loc
    elif ffn_type == "relu":
        t["mlp_activation"] = e * sb * f_loc
    else:
        t["mlp_activation"] = 2 * e * sb * f_loc
    if dropout:
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
    n = 3 if ffn_type == "swiglu" else 2
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
