"""config.json readers of the classic architectures: GPT-2, OPT, BERT and GPTBigCode (GPT2Config, OPTConfig, BertConfig,
GPTBigCodeConfig)."""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, activation as _activation, dropout_fields


def gpt2(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """GPT2LMHeadModel: fused c_attn, learned positions, tied head."""
    h = g("n_embd", req=True)
    act = str(g("activation_function", "gelu_new"))
    return dict(
        name=name, layers=g("n_layer", req=True), hidden=h, heads=g("n_head", req=True),
        vocab=g("vocab_size", req=True), max_seq_len=g("n_positions", 1024),
        ffn_hidden=g("n_inner") or 4 * h, ffn_type="relu" if act == "relu" else "gelu",
        activation=_activation(act, where, "activation_function"),
        norm="layernorm", bias=True, position="learned", tied_embeddings=g("tie_word_embeddings", True),
        **dropout_fields(g("attn_pdrop", 0.1), g("resid_pdrop", 0.1), g("embd_pdrop", 0.1)),
        source=f"Hugging Face config {where}",
    )


def opt(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """OPTForCausalLM (Transformers 5.24 modeling_opt.py; learned positions offset by 2).

    ``word_embed_proj_dim`` e != h (OPT-350m: 512 of 1,024): the word embedding and the tied LM head are e wide, with
    ``project_in`` (e x h) after the lookup and ``project_out`` (h x e) before the head, both without bias
    (``embedding_dim``). ``do_layer_norm_before`` false (OPT-350m: post-LN): each LayerNorm runs after its residual
    add instead of before its branch -- the same two norms a layer, the same passes and the same saved tensors (the
    norm's input and the next GEMM's input either way) -- and OPTDecoder builds no final LayerNorm. Priced as the
    pre-LN layer."""
    h = g("hidden_size", req=True)
    e = g("word_embed_proj_dim", h)
    pre_ln = bool(g("do_layer_norm_before", True))
    act = str(g("activation_function", "relu"))
    _activation(act, where, "activation_function")
    maxpos = g("max_position_embeddings", 2048)
    return dict(
        name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=g("num_attention_heads", req=True),
        ffn_hidden=g("ffn_dim", 4 * h), ffn_type="relu" if act == "relu" else "gelu", norm="layernorm",
        bias=bool(g("enable_bias", True)), vocab=g("vocab_size", req=True), max_seq_len=maxpos,
        position="learned", position_embeddings=maxpos + 2,  # OPTLearnedPositionalEmbedding offsets by 2
        tied_embeddings=bool(g("tie_word_embeddings", True)), embedding_dim=None if e == h else e,
        final_norm=pre_ln and not bool(g("_remove_final_layer_norm", False)), qkv_projection="separate",
        softmax_dtype="fp32", scale_query=True,
        **dropout_fields(g("attention_dropout", 0.0), g("dropout", 0.1)), source=f"Hugging Face config {where}",
    )


def bert(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """BERT encoders; the heads follow ``architectures[0]``."""
    h = g("hidden_size", req=True)
    act = str(g("hidden_act", "gelu"))
    if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
        raise InputError(f"{where}: hidden_act {act!r} is not supported for bert (expected gelu)")
    archs = g("architectures", ["BertForPreTraining"]) or ["BertForPreTraining"]
    arch = archs[0]
    pooler = arch in ("BertForPreTraining", "BertModel", "BertForNextSentencePrediction",
                      "BertForSequenceClassification")
    mlm = arch in ("BertForPreTraining", "BertForMaskedLM")
    return dict(
        name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=g("num_attention_heads", req=True),
        ffn_hidden=g("intermediate_size", 4 * h), ffn_type="gelu", norm="layernorm", bias=True,
        vocab=g("vocab_size", req=True), max_seq_len=g("max_position_embeddings", 512), position="learned",
        tied_embeddings=True, **dropout_fields(g("attention_probs_dropout_prob", 0.1), g("hidden_dropout_prob", 0.1),
                                               g("hidden_dropout_prob", 0.1)), architecture="encoder",
        token_types=g("type_vocab_size", 2), embedding_norm=True, final_norm=False, pooler=pooler,
        mlm_head=mlm, nsp_head=arch == "BertForPreTraining", qkv_projection="separate",
        source=f"Hugging Face config {where}",
    )


def gpt_bigcode(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """GPTBigCodeForCausalLM (StarCoder, SantaCoder; Transformers 5.24 modeling_gpt_bigcode.py): GPT-2's block with
    multi-query attention -- one fused ``c_attn`` of h + 2 d (``multi_query``, default true: one K/V head; else a
    per-head [q k v] h x 3h) -- learned positions, LayerNorm, biases, a tied head, the eager softmax in fp32."""
    h = g("n_embd", req=True)
    heads = g("n_head", req=True)
    act = str(g("activation_function", "gelu_pytorch_tanh"))
    if not g("scale_attn_weights", True):
        raise InputError(f"{where}: scale_attn_weights false is not modelled for gpt_bigcode")
    return dict(
        name=name, layers=g("n_layer", req=True), hidden=h, heads=heads,
        kv_heads=1 if g("multi_query", True) else heads,
        vocab=g("vocab_size", req=True), max_seq_len=g("n_positions", 1024), ffn_hidden=g("n_inner") or 4 * h,
        ffn_type="relu" if act == "relu" else "gelu", activation=_activation(act, where, "activation_function"),
        norm="layernorm", bias=True, position="learned", tied_embeddings=bool(g("tie_word_embeddings", True)),
        qkv_projection="fused", softmax_dtype="fp32",
        **dropout_fields(g("attn_pdrop", 0.1), g("resid_pdrop", 0.1), g("embd_pdrop", 0.1)),
        source=f"Hugging Face config {where}",
    )
