"""The types of the config.json keys the readers of :mod:`dse.specs.hf` read, checked before any reader runs.

A reader computes with a config's values before the model spec's own checks see them (``hidden_size //
num_attention_heads``, ``float(attention_dropout)``, ``min(first_k_dense_replace, layers)``), so a value of the wrong
type stopped with a traceback, or ran silently (an infinite ``first_k_dense_replace`` became every layer, the string
``"x"`` as ``alibi`` was true). Each key here has its kind (:data:`KINDS`); a value of another kind is a one-line
:class:`~dse.errors.InputError` naming the file and the key. ``null`` is a missing key (the reader's default) and a
key not listed is not read. The keys nest the same way under ``text_config`` (Llama 4, Gemma 3) and the numbers of
``rope_scaling`` / ``rope_parameters``.
"""

from __future__ import annotations

import math
from typing import Any

from dse.errors import InputError

#: sizes and counts a reader divides by or builds from: whole numbers >= 1
SIZES = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_kv_heads", "intermediate_size",
         "intermediate_size_mlp", "vocab_size", "max_position_embeddings", "head_dim", "n_embd", "n_embed", "n_head",
         "n_inner", "n_positions", "num_heads", "d_model", "d_ff", "d_kv", "ffn_dim", "ffn_hidden_size",
         "word_embed_proj_dim", "seq_length", "moe_intermediate_size", "shared_expert_intermediate_size",
         "num_experts_per_tok", "attention_chunk_size", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
         "v_head_dim", "decoder_sparse_step", "interleave_moe_layer_step", "no_rope_layer_interval",
         "num_ln_in_parallel_attn", "pretraining_tp", "moe_layer_freq", "window_size")
#: counts that may be 0: whole numbers >= 0
COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "n_shared_experts", "first_k_dense_replace",
          "max_window_layers", "n_group", "topk_group", "num_nextn_predict_layers", "type_vocab_size", "rotary_dim",
          "relative_attention_num_buckets", "sliding_window", "q_lora_rank", "sliding_window_pattern")
#: dropout probabilities: numbers in [0, 1)
PROBABILITIES = ("attention_dropout", "hidden_dropout", "hidden_dropout_prob", "resid_pdrop", "residual_dropout",
                 "dropout", "dropout_rate", "attn_pdrop", "embd_pdrop", "embedding_dropout",
                 "attention_probs_dropout_prob", "resid_dropout", "embed_dropout")
#: other numbers: finite
NUMBERS = ("partial_rotary_factor", "attn_logit_softcapping", "final_logit_softcapping", "swiglu_limit", "clip_qkv",
           "mscale", "mscale_all_dim", "factor", "attention_factor", "input_jitter_noise")
#: switches: true or false (0 and 1 as some configs write them)
SWITCHES = ("alibi", "apply_residual_connection_post_layernorm", "attention_bias", "bias", "do_layer_norm_before",
            "enable_bias", "is_decoder", "is_encoder_decoder", "mlp_bias", "multi_query", "new_decoder_architecture",
            "parallel_attn", "qk_layernorm", "qkv_bias", "scale_attn_weights", "slow_but_exact",
            "tie_word_embeddings", "use_bias", "use_parallel_residual", "use_qk_norm", "use_qkv_bias",
            "use_sliding_window", "_remove_final_layer_norm", "lm_head_bias")
#: names
NAMES = ("model_type", "hidden_act", "activation_function", "activation", "feed_forward_proj",
         "position_embedding_type", "rope_type", "topk_method", "type")
#: lists of layer indices or per-layer flags (whole numbers), and of names
INDEX_LISTS = ("mlp_only_layers", "moe_layers", "no_rope_layers")
NAME_LISTS = ("architectures", "layer_types")
#: mappings, read key by key (their numbers as above)
MAPPINGS = ("rope_scaling", "rope_parameters", "quantization_config", "text_config")


def _whole(v: Any, least: int) -> bool:
    return (type(v) is int or (type(v) is float and v.is_integer())) and v >= least


def _switch(v: Any) -> bool:
    return type(v) is bool or (type(v) is int and v in (0, 1))


def _number(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


#: layer counts: the readers build per-layer lists from them (a count of 10**12 hung in one)
LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers")


def _layers(v: Any) -> bool:
    from dse.specs.model import MAX_LAYERS

    return _whole(v, 1) and v <= MAX_LAYERS


#: key -> (test, what it expects)
KINDS: dict[str, tuple[Any, str]] = {
    **dict.fromkeys(LAYER_COUNTS, (_layers, "a whole number of layers from 1 to 1,000,000")),
    **dict.fromkeys(SIZES, (lambda v: _whole(v, 1), "a whole number >= 1")),
    **dict.fromkeys(COUNTS, (lambda v: _whole(v, 0), "a whole number >= 0")),
    **dict.fromkeys(PROBABILITIES, (lambda v: _number(v) and 0 <= v < 1, "a probability from 0 to below 1")),
    **dict.fromkeys(NUMBERS, (_number, "a finite number")),
    **dict.fromkeys(SWITCHES, (_switch, "true or false")),
    **dict.fromkeys(NAMES, (lambda v: type(v) is str, "a name (a string)")),
    **dict.fromkeys(INDEX_LISTS, (lambda v: type(v) is list and all(_whole(x, 0) for x in v),
                                  "a list of whole numbers >= 0")),
    **dict.fromkeys(NAME_LISTS, (lambda v: type(v) is list and all(type(x) is str for x in v), "a list of names")),
    **dict.fromkeys(MAPPINGS, (lambda v: type(v) is dict, "a mapping")),
}


def check_types(cfg: dict, where: str, prefix: str = "") -> None:
    """Raise :class:`InputError` for the first key of ``cfg`` (and of its mappings) whose value is not of its kind."""
    for key, value in cfg.items():
        if value is None or key not in KINDS:
            continue
        ok, expected = KINDS[key]
        if not ok(value):
            raise InputError(f"{where}: {prefix}{key}: expected {expected}, got {value!r}")
        if key in MAPPINGS:
            check_types(value, where, f"{prefix}{key}.")
