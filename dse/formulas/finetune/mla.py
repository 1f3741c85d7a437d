"""LoRA and QLoRA of multi-head latent attention (DeepSeek-V2/V3): the adapters on its five projections.

Part of :mod:`dse.formulas.finetune` (the symbols are there; the MLA kernels: :mod:`dse.formulas.kernels.mla`).
Hugging Face Transformers 5.24's ``DeepseekV3Attention`` / ``DeepseekV2Attention`` hold five ``nn.Linear``
modules: ``q_a_proj`` (h -> d_c'), ``q_b_proj`` (d_c' -> a d_qk), or ``q_proj`` (h -> a d_qk) without a query
latent, ``kv_a_proj_with_mqa`` (h -> d_c + d_R), ``kv_b_proj`` (d_c -> a (d_nope + d_v)) and ``o_proj``
(a d_v -> h); the two latent RMSNorms have no linear weight. Hugging Face PEFT 0.21's
``target_modules="all-linear"`` adapts all five (each an ``nn.Linear``; checked by tests/test_finetune_mla.py on
the meta device), and bitsandbytes quantizes all five under QLoRA (every ``nn.Linear`` but the output head). The
kernel rows they become: ``q_down``, ``q_up`` (or ``q_proj``), ``kv_down``, ``kv_up``, ``out``; Megatron-Core
duplicates the down projections on every tensor-parallel rank (``parallel_mode="duplicated"``), so their adapters
are whole on every rank, like the weights they adapt, and run on the rank's tokens (T/t with sequence
parallelism).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, maximum

__all__ = ["MLA_ROWS", "mla_adapted_linears", "mla_linear_parameters", "mla_linear_count", "mla_largest_linear"]

#: The linear rows of an MLA layer's attention and how tensor parallelism splits them (the down projections are
#: duplicated on every rank: "replicated").
MLA_ROWS = {"q_proj": "column", "q_down": "replicated", "kv_down": "replicated", "q_up": "column",
            "kv_up": "column"}


def _plain(q_lora: Num) -> bool:
    return type(q_lora) is int and q_lora == 0


def mla_adapted_linears(h: Num, heads: Num, q_lora: Num, kv_lora: Num, nope: Num, rope: Num, v_dim: Num,
                        targets: str = "all") -> dict[str, list[tuple[Any, ...]]]:
    """The adapters of one MLA layer's attention: kernel-table row -> (d_in, d_out) of each adapted projection.

    Formula: ``all`` and ``attention``: q_down (h, d_c') and q_up (d_c', a d_qk), or q_proj (h, a d_qk) when
    d_c' = 0; kv_down (h, d_c + d_R); kv_up (d_c, a (d_nope + d_v)); out (a d_v, h), d_qk = d_nope + d_R; ``mlp``:
    none (``qv`` names q and v projections MLA does not have: refused by the plan rules)
    Source: Hugging Face PEFT 0.21 ``LoraConfig(target_modules="all-linear")`` on Transformers 5.24's
    DeepseekV3ForCausalLM and DeepseekV2ForCausalLM (``q_a_proj``, ``q_b_proj`` or ``q_proj``,
    ``kv_a_proj_with_mqa``, ``kv_b_proj``, ``o_proj``); Hu et al. 2021 (LoRA) §4.1: A is r x d_in, B d_out x r.

    Returns:
        row -> list of (d_in, d_out) [dict]

    >>> a = mla_adapted_linears(7168, 128, 1536, 512, 128, 64, 128)      # DeepSeek-V3
    >>> a["q_down"], a["q_up"], a["kv_down"], a["kv_up"], a["out"]
    ([(7168, 1536)], [(1536, 24576)], [(7168, 576)], [(512, 32768)], [(16384, 7168)])
    >>> list(mla_adapted_linears(2048, 16, 0, 512, 128, 64, 128))   # DeepSeek-V2-Lite: no query latent
    ['q_proj', 'kv_down', 'kv_up', 'out']
    """
    if targets not in ("all", "attention"):
        return {}
    qk = nope + rope
    q: dict[str, list[tuple[Any, ...]]] = ({"q_proj": [(h, heads * qk)]} if _plain(q_lora)
                                           else {"q_down": [(h, q_lora)], "q_up": [(q_lora, heads * qk)]})
    return {**q, "kv_down": [(h, kv_lora + rope)], "kv_up": [(kv_lora, heads * (nope + v_dim))],
            "out": [(heads * v_dim, h)]}


def _replicated_adapter_rows(out: dict[str, Any], name: str, shapes: list[tuple[Any, ...]], base: dict[str, Any],
                             rank: Num, e: Num) -> tuple[int, Num, Num]:
    """The A and B GEMM rows of the adapters on a duplicated down projection (in place), as the base row runs: m its
    rows on this rank (T, or T/t with sequence parallelism), FLOPs over the model's T/t share of it (the duplicated
    GEMM counts once over the t ranks, :func:`dse.formulas.kernels.mla.mla_attention_kernels`); returns (adapters,
    the merge's forward bytes, its backward bytes): 5 passes over each output forward, 2 over it and 3 over the input
    backward, as :func:`dse.formulas.finetune.apply_layer` prices the others."""
    m = base["m"]
    tokens = base["flops"] / (2 * base["k"] * base["n"])
    fwd: Num = 0
    bwd: Num = 0
    for i, adapter in enumerate(shapes):
        d_in, d_out = adapter[0], adapter[1]
        out[f"lora_{name}_{i}_a"] = {"kind": "gemm", "m": m, "k": d_in, "n": rank, "batch": 1, "split": "",
                                     "saved": 0, "flops": 2 * tokens * d_in * rank, "adapter": True}
        out[f"lora_{name}_{i}_b"] = {"kind": "gemm", "m": m, "k": rank, "n": d_out, "batch": 1, "split": "",
                                     "saved": e * m * rank, "flops": 2 * tokens * rank * d_out, "adapter": True}
        fwd, bwd = fwd + e * m * 5 * d_out, bwd + e * m * (2 * d_out + 3 * d_in)
    return len(shapes), fwd, bwd


def mla_linear_parameters(h: Num, heads: Num, q_lora: Num, kv_lora: Num, nope: Num, rope: Num, v_dim: Num,
                          tp: Num = 1) -> Num:
    """Weights of an MLA layer's attention projections on one GPU (what QLoRA quantizes; the norms are not linear).

    Formula: h d_c' + d_c' a d_qk / t (or h a d_qk / t when d_c' = 0) + h (d_c + d_R) + d_c a (d_nope + d_v) / t
    + a d_v h / t: the down projections whole on every rank, the rest split over the t ranks
    Source: :func:`dse.formulas.transformer.mla_attention_parameters` less the two latent RMSNorms; Megatron-Core
    ``MLASelfAttention`` (duplicated down projections); bitsandbytes replaces each ``nn.Linear`` by a ``Linear4bit``.

    Returns:
        parameters [count]

    >>> mla_linear_parameters(7168, 128, 1536, 512, 128, 64, 128)   # DeepSeek-V3: 187,107,328 less 1,536 + 512
    187105280
    """
    qk = nope + rope
    split = h * heads * qk if _plain(q_lora) else q_lora * heads * qk          # the query's split part
    split = split + kv_lora * heads * (nope + v_dim) + heads * v_dim * h
    whole = 0 if _plain(q_lora) else h * q_lora                              # the duplicated down projections
    return whole + h * (kv_lora + rope) + (split if type(tp) is int and tp == 1 else split / tp)


def mla_linear_count(q_lora: Num) -> int:
    """Linear modules of an MLA layer's attention (QLoRA's dequantization kernels per pass).

    Formula: 5 (q_a, q_b, kv_a, kv_b, o), 4 without a query latent (q, kv_a, kv_b, o)
    Source: Transformers 5.24 ``DeepseekV3Attention``'s ``nn.Linear`` modules, each a bitsandbytes ``Linear4bit``.

    Returns:
        linear layers [count]

    >>> mla_linear_count(1536), mla_linear_count(0)
    (5, 4)
    """
    return 4 if _plain(q_lora) else 5


def mla_largest_linear(h: Num, heads: Num, q_lora: Num, kv_lora: Num, nope: Num, rope: Num, v_dim: Num,
                       tp: Num = 1) -> Num:
    """Weights of an MLA layer's largest attention projection on one GPU (QLoRA's dequantized copy of it).

    Formula: max(h d_c', d_c' a d_qk / t (h a d_qk / t when d_c' = 0), h (d_c + d_R), d_c a (d_nope + d_v) / t,
    a d_v h / t)
    Source: the projections of :func:`mla_adapted_linears`; bitsandbytes dequantizes one ``Linear4bit`` at a time.

    Returns:
        parameters [count]

    >>> mla_largest_linear(7168, 128, 1536, 512, 128, 64, 128, tp=8)   # DeepSeek-V3 on tp 8: o_proj's 16384 x 7168 / 8
    14680064.0
    """
    split = 1 if type(tp) is int and tp == 1 else tp
    out: Num = 0
    for name, shapes in mla_adapted_linears(h, heads, q_lora, kv_lora, nope, rope, v_dim).items():
        d_in, d_out = shapes[0][0], shapes[0][1]
        size = d_in * d_out if MLA_ROWS.get(name) == "replicated" or split == 1 else d_in * d_out / split
        out = maximum(out, size)
    return out
