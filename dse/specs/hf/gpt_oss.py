"""config.json reader of gpt-oss (``gpt_oss``, GptOssConfig): an MoE decoder with biased experts, attention sinks and
alternating sliding-window / full attention.

GptOssForCausalLM as Transformers 5.24 writes it: q, k, v, o projections with biases (``attention_bias``), a learned
sink logit per head (``sinks``), two RMSNorms per layer, in every layer a router with a bias (GptOssTopKRouter) and
``num_local_experts`` experts of ``intermediate_size`` with biases (gate_up_proj and its bias, down_proj and its
bias), top ``num_experts_per_tok``; ``layer_types`` by default sliding_attention on even layers with a window of
``sliding_window`` (128) tokens; untied head; YaRN rotary positions (``rope_scaling`` factor 32: the attention
factor 0.1 ln 32 + 1 on cos and sin, ``rotary_attention_factor``) (OpenAI 2025, gpt-oss-120b & gpt-oss-20b model
card §2).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields, expect, layer_types, yarn_attention_factor

#: The model_types this module reads.
TYPES = ("gpt_oss",)


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """The fields of a gpt-oss config (defaults: GptOssConfig's, the 20b's shapes with 36 layers and 128 experts)."""
    if not g("attention_bias", True):
        raise InputError(f"{where}: attention_bias false is not modelled for gpt_oss (its experts and router keep "
                         "their biases)")
    expect(g, "hidden_act", "silu", where, mt)
    layers = g("num_hidden_layers", 36)
    ffn = g("intermediate_size", 2880)
    out = dict(
        name=name, layers=layers, hidden=g("hidden_size", 2880), heads=g("num_attention_heads", 64),
        kv_heads=g("num_key_value_heads", 8), head_dim=g("head_dim", 64), ffn_hidden=ffn, ffn_type="swiglu",
        norm="rmsnorm", bias=True, qkv_bias=True, attention_sinks=True, vocab=g("vocab_size", 201088),
        max_seq_len=g("max_position_embeddings", 131072), position="rotary",
        tied_embeddings=bool(g("tie_word_embeddings", False)), qkv_projection="separate", softmax_dtype="activation",
        **dropout_fields(g("attention_dropout", 0.0)), source=f"Hugging Face config {where}",
        experts=g("num_local_experts", 128), experts_per_token=g("num_experts_per_tok", 4), expert_ffn=ffn,
    )
    if g("swiglu_limit") is not None:        # the clamped gate and linear parts (GptOssExperts: limit 7.0)
        out.update(glu_limit=float(g("swiglu_limit")))
    factor = yarn_attention_factor(cfg)     # YaRN (rope_scaling factor 32): cos and sin scaled by 0.1 ln 32 + 1
    if factor != 1:
        out.update(rotary_attention_factor=factor)
    window = g("sliding_window", 128)
    types = layer_types(cfg, layers, where, lambda i, c: (i + 1) % 2)
    if window and "sliding_attention" in types:
        out.update(sliding_window=window, layer_types=types)
    return out
