"""What every config.json reader shares: the keys dse refuses, the activation names, field lookup."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dse.errors import InputError

#: A reader's field lookup: ``g(key, default=None, required=False)``.
Get = Callable[..., Any]

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
#: The UNMODELLED keys a model_type's experts are read from (docs/moe.md): not refused for that type.
MOE_KEYS = {"mixtral": ("num_local_experts", "num_experts_per_tok"),
            "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "shared_expert_intermediate_size"),
            "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "gpt_oss": ("num_local_experts", "num_experts_per_tok"),
            "llama4_text": ("num_local_experts", "num_experts_per_tok"),
            "olmoe": ("num_experts", "num_experts_per_tok"),
            "granitemoe": ("num_local_experts", "num_experts_per_tok"),
            "phimoe": ("num_local_experts", "num_experts_per_tok"),
            # and multi-token prediction (dse.specs.hf.moe_decoders)
            "glm4_moe": ("n_routed_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
                         "num_nextn_predict_layers"),
            # and multi-head latent attention, multi-token prediction (dse.specs.hf.deepseek)
            **dict.fromkeys(("deepseek_v2", "deepseek_v3"), (
                "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
                "kv_lora_rank", "q_lora_rank", "num_nextn_predict_layers"))}
#: The UNMODELLED keys an encoder-decoder model_type is read with (docs/encoder-decoder.md): not refused for it.
ENCODER_DECODER_KEYS = {"t5": ("is_encoder_decoder",)}
#: Transformers' activation_function names -> the model spec's activation (how the framework writes it).
#: gelu_fast (Transformers' FastGELUActivation, GPT-NeoX-20B): the tanh GELU as separate element-wise ops, as gelu_new.
_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
                "silu": "silu", "swish": "silu", "gelu_fast": "gelu_new"}


#: The model_types whose readers model a parallel residual (model.parallel_residual).
PARALLEL_READ = ("gpt_neox", "falcon", "stablelm")


def rotary_fraction(cfg: dict, where: str, default: float = 1.0, legacy: str = "partial_rotary_factor") -> float:
    """The rotated share of a head: ``rope_parameters.partial_rotary_factor`` (Transformers 5), else the config's
    top-level ``legacy`` key (GPT-NeoX rotary_pct, Phi partial_rotary_factor), else ``default``; an error outside
    (0, 1]."""
    rope = cfg.get("rope_parameters")
    value = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
    if value is None:
        value = cfg.get(legacy, default)
    if not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise InputError(f"{where}: {legacy} {value!r} is not a share of the head dimension in (0, 1]")
    return float(value)


def yarn_attention_factor(cfg: dict) -> float:
    """YaRN's attention factor of a config (1 without YaRN): ``rope_parameters`` (Transformers 5) or ``rope_scaling``
    of ``rope_type`` (or ``type``) yarn: its ``attention_factor`` if given, else m(s, mscale) / m(s, mscale_all_dim)
    when both are given, else m(s, 1), with m(s, c) = 0.1 c ln s + 1 for s > 1 (else 1) and s its ``factor``.
    Source: Transformers ``_compute_yarn_parameters`` (modeling_rope_utils.py); Megatron-Core
    ``_yarn_get_concentration_factor`` (yarn_rotary_pos_embedding.py) computes the same; Peng et al. 2023 (arXiv
    2309.00071) Eq. 22: sqrt(1/t) = 0.1 ln s + 1.

    >>> round(yarn_attention_factor({"rope_scaling": {"rope_type": "yarn", "factor": 32.0}}), 4)   # gpt-oss
    1.3466
    >>> yarn_attention_factor({"rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0}})
    1.0
    """
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not isinstance(rope, dict) or (rope.get("rope_type") or rope.get("type")) != "yarn":
        return 1.0
    if rope.get("attention_factor") is not None:
        return float(rope["attention_factor"])
    s = float(rope.get("factor") or 1.0)

    def m(c: float) -> float:
        return 0.1 * c * math.log(s) + 1.0 if s > 1 else 1.0

    if rope.get("mscale") is not None and rope.get("mscale_all_dim") is not None:
        return m(float(rope["mscale"])) / m(float(rope["mscale_all_dim"]))
    return m(1.0)


def get(cfg: dict, key: str, where: str, default=None, required: bool = False):
    """``cfg[key]`` unless missing or null; then ``default``, or an error naming the file and key if required."""
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    if required:
        raise InputError(f"{where}: missing field '{key}' for model_type {cfg.get('model_type')!r}")
    return default


def refuse_unmodelled(cfg: dict, where: str) -> None:
    """An :class:`InputError` for the first key of :data:`UNMODELLED` set to something other than off (0, 1, false),
    except the keys the config's model_type reader reads (:data:`MOE_KEYS`)."""
    read = MOE_KEYS.get(cfg.get("model_type"), ()) + ENCODER_DECODER_KEYS.get(cfg.get("model_type"), ())
    for key, what in UNMODELLED.items():
        if key in read:
            continue
        value = cfg.get(key)
        if not (value is None or value is False or (type(value) is int and value in (0, 1))):
            raise InputError(f"{where}: {key}: {value!r} is not modelled: {what} (dse models dense transformers "
                             f"and the experts of {', '.join(MOE_KEYS)})")


def activation(act: str, where: str, key: str) -> str:
    """The model spec's activation for a Transformers activation name; an error naming ``key`` otherwise."""
    if act not in _ACTIVATIONS:
        raise InputError(f"{where}: {key} {act!r} is not modelled; supported: {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[act]


def notes(cfg: dict, mt: str) -> list[str]:
    """Read but not modelled, and small enough to price approximately: each a warning with every estimate.

    ``quantization_config``: quantized checkpoint weights; the plan's precision prices them. ``parallel_attn`` /
    ``use_parallel_residual`` in a model_type whose reader does not read them (:data:`PARALLEL_READ` do): attention
    and MLP side by side, priced as sequential blocks. BERT ``position_embedding_type`` relative_key(_query): Shaw
    et al. 2018 (arXiv 1803.02155) add a (2 max_pos - 1) x d distance table and a score term per layer, priced as
    absolute positions. Llama 4's QK-norm: priced on every layer, applied on the RoPE layers only. GPT-J's fp32
    eager attention: priced as the fp32-softmax eager attention; GPT-Neo's fp32 score GEMM: at the bf16 rate.
    PhiMoE's ``input_jitter_noise``: the MoE input multiplied by uniform noise in training (PhimoeSparseMoeBlock and
    PhimoeTopKRouter), not priced.
    """
    out = []
    q = cfg.get("quantization_config")
    if q:
        method = q.get("quant_method", "?") if isinstance(q, dict) else "?"
        out.append(f"quantization_config ({method}) is not modelled: weights priced at the plan's precision")
    for key in ("parallel_attn", "use_parallel_residual"):
        if cfg.get(key) and mt not in PARALLEL_READ:
            out.append(f"{key}: true is not modelled: attention and MLP priced as sequential blocks "
                         "(same FLOPs and parameters)")
    if mt in ("llama4", "llama4_text"):   # Llama4TextAttention (transformers 5.24 modeling_llama4.py:331, 360)
        text = cfg.get("text_config") if mt == "llama4" and isinstance(cfg.get("text_config"), dict) else cfg
        rope = text.get("no_rope_layers")
        if (rope is None or 0 in rope) and text.get("use_qk_norm", True):
            out.append("use_qk_norm: the QK L2-norm is priced on every layer; Llama 4 applies it on its RoPE layers "
                       "only (its NoPE layers' attention temperature tuning, a few element-wise ops on the queries, "
                       "is not priced)")
    if mt == "phimoe" and cfg.get("input_jitter_noise"):
        out.append(f"input_jitter_noise {cfg['input_jitter_noise']} is not modelled: the MoE input's training-time "
                   "jitter (uniform fills and products over the layer input, in the block and again in the router) "
                   "is not priced")
    if mt == "gpt_neo":
        out.append("GPT-Neo's eager attention multiplies q and k in fp32 (query.to(float32)): the score and context "
                   "GEMMs are priced at the bf16 rate (an fp32 GEMM runs slower)")
    if mt == "gptj":
        out.append("GPT-J's eager attention multiplies in fp32: priced as the fp32-softmax eager attention (SDPA, "
                   "Transformers' default, as traced)")
    pos = cfg.get("position_embedding_type", "absolute")
    if mt == "bert" and pos not in (None, "absolute"):
        out.append(f"position_embedding_type {pos!r} is not modelled: priced as absolute positions (the "
                     "relative-distance table and its score term are not counted)")
    return out


def layer_types(cfg: dict, layers: int, where: str, default=None) -> list[str] | None:
    """The attention of each layer: the config's ``layer_types`` as written, else ``default(i, cfg)`` (true: a
    sliding_attention layer) as the configuration class fills it in, else None (every layer alike).

    A list of the wrong length or with an unknown kind is an error naming ``layer_types``.
    """
    from dse.specs.model import LAYER_TYPES

    types = cfg.get("layer_types")
    if types is None:
        if default is None:
            return None
        return ["sliding_attention" if default(i, cfg) else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers:
        n = len(types) if isinstance(types, list) else "not a list"
        raise InputError(f"{where}: layer_types has {n} entries; it needs one per layer ({layers})")
    bad = [t for t in types if t not in LAYER_TYPES]
    if bad:
        raise InputError(f"{where}: layer_types {bad[0]!r} is not modelled; allowed: {', '.join(LAYER_TYPES)}")
    return list(types)


def text_config(cfg: dict, mt: str, multimodal: str, text_type: str, where: str, g: Get) -> tuple[dict, Get]:
    """The config and field lookup a text-decoder reader reads: a multimodal config's (``mt`` == ``multimodal``:
    Gemma 3, Llama 4) ``text_config`` as a config of ``text_type``, its unmodelled keys refused; else ``cfg``
    and ``g`` as they are. A missing text_config is an error naming it."""
    if mt != multimodal:
        return cfg, g
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise InputError(f"{where}: missing field 'text_config' for model_type {mt!r}")
    text = {**text, "model_type": text_type}
    refuse_unmodelled(text, where)
    return text, lambda k, d=None, req=False: get(text, k, where, d, req)


def llama_shape(g: Get, layers: int, hidden: int, heads: int, ffn: int, vocab: int, max_pos: int) -> dict:
    """The sizes a config with Llama's field names states (num_hidden_layers, hidden_size, num_attention_heads,
    num_key_value_heads -- default: every head --, head_dim -- default hidden_size / heads --, intermediate_size,
    vocab_size, max_position_embeddings), each defaulting to its configuration class's value given here."""
    h, a = g("hidden_size", hidden), g("num_attention_heads", heads)
    return dict(layers=g("num_hidden_layers", layers), hidden=h, heads=a, kv_heads=g("num_key_value_heads", a),
                head_dim=g("head_dim", h // a), ffn_hidden=g("intermediate_size", ffn), vocab=g("vocab_size", vocab),
                max_seq_len=g("max_position_embeddings", max_pos))


def expect(g: Get, key: str, default: str, where: str, mt: str) -> None:
    """An error naming ``key`` unless the config's ``key`` (``default`` when unset) is ``default``: the one
    activation a family's reader models."""
    value = str(g(key, default))
    if value != default:
        raise InputError(f"{where}: {key} {value!r} is not supported for {mt} (expected {default})")


def dropout_fields(attention: float | None = None, branch: float | None = None, embedding: float | None = None, *,
                   branches: int = 2) -> dict:
    """The model's dropout fields from the probabilities a Transformers model applies, by where it applies them.

    ``attention``: on the attention probabilities (``attention_dropout``, GPT-2's ``attn_pdrop``); ``branch``: on
    ``branches`` branch outputs of each layer before their residual add (``resid_pdrop``, ``hidden_dropout``,
    ``residual_dropout``); ``embedding``: on the embedding output (``embd_pdrop``, ``embedding_dropout``). ``None``:
    the model has no dropout there. Each place with a probability > 0 is priced; a config whose probabilities are all
    0 keeps every place the model has (a later ``dropout`` override runs where Transformers would run it). ``dropout``
    is the largest probability: only whether it is > 0 is priced (a mask per element, whatever p).

    >>> dropout_fields(attention=0.1)        # Llama's attention_dropout: the scores only
    {'dropout': 0.1, 'attention_dropout': True, 'branch_dropouts': 0, 'embedding_dropout': False}
    >>> dropout_fields(0.0, 0.1, 0.0)        # StarCoder2's residual_dropout 0.1 alone
    {'dropout': 0.1, 'attention_dropout': False, 'branch_dropouts': 2, 'embedding_dropout': False}
    """
    found = {k: float(p) for k, p in (("attention", attention), ("branch", branch), ("embedding", embedding))
             if p is not None}
    on = {k for k, p in found.items() if p > 0} or set(found)
    return dict(dropout=max(found.values(), default=0.0), attention_dropout="attention" in on,
                branch_dropouts=branches if "branch" in on else 0, embedding_dropout="embedding" in on)
