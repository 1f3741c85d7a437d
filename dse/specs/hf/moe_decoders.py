"""config.json readers of the MoE decoders Transformers 5.24 writes on Llama's, Mixtral's and DeepSeek-V3's patterns:
OLMoE (OlmoeConfig), Granite-MoE (GraniteMoeConfig), PhiMoE (PhimoeConfig) and GLM-4.5 (Glm4MoeConfig).

What each changes, from its modeling file (transformers/models/<type>/modular_<type>.py):

- olmoe (Muennighoff et al. 2024, arXiv 2409.02060): Llama's layer with a QK-norm over the whole query and key
  projections (OlmoeAttention: ``q_norm`` an RMSNorm of h, ``k_norm`` of kv (h / a) weights, before the heads are
  split: OLMo 2's layout, ``qk_norm_full``, but with Llama's RMSNorm -- weight after the cast -- and pre-norms) and
  every MLP an OlmoeSparseMoeBlock: a router h -> ``num_experts`` (64) without bias, softmax, top
  ``num_experts_per_tok`` (8; ``norm_topk_prob`` renormalises them: no parameters), MixtralExperts of
  ``intermediate_size`` (1024), no shared expert. ``clip_qkv`` (an in-place clamp) and ``attention_bias`` (on q, k,
  v and o) are refused; so is a ``head_dim`` other than h / a (q_norm is h wide whatever head_dim is).
- granitemoe (GraniteMoeConfig; Shen et al. 2024, arXiv 2408.13359): Granite's multipliers (embedding, residual,
  logits, attention scale: dse.specs.hf.decoders) around Mixtral's block: GraniteMoeTopKRouter (h -> E, no bias; top
  ``num_experts_per_tok`` of the logits, softmax over those) and MixtralExperts of ``intermediate_size`` in every
  layer.
- phimoe (Phi-3.5-MoE; Liu et al. 2024, GRIN, arXiv 2409.12136): Mixtral's layer (``num_local_experts`` (16)
  MixtralExperts of ``intermediate_size`` (6400), a router h -> E without bias, every layer) with LayerNorms (weight
  and bias: PhimoeDecoderLayer, PhimoeModel.norm), biases on q, k, v and o with ``attention_bias`` (LlamaAttention;
  none on the experts or the router: ``mlp_bias`` false), an lm_head bias with ``lm_head_bias`` (``head_bias``) and
  a ``sliding_window`` mask on every layer when set (MixtralModel). Its router is sparsemixer, which picks exactly
  two experts whatever ``num_experts_per_tok`` says: another top-k is refused; its extra element-wise work is priced
  as the one ``routing`` row. ``input_jitter_noise`` > 0 (a training-time multiplicative jitter of the MoE input,
  applied by the block and again by the router: uniform fills and products over the layer input) is a warning.
- glm4_moe (GLM-4.5, Zeng et al. 2025, arXiv 2508.06471): DeepSeek-V3's MoE layers (DeepseekV3MoE: a router h -> E
  with an fp32 weight and a sigmoid score, its ``e_score_correction_bias`` a buffer; ``n_routed_experts`` of
  ``moe_intermediate_size``, top ``num_experts_per_tok``, ``n_shared_experts`` as one MLP of n_shared x
  moe_intermediate_size, the first ``first_k_dense_replace`` layers a dense MLP of ``intermediate_size``;
  ``n_group`` / ``topk_group`` group-limited routing) under a grouped-query attention with biases on q, k and v
  only (``attention_bias``; o_proj has none), an optional per-head RMSNorm of q and k (``use_qk_norm``) and rotary
  positions on ``partial_rotary_factor`` of each head (0.5, GPT-NeoX's slice-and-concatenate). The MTP depths
  (``num_nextn_predict_layers``, default 1): ``mtp_layers`` as DeepSeek-V3's (dse.specs.hf.deepseek; Transformers
  builds none and ignores their weights on load).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields, expect, rotary_fraction

#: The model_types this module reads (the UNMODELLED keys they read: dse.specs.hf.common.MOE_KEYS).
TYPES = ("olmoe", "granitemoe", "phimoe", "glm4_moe")
#: The configuration classes' defaults (Transformers 5.24): max_position_embeddings, intermediate_size, layers,
#: hidden_size, attention heads, vocab_size.
_MAXPOS = {"olmoe": 4096, "granitemoe": 2048, "phimoe": 131072, "glm4_moe": 131072}
_FFN = {"olmoe": 2048, "granitemoe": 11008, "phimoe": 6400, "glm4_moe": 10944}
_LAYERS = {"olmoe": 16, "granitemoe": 32, "phimoe": 32, "glm4_moe": 46}
_HIDDEN = {"olmoe": 2048, "granitemoe": 4096, "phimoe": 4096, "glm4_moe": 4096}
_HEADS = {"olmoe": 16, "granitemoe": 32, "phimoe": 32, "glm4_moe": 96}
_VOCAB = {"olmoe": 50304, "granitemoe": 32000, "phimoe": 32064, "glm4_moe": 151552}
#: default num_key_value_heads (None: the attention heads)
_KV = {"phimoe": 8, "glm4_moe": 8}


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """The fields of an OLMoE, Granite-MoE, PhiMoE or GLM-4.5 (glm4_moe) decoder and its experts."""
    expect(g, "hidden_act", "silu", where, mt)
    h, heads = g("hidden_size", _HIDDEN[mt]), g("num_attention_heads", _HEADS[mt])
    out = dict(name=name, layers=g("num_hidden_layers", _LAYERS[mt]), hidden=h, heads=heads,
               kv_heads=g("num_key_value_heads", _KV.get(mt, heads)), head_dim=g("head_dim", h // heads),
               ffn_hidden=g("intermediate_size", _FFN[mt]), ffn_type="swiglu", norm="rmsnorm", bias=False,
               qkv_bias=False, vocab=g("vocab_size", _VOCAB[mt]),
               max_seq_len=g("max_position_embeddings", _MAXPOS[mt]), position="rotary",
               tied_embeddings=bool(g("tie_word_embeddings", False)), qkv_projection="separate",
               softmax_dtype="fp32", **dropout_fields(g("attention_dropout", 0.0)),
               source=f"Hugging Face config {where}")
    if mt == "glm4_moe":
        _glm4_moe(out, cfg, where, g)
        return out
    if mt == "phimoe":
        _phimoe(out, cfg, where, g)
        return out
    if g("attention_bias", False):     # LlamaAttention: on q, k, v and o alike, not a Q/K/V-only bias
        raise InputError(f"{where}: attention_bias true is not modelled for {mt} (a bias on q, k, v and o)")
    if mt == "olmoe":
        if g("clip_qkv") is not None:
            raise InputError(f"{where}: clip_qkv {g('clip_qkv')!r} is not modelled for olmoe (an in-place clamp of "
                             "q, k and v); expected null")
        if out["head_dim"] != h // heads:
            raise InputError(f"{where}: head_dim {out['head_dim']} is not modelled for olmoe (its q_norm is "
                             f"hidden_size wide: head_dim must be hidden_size / num_attention_heads = {h // heads})")
        out.update(qk_norm=True, qk_norm_full=True, experts=g("num_experts", 64),
                   experts_per_token=g("num_experts_per_tok", 8))
    else:
        out.update(embedding_scale=True, residual_scale=True, logit_scale=True, experts=g("num_local_experts", 8),
                   experts_per_token=g("num_experts_per_tok", 2))
    out["expert_ffn"] = out["ffn_hidden"]      # MixtralExperts: intermediate_size, every layer
    return out


def _glm4_moe(out: dict, cfg: dict, where: str, g: Get) -> None:
    """GLM-4.5's attention and DeepSeek-V3's MoE layout (module docstring)."""
    out.update(qkv_bias=bool(g("attention_bias", False)), qk_norm=bool(g("use_qk_norm", False)),
               rotary_fraction=rotary_fraction(cfg, where, 0.5), mtp_layers=g("num_nextn_predict_layers", 1))
    experts = g("n_routed_experts", 128)
    if not experts:
        return
    out.update(experts=experts, experts_per_token=g("num_experts_per_tok", 8),
               expert_ffn=g("moe_intermediate_size", 1408), shared_experts=g("n_shared_experts", 1),
               first_dense_layers=min(g("first_k_dense_replace", 1), out["layers"]))
    if out["shared_experts"]:
        out["shared_expert_ffn"] = out["expert_ffn"]
    groups = g("n_group", 1)
    if groups and groups > 1:
        out.update(expert_groups=groups, expert_groups_per_token=g("topk_group", 1))


def _phimoe(out: dict, cfg: dict, where: str, g: Get) -> None:
    """Phi-3.5-MoE: Mixtral's layer with LayerNorms, attention-only biases, an lm_head bias (module docstring)."""
    k = g("num_experts_per_tok", 2)
    if k != 2:
        raise InputError(f"{where}: num_experts_per_tok {k!r} is not modelled for phimoe (its sparsemixer router "
                         "always picks 2 experts); allowed: 2")
    bias = bool(g("attention_bias", False))
    out.update(norm="layernorm", bias=bias, qkv_bias=bias, mlp_bias=False, head_bias=bool(g("lm_head_bias", False)),
               experts=g("num_local_experts", 16), experts_per_token=2, expert_ffn=out["ffn_hidden"])
    if g("sliding_window"):
        out["sliding_window"] = g("sliding_window")
