"""Parameter counts: norms, FFN matrices, a layer (and its replicated part), embeddings, head, the model.

Part of :mod:`dse.formulas.transformer` (the symbols are there).
"""

from __future__ import annotations

from dse.formulas._array import Num

__all__ = ["norm_parameters", "ffn_matrices", "mlp_parameters", "layer_parameters", "layer_parameters_replicated",
           "mtp_parameters", "embedding_parameters", "head_parameters", "parameter_count", "GATED_FFN", "cross_attention_parameters",
           "relative_position_parameters"]


#: FFN types with a gate (three h x F matrices instead of two): SwiGLU and GeGLU (Gemma's tanh-GELU gate).
GATED_FFN = ("swiglu", "geglu")


def norm_parameters(h: Num, norm: str = "layernorm") -> Num:
    """Parameters of one normalisation layer.

    Formula: LayerNorm 2h (weight + bias); RMSNorm h (weight only); "weight" h (a LayerNorm without bias: Cohere's
    CohereLayerNorm); "none" 0 (a norm without parameters: OLMo's LayerNorm)
    Source: Ba et al. 2016 (LayerNorm, arXiv 1607.06450); Zhang & Sennrich 2019 (RMSNorm, arXiv 1910.07467);
    Groeneveld et al. 2024 (OLMo, arXiv 2402.00838, §2.1: "non-parametric layer norm"); Transformers 5.24
    modeling_cohere.py CohereLayerNorm (a weight, "bias=False").

    Returns:
        parameters [count]

    >>> norm_parameters(4096), norm_parameters(4096, "rmsnorm"), norm_parameters(4096, "weight"), norm_parameters(4096, "none")
    (8192, 4096, 4096, 0)
    """
    return 2 * h if norm == "layernorm" else 0 if norm == "none" else h


def ffn_matrices(ffn_type: str) -> int:
    """Weight matrices of h x F in the MLP: 3 for gated (SwiGLU), else 2.

    Formula: n_m = 3 (SwiGLU: gate, up, down) or 2 (up, down)
    Source: Shazeer 2020 (GLU variants, arXiv 2002.05202) for the gated form; Vaswani et al. 2017 otherwise.

    Returns:
        matrices [count]

    >>> ffn_matrices("swiglu"), ffn_matrices("gelu")
    (3, 2)
    """
    return 3 if ffn_type in GATED_FFN else 2


def mlp_parameters(h: Num, ffn: Num, ffn_type: str = "gelu", bias: bool = True) -> Num:
    """Parameters of the dense MLP of one layer (the part an MoE layer replaces).

    Formula: n_m h F + (biases: (n_m - 1) F + h)
    Source: Vaswani et al. 2017 (position-wise FFN); Shazeer 2020 (arXiv 2002.05202) for the gated form.

    Returns:
        parameters [count]

    >>> mlp_parameters(4096, 14336, "swiglu", bias=False)   # Mistral 7B
    176160768
    """
    return ffn_matrices(ffn_type) * h * ffn + (((ffn_matrices(ffn_type) - 1) * ffn + h) if bias else 0)


def layer_parameters(h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, ffn_type: str = "gelu",
                     norm: str = "layernorm", bias: bool = True, qkv_bias: bool | None = None, *,
                     layer_norms: int = 2, qk_norm: bool = False, sinks: bool = False,
                     attention: Num | None = None, qk_norm_full: bool = False, mlp_bias: bool | None = None) -> Num:
    """Parameters of one transformer layer (attention + MLP + its norms).

    Formula: h(a+2kv)d + a d h + n_m h F + biases + n_norm norm (+ 2d with QK-norm; (a+kv)d spanning the whole
    projections) (+ a attention sinks); n_m = 3 gated, 2 otherwise
    Source: Narayanan et al. 2021 (arXiv 2104.04473) Eq. 2 without the embedding term: 12h^2 + 13h for GPT
    (kv = a, d = h/a, F = 4h, biases, LayerNorm); Megatron-LM theoretical_memory_usage.py for GQA and SwiGLU;
    Hugging Face Gemma2DecoderLayer (n_norm = 4: input, post-attention, pre- and post-feedforward RMSNorms) and
    Qwen3Attention (q_norm, k_norm: RMSNorm over head_dim, shared by the heads); GptOssAttention (``sinks``: one
    learned logit per head, Xiao et al. 2023, arXiv 2309.17453).

    Args:
        layer_norms: n_norm, norms per layer (2 pre-LN; 4 Gemma 2) [count]
        qk_norm: an RMSNorm of each query and key head (Qwen3) [bool]
        qk_norm_full: the QK-norm spans the whole query and key projections (OLMo 2 Olmo2Attention q_norm over
            a d, k_norm over kv d) [bool]
        mlp_bias: biases on the MLP's linear layers (None: ``bias``; GPT-J: there only) [bool]
        sinks: a learned attention-sink logit per head (gpt-oss) [bool]
        attention: the attention's parameters when it is not multi-head/grouped-query (multi-head latent
            attention: :func:`mla_attention_parameters`); None: h(a+2kv)d + a d h and the Q/K/V biases [count]

    Returns:
        parameters [count]

    >>> layer_parameters(1600, 25, 25, 64, 6400)   # GPT-2 XL: 12h^2 + 13h
    30740800
    >>> layer_parameters(4096, 32, 32, 128, 11008, "swiglu", "rmsnorm", bias=False)   # Llama-2-7B
    202383360
    >>> layer_parameters(3584, 16, 8, 256, 14336, "geglu", "rmsnorm", bias=False, layer_norms=4)   # Gemma 2 9B
    198195200
    """
    qkv_bias = bias if qkv_bias is None else qkv_bias
    attn = h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h if attention is None else attention
    biases: Num = 0
    if qkv_bias and attention is None:
        biases = biases + (heads + 2 * kv_heads) * head_dim
    if bias:
        biases = biases + h  # out-proj; the MLP's biases are in mlp_parameters
    qk = ((heads + kv_heads) * head_dim if qk_norm_full else 2 * head_dim) if qk_norm else 0
    sink = heads if sinks else 0
    mlp = mlp_parameters(h, ffn, ffn_type, bias if mlp_bias is None else mlp_bias)
    return attn + mlp + biases + layer_norms * norm_parameters(h, norm) + qk + sink


def layer_parameters_replicated(h: Num, ffn_type: str = "gelu", norm: str = "layernorm", bias: bool = True, *,
                                layer_norms: int = 2, qk_norm: bool = False, head_dim: Num = 0,
                                attention_replicated: Num = 0, mlp_bias: bool | None = None) -> Num:
    """Parameters of one layer that tensor parallelism does not split.

    Formula: n_norm norm + (2h if biases: the row-parallel out-proj and fc2 biases; h each where only one has one,
    ``mlp_bias``) (+ 2d with QK-norm)
    Source: Megatron-LM (Shoeybi et al. 2019, arXiv 1909.08053 §3): norms and row-parallel biases are replicated;
    a QK-norm's weights act per head, shared by all heads (Megatron-Core qk_layernorm); multi-head latent
    attention's down projections and latent norms (``attention_replicated``:
    :func:`mla_attention_parameters_replicated`).

    Args:
        mlp_bias: a bias on fc2 (None: ``bias``; GPT-J: there, not on the out-proj) [bool]
    Returns:
        parameters [count]

    >>> layer_parameters_replicated(1600)   # GPT-2 XL: 2 LayerNorms + 2 biases
    9600
    """
    fc2_bias = bias if mlp_bias is None else mlp_bias
    return (layer_norms * norm_parameters(h, norm) + (h if bias else 0) + (h if fc2_bias else 0)
            + (2 * head_dim if qk_norm else 0)
            + attention_replicated)


def cross_attention_parameters(h: Num, heads: Num, kv_heads: Num, head_dim: Num, norm: str = "rmsnorm",
                               bias: bool = False) -> Num:
    """Parameters of a decoder layer's cross-attention over the encoder's output, with its norm.

    Formula: h(a+2kv)d + a d h + norm (+ (a+2kv)d + h with biases)
    Source: Vaswani et al. 2017 §3.2.3 (encoder-decoder attention: queries from the decoder, keys and values from
    the encoder output); Hugging Face T5LayerCrossAttention (EncDecAttention q, k, v, o without bias, and a
    T5LayerNorm).

    Returns:
        parameters [count]

    >>> cross_attention_parameters(768, 12, 12, 64)   # t5-base: 4 h^2 + h
    2360064
    """
    p = h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h + norm_parameters(h, norm)
    return p + ((heads + 2 * kv_heads) * head_dim + h if bias else 0)


def relative_position_parameters(buckets: Num, heads: Num) -> Num:
    """Parameters of one stack's relative position bias: a learned scalar per distance bucket and head.

    Formula: n_buckets a (one table per stack, in its first layer, shared by all its layers)
    Source: Raffel et al. 2020 (T5, arXiv 1910.10683) §2.1: "each 'embedding' is simply a scalar added to the
    corresponding logit ... we share the position embedding parameters across all layers", 32 buckets; Hugging Face
    T5Attention.relative_attention_bias = nn.Embedding(relative_attention_num_buckets, n_heads).

    Args:
        buckets: n_buckets, relative distance buckets (T5: 32) [count]
    Returns:
        parameters [count]

    >>> relative_position_parameters(32, 12)   # t5-base, per stack
    384
    """
    return buckets * heads


def embedding_parameters(h: Num, vocab: Num, position_embeddings: Num = 0, token_types: Num = 0,
                         embedding_norm: bool = False, norm: str = "layernorm", embedding_dim: Num | None = None
                         ) -> Num:
    """Input-side parameters: token table, learned positions, segments, embedding norm, embedding projection.

    Formula: V h + P_pos h + n_types h (+ norm); a word embedding of its own width e (``embedding_dim``): V e + e h
    (the table and project_in, an e x h linear without bias) in place of V h
    Source: Radford et al. 2019 (GPT-2) and Devlin et al. 2019 (BERT) model definitions; Transformers 5.24
    modeling_opt.py OPTDecoder (embed_tokens V x word_embed_proj_dim, project_in Linear(word_embed_proj_dim, h,
    bias=False) where the two differ: OPT-350m).

    Args:
        position_embeddings: P_pos, learned position embeddings (0 for rotary) [count]
        token_types: n_types, segment embeddings (BERT: 2) [count]
        embedding_norm: a norm after the embedding (BERT) [bool]
        embedding_dim: e, the word embedding's width where it differs from h (None: h) [count]
    Returns:
        parameters [count]

    >>> embedding_parameters(1600, 50257, position_embeddings=1024)   # GPT-2 XL
    82049600
    >>> embedding_parameters(1024, 50272, position_embeddings=2050, embedding_dim=512)   # OPT-350m
    28362752
    """
    words = vocab * h if embedding_dim is None else vocab * embedding_dim + embedding_dim * h
    return words + position_embeddings * h + token_types * h + (norm_parameters(h, norm) if embedding_norm else 0)


def head_parameters(h: Num, vocab: Num, tied: bool = True, final_norm: bool = True, norm: str = "layernorm",
                    pooler: bool = False, mlm_head: bool = False, nsp_head: bool = False, head_bias: bool = False,
                    embedding_dim: Num | None = None) -> Num:
    """Output-side parameters: final norm, untied LM head, BERT pooler/MLM/NSP heads, the head's projection.

    Formula: norm + (V h if untied) (+ V: the head's bias) + (h^2 + h if pooler) + (h^2 + h + norm + V if MLM)
    + (2h + 2 if NSP); a word embedding of its own width e (``embedding_dim``): h e (project_out, an h x e linear
    without bias) and an untied head V e in place of V h
    Source: Radford et al. 2019 (GPT-2), Touvron et al. 2023 (Llama 2, untied head), Devlin et al. 2019 (BERT heads);
    Transformers 5.24 PhiForCausalLM (lm_head = nn.Linear(h, V, bias=True)); modeling_opt.py (project_out
    Linear(h, word_embed_proj_dim, bias=False), lm_head Linear(word_embed_proj_dim, V)).

    Args:
        tied: the LM head shares the token embedding [bool]
        final_norm: a norm after the last layer [bool]
        pooler: BERT pooler [bool]
        mlm_head: BERT masked-LM head (transform + norm + output bias) [bool]
        nsp_head: BERT next-sentence head [bool]
        head_bias: the LM head's bias (Phi) [bool]
        embedding_dim: e, the word embedding's width where it differs from h (None: h) [count]
    Returns:
        parameters [count]

    >>> head_parameters(4096, 32000, tied=False, norm="rmsnorm")   # Llama-2-7B: final RMSNorm + LM head
    131076096
    >>> head_parameters(1024, 50272, final_norm=False, embedding_dim=512)   # OPT-350m: project_out, tied head
    524288
    """
    p = norm_parameters(h, norm) if final_norm else 0
    if embedding_dim is not None:
        p = p + h * embedding_dim
    if not tied:
        p = p + vocab * (h if embedding_dim is None else embedding_dim)
    if head_bias:
        p = p + vocab
    if pooler:
        p = p + h * h + h
    if mlm_head:
        p = p + h * h + h + norm_parameters(h, norm) + vocab
    if nsp_head:
        p = p + 2 * h + 2
    return p


def mtp_parameters(layer: Num, h: Num, depths: Num = 1, norm: str = "rmsnorm") -> Num:
    """Parameters of the multi-token prediction (MTP) modules besides the shared embedding and output head.

    Formula: D (P_layer + 2 h^2 + 3 norm(h))   (enorm, hnorm, the 2h x h projection eh_proj, one transformer layer,
    the final norm before the shared head)
    Source: DeepSeek-V3 (arXiv 2412.19437) §2.2 Eq. 21-23; Megatron-Core MultiTokenPredictionLayer (enorm, hnorm,
    eh_proj without bias, mtp_model_layer, final_layernorm); DeepSeek-V3's README_WEIGHTS.md (model.layers.61:
    "11.5B unique parameters, excluding the shared 0.9B Embedding and 0.9B output Head").

    Args:
        layer: P_layer, parameters of the module's transformer layer (the model's last layer's kind) [count]
        depths: D, MTP depths (Megatron-Core --mtp-num-layers) [count]
    Returns:
        parameters [count]

    >>> mtp_parameters(11507286016, 7168)   # DeepSeek-V3: its MoE layer, one depth
    11610067968
    """
    return depths * (layer + 2 * h * h + 3 * norm_parameters(h, norm))


def parameter_count(layers: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, vocab: Num, *,
                    ffn_type: str = "gelu", norm: str = "layernorm", bias: bool = True, qkv_bias: bool | None = None,
                    position_embeddings: Num = 0, token_types: Num = 0, embedding_norm: bool = False,
                    tied: bool = True, final_norm: bool = True, pooler: bool = False, mlm_head: bool = False,
                    nsp_head: bool = False, layer_norms: int = 2, qk_norm: bool = False,
                    attention: Num | None = None, qk_norm_full: bool = False, head_bias: bool = False,
                    mlp_bias: bool | None = None) -> Num:
    """Total trainable parameters of the model.

    Formula: P = embeddings + L * layer + head. GPT: 12Lh^2 + 13Lh + (V + s)h + 2h
    Source: Narayanan et al. 2021 (arXiv 2104.04473) Eq. 2, plus the final LayerNorm.

    Args:
        position_embeddings: learned position embeddings (0 for rotary) [count]
        token_types: segment embeddings (BERT: 2) [count]
        embedding_norm: a norm after the embedding (BERT) [bool]
        tied: the LM head shares the token embedding [bool]
        final_norm: a norm after the last layer [bool]
        pooler: BERT pooler [bool]
        mlm_head: BERT masked-LM head [bool]
        nsp_head: BERT next-sentence head [bool]
        layer_norms: norms per layer [count]
        qk_norm: per-head query and key norms [bool]
        attention: a layer's attention parameters when not multi-head/grouped-query (MLA) [count]
        qk_norm_full: the QK-norm spans the whole query and key projections (OLMo 2) [bool]
        head_bias: the LM head's bias (Phi) [bool]
        mlp_bias: biases on the MLP's linear layers (None: ``bias``) [bool]
    Returns:
        parameters [count]

    >>> parameter_count(48, 1600, 25, 25, 64, 6400, 50257, position_embeddings=1024)  # GPT-2 XL
    1557611200
    >>> import numpy as np
    >>> parameter_count(np.array([32, 40, 80]), np.array([4096, 5120, 8192]), np.array([32, 40, 64]),
    ...     np.array([32, 40, 8]), 128, np.array([11008, 13824, 28672]), 32000, ffn_type="swiglu", norm="rmsnorm",
    ...     bias=False, tied=False) / 1e9   # Llama-2 7B, 13B, 70B
    array([ 6.73841562, 13.01586432, 68.97664819])
    """
    return (embedding_parameters(h, vocab, position_embeddings, token_types, embedding_norm, norm)
            + layers * layer_parameters(h, heads, kv_heads, head_dim, ffn, ffn_type, norm, bias, qkv_bias,
                                        layer_norms=layer_norms, qk_norm=qk_norm, attention=attention,
                                        qk_norm_full=qk_norm_full, mlp_bias=mlp_bias)
            + head_parameters(h, vocab, tied, final_norm, norm, pooler, mlm_head, nsp_head, head_bias))


# ----------------------------------------------------------------------------- FLOPs
