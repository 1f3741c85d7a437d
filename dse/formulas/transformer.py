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
"""

from __future__ import annotations

from dse.formulas._array import where

GATED_FFN = ("swiglu",)


def norm_parameters(h, norm: str = "layernorm"):
    """Parameters of one normalisation layer.

    Formula: LayerNorm 2h (weight + bias); RMSNorm h (weight only).
    """
    return 2 * h if norm == "layernorm" else h


def ffn_matrices(ffn_type: str) -> int:
    """Weight matrices of h x F in the MLP: 3 for gated (SwiGLU), else 2."""
    return 3 if ffn_type in GATED_FFN else 2


def layer_parameters(h, heads, kv_heads, head_dim, ffn, ffn_type="gelu", norm="layernorm", bias=True, qkv_bias=None):
    """Parameters of one transformer layer (attention + MLP + two norms).

    Formula: h(a+2kv)d + a d h + n_m h F + biases + 2 norm; n_m = 3 for SwiGLU, 2 otherwise.
    For GPT (kv = a, d = h/a, F = 4h, biases, LayerNorm) this is 12h^2 + 13h
    (Narayanan et al. 2021, Eq. 2 without the embedding term).
    """
    qkv_bias = bias if qkv_bias is None else qkv_bias
    attn = h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h
    mlp = ffn_matrices(ffn_type) * h * ffn
    biases = 0
    if qkv_bias:
        biases = biases + (heads + 2 * kv_heads) * head_dim
    if bias:
        biases = biases + h + (ffn_matrices(ffn_type) - 1) * ffn + h  # out-proj, fc1 (gate+up), fc2
    return attn + mlp + biases + 2 * norm_parameters(h, norm)


def layer_parameters_replicated(h, ffn_type="gelu", norm="layernorm", bias=True):
    """Parameters of one layer that tensor parallelism does not split.

    Formula: 2 norm + (2h if biases: the row-parallel out-proj and fc2 biases).
    Megatron-LM replicates norms and the biases of row-parallel linears.
    """
    return 2 * norm_parameters(h, norm) + (2 * h if bias else 0)


def embedding_parameters(h, vocab, position_embeddings=0, token_types=0, embedding_norm=False, norm="layernorm"):
    """Input-side parameters: token table, learned positions, segments, embedding norm.

    Formula: V h + P_pos h + n_types h (+ norm).
    """
    return vocab * h + position_embeddings * h + token_types * h + (norm_parameters(h, norm) if embedding_norm else 0)


def head_parameters(h, vocab, tied=True, final_norm=True, norm="layernorm", pooler=False, mlm_head=False, nsp_head=False):
    """Output-side parameters: final norm, untied LM head, BERT pooler/MLM/NSP heads.

    Formula: norm + (V h if untied) + (h^2 + h if pooler) + (h^2 + h + norm + V if MLM) + (2h + 2 if NSP).
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


def parameter_count(layers, h, heads, kv_heads, head_dim, ffn, vocab, *, ffn_type="gelu", norm="layernorm", bias=True,
                    qkv_bias=None, position_embeddings=0, token_types=0, embedding_norm=False, tied=True,
                    final_norm=True, pooler=False, mlm_head=False, nsp_head=False):
    """Total trainable parameters of the model.

    Formula: P = embeddings + L * layer + head. GPT: 12Lh^2 + 13Lh + (V + s)h + 2h
    (Narayanan et al. 2021, Eq. 2, plus the final LayerNorm).

    >>> parameter_count(48, 1600, 25, 25, 64, 6400, 50257, position_embeddings=1024)  # GPT-2 XL
    1557611200
    """
    return (embedding_parameters(h, vocab, position_embeddings, token_types, embedding_norm, norm)
            + layers * layer_parameters(h, heads, kv_heads, head_dim, ffn, ffn_type, norm, bias, qkv_bias)
            + head_parameters(h, vocab, tied, final_norm, norm, pooler, mlm_head, nsp_head))


# ----------------------------------------------------------------------------- FLOPs


def layer_gemm_flops_per_token(h, heads, kv_heads, head_dim, ffn, ffn_type="gelu"):
    """Forward FLOP per token of one layer's weight GEMMs (QKV, out-proj, MLP).

    Formula: 2 [h(a+2kv)d + a d h + n_m h F]; = 24 h^2 for GPT (Narayanan et al. 2021, App. A).
    """
    return 2 * (h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h + ffn_matrices(ffn_type) * h * ffn)


def attention_flops_per_token(s, heads, head_dim):
    """Forward FLOP per token of the attention scores and context (QK^T and PV).

    Formula: 4 s a d (full s x s; = 4 s h for d = h/a; Narayanan et al. 2021, App. A).
    """
    return 4 * s * heads * head_dim


def logits_flops_per_token(h, vocab):
    """Forward FLOP per token of the LM head. Formula: 2 h V."""
    return 2 * h * vocab


def model_flops(tokens, layers, h, heads, kv_heads, head_dim, ffn, vocab, s, ffn_type="gelu"):
    """Model FLOPs of one training iteration (forward + backward, no recompute).

    Formula: 3 T [L (gemm + attn) + logits]; GPT: 72 B s L h^2 (1 + s/6h + V/12hL)
    (Korthikanti et al. 2022, App. A, Eq. 7). ``tokens`` T = global batch x s.
    """
    per_token = layers * (layer_gemm_flops_per_token(h, heads, kv_heads, head_dim, ffn, ffn_type)
                          + attention_flops_per_token(s, heads, head_dim)) + logits_flops_per_token(h, vocab)
    return 3 * tokens * per_token


def recompute_flops(tokens, layers, h, heads, kv_heads, head_dim, ffn, s, ffn_type="gelu", recompute="none"):
    """Extra forward FLOPs that activation recomputation adds per iteration.

    Formula: full: T L (gemm + attn) (one more forward of every layer, Narayanan
    et al. 2021 Eq. 3: 96 B s L h^2 ...); selective: T L attn (QK^T and PV again,
    Korthikanti et al. App. A: hardware FLOPs use 1 + s/3h); none: 0.
    """
    attn = attention_flops_per_token(s, heads, head_dim)
    if recompute == "full":
        return tokens * layers * (layer_gemm_flops_per_token(h, heads, kv_heads, head_dim, ffn, ffn_type) + attn)
    if recompute == "selective":
        return tokens * layers * attn
    return 0 * tokens


# ------------------------------------------------------------------ activation bytes


def activation_terms(s, b, h, heads, kv_heads, head_dim, ffn, *, tp=1, sequence_parallel=False,
                     recompute="none", attention="flash", ffn_type="gelu", norm="layernorm",
                     position="learned", dropout=True, bytes_per_element=2):
    """Bytes one layer keeps for backward, per GPU and micro-batch, tensor by tensor.

    Formula: sum of the terms below; for GPT with dropout, math attention and no
    recompute it is s b h (10 + 24/t + 5 a s/(h t)) without sequence parallelism and
    s b h (34/t + 5 a s/(h t)) with it (Korthikanti et al. 2022, Table 2, Eqs. 2, 4);
    full recompute keeps only the layer input, 2 s b h (/t with SP).

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

    Returns a dict of name -> bytes (arrays broadcast).
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


def activation_bytes_per_layer(s, b, h, heads, kv_heads, head_dim, ffn, **options):
    """Total of :func:`activation_terms` (same arguments).

    Formula: GPT, no recompute, math attention: s b h (10 + 24/t + 5 a s / (h t)) (Korthikanti Eq. 2).

    >>> activation_bytes_per_layer(2048, 1, 12288, 96, 96, 128, 49152, tp=8, attention="math",
    ...     norm="layernorm", dropout=True) / (2048 * 12288)  # GPT-3 layer, t = 8 (note V2): 10 + 3 + 10, + stats
    23.001302083333332
    """
    total = 0
    for v in activation_terms(s, b, h, heads, kv_heads, head_dim, ffn, **options).values():
        total = total + v
    return total


def recompute_working_bytes(s, b, h, heads, kv_heads, head_dim, ffn, **options):
    """Bytes of the one layer being recomputed during backward (full recompute only).

    Formula: activation_bytes_per_layer(..., recompute="none") when recompute = full, else 0.
    """
    if options.get("recompute") != "full":
        return 0 * s
    return activation_bytes_per_layer(s, b, h, heads, kv_heads, head_dim, ffn, **{**options, "recompute": "none"})


def backward_working_bytes(s, b, h, ffn, *, tp=1, sequence_parallel=False, ffn_type="gelu", bytes_per_element=2):
    """Gradient buffers alive together at the worst point of one layer's backward (an estimate).

    Formula: W = e s b (h r + n F / t), n = 2 for GeLU/ReLU (gradients of the fc2 input and of the activation
    input, both F wide, beside the incoming [s, b, h] gradient), 3 for SwiGLU (F and 2F). Read off the op
    order of a Megatron MLP backward, not measured; the saved tensors freed meanwhile are not subtracted.
    Offloading leaves W unchanged; it is part of what an allocator-peak measurement (SSDTrain's "activation
    peak": max_memory_allocated minus model states) sees besides the saved activations. The base estimate
    counts it in the GPU's ``buffers``.
    """
    r = 1 / tp if sequence_parallel else 1
    n = 3 if ffn_type == "swiglu" else 2
    return bytes_per_element * s * b * (h * r + n * ffn / tp)


def head_activation_bytes(s, b, h, vocab, *, tp=1, sequence_parallel=False, norm="layernorm", final_norm=True,
                          bytes_per_element=2):
    """Bytes the output side keeps per micro-batch: final norm, LM-head input, fp32 loss softmax.

    Formula: e·sbh·r (norm input) + e·sbh·r (head input) + 4 s b V / t (fp32 cross-entropy
    softmax in the vocab-parallel loss; Korthikanti et al. 2022 §4.3: 4sbv/t).
    Matches PyTorch's saved tensors within 0.5 % (tests/test_activations_torch.py); left
    out: the loss's bool target mask and int64 masked targets, 9 B per token.
    """
    e = bytes_per_element
    r = 1 / tp if sequence_parallel else 1
    stats = 8 if norm == "layernorm" else 4
    n = (e * s * b * h + stats * s * b) * r if final_norm else 0
    return n + e * s * b * h * r + 4 * s * b * vocab / tp


def embedding_activation_bytes(s, b, h, *, tp=1, sequence_parallel=False, dropout=True, position="learned"):
    """Bytes the input side keeps per micro-batch: int64 ids, the vocab-range mask, the dropout mask.

    Formula: 8 s b (token ids, kept by the embedding lookup) + 8 s b (position ids, learned
    positions only) + s b (bool mask of ids outside this rank's vocabulary shard, t > 1) +
    s b h r (1-byte embedding-dropout mask; Korthikanti et al. 2022 §4.3: sbhp/t over p in flight).
    Megatron's VocabParallelEmbedding; measured with PyTorch in tests/test_activations_torch.py.
    """
    r = 1 / tp if sequence_parallel else 1
    ids = 16 * s * b if position == "learned" else 8 * s * b
    return ids + where(tp > 1, s * b, 0 * s) + where(dropout, s * b * h * r, 0 * s)


def interleave_factor(pp, virtual_stages=1):
    """Extra activation memory of the interleaved 1F1B schedule on the first stage.

    Formula: 1 + (p - 1) / (p v) (Korthikanti et al. 2022, §4.2.3).
    """
    return 1 + (pp - 1) / (pp * virtual_stages)
