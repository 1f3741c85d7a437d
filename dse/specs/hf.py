"""Read a Hugging Face ``config.json`` into model-spec fields, offline.

No network and no ``transformers`` package: the field names of each supported
``model_type`` are mapped by hand, following the configuration classes'
documented defaults (GPT2Config, LlamaConfig, MistralConfig, Qwen2Config,
OPTConfig, BertConfig, MixtralConfig, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig, Gemma2Config).
How each family's modules are written where it changes an eager stack's kernels
(``qkv_projection``, ``softmax_dtype``) follows the modeling files of Transformers 5.24: GPT-2's fused
``c_attn``, the separate ``q_proj``/``k_proj``/``v_proj`` (``query``/``key``/``value``) of the others, and the
``softmax(..., dtype=torch.float32)`` of the Llama, Mistral, Qwen2 and OPT eager attention.
"""

from __future__ import annotations

from dse.errors import InputError

#: Keys that make a config an architecture dse does not model: an error naming the file and the key, never a
#: dense model read in its place (a Mixtral config relabelled ``mistral`` would otherwise be a 7.24 B dense model).
#: Each changes what is computed and stored, not a detail of it: routed experts multiply the MLP weights and route
#: tokens (Fedus et al. 2021, arXiv 2101.03961); latent attention factors K/V through a low-rank projection
#: (DeepSeek-V2, arXiv 2405.04434 §2.1); cross-attention adds a second attention per layer over an encoder's
#: output (Vaswani et al. 2017); multi-token prediction adds layers (DeepSeek-V3, arXiv 2412.19437 §2.2).
UNMODELLED = {
    "num_local_experts": "mixture-of-experts", "num_experts": "mixture-of-experts",
    "num_experts_per_tok": "mixture-of-experts", "n_routed_experts": "mixture-of-experts",
    "n_shared_experts": "mixture-of-experts", "moe_intermediate_size": "mixture-of-experts",
    "shared_expert_intermediate_size": "mixture-of-experts", "moe_num_experts": "mixture-of-experts",
    "kv_lora_rank": "multi-head latent attention", "q_lora_rank": "multi-head latent attention",
    "add_cross_attention": "cross-attention", "is_encoder_decoder": "an encoder-decoder model",
    "num_nextn_predict_layers": "multi-token prediction layers",
}
SUPPORTED = ("gpt2", "llama", "mistral", "qwen2", "opt", "bert", "mixtral", "qwen2_moe", "qwen3", "qwen3_moe",
             "gemma2")
#: The Llama-like decoders (RMSNorm, rotary, gated MLP, separate Q/K/V projections) and their MoE variants.
_LLAMA_LIKE = ("llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2")
#: The UNMODELLED keys a model_type's experts are read from (docs/moe.md): not refused for that type.
MOE_KEYS = {"mixtral": ("num_local_experts", "num_experts_per_tok"),
            "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "shared_expert_intermediate_size"),
            "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size")}
#: Transformers' activation_function names -> the model spec's activation (how the framework writes it).
_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
                "silu": "silu", "swish": "silu"}


def _get(cfg: dict, key: str, where: str, default=None, required: bool = False):
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    if required:
        raise InputError(f"{where}: missing field '{key}' for model_type {cfg.get('model_type')!r}")
    return default


def _refuse_unmodelled(cfg: dict, where: str) -> None:
    """An :class:`InputError` for the first key of :data:`UNMODELLED` set to something other than off (0, 1, false),
    except the MoE keys of a model_type whose experts are read (:data:`MOE_KEYS`)."""
    read = MOE_KEYS.get(cfg.get("model_type"), ())
    for key, what in UNMODELLED.items():
        if key in read:
            continue
        value = cfg.get(key)
        if not (value is None or value is False or (type(value) is int and value in (0, 1))):
            raise InputError(f"{where}: {key}: {value!r} is not modelled: {what} (dse models dense transformers "
                             f"and the experts of {', '.join(MOE_KEYS)})")


def _activation(act: str, where: str, key: str) -> str:
    if act not in _ACTIVATIONS:
        raise InputError(f"{where}: {key} {act!r} is not modelled; supported: {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[act]


def _notes(cfg: dict, mt: str) -> list[str]:
    """Read but not modelled, and small enough to price approximately: each a warning with every estimate.

    ``quantization_config``: quantized checkpoint weights; the plan's precision prices them. ``parallel_attn`` /
    ``use_parallel_residual``: attention and MLP side by side (GPT-J, Falcon): the same FLOPs and parameters,
    priced as sequential blocks. BERT ``position_embedding_type`` relative_key(_query): Shaw et al. 2018 (arXiv
    1803.02155) add a (2 max_pos - 1) x d distance table and a score term per layer, priced as absolute positions.
    """
    notes = []
    q = cfg.get("quantization_config")
    if q:
        method = q.get("quant_method", "?") if isinstance(q, dict) else "?"
        notes.append(f"quantization_config ({method}) is not modelled: weights priced at the plan's precision")
    for key in ("parallel_attn", "use_parallel_residual"):
        if cfg.get(key):
            notes.append(f"{key}: true is not modelled: attention and MLP priced as sequential blocks "
                         "(same FLOPs and parameters)")
    if mt == "gemma2":   # Gemma2Config defaults: 50 and 30
        for key, default in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0)):
            if cfg.get(key, default):
                notes.append(f"{key} is not modelled: the element-wise tanh cap is not priced")
    pos = cfg.get("position_embedding_type", "absolute")
    if mt == "bert" and pos not in (None, "absolute"):
        notes.append(f"position_embedding_type {pos!r} is not modelled: priced as absolute positions (the "
                     "relative-distance table and its score term are not counted)")
    return notes


def _sliding_window(cfg: dict, mt: str):
    """The attention window of a Mistral, Mixtral, Qwen2(-MoE), Qwen3(-MoE) or Gemma 2 config (None: full attention).

    The Qwen families apply it only with ``use_sliding_window`` true; Mistral and Mixtral whenever
    ``sliding_window`` is set; Gemma 2 on every other layer (its local layers).
    """
    if mt in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not cfg.get("use_sliding_window", False):
        return None
    if mt not in ("mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2"):
        return None
    return cfg.get("sliding_window", 4096 if mt == "gemma2" else None)


def from_hf_config(cfg: dict, where: str, default_name: str = "hf-model") -> dict:
    """Model-spec fields (a dict for :func:`dse.specs._schema.build`) from a HF config.

    A key that changes the architecture and is not modelled is an error (:data:`UNMODELLED`) or, where the
    estimate prices it approximately, a note in the spec's ``unmodelled`` (reported as a warning with every
    estimate; a ``sliding_window`` shorter than the sequence is one, see :mod:`dse.estimate.defaults`).
    """
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: expected a JSON object")
    mt = cfg.get("model_type")
    if mt not in SUPPORTED:
        raise InputError(f"{where}: unsupported model_type {mt!r}; supported: {', '.join(SUPPORTED)}")
    _refuse_unmodelled(cfg, where)
    fields = _fields(cfg, where, mt, default_name)
    notes = _notes(cfg, mt)
    if notes:
        fields["unmodelled"] = [f"{where}: {n}" for n in notes]
    window = _sliding_window(cfg, mt)
    if window:
        fields["sliding_window"] = window
    return fields


def _fields(cfg: dict, where: str, mt: str, default_name: str) -> dict:
    """The spec fields of one supported ``model_type``."""
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
            activation=_activation(act, where, "activation_function"),
            norm="layernorm", bias=True, position="learned", tied_embeddings=g("tie_word_embeddings", True),
            dropout=float(g("resid_pdrop", 0.1)), source=f"Hugging Face config {where}",
        )
    if mt in _LLAMA_LIKE:
        return {**_llama_like(cfg, mt, where, name, g), **_experts(cfg, mt, where, g)}
    if mt == "opt":
        h = g("hidden_size", req=True)
        if g("word_embed_proj_dim", h) != h:
            raise InputError(f"{where}: OPT with word_embed_proj_dim != hidden_size (projected embeddings) "
                             "is not supported")
        if not g("do_layer_norm_before", True):
            raise InputError(f"{where}: post-LN OPT (do_layer_norm_before=false) is not supported")
        act = str(g("activation_function", "relu"))
        _activation(act, where, "activation_function")
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
        tied_embeddings=True, dropout=float(g("hidden_dropout_prob", 0.1)), architecture="encoder",
        token_types=g("type_vocab_size", 2), embedding_norm=True, final_norm=False, pooler=pooler,
        mlm_head=mlm, nsp_head=arch == "BertForPreTraining", qkv_projection="separate",
        source=f"Hugging Face config {where}",
    )


def _llama_like(cfg: dict, mt: str, where: str, name: str, g) -> dict:
    """Fields of a Llama-like decoder: Llama, Mistral, Qwen2, Qwen3 (QK-norm, head_dim 128 by default), Gemma 2
    (GeGLU, head_dim 256, tied, four norms per layer) and the MoE variants' attention and dense MLP."""
    h = g("hidden_size", req=True)
    heads = g("num_attention_heads", req=True)
    gemma = mt == "gemma2"
    key = "hidden_activation" if gemma else "hidden_act"
    act = str(g(key, "gelu_pytorch_tanh" if gemma else "silu"))
    if act not in (("gelu_pytorch_tanh",) if gemma else ("silu", "swish")):
        raise InputError(f"{where}: {key} {act!r} is not supported for {mt} "
                         f"(expected {'gelu_pytorch_tanh' if gemma else 'silu'})")
    qwen3 = mt in ("qwen3", "qwen3_moe")
    if (qwen3 or gemma) and g("attention_bias", False):   # their o_proj has it too: not a Q/K/V-only bias
        raise InputError(f"{where}: attention_bias true is not modelled for {mt} (a bias on q, k, v and o)")
    if mt == "qwen2":
        qkv_bias = True
    elif mt == "qwen2_moe":
        qkv_bias = bool(g("qkv_bias", True))
    else:
        qkv_bias = bool(g("attention_bias", False))
    head_dim = g("head_dim", 256 if gemma else (128 if mt == "qwen3" else h // heads))
    out = dict(
        name=name, layers=g("num_hidden_layers", req=True), hidden=h, heads=heads,
        kv_heads=g("num_key_value_heads", heads), head_dim=head_dim,
        ffn_hidden=g("intermediate_size", req=True), ffn_type="geglu" if gemma else "swiglu", norm="rmsnorm",
        bias=bool(g("mlp_bias", False)), qkv_bias=qkv_bias,
        vocab=g("vocab_size", req=True), max_seq_len=g("max_position_embeddings", 4096),
        position="rotary", tied_embeddings=bool(g("tie_word_embeddings", gemma)),
        qkv_projection="separate", softmax_dtype="fp32",
        dropout=float(g("attention_dropout", 0.0)), source=f"Hugging Face config {where}",
    )
    if gemma:   # Gemma2DecoderLayer: input, post-attention, pre- and post-feedforward RMSNorms
        out.update(activation="gelu_tanh", layer_norms=4)
    if qwen3:   # Qwen3Attention: q_norm, k_norm over head_dim
        out["qk_norm"] = True
    return out


def _experts(cfg: dict, mt: str, where: str, g) -> dict:
    """The MoE fields of a Mixtral, Qwen2-MoE or Qwen3-MoE config ({} for a dense model_type).

    Mixtral: num_local_experts (8) experts of intermediate_size, top num_experts_per_tok (2), every layer.
    Qwen2-MoE: num_experts (60) of moe_intermediate_size (1408), top 4, one shared expert of
    shared_expert_intermediate_size (5632) with a sigmoid gate; layer i is MoE when i is not in mlp_only_layers and
    (i + 1) % decoder_sparse_step == 0, the others a dense MLP of intermediate_size. Qwen3-MoE: the same without the
    shared expert (128 experts of 768, top 8). Defaults: the configuration classes' (Transformers 5.24).
    """
    if mt == "mixtral":
        return dict(experts=g("num_local_experts", 8), experts_per_token=g("num_experts_per_tok", 2),
                    expert_ffn=g("intermediate_size", req=True))
    if mt not in ("qwen2_moe", "qwen3_moe"):
        return {}
    qwen2 = mt == "qwen2_moe"
    experts = g("num_experts", 60 if qwen2 else 128)
    if not experts:     # num_experts 0: every layer dense
        return {}
    out = dict(experts=experts, experts_per_token=g("num_experts_per_tok", 4 if qwen2 else 8),
               expert_ffn=g("moe_intermediate_size", 1408 if qwen2 else 768),
               moe_layer_step=g("decoder_sparse_step", 1), dense_layers=list(g("mlp_only_layers", []) or []))
    if qwen2:
        out.update(shared_experts=1, shared_expert_ffn=g("shared_expert_intermediate_size", 5632),
                   shared_expert_gate=True)
    return out
