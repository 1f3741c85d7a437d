"""config.json readers of the Llama-like decoders (RMSNorm, rotary, gated MLP, separate Q/K/V projections):
Llama, Mistral, Qwen2, Qwen3, Gemma 2 and the MoE variants Mixtral, Qwen2-MoE and Qwen3-MoE
(LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, Gemma2Config, MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig)."""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields, layer_types

#: The model_types this module reads.
TYPES = ("llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2")


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """The fields of a Llama-like decoder, its experts and its sliding window."""
    out = {**_llama_like(cfg, mt, where, name, g), **_experts(cfg, mt, where, g)}
    window = _sliding_window(cfg, mt)
    if window:
        out["sliding_window"] = window
        types = layer_types(cfg, out["layers"], where, _DEFAULT_TYPES.get(mt))
        if types is not None:
            out["layer_types"] = types
    if mt == "gemma2":   # Gemma2Config defaults: attention 50, final logits 30 (null: off)
        out.update(attn_softcap=cfg.get("attn_logit_softcapping", 50.0),
                   logit_softcap=cfg.get("final_logit_softcapping", 30.0), embedding_scale=True,
                   norm_fp32_weight=True)
    return out


#: The configuration classes' default layer_types (Transformers 5.24) of the families whose windows are per layer;
#: the others (Mistral, Mixtral, Qwen3-MoE) window every layer. i: the layer index, c: the config.
_DEFAULT_TYPES = {
    "gemma2": lambda i, c: (i + 1) % 2,
    "qwen2": lambda i, c: i >= c.get("max_window_layers", 28),
    "qwen3": lambda i, c: i >= c.get("max_window_layers", 28),
    "qwen2_moe": lambda i, c: (i + 1) % 2 and i < c.get("max_window_layers", 28),
}


def _llama_like(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """Fields of a Llama-like decoder: Llama, Mistral, Qwen2, Qwen3 (QK-norm, head_dim 128 by default), Gemma 2
    (GeGLU, head_dim 256, tied, four norms per layer) and the MoE variants' attention and dense MLP."""
    h = g("hidden_size", req=True)
    heads = g("num_attention_heads", req=True)
    gemma = mt == "gemma2"
    key = "hidden_activation" if gemma else "hidden_act"
    act = str(g(key, "gelu_pytorch_tanh" if gemma else "silu"))
    if act not in (("gelu_pytorch_tanh",) if gemma else ("silu", "swish")):
        raise InputError(f"{where}: {key} {act!r} is not supported for {mt} "
                         f"(expected {'gelu_pytorch_tanh' if gemma else 'silu'})")
    qwen3 = mt in ("qwen3", "qwen3_moe")
    if (qwen3 or gemma) and g("attention_bias", False):   # their o_proj has it too: not a Q/K/V-only bias
        raise InputError(f"{where}: attention_bias true is not modelled for {mt} (a bias on q, k, v and o)")
    if mt == "qwen2":
        qkv_bias = True
    elif mt == "qwen2_moe":
        qkv_bias = bool(g("qkv_bias", True))
    else:
        qkv_bias = bool(g("attention_bias", False))
    head_dim = g("head_dim", 256 if gemma else (128 if mt == "qwen3" else h // heads))
    out = dict(
        name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=heads,
        kv_heads=g("num_key_value_heads", heads), head_dim=head_dim,
        ffn_hidden=g("intermediate_size", req=True), ffn_type="geglu" if gemma else "swiglu", norm="rmsnorm",
        bias=bool(g("mlp_bias", False)), qkv_bias=qkv_bias,
        vocab=g("vocab_size", req=True), max_seq_len=g("max_position_embeddings", 4096),
        position="rotary", tied_embeddings=bool(g("tie_word_embeddings", gemma)),
        qkv_projection="separate", softmax_dtype="fp32",
        **dropout_fields(g("attention_dropout", 0.0)), source=f"Hugging Face config {where}",
    )
    if gemma:   # Gemma2DecoderLayer: input, post-attention, pre- and post-feedforward RMSNorms
        out.update(activation="gelu_tanh", layer_norms=4)
    if qwen3:   # Qwen3Attention: q_norm, k_norm over head_dim
        out["qk_norm"] = True
    return out


def _experts(cfg: dict, mt: str, where: str, g: Get) -> dict:
    """The MoE fields of a Mixtral, Qwen2-MoE or Qwen3-MoE config ({} for a dense model_type).

    Mixtral: num_local_experts (8) experts of intermediate_size, top num_experts_per_tok (2), every layer.
    Qwen2-MoE: num_experts (60) of moe_intermediate_size (1408), top 4, one shared expert of
    shared_expert_intermediate_size (5632) with a sigmoid gate; layer i is MoE when i is not in mlp_only_layers and
    (i + 1) % decoder_sparse_step == 0, the others a dense MLP of intermediate_size. Qwen3-MoE: the same without the
    shared expert (128 experts of 768, top 8). Defaults: the configuration classes' (Transformers 5.24).
    """
    if mt == "mixtral":
        return dict(experts=g("num_local_experts", 8), experts_per_token=g("num_experts_per_tok", 2),
                    expert_ffn=g("intermediate_size", req=True))
    if mt not in ("qwen2_moe", "qwen3_moe"):
        return {}
    qwen2 = mt == "qwen2_moe"
    experts = g("num_experts", 60 if qwen2 else 128)
    if not experts:     # num_experts 0: every layer dense
        return {}
    out = dict(experts=experts, experts_per_token=g("num_experts_per_tok", 4 if qwen2 else 8),
               expert_ffn=g("moe_intermediate_size", 1408 if qwen2 else 768),
               moe_layer_step=g("decoder_sparse_step", 1), dense_layers=list(g("mlp_only_layers", []) or []))
    if qwen2:
        out.update(shared_experts=1, shared_expert_ffn=g("shared_expert_intermediate_size", 5632),
                   shared_expert_gate=True)
    return out


def _sliding_window(cfg: dict, mt: str):
    """The attention window of a Mistral, Mixtral, Qwen2(-MoE), Qwen3(-MoE) or Gemma 2 config (None: full attention).

    The Qwen families apply it only with ``use_sliding_window`` true; Mistral and Mixtral whenever
    ``sliding_window`` is set; Gemma 2 on every other layer (its local layers).
    """
    if mt in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not cfg.get("use_sliding_window", False):
        return None
    if mt not in ("mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2"):
        return None
    return cfg.get("sliding_window", 4096 if mt == "gemma2" else None)
