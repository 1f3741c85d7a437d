"""config.json readers of DeepSeek-V2 and DeepSeek-V3 (DeepseekV2Config, DeepseekV3Config, Transformers 5.24).

Multi-head latent attention (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
``v_head_dim``; docs/mla.md) and DeepSeekMoE experts: ``n_routed_experts`` of ``moe_intermediate_size``, top
``num_experts_per_tok``, ``n_shared_experts`` run as one MLP of ``n_shared_experts x moe_intermediate_size``, the
first ``first_k_dense_replace`` layers dense (``intermediate_size``). As Hugging Face's ``DeepseekV3DecoderLayer``
builds them: layer i is MoE when ``i >= first_k_dense_replace``; ``moe_layer_freq`` is not read by Transformers
(DeepSeek's own modeling code makes layer i MoE when also ``i % moe_layer_freq == 0``), so a value other than 1 is
refused rather than read two ways. The router (``gate``): a linear h -> E (fp32 weight in Transformers); V3's
sigmoid scores with ``e_score_correction_bias`` (a buffer, no parameter: Transformers counts E h), V2's softmax.
Group-limited routing (V3 ``noaux_tc``, V2 ``group_limited_greedy``): ``n_group`` and ``topk_group`` ->
``expert_groups``, ``expert_groups_per_token``. ``num_nextn_predict_layers`` (V3's multi-token prediction, arXiv
2412.19437 §2.2): ``mtp_layers``, read and reported, not priced (Transformers builds no MTP module either).
"""

from __future__ import annotations

from dse.errors import InputError
from dse.specs.hf.common import Get, dropout_fields

#: The model_types this module reads.
TYPES = ("deepseek_v2", "deepseek_v3")   # the UNMODELLED keys they read: dse.specs.hf.common.MOE_KEYS


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """The fields of a DeepSeek-V2 / V3 config: a decoder with MLA and DeepSeekMoE layers."""
    v3 = mt == "deepseek_v3"
    act = str(g("hidden_act", "silu"))
    if act not in ("silu", "swish"):
        raise InputError(f"{where}: hidden_act {act!r} is not supported for {mt} (expected silu)")
    for key in ("attention_bias", "mlp_bias"):
        if g(key, False):
            raise InputError(f"{where}: {key} true is not modelled for {mt} (MLA and the MLP without biases)")
    freq = g("moe_layer_freq", 1)
    if freq != 1:
        raise InputError(f"{where}: moe_layer_freq {freq!r} is not modelled (Transformers' DeepseekV3DecoderLayer "
                         "ignores it, DeepSeek's code does not); allowed: 1")
    heads = g("num_attention_heads", 128 if v3 else 32)
    out = dict(
        name=name, layers=g("num_hidden_layers", 61 if v3 else 30), hidden=g("hidden_size", 7168 if v3 else 4096),
        heads=heads, ffn_hidden=g("intermediate_size", 18432 if v3 else 11008), ffn_type="swiglu", norm="rmsnorm",
        bias=False, qkv_bias=False, vocab=g("vocab_size", 129280 if v3 else 102400),
        max_seq_len=g("max_position_embeddings", 4096 if v3 else 2048), position="rotary",
        tied_embeddings=bool(g("tie_word_embeddings", False)), qkv_projection="separate", softmax_dtype="fp32",
        **dropout_fields(g("attention_dropout", 0.0)), source=f"Hugging Face config {where}",
        q_lora_rank=(cfg["q_lora_rank"] or 0) if "q_lora_rank" in cfg else 1536,   # null: no query latent (V2-Lite)
        kv_lora_rank=g("kv_lora_rank", 512),
        qk_nope_head_dim=g("qk_nope_head_dim", 128), qk_rope_head_dim=g("qk_rope_head_dim", 64),
        v_head_dim=g("v_head_dim", 128), mtp_layers=g("num_nextn_predict_layers", 0),
    )
    experts = g("n_routed_experts", 256 if v3 else 64)
    if not experts:
        return out
    out.update(experts=experts, experts_per_token=g("num_experts_per_tok", 8 if v3 else 6),
               expert_ffn=g("moe_intermediate_size", 2048 if v3 else 1407),
               shared_experts=g("n_shared_experts", 1 if v3 else 2),
               first_dense_layers=min(g("first_k_dense_replace", 3 if v3 else 0), out["layers"]))
    if out["shared_experts"]:
        out["shared_expert_ffn"] = out["expert_ffn"]
    method = g("topk_method", "noaux_tc" if v3 else "greedy")
    groups = g("n_group", 8 if v3 else None)
    if (v3 or method == "group_limited_greedy") and groups and groups > 1:
        out.update(expert_groups=groups, expert_groups_per_token=g("topk_group", 4 if v3 else groups))
    return out
