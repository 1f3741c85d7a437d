"""Read a Hugging Face ``config.json`` into model-spec fields, offline.

No network and no ``transformers`` package: the field names of each supported
``model_type`` are mapped by hand, following the configuration classes'
documented defaults (GPT2Config, LlamaConfig, MistralConfig, Qwen2Config,
OPTConfig, BertConfig). How each family's modules are written where it changes an eager stack's kernels
(``qkv_projection``, ``softmax_dtype``) follows the modeling files of Transformers 5.24: GPT-2's fused
``c_attn``, the separate ``q_proj``/``k_proj``/``v_proj`` (``query``/``key``/``value``) of the others, and the
``softmax(..., dtype=torch.float32)`` of the Llama, Mistral, Qwen2 and OPT eager attention.
"""

from __future__ import annotations

from dse.errors import InputError

SUPPORTED = ("gpt2", "llama", "mistral", "qwen2", "opt", "bert")
#: Transformers' activation_function names -> the model spec's activation (how the framework writes it).
_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
                "silu": "silu", "swish": "silu"}


def _get(cfg: dict, key: str, where: str, default=None, required: bool = False):
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    if required:
        raise InputError(f"{where}: missing field '{key}' for model_type {cfg.get('model_type')!r}")
    return default


def from_hf_config(cfg: dict, where: str, default_name: str = "hf-model") -> dict:
    """Model-spec fields (a dict for :func:`dse.specs._schema.build`) from a HF config."""
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: expected a JSON object")
    mt = cfg.get("model_type")
    if mt not in SUPPORTED:
        raise InputError(f"{where}: unsupported model_type {mt!r}; supported: {', '.join(SUPPORTED)}")
    name = cfg.get("_name_or_path") or default_name
    name = str(name).rstrip("/").split("/")[-1] or default_name
    g = lambda k, d=None, req=False: _get(cfg, k, where, d, req)  # noqa: E731
    if mt == "gpt2":
        h = g("n_embd", req=True)
        act = str(g("activation_function", "gelu_new"))
        return dict(
            name=name, layers=g("n_layer", req=True), hidden=h, heads=g("n_head", req=True),
            vocab=g("vocab_size", req=True), max_seq_len=g("n_positions", 1024),
            ffn_hidden=g("n_inner") or 4 * h, ffn_type="relu" if act == "relu" else "gelu",
            activation=_ACTIVATIONS.get(act, "gelu"),
            norm="layernorm", bias=True, position="learned", tied_embeddings=g("tie_word_embeddings", True),
            dropout=float(g("resid_pdrop", 0.1)), source=f"Hugging Face config {where}",
        )
    if mt in ("llama", "mistral", "qwen2"):
        h = g("hidden_size", req=True)
        heads = g("num_attention_heads", req=True)
        act = str(g("hidden_act", "silu"))
        if act not in ("silu", "swish"):
            raise InputError(f"{where}: hidden_act {act!r} is not supported for {mt} (expected silu)")
        return dict(
            name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=heads,
            kv_heads=g("num_key_value_heads", heads), head_dim=g("head_dim", h // heads),
            ffn_hidden=g("intermediate_size", req=True), ffn_type="swiglu", norm="rmsnorm",
            bias=bool(g("mlp_bias", False)),
            qkv_bias=True if mt == "qwen2" else bool(g("attention_bias", False)),
            vocab=g("vocab_size", req=True), max_seq_len=g("max_position_embeddings", 4096),
            position="rotary", tied_embeddings=bool(g("tie_word_embeddings", False)),
            qkv_projection="separate", softmax_dtype="fp32",
            dropout=float(g("attention_dropout", 0.0)), source=f"Hugging Face config {where}",
        )
    if mt == "opt":
        h = g("hidden_size", req=True)
        if g("word_embed_proj_dim", h) != h:
            raise InputError(f"{where}: OPT with word_embed_proj_dim != hidden_size (projected embeddings) "
                             "is not supported")
        if not g("do_layer_norm_before", True):
            raise InputError(f"{where}: post-LN OPT (do_layer_norm_before=false) is not supported")
        act = str(g("activation_function", "relu"))
        maxpos = g("max_position_embeddings", 2048)
        return dict(
            name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=g("num_attention_heads", req=True),
            ffn_hidden=g("ffn_dim", 4 * h), ffn_type="relu" if act == "relu" else "gelu", norm="layernorm",
            bias=bool(g("enable_bias", True)), vocab=g("vocab_size", req=True), max_seq_len=maxpos,
            position="learned", position_embeddings=maxpos + 2,  # OPTLearnedPositionalEmbedding offsets by 2
            tied_embeddings=bool(g("tie_word_embeddings", True)),
            final_norm=not bool(g("_remove_final_layer_norm", False)), qkv_projection="separate", softmax_dtype="fp32",
            scale_query=True,
            dropout=float(g("dropout", 0.1)), source=f"Hugging Face config {where}",
        )
    # bert
    h = g("hidden_size", req=True)
    archs = g("architectures", ["BertForPreTraining"]) or ["BertForPreTraining"]
    arch = archs[0]
    pooler = arch in ("BertForPreTraining", "BertModel", "BertForNextSentencePrediction",
                      "BertForSequenceClassification")
    mlm = arch in ("BertForPreTraining", "BertForMaskedLM")
    return dict(
        name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=g("num_attention_heads", req=True),
        ffn_hidden=g("intermediate_size", 4 * h), ffn_type="gelu", norm="layernorm", bias=True,
        vocab=g("vocab_size", req=True), max_seq_len=g("max_position_embeddings", 512), position="learned",
        tied_embeddings=True, dropout=float(g("hidden_dropout_prob", 0.1)), architecture="encoder",
        token_types=g("type_vocab_size", 2), embedding_norm=True, final_norm=False, pooler=pooler,
        mlm_head=mlm, nsp_head=arch == "BertForPreTraining", qkv_projection="separate",
        source=f"Hugging Face config {where}",
    )
