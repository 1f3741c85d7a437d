"""config.json reader of Llama 4's text decoder: ``llama4_text`` (Llama4TextConfig) and ``llama4`` (Llama4Config: its
``text_config``; the vision encoder and projector are not read).

Llama4ForCausalLM as Transformers 5.24 writes it: MoE layers (``moe_layers``, by default every
``interleave_moe_layer_step``-th) with a router without bias, ``num_local_experts`` experts and one shared expert of
``intermediate_size``, top ``num_experts_per_tok``; the other layers a dense MLP of ``intermediate_size_mlp``;
QK L2-norm without weights (``use_qk_norm``); NoPE layers every ``no_rope_layer_interval``-th (``no_rope_layers``
0: ``nope_layers``, no rotary kernels there), full attention, the others chunked attention over
``attention_chunk_size`` tokens (``layer_types``); untied head (Meta 2025, The Llama 4 herd, model card). Read but
priced approximately (a warning, :func:`dse.specs.hf.common.notes`): the QK-norm on every layer (Transformers applies
it on the RoPE layers only) and the NoPE layers' attention temperature tuning (not priced).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields, expect, layer_types, text_config

#: The model_types this module reads.
TYPES = ("llama4_text", "llama4")


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """The fields of a Llama 4 text decoder (``llama4``: of its text_config)."""
    cfg, g = text_config(cfg, mt, "llama4", "llama4_text", where, g)
    expect(g, "hidden_act", "silu", where, mt)
    if g("attention_bias", False):
        raise InputError(f"{where}: attention_bias true is not modelled for {mt} (a bias on q, k, v and o)")
    layers, expert_ffn = g("num_hidden_layers", 48), g("intermediate_size", 8192)
    out = dict(
        name=name, layers=layers, hidden=g("hidden_size", 5120), heads=g("num_attention_heads", 40),
        kv_heads=g("num_key_value_heads", 8), head_dim=g("head_dim", 128), ffn_hidden=g("intermediate_size_mlp", 16384),
        ffn_type="swiglu", norm="rmsnorm", bias=False, qkv_bias=False, vocab=g("vocab_size", 202048),
        max_seq_len=g("max_position_embeddings", 131072), position="rotary",
        tied_embeddings=bool(g("tie_word_embeddings", False)), qkv_projection="separate", softmax_dtype="fp32",
        **dropout_fields(g("attention_dropout", 0.0)), source=f"Hugging Face config {where}",
        experts=g("num_local_experts", 16), experts_per_token=g("num_experts_per_tok", 1), expert_ffn=expert_ffn,
        shared_experts=1, shared_expert_ffn=expert_ffn,
    )
    if g("use_qk_norm", True):     # Llama4TextL2Norm: x / ||x|| over head_dim, no weight
        out.update(qk_norm=True, qk_norm_weight=False)
    moe = g("moe_layers")
    if moe is None:
        out["moe_layer_step"] = g("interleave_moe_layer_step", 1)
    else:
        out["dense_layers"] = [i for i in range(layers) if i not in set(moe)]
    rope = g("no_rope_layers") or [int((i + 1) % g("no_rope_layer_interval", 4) != 0) for i in range(layers)]
    if len(rope) != layers:
        raise InputError(f"{where}: no_rope_layers has {len(rope)} entries; it needs one per layer ({layers})")
    # Llama4TextAttention applies the rotary only where no_rope_layers[layer_idx] is 1 (transformers 5.24
    # modeling_llama4.py:318, 350): the others are NoPE
    out["nope_layers"] = sum(1 for r in rope if not r)
    out.update(_chunks(cfg, layers, where, g, rope))
    return out


def _chunks(cfg: dict, layers: int, where: str, g: Get, rope: list) -> dict:
    """Chunked attention on the RoPE layers (Llama4TextConfig: ``chunked_attention`` where no_rope_layers[i] is 1 and
    attention_chunk_size is set, else ``full_attention``)."""
    chunk = g("attention_chunk_size", 8192)
    types = cfg.get("layer_types")
    if types is None:
        types = ["chunked_attention" if r and chunk else "full_attention" for r in rope]
    types = layer_types({"layer_types": types}, layers, where)
    return dict(attention_chunk=chunk, layer_types=types) if "chunked_attention" in (types or ()) else {}
