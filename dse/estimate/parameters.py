"""Parameter counts of a scenario: the model (total and active per token), one layer, and a pipeline stage's GPU.

A dense model's layers are alike. An MoE model (:mod:`dse.formulas.transformer.moe`) has MoE layers (router and
experts instead of the MLP) and possibly dense ones; the per-layer numbers are then the mean over the layers, so
that L times a layer is the model's layers exactly (a stage holding more dense or more MoE layers than the mean
is not modelled). The routed experts split over TP like the dense MLP and, with expert parallelism (``plan.ep``),
over the ep ranks too: a GPU holds E/ep experts, each split over the expert tensor-parallel ranks (``plan.etp``,
default tp; Megatron-Core's MoE Parallel Folding), so its expert parameters are the experts' / (etp ep);
``p_expert_gpu`` counts them on a stage's GPU (their gradients are reduced and their ZeRO shards split over the
tp cp dp / (etp ep) ranks that hold the same experts, :mod:`dse.estimate.base`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.estimate import frozen as _frozen
from dse.estimate.memo import ints, remembered
from dse.formulas import transformer as _transformer
from dse.formulas._array import ceil, maximum, where
from dse.specs.plan import differs, expert_tp

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Num, Section
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def parameters(model: ModelSpec, plan: Plan, T: FormulaModule = _transformer) -> Section:
    """Parameters of the model, of one layer (per GPU) and of the first and last pipeline stage's GPU (shared)."""
    t, p, v, ep = plan.tp, plan.pp, plan.virtual_stages, plan.ep
    et = expert_tp(plan)
    ft = (plan.finetune, plan.lora_rank, plan.lora_targets, _frozen.lora_layout(plan))
    if T is _transformer and ints(t, p, v, ep, et) and (plan.lora_rank is None or ints(plan.lora_rank)):
        key = ("parameters", id(model), t, p, v, ep, et, ft, T.layer_parameters, T.layer_parameters_replicated,
               T.embedding_parameters, T.head_parameters, T.norm_parameters, T.ffn_matrices, T.mlp_parameters,
               T.moe_mlp_parameters, T.moe_mlp_parameters_replicated, T.mla_attention_parameters,
               T.mla_attention_parameters_replicated, T.cross_attention_parameters, T.relative_position_parameters)
        out = remembered(key, model, lambda: _parameters(model, t, p, v, T, ft, ep, et))
    else:
        out = _parameters(model, t, p, v, T, ft, ep, et)
    return dualpipe_copies(out, model, t) if plan.schedule == "dualpipe" else out


def dualpipe_copies(prm: Section, model: ModelSpec, t: Num) -> Section:
    """A DualPipe rank's parameters: pipeline stages i and p-1-i (DeepSeek-V3 §3.2.1 Table 2: "2x" parameters).

    Formula: P_gpu = 2 l_stage P_layer_gpu + (P_emb + P_head) / t on every rank (rank 0 holds the first and the last
    stage: the embedding and the head); the experts' share doubles alike. Each stage's weights are then replicated
    on 2 dp x cp ranks (:func:`dse.estimate.context.grad_ranks`), which reduce its gradients and shard its ZeRO states.
    Source: github.com/deepseek-ai/DualPipe examples/example_dualpipe.py (rank r holds modules r and p-1-r; the
    two copies' gradients are summed before the step).

    Fine-tuning (LoRA, QLoRA): the rank holds both stages' frozen weights and both stages' adapters, 2 l_stage
    P_adapters_gpu; only those train, so the doubling of gradients and optimizer states is the adapters' alone.
    """
    both = 2 * prm["l_stage"] * prm["p_layer_gpu"] + (prm["p_emb"] + prm["p_head"]) / t
    out = {**prm, "p_first": both, "p_last": both, "p_gpu": both, "p_expert_gpu": 2 * prm["p_expert_gpu"]}
    if "p_linear_stage" not in prm:     # full training: every parameter of both stages trains
        out["p_train_gpu"] = both
        return out
    # LoRA / QLoRA (dse.estimate.frozen.with_adapters): both stages' frozen weights and adapters; only the adapters
    # train (their weights, gradients and optimizer states double), QLoRA quantizes both stages' linear weights
    adapters = 2 * prm["p_train_gpu"]
    return {**out, "p_first": both + adapters, "p_last": both + adapters, "p_gpu": both + adapters,
            "p_train_gpu": adapters, "p_linear_stage": 2 * prm["p_linear_stage"],
            "p_frozen_expert_gpu": 2 * prm.get("p_frozen_expert_gpu", 0.0)}


def layer_counts(model: ModelSpec, T: FormulaModule = _transformer) -> Section:
    """Parameters of the model's layers: ``dense`` and ``moe`` (one layer of each, total), ``moe_active`` (what a
    token uses of an MoE layer), their replicated parts ``dense_rep``, ``moe_rep``, the routed experts' parameters of
    an MoE layer ``moe_experts`` and ``moe_layers``."""
    if model.architecture == "encoder-decoder":    # an encoder layer as dense, a decoder layer as moe
        from dse.estimate.encoder_decoder import layer_counts as encdec

        return encdec(model, T)
    h = model.hidden
    norms = {"layer_norms": model.layer_norms, "qk_norm": model.qk_norm and model.qk_norm_weight}
    attn: dict[str, Any] = {"sinks": True} if model.attention_sinks else {}
    if model.qk_norm_full:   # OLMo 2: weights across the projections (split with the heads, not replicated)
        attn["qk_norm_full"] = True
    rep: dict[str, Any] = {}
    if model.mlp_bias is not None and model.mlp_bias != model.bias:   # GPT-J: biases on the MLP only
        attn["mlp_bias"] = rep["mlp_bias"] = model.mlp_bias
    if model.mla:   # multi-head latent attention: its projections and latent norms (DeepSeek-V2/V3)
        q, kv, rope = model.q_lora_rank or 0, model.kv_lora_rank, model.qk_rope_head_dim
        attn = {"attention": T.mla_attention_parameters(h, model.heads, q, kv, model.qk_nope_head_dim, rope,
                                                        model.v_head_dim)}
        rep = {"attention_replicated": T.mla_attention_parameters_replicated(h, q, kv, rope)}
    dense = T.layer_parameters(h, model.heads, model.kv_heads, model.head_dim, model.ffn_hidden, model.ffn_type,
                               model.norm_params, model.bias, model.qkv_bias, **norms, **attn)
    dense_rep = T.layer_parameters_replicated(h, model.ffn_type, model.norm_params, model.bias, head_dim=model.head_dim,
                                              **{**norms, "qk_norm": norms["qk_norm"] and not model.qk_norm_full},
                                              **rep)
    out = {"dense": dense, "dense_rep": dense_rep, "moe": dense, "moe_active": dense, "moe_rep": dense_rep,
           "moe_experts": 0, "moe_layers": model.moe_layers}
    if out["moe_layers"]:
        E, k = model.experts, model.experts_per_token
        # the MLP's biases (gpt-oss: the router's and the experts'; PhiMoE: none, its attention's only)
        mlp_b = model.bias if model.mlp_bias is None else model.mlp_bias
        attn = dense - T.mlp_parameters(h, model.ffn_hidden, model.ffn_type, mlp_b)
        moe = dict(shared_experts=model.shared_experts, shared_ffn=model.shared_expert_ffn or 0,
                   shared_gate=model.shared_expert_gate, **({"bias": True} if mlp_b else {}))
        out["moe"] = attn + T.moe_mlp_parameters(h, E, model.expert_ffn, model.ffn_type, **moe)
        out["moe_active"] = attn + T.moe_mlp_parameters(h, E, model.expert_ffn, model.ffn_type, routed=k, **moe)
        out["moe_experts"] = (T.moe_mlp_parameters(h, E, model.expert_ffn, model.ffn_type, **moe)
                              - T.moe_mlp_parameters(h, E, model.expert_ffn, model.ffn_type, routed=0, **moe))
        out["moe_rep"] = (dense_rep - (h if mlp_b else 0)
                          + T.moe_mlp_parameters_replicated(h, E, model.shared_expert_gate,
                                                            **({"bias": True} if mlp_b else {})))
    return out


def _mean(model: ModelSpec, n_moe: int, dense: Num, moe: Num) -> Num:
    """The mean over the layers of a dense and an MoE layer's number (the one, exactly, when all are alike)."""
    L = model.layers
    return dense if n_moe == 0 else (moe if n_moe == L else ((L - n_moe) * dense + n_moe * moe) / L)


def _parameters(model: ModelSpec, t: Num, p: Num, v: Num, T: FormulaModule,
                ft: tuple[str, Any, Any, str] = ("full", None, None, "peft"), ep: Num = 1, et: Num | None = None
                ) -> Section:
    L, h, V = model.layers, model.hidden, model.vocab
    c = layer_counts(model, T)
    n = c["moe_layers"]
    p_layer = _mean(model, n, c["dense"], c["moe"])
    p_layer_rep = _mean(model, n, c["dense_rep"], c["moe_rep"])
    fold = et is not None and differs(t, et)
    split = n > 0 and (fold or not (type(ep) is int and ep == 1))   # the experts split over ep (and etp)
    p_layer_gpu, p_exp = _on_gpu(p_layer, p_layer_rep, _mean(model, n, 0, c["moe_experts"]), t, ep,
                                 et if fold else None, split)
    e = model.embedding_dim      # OPT-350m's narrower word embedding and head (None: h)
    p_emb = T.embedding_parameters(h, V, model.position_embeddings, model.token_types, model.embedding_norm,
                                   model.norm_params, embedding_dim=e)
    p_head = T.head_parameters(h, V, model.tied_embeddings, model.final_norm, model.norm_params, model.pooler,
                               model.mlm_head, model.nsp_head, model.head_bias, embedding_dim=e)
    # on every tensor-parallel rank whole: the learned positions, the segment table and the embedding norm (Megatron-
    # Core LanguageModelEmbedding: torch.nn.Embedding beside the VocabParallelEmbedding of the words), the final norm;
    # OPT-350m's projections (project_in, project_out: whole on every rank, as
    # dse.formulas.kernels.embedding_projections prices their GEMMs)
    emb_rep = p_emb - V * (e or h)
    head_rep = (T.norm_parameters(h, model.norm_params) if model.final_norm else 0) + (h * e if e else 0)
    if model.architecture == "encoder-decoder":    # relative position tables; the encoder's final norm
        from dse.estimate.encoder_decoder import end_parameters

        emb_extra, head_extra = end_parameters(model, T)
        p_emb, p_head = p_emb + emb_extra, p_head + head_extra
    l_stage = ceil(L / (p * v)) * v       # layers on the most loaded stage
    D = model.mtp_layers
    # multi-token prediction (dse.estimate.mtp) on the last stage, which then keeps a copy of the word embedding
    tied_copy = V * (e or h) if model.tied_embeddings or D else 0
    single = p == 1
    mtp = _mtp_gpu(model, c, t, ep, split, et if fold else None) if D else (0.0, 0.0, 0.0)
    emb_gpu = (p_emb - emb_rep) / t + emb_rep
    head_gpu = (p_head - head_rep) / t + head_rep
    p_first = l_stage * p_layer_gpu + emb_gpu + where(single, head_gpu + mtp[1], 0)
    p_last = l_stage * p_layer_gpu + head_gpu + where(single, 0, tied_copy / t) + mtp[1]
    layers = (L - n) * c["dense"] + n * c["moe"]
    active = (L - n) * c["dense"] + n * c["moe_active"]
    out = {"params": p_emb + layers + p_head, "params_active": p_emb + active + p_head, "p_layer": p_layer,
           "p_layer_gpu": p_layer_gpu, "p_emb": p_emb, "p_head": p_head, "l_stage": l_stage, "p_first": p_first,
           "p_last": p_last, "p_gpu": maximum(p_first, p_last), "p_expert_gpu": l_stage * p_exp,
           "p_emb_gpu": emb_gpu, "p_head_gpu": head_gpu,
           "p_layer_expert_gpu": p_exp}
    if 0 < n < L:   # a layer of each kind on a GPU, and its routed experts there (a custom layout's stages)
        dense_gpu, _ = _on_gpu(c["dense"], c["dense_rep"], 0, t, ep, None, False)
        moe_gpu, moe_exp = _on_gpu(c["moe"], c["moe_rep"], c["moe_experts"], t, ep, et if fold else None, split)
        out.update(p_dense_gpu=dense_gpu, p_moe_gpu=moe_gpu, p_moe_expert_gpu=moe_exp)
    if D:   # the MTP modules' own parameters (not in "params": Transformers does not build them either)
        out["params_mtp"] = mtp[0]
        out["p_expert_mtp"] = mtp[2]   # the MTP layers' routed experts on a last-stage GPU (expert parallelism)
        out["p_mtp_gpu"] = mtp[1]
    if ft[0] == "full":
        return {**out, "p_train": out["params"], "p_train_gpu": out["p_gpu"]}
    return _frozen.with_adapters(out, model, t, 16 if ft[1] is None else ft[1], ft[2] or "all", ep,
                                 et if fold else None, ft[3])


def _on_gpu(layer: Num, rep: Num, experts: Num, t: Num, ep: Num, et: Num | None, split: bool) -> tuple[Num, Num]:
    """(a layer's parameters on one GPU, of which its routed experts there): the layer split over tp but its
    replicated parameters ``rep``; with ``split`` its experts over ep, and over etp instead of tp with MoE Parallel
    Folding (``et`` given): a GPU holds 1/(etp ep) of them."""
    p_gpu = (layer - rep) / t + rep
    if split and et is not None:
        p_exp = experts / (et * ep)
        return p_gpu - experts / t + p_exp, p_exp
    if split:
        p_exp = experts / (t * ep)   # a layer's experts on one GPU
        return p_gpu - p_exp * (ep - 1), p_exp
    return p_gpu, 0.0


def _mtp_gpu(model: ModelSpec, c: Section, t: Num, ep: Num, split: bool, et: Num | None = None
             ) -> tuple[Num, Num, Num]:
    """The MTP depths' parameters (total, on a last-stage GPU, of which routed experts on that GPU).

    Each depth's layer is of the model's last layer kind (Megatron-Core's MTP spec: the decoder's last layer spec;
    :class:`~dse.specs.model.ModelSpec` refuses an MoE model whose last layer is dense), split like the model's
    layers (its experts over ep, and etp with MoE Parallel Folding); eh_proj is column-parallel (split over tp),
    the three norms replicated.
    """
    D, h = model.mtp_layers, model.hidden
    layer, rep = (c["moe"], c["moe_rep"]) if c["moe_layers"] else (c["dense"], c["dense_rep"])
    experts = c["moe_experts"] if c["moe_layers"] else 0
    total = _transformer.mtp_parameters(layer, h, D, model.norm_params)
    layer_gpu, exp_gpu = _on_gpu(layer, rep, experts, t, ep, et, split)
    norms = 3 * _transformer.norm_parameters(h, model.norm_params)
    return total, D * (layer_gpu + 2 * h * h / t + norms), D * exp_gpu


def model_parameters(model: ModelSpec, T: FormulaModule = _transformer) -> tuple[Num, Num]:
    """The model's parameters: (total, active per token). A dense model's are equal.

    Formula: P = embeddings + (L - L_moe) P_dense + L_moe P_moe + head; active: P_moe with k of the E routed
    experts (dse.formulas.transformer.moe_mlp_parameters)
    """
    prm = _parameters(model, 1, 1, 1, T)
    return prm["params"], prm["params_active"]
