"""config.json readers of the small dense decoders with separate ``q_proj``/``k_proj``/``v_proj`` and rotary positions
that Transformers 5.24 writes on Llama's pattern: Gemma (GemmaConfig), StarCoder2 (Starcoder2Config), StableLM
(StableLmConfig), Granite (GraniteConfig), SmolLM3 (SmolLM3Config) and OLMo 2 (Olmo2Config).

What each changes against Llama, from its modeling file (transformers/models/<type>/modeling_<type>.py):

- gemma: Gemma 2's layer without the post-norms and soft-capping: GeGLU (``hidden_act`` gelu_pytorch_tanh; the legacy
  ``gelu`` of the released configs is rewritten to it by GemmaConfig.__post_init__), RMSNorm scaling by (1 + w) in
  fp32 (GemmaRMSNorm), embeddings times sqrt(h) (GemmaTextScaledWordEmbedding), head_dim 256, a tied head.
- starcoder2: LayerNorm, a two-matrix MLP c_fc/c_proj with ``hidden_act`` (gelu_pytorch_tanh), biases on every
  linear layer with ``use_bias`` (default true), grouped K/V heads, a ``sliding_window`` on every layer when set.
- stablelm: LayerNorm, rotary positions on ``partial_rotary_factor`` of each head (default 0.25), biases on Q, K and
  V only with ``use_qkv_bias``, SwiGLU, an untied head; ``use_parallel_residual``: x + attn(ln(x)) + mlp(ln(x)) with
  the one input_layernorm (post_attention_layernorm is None). ``qk_layernorm`` (a LayerNorm per head, weights
  per head) is refused.
- granite: Llama with IBM's multipliers (GraniteModel, GraniteDecoderLayer, GraniteForCausalLM): the embeddings
  times ``embedding_multiplier``, each branch output times ``residual_multiplier`` before its residual add, the
  logits divided by ``logits_scaling`` -- each an element-wise kernel of its own, run whatever the value -- and
  ``attention_multiplier`` as the attention's scale (no kernel).
- smollm3: Llama with no rotary positions on the layers whose ``no_rope_layers`` entry is 0 (every fourth by default:
  NoPE; ``nope_layers``: the rotary kernels priced on the other layers only), a tied head.
- olmo2: RMSNorm after each branch (x + norm(attn(x)), x + norm(mlp(x)): post_attention_layernorm and
  post_feedforward_layernorm, no pre-norms) and a QK-norm over the whole query and key projections (q_norm of a d,
  k_norm of kv d weights), an untied head.
- olmo (OLMo-1; OlmoConfig, modeling_olmo.py): Llama's layer with OlmoLayerNorm -- a LayerNorm without weight or bias
  (Groeneveld et al. 2024, arXiv 2402.00838 §2.1), run in fp32 and cast back (``norm_weight`` false) -- and, as OLMo 2,
  the rotary products in fp32 (its rotary embedding returns fp32 cos and sin); an untied head by default.
  ``clip_qkv`` (an in-place clamp of q, k and v) is refused.
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields, expect, rotary_fraction

#: The model_types this module reads.
TYPES = ("gemma", "starcoder2", "stablelm", "granite", "smollm3", "olmo2", "olmo")
#: The configuration classes' defaults (Transformers 5.24) of max_position_embeddings and tie_word_embeddings.
_MAXPOS = {"gemma": 8192, "starcoder2": 4096, "stablelm": 4096, "granite": 2048, "smollm3": 32768, "olmo2": 2048,
           "olmo": 2048}
_TIED = {"gemma": True, "starcoder2": True, "stablelm": False, "granite": False, "smollm3": True, "olmo2": False,
         "olmo": False}


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """The fields of a Gemma, StarCoder2, StableLM, Granite, SmolLM3 or OLMo 2 decoder."""
    h, heads = g("hidden_size", req=True), g("num_attention_heads", req=True)
    out = dict(name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=heads,
               kv_heads=g("num_key_value_heads", heads), head_dim=g("head_dim", h // heads),
               ffn_hidden=g("intermediate_size", req=True), ffn_type="swiglu", norm="rmsnorm", bias=False,
               qkv_bias=False, vocab=g("vocab_size", req=True), max_seq_len=g("max_position_embeddings", _MAXPOS[mt]),
               position="rotary", tied_embeddings=bool(g("tie_word_embeddings", _TIED[mt])), qkv_projection="separate",
               softmax_dtype="fp32", **dropout_fields(g("attention_dropout", 0.0)),
               source=f"Hugging Face config {where}")
    if mt in ("granite", "smollm3", "olmo2", "olmo", "gemma"):
        if g("attention_bias", False):       # on q, k, v and o alike: not a Q/K/V-only bias
            raise InputError(f"{where}: attention_bias true is not modelled for {mt} (a bias on q, k, v and o)")
        if mt != "gemma":
            expect(g, "hidden_act", "silu", where, mt)
            out["bias"] = bool(g("mlp_bias", False)) if mt not in ("olmo2", "olmo") else False
            if out["bias"]:
                raise InputError(f"{where}: mlp_bias true is not modelled for {mt} (biases on the MLP only)")
    _FAMILY[mt](out, cfg, where, g)
    return out


def _gemma(out: dict, cfg: dict, where: str, g: Get) -> None:
    act = str(g("hidden_act", "gelu_pytorch_tanh"))
    if act not in ("gelu", "gelu_pytorch_tanh"):    # GemmaConfig rewrites gelu to gelu_pytorch_tanh
        raise InputError(f"{where}: hidden_act {act!r} is not supported for gemma (expected gelu_pytorch_tanh)")
    out.update(head_dim=g("head_dim", 256), ffn_type="geglu", activation="gelu_tanh", norm_fp32_weight=True,
               embedding_scale=True)


def _starcoder2(out: dict, cfg: dict, where: str, g: Get) -> None:
    expect(g, "hidden_act", "gelu_pytorch_tanh", where, "starcoder2")
    bias = bool(g("use_bias", True))
    out.update(ffn_type="gelu", activation="gelu_tanh", norm="layernorm", bias=bias, qkv_bias=bias,
               **dropout_fields(g("attention_dropout", 0.0), g("residual_dropout", 0.0),
                                g("embedding_dropout", 0.0)))
    if g("sliding_window"):
        out["sliding_window"] = g("sliding_window")


def _stablelm(out: dict, cfg: dict, where: str, g: Get) -> None:
    expect(g, "hidden_act", "silu", where, "stablelm")
    if g("qk_layernorm", False):
        raise InputError(f"{where}: qk_layernorm true is not modelled for stablelm (a LayerNorm of each head with "
                         "weights per head)")
    parallel = bool(g("use_parallel_residual", False))
    out.update(norm="layernorm", qkv_bias=bool(g("use_qkv_bias", False)),
               rotary_fraction=rotary_fraction(cfg, where, 0.25),
               parallel_residual=parallel, layer_norms=1 if parallel else 2,
               **dropout_fields(g("attention_dropout", 0.0), g("hidden_dropout", 0.0), branches=1))


def _granite(out: dict, cfg: dict, where: str, g: Get) -> None:
    out.update(embedding_scale=True, residual_scale=True, logit_scale=True)


def _smollm3(out: dict, cfg: dict, where: str, g: Get) -> None:
    if cfg.get("use_sliding_window") and g("sliding_window"):
        raise InputError(f"{where}: use_sliding_window true is not modelled for smollm3 (windows on its NoPE layers)")
    # SmolLM3Config: no_rope_layers, else every no_rope_layer_interval-th layer (4) is NoPE; SmolLM3Attention applies
    # the rotary only where no_rope_layers[layer_idx] is 1 (transformers 5.24 modeling_smollm3.py:192, 215)
    layers = out["layers"]
    flags = g("no_rope_layers") or [int((i + 1) % (g("no_rope_layer_interval") or 4) != 0) for i in range(layers)]
    if len(flags) != layers:
        raise InputError(f"{where}: no_rope_layers has {len(flags)} entries; it needs one per layer ({layers})")
    out["nope_layers"] = sum(1 for f in flags if not f)


def _olmo2(out: dict, cfg: dict, where: str, g: Get) -> None:
    out.update(qk_norm=True, qk_norm_full=True, norm_fp32_weight=True, norm_offset=False, rotary_fp32=True)


def _olmo(out: dict, cfg: dict, where: str, g: Get) -> None:
    if g("clip_qkv") is not None:
        raise InputError(f"{where}: clip_qkv {g('clip_qkv')!r} is not modelled for olmo (an in-place clamp of q, k "
                         "and v); expected null")
    out.update(norm="layernorm", norm_weight=False, rotary_fp32=True)


_FAMILY = {"gemma": _gemma, "starcoder2": _starcoder2, "stablelm": _stablelm, "granite": _granite,
           "smollm3": _smollm3, "olmo2": _olmo2, "olmo": _olmo}
