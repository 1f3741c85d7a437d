"""config.json reader of Falcon (FalconConfig; Transformers 5.24 modeling_falcon.py).

One fused ``query_key_value`` projection of (a + 2 kv) d: multi-query (``multi_query``, Falcon-7B: one K/V head)
or, with ``new_decoder_architecture`` (Falcon-40B/180B), ``num_kv_heads`` grouped K/V heads; LayerNorm, rotary
positions, a GELU MLP of ``ffn_hidden_size`` (default 4h), biases only with ``bias``, a tied head by default.
``parallel_attn`` (default true): attention and MLP side by side, x + attn(ln(x)) + mlp(ln(x)), with one shared
``input_layernorm`` (Falcon-7B) or, in the new decoder architecture, ``num_ln_in_parallel_attn`` norms (default 2:
``ln_attn``, ``ln_mlp``). ALiBi (``alibi`` true) is refused: its per-head distance bias on every score runs only in
Falcon's eager attention, which dse does not price apart.
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, activation, dropout_fields, rotary_fraction

TYPES = ("falcon",)


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """FalconForCausalLM's fields."""
    if g("alibi", False):
        raise InputError(f"{where}: alibi true is not modelled (ALiBi position biases on every attention score, "
                         "eager attention only); dse prices Falcon with rotary positions (alibi false)")
    heads = g("num_attention_heads", req=True)
    new = bool(g("new_decoder_architecture", False))
    parallel = bool(g("parallel_attn", True))
    if new and not parallel:   # FalconDecoderLayer builds ln_attn/ln_mlp only for a parallel layer
        raise InputError(f"{where}: new_decoder_architecture with parallel_attn false is not a Falcon layer "
                         "Transformers builds; expected parallel_attn true")
    if new:
        kv, norms = g("num_kv_heads", heads), g("num_ln_in_parallel_attn", 2)
    else:
        kv, norms = (1 if g("multi_query", True) else heads), (1 if parallel else 2)
    if norms not in (1, 2):
        raise InputError(f"{where}: num_ln_in_parallel_attn {norms!r} is not modelled; expected 1 or 2")
    h = g("hidden_size") or g("n_embed", req=True)
    act = str(g("activation", "gelu"))
    return dict(
        name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=heads, kv_heads=kv,
        ffn_hidden=g("ffn_hidden_size", 4 * h), ffn_type="relu" if act == "relu" else "gelu",
        activation=activation(act, where, "activation"), norm="layernorm", bias=bool(g("bias", False)),
        vocab=g("vocab_size", req=True), max_seq_len=g("max_position_embeddings", 2048), position="rotary",
        rotary_fraction=rotary_fraction(cfg, where), tied_embeddings=bool(g("tie_word_embeddings", True)),
        qkv_projection="fused", parallel_residual=parallel, layer_norms=norms,
        **_dropouts(parallel, g), source=f"Hugging Face config {where}",
    )


def _dropouts(parallel: bool, g: Get) -> dict:
    """Falcon's dropout fields. Never on the attention probabilities (ALiBi refused: without it both the SDPA call,
    ``dropout_p=0.0``, and the eager path skip it, modeling_falcon.py:344, 353); ``hidden_dropout`` on the layer's
    output branch -- one dropout_add of the parallel layer's attention + MLP sum (:621) -- and, in the sequential
    layer, ``attention_dropout`` on the attention output before its residual add (:603-605): a branch dropout."""
    hidden = float(g("hidden_dropout", 0.0))
    if parallel:
        return dropout_fields(branch=hidden, branches=1)
    attn = float(g("attention_dropout", 0.0))
    return dropout_fields(branch=max(attn, hidden), branches=(attn > 0) + (hidden > 0) or 2)
