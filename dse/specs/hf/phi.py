"""config.json readers of the parallel-block decoders with one shared LayerNorm: Phi-1, Phi-1.5 and Phi-2 (PhiConfig;
Transformers 5.24 modeling_phi.py) and GPT-J (GPTJConfig; modeling_gptj.py).

PhiDecoderLayer: one shared ``input_layernorm`` (LayerNorm) feeding attention and MLP side by side, x + attn(ln(x)) +
mlp(ln(x)) (a parallel residual with one norm, as Falcon-7B); separate ``q_proj``/``k_proj``/``v_proj`` and ``dense``,
all with biases, a two-matrix MLP fc1/fc2 with biases and ``hidden_act`` (gelu_new); rotary positions on
``partial_rotary_factor`` of each head (PhiConfig's default 0.5; Phi-2 0.4) -- the rotated and passed parts are
concatenated back (torch.cat), as GPT-NeoX; a final LayerNorm and an untied ``lm_head`` with a bias; the eager
softmax in fp32. ``qk_layernorm`` (a LayerNorm over each query and key head, with bias) is refused.
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, activation, dropout_fields, rotary_fraction

TYPES = ("phi",)


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """PhiForCausalLM's fields."""
    if g("qk_layernorm", False):
        raise InputError(f"{where}: qk_layernorm true is not modelled for phi (a LayerNorm with bias of each query "
                         "and key head)")
    act = str(g("hidden_act", "gelu_new"))
    heads = g("num_attention_heads", req=True)
    return dict(
        name=name, layers=g("num_hidden_layers", req=True), hidden=g("hidden_size", req=True), heads=heads,
        kv_heads=g("num_key_value_heads", heads), ffn_hidden=g("intermediate_size", req=True),
        ffn_type="relu" if act == "relu" else "gelu", activation=activation(act, where, "hidden_act"),
        norm="layernorm", bias=True, qkv_bias=True, vocab=g("vocab_size", req=True),
        max_seq_len=g("max_position_embeddings", 2048), position="rotary",
        rotary_fraction=rotary_fraction(cfg, where, 0.5), tied_embeddings=bool(g("tie_word_embeddings", False)),
        head_bias=True, qkv_projection="separate", softmax_dtype="fp32", parallel_residual=True, layer_norms=1,
        **dropout_fields(g("attention_dropout", 0.0), g("resid_pdrop", 0.0), g("embd_pdrop", 0.0)),
        source=f"Hugging Face config {where}",
    )


def gptj(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """GPTJForCausalLM: Phi's block (one ``ln_1`` feeding attention and MLP side by side) with separate ``q_proj``,
    ``k_proj``, ``v_proj`` and ``out_proj`` without biases, the MLP fc_in/fc_out with them (``mlp_bias``), rotary
    positions on ``rotary_dim`` of each head (64 of 256; none: all), applied to every pair of dimensions
    (rotate_every_two) in the projections' (b, s, a, d) layout before the heads are transposed, an untied
    ``lm_head`` with a bias. Its eager attention multiplies in fp32 (query.to(float32)): priced as the others' eager
    attention (fp32 softmax), a warning (dse.specs.hf.common.notes); SDPA, Transformers' default, as traced."""
    h, heads = g("n_embd", 4096), g("n_head", 16)
    act = str(g("activation_function", "gelu_new"))
    rot = g("rotary_dim", 64)
    if rot is not None and not 0 < rot <= h // heads:
        raise InputError(f"{where}: rotary_dim {rot!r} is not a share of the head dimension {h // heads}")
    return dict(
        name=name, layers=g("n_layer", 28), hidden=h, heads=heads, ffn_hidden=g("n_inner") or 4 * h,
        ffn_type="relu" if act == "relu" else "gelu", activation=activation(act, where, "activation_function"),
        norm="layernorm", bias=False, qkv_bias=False, mlp_bias=True, vocab=g("vocab_size", 50400),
        max_seq_len=g("n_positions", 2048), position="rotary", rotary_fraction=(rot or h // heads) / (h // heads),
        rotary_before_transpose=True, tied_embeddings=bool(g("tie_word_embeddings", False)), head_bias=True,
        qkv_projection="separate", softmax_dtype="fp32", parallel_residual=True, layer_norms=1,
        **dropout_fields(g("attn_pdrop", 0.0), g("resid_pdrop", 0.0), g("embd_pdrop", 0.0)),
        source=f"Hugging Face config {where}",
    )
