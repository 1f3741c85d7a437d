"""What every config.json reader shares: the keys dse refuses, the activation names, field lookup."""

from __future__ import annotations

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
            "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size")}
#: Transformers' activation_function names -> the model spec's activation (how the framework writes it).
_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
                "silu": "silu", "swish": "silu"}


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
    read = MOE_KEYS.get(cfg.get("model_type"), ())
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
    ``use_parallel_residual``: attention and MLP side by side (GPT-J, Falcon): the same FLOPs and parameters,
    priced as sequential blocks. BERT ``position_embedding_type`` relative_key(_query): Shaw et al. 2018 (arXiv
    1803.02155) add a (2 max_pos - 1) x d distance table and a score term per layer, priced as absolute positions.
    """
    out = []
    q = cfg.get("quantization_config")
    if q:
        method = q.get("quant_method", "?") if isinstance(q, dict) else "?"
        out.append(f"quantization_config ({method}) is not modelled: weights priced at the plan's precision")
    for key in ("parallel_attn", "use_parallel_residual"):
        if cfg.get(key):
            out.append(f"{key}: true is not modelled: attention and MLP priced as sequential blocks "
                         "(same FLOPs and parameters)")
    if mt == "gemma2":   # Gemma2Config defaults: 50 and 30
        for key, default in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0)):
            if cfg.get(key, default):
                out.append(f"{key} is not modelled: the element-wise tanh cap is not priced")
    pos = cfg.get("position_embedding_type", "absolute")
    if mt == "bert" and pos not in (None, "absolute"):
        out.append(f"position_embedding_type {pos!r} is not modelled: priced as absolute positions (the "
                     "relative-distance table and its score term are not counted)")
    return out
