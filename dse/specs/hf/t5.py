"""config.json reader of T5 (T5Config; Transformers 5.24 modeling_t5.py): an encoder-decoder model.

Both stacks: ``num_layers`` encoder layers (bidirectional self-attention, MLP) and ``num_decoder_layers`` (default
num_layers) decoder layers (causal self-attention, cross-attention over the encoder output, MLP), ``d_model``,
``num_heads`` of ``d_kv`` (inner dimension a d_kv, which may differ from d_model), ``d_ff``. q, k, v, o and the MLP
have no bias; T5LayerNorm is an RMS norm without bias or mean (three per decoder layer, two per encoder layer, a final
one per stack); positions are a relative bias, ``relative_attention_num_buckets`` scalars per head in each stack's
first layer, shared by its layers; the scores are not scaled by 1/sqrt(d). ``feed_forward_proj``: relu (T5) or
gated-gelu (T5 v1.1, Flan-T5: wi_0, wi_1, the tanh GELU ``gelu_new``) or gated-silu. One shared embedding for both
stacks; the LM head is tied to it unless ``tie_word_embeddings`` is false (T5 v1.1, Flan-T5: a separate lm_head, as
their checkpoints store it; Transformers 5.24 ties it regardless, see docs/encoder-decoder.md).

Sequence lengths: ``seq_len`` is the encoder's input length, 512 (``n_positions``, T5's pre-training inputs);
``target_len`` the decoder's, 114: the span-corruption targets of 512 inputs at 15 % noise and mean span 3
(Raffel et al. 2020, arXiv 1910.10683, §3.1.4; T5X's pre-training task_feature_lengths inputs 512, targets 114).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get

TYPES = ("t5",)
#: feed_forward_proj -> (ffn_type, activation)
_FFN = {"relu": ("relu", "relu"), "gelu": ("gelu", "gelu"), "gated-gelu": ("geglu", "gelu_new"),
        "gated-silu": ("swiglu", "silu")}
#: T5's span-corruption pre-training: 512 input tokens, 114 target tokens (module docstring)
INPUT_LEN, TARGET_LEN = 512, 114


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """T5ForConditionalGeneration's fields (both stacks)."""
    ffp = str(g("feed_forward_proj", "relu"))
    if ffp not in _FFN:
        raise InputError(f"{where}: feed_forward_proj {ffp!r} is not modelled; supported: {', '.join(_FFN)}")
    if g("is_encoder_decoder", True) is False or g("is_decoder", False):
        raise InputError(f"{where}: a T5 config with is_encoder_decoder false or is_decoder true (one stack) is not "
                         "modelled; expected T5ForConditionalGeneration's encoder and decoder")
    archs = g("architectures", ["T5ForConditionalGeneration"]) or ["T5ForConditionalGeneration"]
    if archs[0] != "T5ForConditionalGeneration":
        raise InputError(f"{where}: architectures {archs[0]!r} is not modelled for t5; expected "
                         "T5ForConditionalGeneration (encoder, decoder and LM head)")
    enc = g("num_layers", req=True)
    dec = g("num_decoder_layers", enc)
    ffn_type, act = _FFN[ffp]
    heads = g("num_heads", req=True)
    return dict(
        name=name, architecture="encoder-decoder", layers=enc + dec, decoder_layers=dec,
        hidden=g("d_model", req=True), heads=heads, kv_heads=heads, head_dim=g("d_kv", req=True),
        ffn_hidden=g("d_ff", req=True), ffn_type=ffn_type, activation=act, norm="rmsnorm", bias=False,
        vocab=g("vocab_size", req=True), max_seq_len=g("n_positions", INPUT_LEN), seq_len=INPUT_LEN,
        target_len=TARGET_LEN, position="relative", relative_buckets=g("relative_attention_num_buckets", 32),
        tied_embeddings=bool(g("tie_word_embeddings", True)), qkv_projection="separate",
        dropout=float(g("dropout_rate", 0.1)), source=f"Hugging Face config {where}",
    )
