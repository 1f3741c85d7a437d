"""config.json reader of GPT-NeoX / Pythia (GPTNeoXConfig; Transformers 5.24 modeling_gpt_neox.py).

One fused ``query_key_value`` projection (per head [q k v], views of one GEMM's output), rotary positions on
``rotary_pct`` of each head (default 0.25; Transformers 5 ``rope_parameters.partial_rotary_factor``), LayerNorm,
a GELU MLP, biases on every linear layer (``attention_bias``, default true, on the attention's two), an untied
``embed_out`` head, the eager softmax in fp32, and by default (``use_parallel_residual`` true) a parallel residual
with two norms: x + attn(ln1(x)) + mlp(ln2(x)) (GPTNeoXLayer.forward).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, activation, dropout_fields, rotary_fraction

TYPES = ("gpt_neox",)


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """GPTNeoXForCausalLM's fields."""
    if not g("attention_bias", True):   # GPTNeoXMLP's linears keep theirs: not one bias setting for the layer
        raise InputError(f"{where}: attention_bias false is not modelled for gpt_neox (the MLP keeps its biases)")
    act = str(g("hidden_act", "gelu"))
    return dict(
        name=name, layers=g("num_hidden_layers", req=True), hidden=g("hidden_size", req=True),
        heads=g("num_attention_heads", req=True), ffn_hidden=g("intermediate_size", req=True),
        ffn_type="relu" if act == "relu" else "gelu", activation=activation(act, where, "hidden_act"),
        norm="layernorm", bias=True, vocab=g("vocab_size", req=True),
        max_seq_len=g("max_position_embeddings", 2048), position="rotary",
        rotary_fraction=rotary_fraction(cfg, where, 0.25, "rotary_pct"),
        tied_embeddings=bool(g("tie_word_embeddings", False)), qkv_projection="fused", softmax_dtype="fp32",
        parallel_residual=bool(g("use_parallel_residual", True)),
        **dropout_fields(g("attention_dropout", 0.0), g("hidden_dropout", 0.0), g("hidden_dropout", 0.0)),
        source=f"Hugging Face config {where}",
    )
