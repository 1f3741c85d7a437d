"""LoRA and QLoRA of a Mixture-of-Experts layer: the adapters on its router, experts and shared experts.

Part of :mod:`dse.formulas.finetune` (symbols there). Transformers 5.24 stores a layer's routed experts as two 3-D
parameters, ``gate_up_proj`` (E x n_up F_e x h, the gate and up projections fused) and ``down_proj`` (E x h x F_e);
the router (``gate``) is an E x h weight. Hugging Face PEFT 0.21 adapts 3-D parameters with ``ParamWrapper``
(``target_parameters``): one low-rank pair per expert, ``lora_A`` r E x d_in and ``lora_B`` d_out x r E. With
``target_modules="all-linear"`` (QLoRA's choice) or the Transformers-4 names of the expert projections (``w1``,
``w3`` / ``gate_proj``, ``up_proj``), PEFT maps the fused ``gate_up_proj`` to one adapter of rank n_up r (and alpha
n_up alpha, ``peft/utils/transformers_weight_conversion.py``: ``rank_pattern[gate_up_proj] = r *
len(required_old_targets)``), ``down_proj`` to rank r, and adapts the router (``gate``) at rank r; shared experts are
``nn.Linear`` modules adapted like a dense MLP. The expert weights are frozen: their grouped GEMMs run the data
gradient only, and each expert's adapter runs on the tokens routed to it (Megatron-Bridge's LoRA on
``TEGroupedMLP``'s ``linear_fc1``/``linear_fc2``, NeMo AutoModel's ``GroupedExpertsLoRA``: one low-rank pair per
local expert on the permuted tokens).

An adapter entry is ``(d_in, d_out)`` at the plan's rank r, or ``(d_in, d_out, n)`` at rank n r.
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num
from dse.formulas.finetune.mla import MLA_ROWS

__all__ = ["EXPERT_ROWS", "moe_adapted_linears", "moe_linear_parameters", "moe_linear_count"]

#: the gated MLPs: three matrices (gate, up, down), the gate and up projections reading the same input
GATED = ("swiglu", "geglu")

#: Kernel-table rows whose weights are one per routed expert (their adapters too: one per local expert).
EXPERT_ROWS = ("expert_fc1", "expert_fc2")

#: The linear layers of a layer's kernel table, in order, and how tensor parallelism splits them (an MoE layer's
#: router and shared gate are replicated; multi-head latent attention's rows: :data:`~dse.formulas.finetune.MLA_ROWS`).
LINEAR_ROWS = {"qkv": "column", "out": "row", "fc1": "column", "fc2": "row", "router": "replicated",
               "expert_fc1": "column", "expert_fc2": "row", "shared_fc1": "column", "shared_fc2": "row",
               "shared_gate": "replicated", **MLA_ROWS}


def _dims(adapter: tuple[Any, ...], split: str, tp: Num) -> tuple[Num, Num, Num]:
    """(k of A's GEMM, n of B's GEMM, rank multiple) of an adapter (d_in, d_out[, n]) on a row split as ``split``."""
    d_in, d_out = adapter[0], adapter[1]
    n = adapter[2] if len(adapter) > 2 else 1
    if split == "column":
        return d_in, _split(d_out, tp), n
    if split == "row":
        return _split(d_in, tp), d_out, n
    return d_in, d_out, n


def _split(x: Num, tp: Num) -> Num:
    """x / t, an integer staying one when the layer is not split (t = 1)."""
    return x if type(tp) is int and tp == 1 else x / tp


#: An MoE layer's linear rows (dse.formulas.kernels.moe_mlp_kernels); adapters on those that read the layer input
_MOE_ROWS = frozenset(("router", "expert_fc1", "expert_fc2", "shared_fc1", "shared_fc2", "shared_gate"))
_ROUTER_INPUT = frozenset(("shared_fc1", "shared_gate"))    # the router's saved input is theirs too


def _row_tokens(name: str, row: dict[str, Any]) -> Num:
    """Tokens an adapter on an MoE row runs on: the T k routed copies of the experts' rows (their FLOPs' tokens, the
    busiest expert's load not counted), else the row's GEMM rows."""
    tokens: Num = row["flops"] / (2 * row["k"] * row["n"]) if name in EXPERT_ROWS else row["m"]
    return tokens


def _moe_adapter_rows(out: dict[str, Any], name: str, shapes: list[tuple[Any, ...]], base: dict[str, Any], rank: Num,
                      tp: Num, e: Num) -> int:
    """The A and B GEMM rows of the adapters on one MoE row (in place); returns how many adapters."""
    tokens = _row_tokens(name, base)
    for i, adapter in enumerate(shapes):
        k_a, n_b, n = _dims(adapter, LINEAR_ROWS[name], tp)
        r = n * rank
        out[f"lora_{name}_{i}_a"] = {"kind": "gemm", "m": base["m"], "k": k_a, "n": r, "batch": base["batch"],
                                     "split": "", "saved": 0, "flops": 2 * tokens * k_a * r, "adapter": True}
        out[f"lora_{name}_{i}_b"] = {"kind": "gemm", "m": base["m"], "k": r, "n": n_b, "batch": base["batch"],
                                     "split": "", "saved": e * tokens * r, "flops": 2 * tokens * r * n_b,
                                     "adapter": True}
    return len(shapes)


def moe_adapted_linears(h: Num, experts: int, expert_ffn: Num, ffn_type: str = "swiglu", shared_ffn: Num = 0,
                        shared_gate: bool = False, targets: str = "all") -> dict[str, list[tuple[Any, ...]]]:
    """The adapters of one MoE layer's MLP: kernel-table row -> (d_in, d_out[, rank multiple]) of each adapter.

    Formula: router (h, E) [all]; each routed expert: fc1 (h, n_up F_e) at rank n_up r (n_up = 2 gated, else 1),
    fc2 (F_e, h) [all, mlp]; shared experts (S F_s = ``shared_ffn``): gate and up (h, S F_s) each, or fc1, and
    down (S F_s, h) [all, mlp]; a shared gate (h, 1) [all]. One expert (E = 1) is the dense MLP: its gate and up
    projections adapted separately, no router (dse's one-expert convention, dse.formulas.kernels.moe_mlp_kernels)
    Source: Hugging Face PEFT 0.21 ``LoraConfig(target_modules="all-linear")`` on Transformers 5.24's
    MixtralForCausalLM and Qwen3MoeForCausalLM (``ParamWrapper`` of ``experts.gate_up_proj`` at rank 2 r,
    ``experts.down_proj`` at r; ``mlp.gate`` at r); counted exactly by tests/test_finetune_moe.py.

    Returns:
        row -> list of adapters [dict]

    >>> moe_adapted_linears(4096, 8, 14336)      # Mixtral 8x7B, all linear layers
    {'router': [(4096, 8)], 'expert_fc1': [(4096, 28672, 2)], 'expert_fc2': [(14336, 4096)]}
    >>> moe_adapted_linears(4096, 1, 14336, targets="mlp")   # one expert: the dense MLP's adapters
    {'expert_fc1': [(4096, 14336), (4096, 14336)], 'expert_fc2': [(14336, 4096)]}
    """
    out: dict[str, list[tuple[Any, ...]]] = {}
    if targets not in ("all", "mlp"):
        return out
    n_up = 2 if ffn_type in ("swiglu", "geglu") else 1
    if experts == 1:
        out["expert_fc1"] = [(h, expert_ffn)] * n_up
    else:
        if targets == "all":
            out["router"] = [(h, experts)]
        out["expert_fc1"] = [(h, n_up * expert_ffn, n_up)] if n_up > 1 else [(h, expert_ffn)]
    out["expert_fc2"] = [(expert_ffn, h)]
    if shared_ffn:
        out["shared_fc1"] = [(h, shared_ffn)] * n_up
        out["shared_fc2"] = [(shared_ffn, h)]
        if shared_gate and targets == "all":
            out["shared_gate"] = [(h, 1)]
    return out


def moe_linear_parameters(h: Num, experts: int, expert_ffn: Num, ffn_type: str = "swiglu", shared_ffn: Num = 0,
                          shared_gate: bool = False, tp: Num = 1, ep: Num = 1, etp: Num | None = None) -> Num:
    """Weights of an MoE layer's MLP linear layers on one GPU (what QLoRA quantizes): router, local experts, shared.

    Formula: E h [E > 1] + (E / ep) n_m h F_e / t_e + n_m h S F_s / t (+ h with a shared gate); n_m = 3 gated,
    else 2; t_e = ``etp`` (expert tensor parallelism, MoE Parallel Folding), t where None
    Source: the modules of a Transformers-4 MoE layer (``MixtralSparseMoeBlock``: ``gate`` and per expert ``w1``,
    ``w2``, ``w3`` as ``nn.Linear``, each a bitsandbytes ``Linear4bit`` under QLoRA; QLoRA §4: all linear layers).

    Returns:
        parameters [count]

    >>> moe_linear_parameters(4096, 8, 14336) / 1e6     # Mixtral 8x7B: one layer's router and 8 experts, millions
    1409.318912
    """
    n_m = 3 if ffn_type in ("swiglu", "geglu") else 2
    router = experts * h if experts > 1 else 0
    split = 1 if type(tp) is int and tp == 1 else tp
    local = experts if type(ep) is int and ep == 1 else experts / ep
    shared = n_m * h * shared_ffn / split + (h if shared_gate else 0)
    e_split = split if etp is None else (1 if type(etp) is int and etp == 1 else etp)
    return router + local * n_m * h * expert_ffn / e_split + shared


def moe_linear_count(experts: Num, ffn_type: str = "swiglu", shared: bool = False, shared_gate: bool = False,
                     ep: Num = 1) -> Num:
    """Linear modules of an MoE layer's MLP on one GPU (QLoRA's dequantization kernels per pass).

    Formula: 1 (router, E > 1) + (E / ep) n_m + n_m [shared] + 1 [shared gate]; n_m = 3 gated, else 2
    Source: a Transformers-4 MoE layer's ``nn.Linear`` modules, each a bitsandbytes ``Linear4bit``.

    Returns:
        linear layers [count]

    >>> moe_linear_count(8)       # Mixtral: the router and 3 per expert
    25
    """
    n_m = 3 if ffn_type in ("swiglu", "geglu") else 2
    local = experts if type(ep) is int and ep == 1 else experts / ep
    return (1 if experts > 1 else 0) + local * n_m + (n_m if shared else 0) + (1 if shared_gate else 0)
