"""FLOPs: a layer's GEMMs and attention per token, the logits, the model's and what recomputation repeats.

Part of :mod:`dse.formulas.transformer` (the symbols are there).
"""

from __future__ import annotations

from dse.formulas._array import Num
from dse.formulas.transformer.parameters import ffn_matrices

__all__ = ["layer_gemm_flops_per_token", "attention_flops_per_token", "logits_flops_per_token", "model_flops",
           "recompute_flops"]


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
