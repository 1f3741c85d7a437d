"""config.json reader of Phi-3 (Phi3Config; Transformers 5.24 modeling_phi3.py).

A Llama-like decoder whose projections are fused: ``qkv_proj`` (one h x (a + 2 kv) d GEMM, Q, K and V its slices)
and ``gate_up_proj`` (one h x 2F GEMM, chunked into gate and up; ``projection_slices``: the views' non-vectorized
GLU and zero-filled slice gradients in an eager stack), RMSNorm, rotary positions on
``partial_rotary_factor`` of each head (1 for Phi-3, 0.75 for Phi-4-mini), an untied head, the eager softmax in
fp32, and a ``sliding_window`` mask whenever the config sets one (Phi3Model picks
create_sliding_window_causal_mask).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields, rotary_fraction

TYPES = ("phi3",)


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """Phi3ForCausalLM's fields."""
    h = g("hidden_size", req=True)
    heads = g("num_attention_heads", req=True)
    act = str(g("hidden_act", "silu"))
    if act not in ("silu", "swish"):
        raise InputError(f"{where}: hidden_act {act!r} is not supported for phi3 (expected silu)")
    out = dict(
        name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=heads,
        kv_heads=g("num_key_value_heads", heads), head_dim=g("head_dim", h // heads),
        ffn_hidden=g("intermediate_size", req=True), ffn_type="swiglu", norm="rmsnorm", bias=False,
        qkv_bias=False, vocab=g("vocab_size", req=True), max_seq_len=g("max_position_embeddings", 4096),
        position="rotary", rotary_fraction=rotary_fraction(cfg, where),
        tied_embeddings=bool(g("tie_word_embeddings", False)), qkv_projection="fused", softmax_dtype="fp32",
        projection_slices=True,
        **dropout_fields(g("attention_dropout", 0.0), g("resid_pdrop", 0.0)),   # embd_pdrop: Phi3Model runs none
        source=f"Hugging Face config {where}",
    )
    if g("sliding_window"):
        out["sliding_window"] = g("sliding_window")
    return out
