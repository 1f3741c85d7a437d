"""The model spec: the architecture being trained.

Fields are plain integers/strings; the shapes follow the usual transformer
notation (Korthikanti et al. 2022, Table 1): ``layers`` L, ``hidden`` h,
``heads`` a, ``kv_heads`` (grouped-query attention), ``ffn_hidden`` F,
``vocab`` V. Derived values (head_dim, default FFN size) are filled in by
:meth:`ModelSpec.resolved`. A Mixture-of-Experts model (``experts`` > 0) replaces the MLP of its MoE
layers by a router and ``experts`` routed experts of which ``experts_per_token`` run per token, plus
``shared_experts`` that every token runs (docs/moe.md); which layers are MoE follows the Hugging Face
configs (``first_dense_layers``, ``moe_layer_step``, ``dense_layers``). Multi-head latent attention
(``kv_lora_rank`` set: DeepSeek-V2, arXiv 2405.04434 §2.1) replaces the Q/K/V projections by low-rank latents
and decoupled rotary dims (docs/mla.md). Group-limited routing (DeepSeek-V3,
Liu et al. 2024, arXiv 2412.19437, §2.1.2 and §3.2: "node-limited routing") splits the experts into
``expert_groups`` and sends each token to experts of at most ``expert_groups_per_token`` of them; it changes where
the routed tokens go, not the parameters.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dse.specs._schema import spec_field
from dse.specs.model_checks import check_model

FFN_TYPES = ("gelu", "relu", "swiglu", "geglu", "relu2")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rotary", "relative", "none")
ARCHITECTURES = ("decoder", "encoder", "encoder-decoder")
ACTIVATIONS = ("gelu", "gelu_new", "gelu_tanh", "relu", "silu", "bloom_gelu")
QKV_PROJECTIONS = ("fused", "separate")
SOFTMAX_DTYPES = ("activation", "fp32", "fp32_scores")
#: The attention of a layer, as Hugging Face configs' ``layer_types`` name it (docs/attention.md).
LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
#: The default training sequence length when the model states none: a training length, not the longest context
#: the positions support (32,768 for Mistral-7B, 131,072 for Llama 3.1 and 1,024,000 for Mistral-NeMo are the
#: context-extension limits; pre-training runs at 4,096 (Llama 2, Touvron et al. 2023, arXiv 2307.09288, §2.2)
#: to 8,192 (Llama 3, arXiv 2407.21783, §3.4.1: 4,096 first, then 8,192), and extends the context in a short
#: last stage).
TRAINING_SEQ_LEN = 4096
#: The most layers a model spec takes: per-layer lists (``layer_types``, a config.json's ``mlp_only_layers``) and the
#: pipeline layouts are built layer by layer, and 10**6 is four orders of magnitude beyond the deepest model trained.
MAX_LAYERS = 1_000_000


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str = spec_field(help="catalog name or file stem")
    layers: int = spec_field(gt=0, le=MAX_LAYERS, help="transformer layers L")
    hidden: int = spec_field(gt=0, help="hidden size h")
    heads: int = spec_field(gt=0, help="attention heads a")
    vocab: int = spec_field(gt=0, help="vocabulary size V (as allocated, i.e. padded if the framework pads)")
    max_seq_len: int = spec_field(gt=0, help="longest sequence the position scheme supports")
    kv_heads: int | None = spec_field(None, gt=0, help="key/value heads (GQA); default = heads")
    head_dim: int | None = spec_field(None, gt=0, help="per-head dimension; default = hidden / heads")
    ffn_hidden: int | None = spec_field(None, gt=0, help="FFN inner size F; default 4h")
    ffn_type: str = spec_field("gelu", choices=FFN_TYPES, help="two-matrix GeLU/ReLU MLP, gated SwiGLU / GeGLU "
                                                                "(Gemma: tanh GELU gate) or two-matrix squared ReLU "
                                                                "relu2 (Nemotron-4, Megatron --squared-relu)")
    activation: str | None = spec_field(None, choices=ACTIVATIONS, help="activation function as the framework "
                                        "writes it (gelu_new: Transformers' tanh GELU as 8 ops; bloom_gelu: "
                                        "BLOOM's autograd tanh GeLU, 9 ops saving x); default from ffn_type")
    norm: str = spec_field("layernorm", choices=NORMS, help="LayerNorm (weight+bias) or RMSNorm (weight)")
    norm_bias: bool = spec_field(True, help="the LayerNorm has a bias; false: a weight only, as Cohere's "
                                 "CohereLayerNorm, which runs as separate fp32 ops (norm variant fp32_layernorm)")
    zero_centered_gamma: bool = spec_field(False, help="the LayerNorm scales by (1 + w), w stored centred on 0 "
                                           "(Nemotron LayerNorm1P; Megatron-Core apply_layernorm_1p, TE "
                                           "zero_centered_gamma): an eager stack's kernel over the weight per norm")
    bias: bool = spec_field(True, help="biases on the linear layers")
    qkv_bias: bool | None = spec_field(None, help="biases on Q/K/V only (Qwen-style); default = bias")
    mlp_bias: bool | None = spec_field(None, help="biases on the MLP's linear layers (GPT-J: there only); default = "
                                       "bias, which then covers the attention's output projection")
    qkv_projection: str = spec_field("fused", choices=QKV_PROJECTIONS,
                                     help="Q, K and V as one fused projection (GPT-2, Megatron) or three (Hugging "
                                          "Face Llama, Mistral, Qwen2, OPT, BERT): an eager stack's copies and sums")
    softmax_dtype: str = spec_field("activation", choices=SOFTMAX_DTYPES,
                                    help="dtype of the unfused (eager) attention softmax: the activation dtype "
                                         "(GPT-2, BERT), fp32 (Hugging Face Llama, Mistral, Qwen2, OPT) or the "
                                         "scores fp32 from the product on: q and k cast to fp32 first (GPT-Neo)")
    scale_query: bool = spec_field(False, help="the query is multiplied by 1/sqrt(d) by a kernel of its own before "
                                               "the attention (Hugging Face OPT); an eager stack's extra pass")
    alibi: bool = spec_field(False, help="ALiBi (arXiv 2108.12409): a per-head distance bias the score GEMM adds "
                             "(BLOOM's baddbmm); eager attention only in Transformers: math (--attention flash off)")
    norm_weight: bool = spec_field(True, help="the norms have parameters; false: OLMo's LayerNorm without weight or "
                                   "bias, run in fp32 and cast back (OlmoLayerNorm)")
    position: str = spec_field("learned", choices=POSITIONS, help="learned absolute or rotary positions")
    position_embeddings: int | None = spec_field(None, gt=0,
                                                 help="rows of the learned position table; default max_seq_len")
    tied_embeddings: bool = spec_field(True, help="LM head shares the input embedding")
    embedding_dim: int | None = spec_field(None, gt=0, help="width e of the word embedding and the LM head where it "
                                           "differs from hidden (OPT-350m word_embed_proj_dim 512): project_in (e x "
                                           "h) after the lookup and project_out (h x e) before the head, two GEMMs "
                                           "without bias; default hidden")
    eager_attention: bool = spec_field(False, help="Transformers has no SDPA path for the model's attention (GPT-Neo: "
                                       "eager, or flash-attn's flash_attention_2 when asked for): the plan's attention "
                                       "defaults to math")
    head_bias: bool = spec_field(False, help="the LM head has a bias (Phi lm_head): V parameters")
    dropout: float = spec_field(0.0, unit="fraction", ge=0.0, lt=1.0,
                                help="dropout probability (0 = no masks); where it runs: attention_dropout, "
                                     "branch_dropouts, embedding_dropout (a config with several: the largest; only "
                                     "> 0 is priced)")
    attention_dropout: bool = spec_field(True, help="dropout (where > 0) also on the attention probabilities (eager "
                                         "attention's score mask); false: on the layers' branch outputs only "
                                         "(StarCoder2's residual_dropout with attention_dropout 0)")
    branch_dropouts: int = spec_field(2, ge=0, le=2, help="branch outputs of a layer dropout (where > 0) runs on "
                                      "before their residual add: 2 the attention's and the MLP's (GPT-2 resid_pdrop, "
                                      "Megatron --hidden-dropout), 1 one (StableLM's MLP output, Falcon's parallel "
                                      "sum), 0 none (Llama: attention_dropout only)")
    nope_layers: int = spec_field(0, ge=0, help="layers without rotary positions (NoPE: SmolLM3's no_rope_layers 0 "
                                  "entries, every fourth layer); the rotary kernels are priced on the others only")
    embedding_dropout: bool = spec_field(True, help="dropout (where > 0) also on the embedding output; false: not "
                                         "there (StarCoder2's embedding_dropout 0)")
    seq_len: int | None = spec_field(None, gt=0, help="default training sequence length; default 4096, or "
                                   "max_seq_len when smaller (a training length, not the longest context)")
    architecture: str = spec_field("decoder", choices=ARCHITECTURES, help="causal decoder, bidirectional encoder, "
                                   "or both (T5: docs/encoder-decoder.md)")
    decoder_layers: int | None = spec_field(None, gt=0, help="encoder-decoder: how many of the layers are decoder "
                                            "layers (self-attention, cross-attention, MLP); the others are encoder "
                                            "layers; default layers / 2")
    target_len: int | None = spec_field(None, gt=0, help="encoder-decoder: default decoder (target) tokens per "
                                        "sequence; seq_len is the encoder's (input) length")
    relative_buckets: int = spec_field(0, ge=0, help="relative position buckets (T5 relative_attention_num_buckets): "
                                       "a buckets x heads bias table per stack, with position relative")
    token_types: int = spec_field(0, ge=0, help="segment (token-type) embeddings, BERT")
    embedding_norm: bool = spec_field(False, help="norm after the embeddings (BERT)")
    final_norm: bool = spec_field(True, help="norm after the last layer (pre-LN models)")
    pooler: bool = spec_field(False, help="BERT pooler (h x h dense)")
    mlm_head: bool = spec_field(False, help="BERT masked-LM transform (dense + norm + output bias)")
    nsp_head: bool = spec_field(False, help="BERT next-sentence classifier (h x 2)")
    sliding_window: int | None = spec_field(None, gt=0, help="attention window in tokens of the sliding-window "
                                            "layers (Mistral: every layer; Gemma 2/3, gpt-oss: the "
                                            "sliding_attention layers of layer_types): query i attends to "
                                            "min(i+1, window) keys (docs/attention.md)")
    attention_chunk: int | None = spec_field(None, gt=0, help="chunk of the chunked_attention layers in tokens "
                                             "(Llama 4 attention_chunk_size): a query attends to the keys of its "
                                             "own chunk up to itself")
    layer_types: tuple[str, ...] = spec_field((), choices=LAYER_TYPES,
                                              help="attention of each layer, as Hugging Face's layer_types names it "
                                                   "(one per layer); empty: sliding_attention everywhere when "
                                                   "sliding_window is set, else full_attention")
    attn_softcap: float | None = spec_field(None, gt=0, help="attention-logit soft-capping c: scores -> c tanh(scores "
                                            "/ c) (Gemma 2 attn_logit_softcapping); eager attention's extra passes")
    logit_softcap: float | None = spec_field(None, gt=0, help="final-logit soft-capping c (Gemma 2 "
                                             "final_logit_softcapping): three element-wise passes over the logits "
                                             "in an eager stack")
    embedding_scale: bool = spec_field(False, help="the embeddings are multiplied by a constant by a kernel of their "
                                                   "own (Gemma: sqrt(h); Granite embedding_multiplier): an eager "
                                                   "stack's extra pass")
    residual_scale: bool = spec_field(False, help="each branch output is multiplied by a constant before its residual "
                                      "add (Granite residual_multiplier): an eager stack's extra pass")
    logit_scale: bool = spec_field(False, help="the logits are divided by a constant (Granite logits_scaling): an "
                                   "eager stack's extra pass over the logits")
    norm_fp32_weight: bool = spec_field(False, help="the RMSNorm scales by (1 + w) in fp32 and casts after (Gemma, "
                                                    "Gemma 2/3; transformers PR 29402), not by w after the cast "
                                                    "(Llama): an eager stack keeps the fp32 normalized tensor")
    attention_sinks: bool = spec_field(False, help="a learned sink logit per head joins each softmax (gpt-oss): "
                                                   "a parameters per layer")
    rotary_attention_factor: float = spec_field(1.0, gt=0, help="YaRN's attention factor on the rotary cos and sin "
                                                "(gpt-oss: 0.1 ln 32 + 1); Megatron-Core's RoPE unfused (attention.md)")
    glu_limit: float | None = spec_field(None, gt=0, help="the gated MLP's clamp c (gpt-oss swiglu_limit 7): gate "
                                         "min(x, c), linear part clamp(x, -c, c); Megatron-Core clamps the experts' "
                                         "fc1 output with eager ops (docs/moe.md)")
    qk_norm_weight: bool = spec_field(True, help="the QK-norm has a weight over head_dim (RMSNorm: Qwen3, Gemma 3); "
                                                 "false: Llama 4's L2 norm without parameters")
    unmodelled: tuple[str, ...] = spec_field((), help="architecture details of the source read but not modelled "
                                             "(the config.json reader fills it); each is a warning with every "
                                             "estimate")
    layer_norms: int = spec_field(2, ge=1, le=4, help="norms per layer: 2 (pre-LN), 4 (Gemma 2: also after the "
                                                       "attention and after the MLP), 1 (Falcon-7B: one norm shared "
                                                       "by the parallel attention and MLP)")
    parallel_residual: bool = spec_field(False, help="attention and MLP both read the layer input and their outputs "
                                         "are added to it together (GPT-J, GPT-NeoX use_parallel_residual, Falcon "
                                         "parallel_attn): one TP all-reduce forward, the MLP norm's input not saved "
                                         "again")
    rotary_fraction: float = spec_field(1.0, unit="fraction", gt=0.0, le=1.0,
                                        help="share of each head's dimensions rotated by the rotary positions "
                                             "(GPT-NeoX rotary_pct, Phi partial_rotary_factor)")
    qk_norm: bool = spec_field(False, help="RMSNorm of each query and key head over head_dim (Qwen3, Gemma 3)")
    qk_norm_full: bool = spec_field(False, help="the QK-norm spans the whole query and key projections (OLMo 2 "
                                    "q_norm over a d, k_norm over kv d: weights of that width), not each head")
    norm_offset: bool = spec_field(True, help="with norm_fp32_weight: the scale is (1 + w), w cast to fp32 by two "
                                   "kernels of its own (Gemma); false: w (OLMo 2's Olmo2RMSNorm)")
    rotary_before_transpose: bool = spec_field(False, help="the rotary runs on the projections' (b, s, a, d) layout "
                                               "before the heads are transposed (GPT-J): its gradients need no copy")
    rotary_fp32: bool = spec_field(False, help="the rotary products run in fp32 and are cast back (OLMo 2: cos and sin "
                                   "kept in fp32): an eager stack's wider passes and two casts")
    rotary_upcast: bool = spec_field(False, help="q and k are cast to fp32 before the rotary and back after (Cohere: "
                                     "q.float()), the cos and sin tables kept in the activation dtype: every rotary op "
                                     "in fp32; not with rotary_fp32 (OLMo 2's fp32 tables)")
    projection_slices: bool = spec_field(False, help="Q, K and V are slices of one fused projection's output and the "
                                         "gate and up halves of a SwiGLU MLP chunks of another, the rotary slicing "
                                         "and concatenating q and k (Phi-3: qkv_proj, gate_up_proj): an eager stack's "
                                         "non-vectorized GLU and the slices' zero-filled gradients; needs "
                                         "qkv_projection fused")
    experts: int = spec_field(0, ge=0, help="routed experts E of an MoE layer; 0: a dense MLP in every layer")
    experts_per_token: int | None = spec_field(None, gt=0, help="routed experts each token runs (top-k); "
                                                               "required with experts")
    shared_experts: int = spec_field(0, ge=0, help="experts every token runs beside the routed ones "
                                                   "(Qwen2-MoE: 1, DeepSeek: n_shared_experts)")
    expert_ffn: int | None = spec_field(None, gt=0, help="FFN inner size of a routed expert; default ffn_hidden")
    shared_expert_ffn: int | None = spec_field(None, gt=0, help="FFN inner size of one shared expert; "
                                                                "default expert_ffn")
    shared_expert_gate: bool = spec_field(False, help="a sigmoid gate (h x 1) scales the shared experts' output "
                                                      "(Qwen2-MoE)")
    first_dense_layers: int = spec_field(0, ge=0, help="leading layers with a dense MLP (DeepSeek: "
                                                       "first_k_dense_replace)")
    moe_layer_step: int = spec_field(1, gt=0, help="every n-th layer is MoE: layer i (from 0) when (i + 1) % n == 0 "
                                                   "(Qwen2-MoE: decoder_sparse_step)")
    dense_layers: tuple[int, ...] = spec_field((), ge=0, help="layer indices (from 0) with a dense MLP "
                                                              "(Qwen2-MoE: mlp_only_layers)")
    expert_groups: int | None = spec_field(None, gt=0, help="groups the routed experts are split into for "
                                           "group-limited routing (DeepSeek-V3: n_group, one group per node)")
    expert_groups_per_token: int | None = spec_field(None, gt=0, help="groups a token's experts may lie in "
                                                     "(DeepSeek-V3: topk_group M); needs expert_groups")
    kv_lora_rank: int | None = spec_field(None, gt=0, help="multi-head latent attention (DeepSeek-V2/V3): rank of the "
                                          "compressed K/V latent d_c; unset: standard attention")
    q_lora_rank: int | None = spec_field(None, ge=0, help="MLA: rank of the compressed query d_c' (0 or unset: a "
                                         "plain h x a d_qk query projection, DeepSeek-V2-Lite)")
    qk_nope_head_dim: int | None = spec_field(None, gt=0, help="MLA: per-head query/key dimension without "
                                              "positions d_h (128)")
    qk_rope_head_dim: int | None = spec_field(None, gt=0, help="MLA: per-head decoupled rotary dimension d_h^R "
                                              "(64; even), the key's part shared by all heads")
    v_head_dim: int | None = spec_field(None, gt=0, help="MLA: per-head value dimension (128)")
    mtp_layers: int = spec_field(0, ge=0, help="multi-token prediction depths (DeepSeek-V3 num_nextn_predict_layers, "
                                 "Megatron-Core --mtp-num-layers): priced on the last pipeline stage (docs/mla.md)")
    expert_imbalance: float = spec_field(1.0, ge=1.0, help="tokens of the busiest expert over the "
                                         "mean T k / E (1: balanced routing); the busiest expert sets the time")
    source: str = spec_field("", help="where the architecture numbers come from")

    def _check(self, where: str) -> None:
        """The fields' consistency (:func:`dse.specs.model_checks.check_model`), after each field's own range."""
        check_model(self, where)

    @property
    def mla(self) -> bool:
        """Multi-head latent attention: K/V (and Q) through low-rank latents (docs/mla.md)."""
        return self.kv_lora_rank is not None

    @property
    def attention_layers(self) -> dict[str, int]:
        """Layers of each attention kind: ``full``, ``sliding`` and ``chunked`` (:data:`LAYER_TYPES`)."""
        if not self.layer_types:     # every layer alike (counted, not listed: the count may be large)
            every = "sliding_attention" if self.sliding_window else "full_attention"
            return {kind.split("_")[0]: self.layers if kind == every else 0 for kind in LAYER_TYPES}
        return {kind.split("_")[0]: self.layer_types.count(kind) for kind in LAYER_TYPES}

    @property
    def moe(self) -> bool:
        """An MoE model: routed experts replace the MLP of its MoE layers."""
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a Mixture of Experts (:func:`dse.formulas.transformer.moe_layer_count`)."""
        if not self.experts:
            return 0
        from dse.formulas.transformer.moe import moe_layer_count

        return moe_layer_count(self.layers, self.first_dense_layers, self.moe_layer_step, self.dense_layers)

    @property
    def norm_kind(self) -> str:
        """The norm as a software stack's ``norm`` variants name it (gemma_rmsnorm: the (1 + w) scale in fp32;
        fp32_rmsnorm: the w scale in fp32, OLMo 2; layernorm1p: LayerNorm by (1 + w), Nemotron; fp32_layernorm:
        Cohere's LayerNorm without bias as fp32 ops)."""
        if self.norm == "rmsnorm" and self.norm_fp32_weight:
            return "gemma_rmsnorm" if self.norm_offset else "fp32_rmsnorm"
        if self.zero_centered_gamma:
            return "layernorm1p"
        if not self.norm_bias:
            return "fp32_layernorm"
        return "olmo_layernorm" if not self.norm_weight else self.norm

    @property
    def norm_params(self) -> str:
        """The norm as the parameter formulas name it: "none" without weights (OLMo), "weight" for a LayerNorm without
        bias (Cohere), else ``norm``."""
        return ("weight" if not self.norm_bias else self.norm) if self.norm_weight else "none"

    @property
    def activation_kind(self) -> str:
        """The activation as a software stack's ``activation`` variants name it (silu_glu for a gated SwiGLU MLP,
        relu2 for the squared ReLU)."""
        if self.ffn_type in ("swiglu", "relu2"):
            if self.ffn_type == "relu2":
                return "relu2"
            return "silu_glu_chunk" if self.projection_slices else "silu_glu"   # Phi-3's gate_up_proj chunks
        if self.ffn_type == "geglu":
            return "gelu_glu"
        act = self.activation or ("relu" if self.ffn_type == "relu" else "gelu")
        return "gelu" if act == "gelu_tanh" else act

    @property
    def layer_param_tensors(self) -> int:
        """Parameter tensors of one layer as Transformers' modules hold them (one gradient-accumulation add each).

        Weights: Q, K, V (one fused QKV or three), output, two MLP matrices (gated: gate, up, down); a bias per linear
        where present (MLP-only biases: GPT-J's fc_in, fc_out); two norms (LayerNorm: weight and bias; RMSNorm:
        weight); a QK-norm's two weights (q_norm, k_norm). Separate q_proj, k_proj, v_proj under a plain MLP (Phi-2:
        transformers 5.24 modeling_phi.py:164-167; StarCoder2: modeling_starcoder2.py:153-156): 6 weights, and with
        biases 6 biases (H200 profiles: 14 and 16 gradient-accumulation adds a layer, vectorized CUDAFunctor_add).
        """
        gated = self.ffn_type in ("swiglu", "geglu")
        mlp = 3 if gated else 2
        weights = mlp + (4 if self.qkv_projection == "separate" else 2)
        if gated and self.qkv_projection == "fused" and self.projection_slices:   # Phi-3's qkv_proj and gate_up_proj
            weights = 4
        biases = weights if self.bias else (3 if self.qkv_bias else 0) + (mlp if self.mlp_bias else 0)
        if self.bias and self.mlp_bias is False:   # biases on the attention only (PhiMoE): q, k, v (or qkv) and o
            biases = 4 if self.qkv_projection == "separate" else 2
        elif self.bias and self.qkv_bias is False:   # no Q/K/V biases (GPT-Neo): out_proj's and the MLP's
            biases = 1 + mlp
        if self.mla:   # q_a, q_b (or q), kv_a, kv_b, o instead of q, k, v, o; and the latents' RMSNorms
            weights, biases = weights + (1 if self.q_lora_rank else 0), 0
            return weights + self.layer_norms * (2 if self.norm == "layernorm" else 1) + (2 if self.q_lora_rank else 1)
        per_norm = 2 if self.norm == "layernorm" and self.norm_bias else 1
        qk = 2 if self.qk_norm and self.qk_norm_weight else 0    # q_norm and k_norm weights (Qwen3, Gemma 3, OLMo 2)
        return weights + biases + self.layer_norms * per_norm * self.norm_weight + qk

    def resolved(self) -> ModelSpec:
        """The same spec with every defaulted field filled in."""
        return dataclasses.replace(
            self,
            kv_heads=self.kv_heads or self.heads,
            head_dim=self.head_dim or ((self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0) if self.mla
                                       else self.hidden // self.heads),
            q_lora_rank=(self.q_lora_rank or 0) if self.mla else None,
            ffn_hidden=self.ffn_hidden or 4 * self.hidden,
            expert_ffn=(self.expert_ffn or self.ffn_hidden or 4 * self.hidden) if self.experts else None,
            shared_expert_ffn=(self.shared_expert_ffn or self.expert_ffn or self.ffn_hidden or 4 * self.hidden)
            if self.shared_experts else None,
            expert_groups_per_token=self.expert_groups_per_token or self.expert_groups,
            qkv_bias=self.bias if self.qkv_bias is None else self.qkv_bias,
            embedding_dim=None if self.embedding_dim == self.hidden else self.embedding_dim,
            mlp_bias=self.bias if self.mlp_bias is None else self.mlp_bias,
            position_embeddings=(self.position_embeddings or self.max_seq_len) if self.position == "learned" else 0,
            seq_len=self.seq_len or min(TRAINING_SEQ_LEN, self.max_seq_len),
            decoder_layers=((self.decoder_layers or self.layers // 2) if self.architecture == "encoder-decoder"
                            else None),
        )
