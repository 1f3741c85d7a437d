"""Multi-head latent attention (MLA): the parameters of its projections and latent norms.

Part of :mod:`dse.formulas.transformer` (the symbols are there). MLA (DeepSeek-V2, Liu et al. 2024, arXiv
2405.04434, §2.1; DeepSeek-V3, arXiv 2412.19437, §2.1) replaces the Q, K, V projections of a layer by low-rank
latents: the hidden state goes down to a K/V latent of rank d_c (``kv_lora_rank``) and, unless q_lora_rank is 0,
a query latent of rank d_c' (``q_lora_rank``), each normalised by an RMSNorm and projected up to the heads; the
positions live in decoupled rotary dims d_R (``qk_rope_head_dim``): a per-head rotary query part and one rotary key
shared by all heads, computed from the hidden state beside the K/V latent. Per head the query and key have
d_qk = d_nope + d_R dims, the value d_v. Hugging Face ``DeepseekV3Attention`` (Transformers 5.24) holds
``q_a_proj`` (h x d_c'), ``q_a_layernorm`` (d_c'), ``q_b_proj`` (d_c' x a d_qk) or ``q_proj`` (h x a d_qk),
``kv_a_proj_with_mqa`` (h x (d_c + d_R)), ``kv_a_layernorm`` (d_c), ``kv_b_proj`` (d_c x a (d_nope + d_v)) and
``o_proj`` (a d_v x h), none with a bias (``attention_bias`` false).

Symbols (besides the package's):
    q_lora: d_c', rank of the query latent (0: a plain query projection) [count]
    kv_lora: d_c, rank of the key/value latent [count]
    nope: d_nope, per-head query/key dims without positions [count]
    rope: d_R, per-head decoupled rotary dims (one rotary key shared by the heads) [count]
    v_dim: d_v, per-head value dims [count]
"""

from __future__ import annotations

from dse.formulas._array import Num, where

__all__ = ["mla_attention_parameters", "mla_attention_parameters_replicated"]


def mla_attention_parameters(h: Num, heads: Num, q_lora: Num, kv_lora: Num, nope: Num, rope: Num, v_dim: Num) -> Num:
    """Parameters of one layer's multi-head latent attention (projections and latent norms).

    Formula: q: h d_c' + d_c' + d_c' a (d_nope + d_R) (q_lora > 0) or h a (d_nope + d_R) (q_lora = 0);
    kv: h (d_c + d_R) + d_c + d_c a (d_nope + d_v); out: a d_v h
    Source: DeepSeek-V2 (arXiv 2405.04434) §2.1 Eqs. 9-19 (W^DKV, W^UK, W^UV, W^DQ, W^UQ, W^QR, W^KR, W^O);
    Hugging Face DeepseekV3Attention (q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm,
    kv_b_proj, o_proj; Transformers 5.24), whose counts tests/test_mla.py checks on the meta device.

    Returns:
        parameters [count]

    >>> mla_attention_parameters(7168, 128, 1536, 512, 128, 64, 128)   # a DeepSeek-V3 layer's attention
    187107328
    >>> mla_attention_parameters(2048, 16, 0, 512, 128, 64, 128)   # DeepSeek-V2-Lite: a plain query projection
    13763072
    """
    qk = nope + rope
    q = where(q_lora > 0, h * q_lora + q_lora + q_lora * heads * qk, h * heads * qk)
    return q + h * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v_dim) + heads * v_dim * h


def mla_attention_parameters_replicated(h: Num, q_lora: Num, kv_lora: Num, rope: Num) -> Num:
    """Parameters of an MLA layer's attention that tensor parallelism does not split: the down projections and the
    latent norms.

    Formula: h d_c' + d_c' (q_lora > 0) + h (d_c + d_R) + d_c
    Source: Megatron-Core ``MLASelfAttention``: ``linear_q_down_proj`` and ``linear_kv_down_proj`` are built with
    ``parallel_mode="duplicated"`` (every tensor-parallel rank holds them whole), the up projections are
    column-parallel and ``linear_proj`` row-parallel over the heads; ``q_layernorm``, ``kv_layernorm`` act on the
    whole latent.

    Returns:
        parameters [count]

    >>> mla_attention_parameters_replicated(7168, 1536, 512, 64)   # DeepSeek-V3
    15140864
    """
    return where(q_lora > 0, h * q_lora + q_lora, 0) + h * (kv_lora + rope) + kv_lora
