"""config.json reader of Cohere's Command-R (CohereConfig; Transformers 5.24 modeling_cohere.py).

CohereDecoderLayer: one ``input_layernorm`` feeding attention and MLP side by side, x + attn(ln(x)) + mlp(ln(x)) (a
parallel residual with one norm, as Falcon-7B and Phi), where the norm is CohereLayerNorm -- a LayerNorm with a weight
and no bias (``norm_bias`` false: h parameters), computed as separate fp32 ops and cast back (norm variant
``fp32_layernorm``); separate q_proj/k_proj/v_proj/o_proj with ``attention_bias`` (default false) on all four, grouped
K/V heads; Llama's SwiGLU MLP without biases (``hidden_act`` silu); rotary positions on every dimension, on
interleaved pairs (rotate_half of x[..., ::2] and x[..., 1::2]) with q and k upcast to fp32 first and the result cast
back (``rotary_upcast``: every rotary op in fp32, the tables in bf16); a final CohereLayerNorm; the logits
multiplied by ``logit_scale`` (0.0625: an element-wise pass, ``logit_scale``) and a head tied to the embeddings by
default. ``use_qk_norm`` (a CohereLayerNorm
over each query and key head with a weight per head, Command R+) is refused.

cohere2 (Cohere2Config, modeling_cohere2.py; Command R7B, Command A): Cohere's layer without the QK-norm, its layers'
attention by ``layer_types`` (default: every ``sliding_window_pattern``-th (4) full, the others sliding_attention over
``sliding_window`` tokens, default 4096) and the rotary positions only in the sliding layers (Cohere2Attention: the
full layers are NoPE: ``nope_layers``, the rotary kernels priced on the sliding layers only).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields, expect, layer_types, llama_shape

TYPES = ("cohere", "cohere2")


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """CohereForCausalLM's and Cohere2ForCausalLM's fields; the defaults are CohereConfig's (Command-R 35B's) and
    Cohere2Config's."""
    if g("use_qk_norm", False):
        raise InputError(f"{where}: use_qk_norm true is not modelled for cohere (a LayerNorm of each query and key "
                         "head with a weight per head)")
    expect(g, "hidden_act", "silu", where, mt)
    attn_bias = bool(g("attention_bias", False))
    shape = llama_shape(g, layers=40, hidden=8192, heads=64, ffn=22528, vocab=256000, max_pos=8192)
    if mt == "cohere2":   # Cohere2Config's sliding layers
        shape["layer_types"] = layer_types(cfg, shape["layers"], where, sliding_layer)
        shape["sliding_window"] = g("sliding_window", 4096) if "sliding_attention" in shape["layer_types"] else None
        # Cohere2Attention applies the rotary only on its sliding layers (transformers 5.24 modeling_cohere2.py,
        # Cohere2Attention.forward: `if self.sliding_window is not None`): the full-attention layers are NoPE
        shape["nope_layers"] = sum(1 for t in shape["layer_types"] if t != "sliding_attention")
    return dict(
        name=name, **shape,
        ffn_type="swiglu", norm="layernorm", norm_bias=False, bias=attn_bias, qkv_bias=attn_bias, mlp_bias=False,
        position="rotary", rotary_upcast=True, logit_scale=True, tied_embeddings=bool(g("tie_word_embeddings", True)),
        qkv_projection="separate", softmax_dtype="fp32", parallel_residual=True, layer_norms=1,
        **dropout_fields(g("attention_dropout", 0.0)), source=f"Hugging Face config {where}",
    )


def sliding_layer(i: int, cfg: dict) -> bool:
    """Cohere2Config's default layer_types: layer i is sliding_attention unless (i + 1) % sliding_window_pattern (4)
    is 0."""
    return bool((i + 1) % (cfg.get("sliding_window_pattern") or 4))
