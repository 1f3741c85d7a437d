"""config.json reader of Gemma 3's text decoder: ``gemma3_text`` (Gemma3TextConfig) and ``gemma3`` (Gemma3Config: its
``text_config``; the vision tower and projector are not read).

Gemma3ForCausalLM as Transformers 5.24 writes it: Gemma 2's layer (GeGLU, four RMSNorms, the sqrt(h) embedding
scale, tied head) with QK-norm (q_norm, k_norm over head_dim) and local:global layers 5:1 (``layer_types``, by
default ``sliding_attention`` unless (i + 1) % sliding_window_pattern == 0, pattern 6), local window
``sliding_window``; soft-capping only where the config sets it (Gemma Team 2025, arXiv 2503.19786 §2).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields, expect, layer_types, text_config

#: The model_types this module reads.
TYPES = ("gemma3_text", "gemma3")


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """The fields of a Gemma 3 text decoder (``gemma3``: of its text_config)."""
    cfg, g = text_config(cfg, mt, "gemma3", "gemma3_text", where, g)
    expect(g, "hidden_activation", "gelu_pytorch_tanh", where, mt)
    for key in ("attention_bias", "use_bidirectional_attention"):
        if g(key, False):
            raise InputError(f"{where}: {key} true is not modelled for {mt}")
    layers = g("num_hidden_layers", 26)
    pattern = g("sliding_window_pattern", 6)
    out = dict(
        name=name, layers=layers, hidden=g("hidden_size", 2304), heads=g("num_attention_heads", 8),
        kv_heads=g("num_key_value_heads", 4), head_dim=g("head_dim", 256), ffn_hidden=g("intermediate_size", 9216),
        ffn_type="geglu", activation="gelu_tanh", norm="rmsnorm", layer_norms=4, qk_norm=True, bias=False,
        vocab=g("vocab_size", 262208), max_seq_len=g("max_position_embeddings", 131072), position="rotary",
        tied_embeddings=bool(g("tie_word_embeddings", True)), qkv_projection="separate", softmax_dtype="fp32",
        embedding_scale=True, norm_fp32_weight=True, **dropout_fields(g("attention_dropout", 0.0)),
        source=f"Hugging Face config {where}",
    )
    window = g("sliding_window", 4096)
    types = layer_types(cfg, layers, where, lambda i, c: (i + 1) % pattern)
    if window and "sliding_attention" in types:
        out.update(sliding_window=window, layer_types=types)
    for key, field in (("attn_logit_softcapping", "attn_softcap"), ("final_logit_softcapping", "logit_softcap")):
        if g(key):
            out[field] = g(key)
    return out
