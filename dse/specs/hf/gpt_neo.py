"""config.json reader of GPT-Neo (GPTNeoConfig; Transformers 5.24 modeling_gpt_neo.py).

GPT-2's block -- two LayerNorms before the branches, a GELU MLP ``c_fc``/``c_proj`` with biases, learned absolute
positions, a tied head -- with separate ``q_proj``, ``k_proj``, ``v_proj`` without biases and an ``out_proj`` with
one (GPTNeoSelfAttention.__init__). ``attention_types`` ([[["global", "local"], 12]]: the pattern and how often it
repeats) gives each layer its attention: global layers attend causally over the whole sequence, local ones over the
last ``window_size`` (256) tokens (``bias ^ tril(bias, -window_size)``), dse's ``layer_types`` full_attention and
sliding_attention with ``sliding_window`` = window_size. The eager attention masks the window with ``torch.where``
over the whole s x s score matrix: it computes every score of a local layer (the model's FLOPs count the window;
the executed work, the whole matrix: :func:`dse.estimate.table_inputs.attention_shares`).

GPTNeoPreTrainedModel has no SDPA path (eager, or flash-attn's flash_attention_2 when asked for): the plan's
attention defaults to math (``eager_attention``). That eager attention casts q and k to fp32 and multiplies them
unscaled (no 1/sqrt(d): GPT-Neo's convention), masks, softmaxes the fp32 scores and casts them back: the pytorch
stack's ``fp32_scores`` eager attention (stacks/pytorch.yaml, from the trace of GPTNeoBlock). The score product
itself runs in fp32 and is priced at the bf16 GEMM rate: a warning with every estimate
(:func:`dse.specs.hf.common.notes`).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, activation, dropout_fields

TYPES = ("gpt_neo",)
#: GPT-Neo's attention kinds -> dse's layer_types
KINDS = {"global": "full_attention", "local": "sliding_attention"}


def layer_types(types: object, layers: int, where: str) -> tuple[str, ...]:
    """Each layer's attention from ``attention_types`` (GPTNeoConfig.expand_attention_types_params: each
    [pattern, n] repeats the pattern n times), one per layer."""
    allowed = "a list of [[kinds], repeats] with kinds global or local"
    if not isinstance(types, list) or not types:
        raise InputError(f"{where}: attention_types = {types!r}; expected {allowed}")
    out: list[str] = []
    for item in types:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], list) or not item[0]
                or type(item[1]) is not int or item[1] < 1 or any(k not in KINDS for k in item[0])):
            raise InputError(f"{where}: attention_types entry {item!r}; expected {allowed}")
        out += [KINDS[k] for k in item[0]] * item[1]
    if len(out) != layers:
        raise InputError(f"{where}: attention_types gives {len(out)} layers; num_layers is {layers} (GPTNeoConfig "
                         "needs one attention kind per layer)")
    return tuple(out)


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """GPTNeoForCausalLM's fields."""
    h, layers = g("hidden_size", 2048), g("num_layers", 24)
    act = str(g("activation_function", "gelu_new"))
    types = layer_types(g("attention_types", [[["global", "local"], 12]]), layers, where)   # GPTNeoConfig default
    return dict(
        name=name, layers=layers, hidden=h, heads=g("num_heads", 16), vocab=g("vocab_size", 50257),
        max_seq_len=g("max_position_embeddings", 2048), ffn_hidden=g("intermediate_size") or 4 * h,
        ffn_type="relu" if act == "relu" else "gelu", activation=activation(act, where, "activation_function"),
        norm="layernorm", bias=True, qkv_bias=False, position="learned",
        tied_embeddings=bool(g("tie_word_embeddings", True)), qkv_projection="separate", softmax_dtype="fp32_scores",
        eager_attention=True, layer_types=types,
        sliding_window=g("window_size", 256) if "sliding_attention" in types else None,
        # attn_dropout on the probabilities, resid_dropout on both branch outputs (out_proj's, GPTNeoMLP's), drop
        # (embed_dropout) on the embeddings
        **dropout_fields(g("attention_dropout", 0.0), g("resid_dropout", 0.0), g("embed_dropout", 0.0)),
        source=f"Hugging Face config {where}",
    )
