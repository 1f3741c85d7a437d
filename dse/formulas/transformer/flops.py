"""FLOPs: a layer's GEMMs and attention per token, the logits, the model's and what recomputation repeats.

Part of :mod:`dse.formulas.transformer` (the symbols are there).
"""

from __future__ import annotations

from dse.formulas._array import Num, where
from dse.formulas.transformer.parameters import ffn_matrices

__all__ = ["layer_gemm_flops_per_token", "attention_flops_per_token", "attention_pairs", "attention_share",
           "logits_flops_per_token", "model_flops", "recompute_flops"]


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


def attention_flops_per_token(s: Num, heads: Num, head_dim: Num, causal: bool = False) -> Num:
    """Forward FLOP per token of the attention scores and context (QK^T and PV).

    Formula: 4 s a d (full s x s; = 4 s h for d = h/a); x 1/2 when causal
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A (the full matrix); a causal mask leaves half of it to
    compute, as FlashAttention-2 (Dao 2023, arXiv 2307.08691) §4.1 counts it. The estimate counts a decoder's
    attention causal, as its causal kernels run it.

    Returns:
        FLOP per token [FLOP]

    >>> attention_flops_per_token(2048, 96, 128) / 1e9   # GPT-3: GFLOP
    0.100663296
    >>> attention_flops_per_token(2048, 96, 128, causal=True) / 1e9
    0.050331648
    """
    return 4 * s * heads * head_dim * (0.5 if causal else 1)


def attention_pairs(s: Num, window: Num | None = None, chunk: Num | None = None) -> Num:
    """Query-key pairs one causal attention head computes over one sequence: the unmasked scores.

    Formula: full causal: s^2/2; sliding window w < s: sum_{i<s} min(i+1, w) = w(w+1)/2 + (s-w) w; chunked
    (chunk c < s: a query sees the keys of its own chunk up to itself): n c(c+1)/2 + r(r+1)/2 with n = floor(s/c),
    r = s - n c; a window or chunk >= s is the full causal count
    Source: sliding window: Beltagy et al. 2020 (Longformer, arXiv 2004.05150) §3.1, Jiang et al. 2023 (Mistral 7B,
    arXiv 2310.06825) §2, Hugging Face masking_utils.sliding_window_overlay (key j seen by query i when
    i - w < j <= i); chunked: Hugging Face masking_utils.chunked_overlay (Llama 4's attention_chunk_size). The full
    causal count is FlashAttention-2's (Dao 2023, arXiv 2307.08691 §4.1: "divide the FLOPs count by 2", the
    diagonal counted half: s^2/2 = s(s+1)/2 - s/2); the windowed and chunked counts are exact sums over the mask.

    Args:
        window: w, the sliding window in tokens (None: no window) [count]
        chunk: c, the attention chunk in tokens (None: no chunks) [count]
    Returns:
        query-key pairs per head and sequence [count]

    >>> attention_pairs(8), attention_pairs(8, window=3), attention_pairs(8, chunk=3)
    (32.0, 21, 15)
    >>> attention_pairs(4096, window=4096)   # a window as long as the sequence: full causal
    8388608.0
    """
    full = s * s / 2
    if window is not None:
        return where(window >= s, full, window * (window + 1) // 2 + (s - window) * window)
    if chunk is not None:
        n = s // chunk
        r = s - n * chunk
        return where(chunk >= s, full, n * chunk * (chunk + 1) // 2 + r * (r + 1) // 2)
    return full


def attention_share(s: Num, full: Num, sliding: Num = 0, chunked: Num = 0, window: Num | None = None,
                    chunk: Num | None = None, skips: bool = True) -> Num:
    """Share of the s x s score matrix an attention kernel computes, averaged over the layers.

    Formula: skipping kernel: sum over kinds n_k pairs_k / (L s^2), L = n_full + n_sliding + n_chunked, pairs_k =
    :func:`attention_pairs` of the kind; a kernel that only masks (``skips`` false): 1/2 for the full causal layers
    (its causal kernel) and 1 for the windowed or chunked layers with w < s (the whole matrix, masked)
    Source: FlashAttention-2/3 ``window_size`` and Transformer Engine's ``window_size`` skip the tiles outside the
    window (Dao 2023, arXiv 2307.08691); PyTorch's scaled_dot_product_attention with an explicit ``attn_mask`` (what
    Transformers 5.24's sdpa_mask builds for a sliding-window or chunked layer once the keys reach the window:
    ``_ignore_causal_mask_sdpa``) runs with is_causal false and computes every score, then masks it.

    Args:
        full: n_full, layers of full causal attention [count]
        sliding: n_sliding, sliding-window layers [count]
        chunked: n_chunked, chunked-attention layers [count]
        window: w, the sliding layers' window [count]
        chunk: c, the chunked layers' chunk [count]
        skips: the kernel skips the masked tiles (FlashAttention window_size) [bool]
    Returns:
        share of s^2 per layer and head [fraction]

    >>> round(attention_share(8192, 21, 21, window=4096), 5)   # Gemma 2 at 8K: local layers at 3/4 of the causal work
    0.43752
    >>> attention_share(8192, 21, 21, window=4096, skips=False)   # SDPA with the explicit sliding mask
    0.75
    """
    layers = full + sliding + chunked
    if skips:
        total = full * attention_pairs(s) + sliding * (attention_pairs(s, window=window) if sliding else 0)
        total = total + chunked * (attention_pairs(s, chunk=chunk) if chunked else 0)
        return total / (layers * s * s)
    masked: Num = 0
    if sliding and window is not None:
        masked = masked + sliding * where(window >= s, 0, 1)
    if chunked and chunk is not None:
        masked = masked + chunked * where(chunk >= s, 0, 1)
    return (0.5 * (layers - masked) + masked) / layers


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
                s: Num, ffn_type: str = "gelu", causal: bool = False) -> Num:
    """Model FLOPs of one training iteration (forward + backward, no recompute).

    Formula: 3 T [L (gemm + attn) + logits]; GPT: 72 B s L h^2 (1 + s/6h + V/12hL); causal: attn halved
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) App. A, Eq. 7 (full attention); MFU counts these FLOPs
    (the estimate with ``causal`` for a decoder, see :func:`attention_flops_per_token`).

    Returns:
        FLOPs per iteration [FLOP]

    >>> f = model_flops(2048, 96, 12288, 96, 96, 128, 49152, 51200, 2048)   # GPT-3, one sequence
    >>> round(f / (72 * 2048 * 96 * 12288**2), 5)   # = 1 + s/6h + V/12hL
    1.03139
    """
    per_token = layers * (layer_gemm_flops_per_token(h, heads, kv_heads, head_dim, ffn, ffn_type)
                          + attention_flops_per_token(s, heads, head_dim, causal)) + logits_flops_per_token(h, vocab)
    return 3 * tokens * per_token


def recompute_flops(tokens: Num, layers: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, s: Num,
                    ffn_type: str = "gelu", recompute: str = "none", causal: bool = False) -> Num:
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
    attn = attention_flops_per_token(s, heads, head_dim, causal)
    if recompute == "full":
        return tokens * layers * (layer_gemm_flops_per_token(h, heads, kv_heads, head_dim, ffn, ffn_type) + attn)
    if recompute == "selective":
        return tokens * layers * attn
    return 0 * tokens


# ------------------------------------------------------------------ activation bytes
