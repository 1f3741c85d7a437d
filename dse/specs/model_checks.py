"""The consistency checks of a model spec (:class:`dse.specs.model.ModelSpec`): the fields that must go together
-- attention heads and K/V heads, an encoder-decoder's layers, an MoE model's routing and group-limited routing
(DeepSeek-V3, arXiv 2412.19437 §2.1.2), multi-head latent attention (DeepSeek-V2, arXiv 2405.04434 §2.1),
multi-token prediction, per-layer attention types. Each raises a one-line :class:`~dse.errors.InputError` naming the
field and what it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.errors import InputError

if TYPE_CHECKING:
    from dse.specs.model import ModelSpec


def check_model(spec: ModelSpec, where: str) -> None:
    """Raise :class:`InputError` for a model spec whose fields do not go together (each message names the field
    and what it needs); the fields' own types and ranges are checked before, by the schema."""
    kv = spec.kv_heads or spec.heads
    if spec.heads % kv:
        raise InputError(f"{where}: heads ({spec.heads}) must be a multiple of kv_heads ({kv})")
    if spec.head_dim is None and spec.hidden % spec.heads:
        raise InputError(f"{where}: hidden ({spec.hidden}) is not divisible by heads ({spec.heads}); set head_dim")
    if spec.ffn_type in ("swiglu", "geglu") and spec.ffn_hidden is None:
        raise InputError(f"{where}: ffn_hidden is required when ffn_type is {spec.ffn_type}")
    _check_encoder_decoder(spec, where)
    if spec.layer_norms == 1 and not spec.parallel_residual:
        raise InputError(f"{where}: layer_norms 1 (one norm shared by attention and MLP) needs parallel_residual")
    _check_experts(spec, where)
    _check_layer_types(spec, where)
    _check_mla(spec, where)
    if spec.mtp_layers:
        _check_mtp(spec, where)
    if not spec.norm_bias and (spec.norm != "layernorm" or not spec.norm_weight or spec.zero_centered_gamma):
        raise InputError(f"{where}: norm_bias false needs a LayerNorm with a weight (norm layernorm, norm_weight "
                         "true, zero_centered_gamma false)")
    if spec.rotary_upcast and (spec.rotary_fp32 or spec.position != "rotary"):
        raise InputError(f"{where}: rotary_upcast needs position rotary and rotary_fp32 false (both price an fp32 "
                         "rotary)")
    if spec.projection_slices and spec.qkv_projection != "fused":
        raise InputError(f"{where}: projection_slices needs qkv_projection fused (Q, K and V slices of one projection)")
    if spec.zero_centered_gamma and (spec.norm != "layernorm" or not spec.norm_weight):
        raise InputError(f"{where}: zero_centered_gamma needs a LayerNorm with weights (norm layernorm, "
                         f"norm_weight true; Gemma's (1 + w) RMSNorm: norm_fp32_weight)")
    if spec.nope_layers and (spec.position != "rotary" or spec.nope_layers > spec.layers):
        raise InputError(f"{where}: nope_layers {spec.nope_layers} needs position rotary and at most layers "
                         f"({spec.layers}) (position: {spec.position})")
    if spec.qk_norm_full and not spec.qk_norm:
        raise InputError(f"{where}: qk_norm_full needs qk_norm")
    if spec.glu_limit is not None and spec.ffn_type not in ("swiglu", "geglu"):
        raise InputError(f"{where}: glu_limit needs a gated MLP (ffn_type swiglu or geglu; ffn_type: "
                         f"{spec.ffn_type})")
    if spec.rotary_attention_factor != 1 and spec.position != "rotary":
        raise InputError(f"{where}: rotary_attention_factor {spec.rotary_attention_factor:g} needs position "
                         f"rotary (position: {spec.position})")
    table = spec.position_embeddings or spec.max_seq_len
    if spec.seq_len is not None and spec.position == "learned" and spec.seq_len > table:
        raise InputError(f"{where}: seq_len {spec.seq_len} exceeds the learned position table ({table})")


def _check_mtp(spec: ModelSpec, where: str) -> None:
    """Multi-token prediction: a decoder, and (Megatron-Core builds its layer of the last layer's kind) a last
    layer of the kind the estimate prices it as."""
    if spec.architecture != "decoder":
        raise InputError(f"{where}: mtp_layers needs a decoder model (architecture: {spec.architecture})")
    last = spec.layers - 1
    if spec.experts and (last < spec.first_dense_layers or (last + 1) % spec.moe_layer_step
                         or last in spec.dense_layers):
        raise InputError(f"{where}: mtp_layers with a dense last layer in an MoE model is not modelled "
                         "(the MTP layer is priced as an MoE layer)")


def _check_mla(spec: ModelSpec, where: str) -> None:
    """Multi-head latent attention's fields (DeepSeek-V2, arXiv 2405.04434 §2.1): all three head dims, an even
    rotary dim, rotary positions, one K/V head per query head, no attention biases; full attention only (no
    window, chunk, sinks or QK-norm: the MLA kernels price none of them)."""
    dims = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    if spec.kv_lora_rank is None:
        for name in ("q_lora_rank",) + dims:
            if getattr(spec, name):
                raise InputError(f"{where}: {name} is a multi-head latent attention field; set kv_lora_rank "
                                 "or remove it")
        return
    for name in dims:
        if getattr(spec, name) is None:
            raise InputError(f"{where}: {name} is required with kv_lora_rank (multi-head latent attention)")
    if (spec.qk_rope_head_dim or 0) % 2:
        raise InputError(f"{where}: qk_rope_head_dim ({spec.qk_rope_head_dim}) must be even (rotary pairs)")
    d = (spec.qk_nope_head_dim or 0) + (spec.qk_rope_head_dim or 0)
    bad = [("position", spec.position, "rotary"), ("kv_heads", spec.kv_heads, spec.heads),
           ("head_dim", spec.head_dim, d), ("bias", spec.bias, False), ("qkv_bias", spec.qkv_bias, False),
           ("sliding_window", spec.sliding_window, None), ("attention_chunk", spec.attention_chunk, None),
           ("attention_sinks", spec.attention_sinks, False), ("qk_norm", spec.qk_norm, False),
           ("rotary_attention_factor", spec.rotary_attention_factor, 1.0)]
    for name, value, allowed in bad:
        if value is not None and value != allowed:
            raise InputError(f"{where}: {name} {value} is not modelled with multi-head latent attention "
                             f"(kv_lora_rank); allowed: {allowed}")


def _check_encoder_decoder(spec: ModelSpec, where: str) -> None:
    if spec.architecture != "encoder-decoder":
        for name in ("decoder_layers", "target_len"):
            if getattr(spec, name) is not None:
                raise InputError(f"{where}: {name} is an encoder-decoder field; set architecture: encoder-decoder")
        return
    dec = spec.decoder_layers if spec.decoder_layers is not None else spec.layers // 2
    if not 0 < dec < spec.layers:
        raise InputError(f"{where}: decoder_layers ({dec}) must leave encoder layers and be > 0 (layers "
                         f"{spec.layers} counts both stacks)")
    if spec.experts:
        raise InputError(f"{where}: an encoder-decoder model with experts is not modelled")
    if (spec.position == "relative") != (spec.relative_buckets > 0):
        raise InputError(f"{where}: position relative and relative_buckets > 0 go together")


def _check_experts(spec: ModelSpec, where: str) -> None:
    moe_fields = ("experts_per_token", "expert_ffn", "shared_expert_ffn", "expert_groups",
                  "expert_groups_per_token")
    if not spec.experts:
        for name in moe_fields + ("shared_experts",):
            if getattr(spec, name):
                raise InputError(f"{where}: {name} is an MoE field; set experts (routed experts) or remove it")
        return
    if spec.experts_per_token is None:
        raise InputError(f"{where}: experts_per_token (top-k) is required with experts ({spec.experts})")
    if spec.experts_per_token > spec.experts:
        raise InputError(f"{where}: experts_per_token ({spec.experts_per_token}) exceeds experts ({spec.experts})")
    _check_expert_groups(spec, where)
    if spec.shared_expert_gate and not spec.shared_experts:
        raise InputError(f"{where}: shared_expert_gate needs shared_experts > 0")
    if spec.first_dense_layers > spec.layers:
        raise InputError(f"{where}: first_dense_layers ({spec.first_dense_layers}) exceeds layers ({spec.layers})")
    bad = [i for i in spec.dense_layers if i >= spec.layers]
    if bad:
        raise InputError(f"{where}: dense_layers {bad} are not layers (0 to {spec.layers - 1})")


def _check_expert_groups(spec: ModelSpec, where: str) -> None:
    """Group-limited routing (DeepSeek-V3 §2.1.2): E experts in G groups, a token's top-k within M of them."""
    g, m = spec.expert_groups, spec.expert_groups_per_token
    if m is not None and g is None:
        raise InputError(f"{where}: expert_groups_per_token ({m}) needs expert_groups (the groups it limits)")
    if g is None:
        return
    if spec.experts % g:
        raise InputError(f"{where}: expert_groups ({g}) does not divide experts ({spec.experts})")
    m = g if m is None else m
    if m > g:
        raise InputError(f"{where}: expert_groups_per_token ({m}) exceeds expert_groups ({g})")
    if m * (spec.experts // g) < (spec.experts_per_token or 0):
        raise InputError(f"{where}: experts_per_token ({spec.experts_per_token}) exceeds the experts of "
                         f"expert_groups_per_token ({m}) groups of {spec.experts // g}")


def _check_layer_types(spec: ModelSpec, where: str) -> None:
    types = spec.layer_types
    if types and len(types) != spec.layers:
        raise InputError(f"{where}: layer_types has {len(types)} entries; it needs one per layer ({spec.layers})")
    if "sliding_attention" in types and spec.sliding_window is None:
        raise InputError(f"{where}: layer_types has sliding_attention layers; set sliding_window")
    if "chunked_attention" in types and spec.attention_chunk is None:
        raise InputError(f"{where}: layer_types has chunked_attention layers; set attention_chunk")
    if spec.attention_chunk is not None and "chunked_attention" not in types:
        raise InputError(f"{where}: attention_chunk needs chunked_attention layers in layer_types")
