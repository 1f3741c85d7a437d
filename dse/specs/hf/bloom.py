"""config.json reader of BLOOM and BLOOMZ (BloomConfig; Transformers 5.24 modeling_bloom.py).

BloomForCausalLM: the word embeddings followed by a LayerNorm (``word_embeddings_layernorm``), no position table --
ALiBi (Press et al. 2022, arXiv 2108.12409): a per-head linear distance bias added to every attention score, built
once per step as a (b a, 1, s) tensor and added by the score GEMM itself (``alibi.baddbmm(q, k^T, beta=1,
alpha=1/sqrt(d))``) -- pre-LN blocks of LayerNorms, one fused ``query_key_value`` of 3h (per head [q k v],
split by views), a dense output, a 4h MLP with BLOOM's own tanh GeLU (``BloomGelu``: a torch.autograd.Function,
forward x/2 (1 + tanh(0.79788456 x (1 + 0.044715 x^2))) as eager ops that save only x, backward its own formula,
``bloom_gelu_back``), biases on every linear layer, a final LayerNorm and an LM head tied to the embeddings.

BloomAttention is its own eager attention: BloomPreTrainedModel declares no SDPA or flash support, and Transformers
refuses ``attn_implementation="sdpa"`` for it ("does not support an attention implementation through
torch.nn.functional.scaled_dot_product_attention"); the model spec says so with ``alibi`` (an estimate's attention
is then eager, ``--attention math``: docs/estimate.md). BLOOM was trained at 2,048 tokens (BigScience 2022, arXiv
2211.05100 §3.5, Table 3); ALiBi sets no limit, so ``seq_length`` (default 2048) is the training length.
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields

TYPES = ("bloom",)


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """BloomForCausalLM's fields."""
    if g("apply_residual_connection_post_layernorm", False):
        raise InputError(f"{where}: apply_residual_connection_post_layernorm true is not modelled for bloom (the "
                         "normed output as the residual); expected false")
    if g("slow_but_exact", False) and g("pretraining_tp", 1) > 1:
        raise InputError(f"{where}: slow_but_exact true with pretraining_tp {g('pretraining_tp')} is not modelled "
                         "for bloom (each dense layer as pretraining_tp sliced GEMMs); expected slow_but_exact false")
    h = g("hidden_size") or g("n_embed", 64)
    seq = g("seq_length", 2048)
    return dict(
        name=name, layers=g("n_layer") or g("num_hidden_layers", 2), hidden=h,
        heads=g("n_head") or g("num_attention_heads", 8), vocab=g("vocab_size", 250880),
        max_seq_len=seq, seq_len=seq, ffn_hidden=4 * h, ffn_type="gelu", activation="bloom_gelu", norm="layernorm",
        bias=True, position="none", alibi=True, embedding_norm=True,
        tied_embeddings=bool(g("tie_word_embeddings", True)), qkv_projection="fused", softmax_dtype="fp32",
        **dropout_fields(g("attention_dropout", 0.0), g("hidden_dropout", 0.0)), source=f"Hugging Face config {where}",
    )
