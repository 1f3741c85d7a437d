"""Mixture-of-Experts layers: which layers are MoE, and the parameters of an MoE MLP (total and active per token).

Part of :mod:`dse.formulas.transformer` (the symbols are there). An MoE layer replaces the dense MLP by a
router (a linear h -> E without bias), E routed experts of which k run per token, and S shared experts that
every token runs, each an MLP of its own inner size (Shazeer et al. 2017, arXiv 1701.06538; Fedus et al.
2021, Switch Transformer, arXiv 2101.03961; Jiang et al. 2024, Mixtral, arXiv 2401.04088; Dai et al. 2024,
DeepSeekMoE, arXiv 2401.06066 for shared experts). The counts follow the modeling files of Hugging Face
Transformers: ``MixtralSparseMoeBlock`` (gate Linear(h, E, bias=False), E x MixtralBlockSparseTop2MLP: w1, w3
of h x F_e and w2 of F_e x h, no biases), ``Qwen2MoeSparseMoeBlock`` (gate, E experts of moe_intermediate_size,
one shared expert of shared_expert_intermediate_size and ``shared_expert_gate`` Linear(h, 1, bias=False)),
``Qwen3MoeSparseMoeBlock`` (gate and experts, no shared expert).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from dse.formulas._array import Num, ceil, maximum, where
from dse.formulas.transformer.parameters import ffn_matrices

__all__ = ["moe_layer_count", "router_parameters", "moe_mlp_parameters", "moe_mlp_parameters_replicated",
           "dropped_token_fraction"]


def moe_layer_count(layers: int, first_dense: int = 0, step: int = 1, dense_layers: Iterable[int] = ()) -> int:
    """Layers whose MLP is a Mixture of Experts.

    Formula: #{i in [0, L): i >= first_dense, (i + 1) mod step = 0, i not in dense_layers}
    Source: Hugging Face Transformers, Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer (``layer_idx not in
    mlp_only_layers and (layer_idx + 1) % decoder_sparse_step == 0``); DeepseekV3DecoderLayer
    (``layer_idx >= first_k_dense_replace``); Mixtral: every layer.

    Args:
        layers: L, transformer layers [count]
        first_dense: leading layers with a dense MLP [count]
        step: every step-th layer is MoE [count]
        dense_layers: layer indices (from 0) with a dense MLP [count]
    Returns:
        MoE layers [count]

    >>> moe_layer_count(32), moe_layer_count(24, step=2), moe_layer_count(61, first_dense=3)
    (32, 12, 58)
    >>> moe_layer_count(48, dense_layers=[0, 47])
    46
    """
    moe = max(layers // step - first_dense // step, 0)     # the i + 1 in (first_dense, L] that step divides
    return moe - len({i for i in dense_layers if first_dense <= i < layers and (i + 1) % step == 0})


def router_parameters(h: Num, experts: Num, bias: bool = False) -> Num:
    """Parameters of the router: one linear h -> E (with a bias: gpt-oss); none for a single expert (nothing to
    route).

    Formula: E h (+ E with a bias) for E > 1, else 0 (one expert is the dense MLP: a softmax over one expert is 1)
    Source: Fedus et al. 2021 (Switch Transformer, arXiv 2101.03961) §2.1 (router weights W_r); Hugging Face
    MixtralSparseMoeBlock.gate = nn.Linear(hidden_size, num_local_experts, bias=False); GptOssTopKRouter (weight
    E x h and bias E).

    Args:
        bias: the router has a bias (gpt-oss) [bool]

    Returns:
        parameters [count]

    >>> router_parameters(4096, 8), router_parameters(4096, 1)   # Mixtral 8x7B; one expert
    (32768, 0)
    """
    return where(experts > 1, experts * (h + 1) if bias else experts * h, 0)


def moe_mlp_parameters(h: Num, experts: Num, expert_ffn: Num, ffn_type: str = "swiglu", *, shared_experts: Num = 0,
                       shared_ffn: Num = 0, shared_gate: bool = False, routed: Num | None = None,
                       bias: bool = False) -> Num:
    """Parameters of the MLP of one MoE layer: the router, the routed experts (all, or those a token runs) and the
    shared experts.

    Formula: E h + n_r n_m h F_e + S n_m h F_s + (h if the shared experts are gated); n_r = E (total) or k (active
    per token: ``routed``); n_m = 3 gated, 2 otherwise; with biases (gpt-oss) + E (router) + n_r ((n_m - 1) F_e + h)
    Source: Hugging Face MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock (shared_expert, shared_expert_gate),
    Qwen3MoeSparseMoeBlock, DeepseekV3MoE (shared_experts: one MLP of n_shared_experts x moe_intermediate_size),
    Llama4TextMoe (one shared expert of intermediate_size); no biases in any of them. GptOssMLP: a router with a
    bias and experts with biases (gate_up_proj_bias E x 2 F_e, down_proj_bias E x h).

    Args:
        experts: E, routed experts [count]
        expert_ffn: F_e, inner size of a routed expert [count]
        shared_experts: S, experts every token runs [count]
        shared_ffn: F_s, inner size of one shared expert [count]
        shared_gate: a sigmoid gate h -> 1 on the shared experts' output (Qwen2-MoE) [bool]
        routed: n_r, routed experts counted (None: all E; k: the parameters a token uses) [count]
        bias: the router and the routed experts have biases (gpt-oss) [bool]
    Returns:
        parameters [count]

    >>> moe_mlp_parameters(4096, 8, 14336)   # a Mixtral 8x7B layer's MLP
    1409318912
    >>> moe_mlp_parameters(4096, 8, 14336, routed=2)   # of which a token uses
    352354304
    """
    n = experts if routed is None else routed
    m = ffn_matrices(ffn_type)
    per_expert = m * h * expert_ffn + (((m - 1) * expert_ffn + h) if bias else 0)
    return (router_parameters(h, experts, bias) + n * per_expert + shared_experts * m * h * shared_ffn
            + (h if shared_gate else 0))


def moe_mlp_parameters_replicated(h: Num, experts: Num, shared_gate: bool = False, bias: bool = False) -> Num:
    """Parameters of an MoE MLP that tensor parallelism does not split: the router (and the shared experts' gate).

    Formula: E h (+ h)
    Source: Megatron-Core ``TopKRouter``: the router weight is replicated on every tensor-parallel rank; the
    experts' matrices split like the dense MLP's (Megatron-Core MoE, expert tensor parallel = tp).

    Returns:
        parameters [count]

    >>> moe_mlp_parameters_replicated(2048, 60, shared_gate=True)   # Qwen1.5-MoE-A2.7B
    124928
    """
    return router_parameters(h, experts, bias) + (h if shared_gate else 0)


def _erf(x: Num) -> Num:
    if type(x) in (int, float):
        return math.erf(x)
    import numpy as np

    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), dtype=float)


def dropped_token_fraction(tokens: Num, experts: int, experts_per_token: Num, capacity: Num,
                           imbalance: Num = 1.0) -> Num:
    """Share of the routed token copies that experts of capacity factor C drop (a lower bound for a skewed router).

    Formula: a GPU routes T tokens; under uniform routing an expert receives X ~ Binomial(T, k/E) of them (each
    token picks it with probability k/E), mean mu = T k / E, sigma^2 = T (k/E)(1 - k/E), and keeps a = ceil(C mu);
    its dropped copies E[(X - a)+] ~ sigma phi(z) + (mu - a)(1 - Phi(z)), z = (a + 1/2 - mu)/sigma (the normal
    approximation with continuity correction), a share E[(X - a)+]/mu of its copies. An expert with c times the mean
    load (``imbalance``, the busiest) drops at least (c - C) mu, (c - C)/E of all copies: the share is the larger
    of the two (both are lower bounds when the router is skewed).
    Source: GShard (Lepikhin et al. 2020, arXiv 2006.16668) §2.2 "expert capacity" (tokens over it overflow and
    are dropped); Switch Transformer (Fedus et al. 2021, arXiv 2101.03961) §2.2 (capacity = tokens per batch /
    experts x capacity factor; dropped tokens skip the layer through the residual); Megatron-Core
    ``moe_utils.get_capacity``: ceil(num_tokens k / E C) of a GPU's tokens.

    Args:
        tokens: T, tokens a GPU's router sees per micro-batch [count]
        experts: E, routed experts [count]
        experts_per_token: k, top-k [count]
        capacity: C, capacity factor [fraction]
        imbalance: c, the busiest expert's tokens over the mean [fraction]
    Returns:
        dropped share of the routed copies [fraction]

    >>> round(dropped_token_fraction(4096, 8, 2, 1.0), 4)    # Mixtral, 4096 tokens, C = 1: routing noise alone
    0.0108
    >>> round(dropped_token_fraction(4096, 8, 2, 1.25), 6)   # C = 1.25 keeps 1,280 of a mean 1,024
    0.0
    >>> round(dropped_token_fraction(4096, 8, 2, 1.0, imbalance=1.5), 4)   # the busiest expert's excess
    0.0625
    """
    p = experts_per_token / experts
    mu = tokens * p
    sigma = (tokens * p * (1 - p)) ** 0.5
    keep = ceil(capacity * mu)
    z = (keep + 0.5 - mu) / sigma
    over = sigma * math.exp(-0.5) ** (z * z) / math.sqrt(2 * math.pi) + (mu - keep) * 0.5 * (1 - _erf(z / math.sqrt(2)))
    return maximum(over / mu, maximum(imbalance - capacity, 0.0) / experts)
