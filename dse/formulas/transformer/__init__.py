"""Transformer training: parameters, FLOPs and the activation bytes saved for backward.

Notation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", arXiv 2205.05198, Table 1): ``s`` sequence length, ``b``
micro-batch, ``h`` hidden, ``a`` heads, ``kv`` key/value heads, ``d`` head
dimension, ``F`` FFN inner size, ``V`` vocabulary, ``L`` layers, ``t`` tensor
parallel size. All functions accept numpy arrays and broadcast.

FLOP convention: a multiply-add is 2 FLOP; attention scores count the full s x s
matrix, as in Narayanan et al. 2021 (arXiv 2104.04473, Eq. 3) and Korthikanti
et al. (Appendix A), unless ``causal`` is set: then the FLOPs count the unmasked
half, as a causal kernel computes it (the estimate does so for decoders; the kernels
that skip the masked half are modelled in :mod:`dse.formulas.compute`).

Symbols:
    h: hidden size [count]
    s: sequence length (tokens per sequence) [count]
    b: micro-batch size (sequences) [count]
    heads: a, attention (query) heads [count]
    kv_heads: kv, key/value heads (kv < a: grouped-query attention) [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    vocab: V, vocabulary size [count]
    layers: L, transformer layers [count]
    tokens: T, tokens per iteration (global batch x s) [count]
    tp: t, tensor-parallel degree [count]
    sequence_parallel: Megatron sequence parallelism (shards norm/dropout tensors over t) [bool]
    recompute: none, selective or full activation recomputation [choice]
    attention: flash (fused) or math (materialised softmax) [choice]
    ffn_type: gelu, relu, swiglu, geglu or relu2 (squared ReLU: two tensors kept, as gelu) [choice]
    norm: layernorm or rmsnorm [choice]
    position: learned, rotary or none (position embeddings) [choice]
    dropout: dropout layers present [bool]
    score_dropout: with dropout, also on the attention probabilities (math attention keeps its mask and output) [bool]
    branch_dropouts: with dropout, the branch outputs of a layer dropped before their residual add (2: attention
        and MLP; 1: one; 0: none) [count]
    causal: decoder attention: count the unmasked half of the score matrix (FlashAttention-2 §4.1) [bool]
    bias: linear layers have biases [bool]
    qkv_bias: the QKV projection has a bias (None: as ``bias``) [bool]
    bytes_per_element: e, bytes per activation element (2 for bf16/fp16) [bytes]
    options: keyword arguments of :func:`activation_terms` [dict]
    layer_norms: norms per layer (2 pre-LN; 4 Gemma 2: also after the attention and the MLP) [count]
    qk_norm: an RMSNorm of each query and key head over d (Qwen3) [bool]
    experts: E, routed experts of an MoE layer [count]
    window: w, sliding attention window in tokens [count]
    chunk: c, attention chunk in tokens (Llama 4) [count]
    shared_gate: a sigmoid gate (h x 1) on the shared experts' output (Qwen2-MoE) [bool]
    q_lora: d_c', rank of the MLA query latent (0: a plain query projection) [count]
    kv_lora: d_c, rank of the MLA key/value latent [count]
    nope: d_nope, MLA per-head query/key dims without positions [count]
    rope: d_R, MLA per-head decoupled rotary dims [count]
    v_dim: d_v, MLA per-head value dims [count]
    attention: parameters of a layer's attention when it is not multi-head/grouped-query (MLA) [count]
    attention_replicated: parameters of that attention tensor parallelism does not split [count]
    depths: D, multi-token prediction depths (DeepSeek-V3 §2.2; Megatron-Core --mtp-num-layers) [count]
"""

from __future__ import annotations

from dse.formulas.transformer.activations import (
    activation_bytes_per_layer,
    activation_terms,
    backward_working_bytes,
    embedding_activation_bytes,
    head_activation_bytes,
    interleave_factor,
    recompute_working_bytes,
)
from dse.formulas.transformer.flops import (
    attention_flops_per_token,
    attention_pairs,
    attention_share,
    layer_gemm_flops_per_token,
    logits_flops_per_token,
    model_flops,
    recompute_flops,
)
from dse.formulas.transformer.mla import mla_attention_parameters, mla_attention_parameters_replicated
from dse.formulas.transformer.moe import (
    dropped_token_fraction,
    moe_layer_count,
    moe_mlp_parameters,
    moe_mlp_parameters_replicated,
    router_parameters,
)
from dse.formulas.transformer.parameters import (
    GATED_FFN,
    cross_attention_parameters,
    embedding_parameters,
    ffn_matrices,
    head_parameters,
    layer_parameters,
    layer_parameters_replicated,
    mlp_parameters,
    mtp_parameters,
    norm_parameters,
    parameter_count,
    relative_position_parameters,
)

__all__ = ["GATED_FFN", "norm_parameters", "ffn_matrices", "mlp_parameters", "layer_parameters",
           "layer_parameters_replicated", "moe_layer_count", "router_parameters", "moe_mlp_parameters",
           "moe_mlp_parameters_replicated", "dropped_token_fraction", "mla_attention_parameters",
           "mla_attention_parameters_replicated", "cross_attention_parameters", "relative_position_parameters",
           "embedding_parameters", "head_parameters", "mtp_parameters", "parameter_count", "layer_gemm_flops_per_token",
           "attention_flops_per_token", "attention_pairs", "attention_share", "logits_flops_per_token", "model_flops", "recompute_flops",
           "activation_terms", "activation_bytes_per_layer", "recompute_working_bytes", "backward_working_bytes",
           "head_activation_bytes", "embedding_activation_bytes", "interleave_factor"]
