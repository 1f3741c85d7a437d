"""The MLP of a Mixture-of-Experts layer as kernels: router, top-k, permutation, expert and shared-expert GEMMs.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there). One GPU, no expert
parallelism: every expert's weights are on every GPU and split over tensor parallelism like the dense MLP
(Megatron-Core MoE with expert tensor parallelism equal to tp and the all-gather token dispatcher).
"""

from __future__ import annotations

from dse.formulas._array import Num
from dse.formulas.kernels.rows import Table

__all__ = ["moe_mlp_kernels"]


def moe_mlp_kernels(s: Num, b: Num, h: Num, experts: int, experts_per_token: Num, expert_ffn: Num, *, tp: Num = 1,
                    sequence_parallel: bool = False, ffn_type: str = "swiglu", shared_experts: Num = 0,
                    shared_ffn: Num = 0, shared_gate: bool = False, imbalance: Num = 1.0,
                    bytes_per_element: Num = 2) -> Table:
    """The kernels of one MoE layer's MLP on one GPU for one micro-batch (balanced routing, the busiest expert's share).

    Formula: T = s b, r = 1/t with SP (else 1), k top-k, E experts, c the busiest expert's tokens over the mean.
    Router GEMM (T r, h, E), its FLOPs 2 T h E / t; routing (fp32 softmax over E, top-k): T r (E (e + 8) + 12 k)
    bytes, saving T r (4 E + 8 k) (fp32 probabilities, int64 indices); permutation to expert order: e T h (1 + k)
    bytes; expert GEMMs as E grouped GEMMs of c T k / E tokens each: fc1 (c T k / E, h, n_g F_e / t), fc2
    (c T k / E, F_e / t, h), FLOPs 2 T k h n_g F_e / t and 2 T k F_e h / t (c does not count: model FLOPs are the
    active parameters'); activation n_g' e T k F_e / t bytes; un-permutation and weighting: e T h (k + 1) bytes,
    saving the k expert outputs e T k h; shared experts as dense GEMMs of T tokens with S F_s columns (a gate:
    GEMM (T, h, 1), a sigmoid scale 3 e T h bytes, and the add of the two outputs 3 e T h). Saved: the router
    keeps the layer input (e T h r, counted once for the shared experts too), fc1 of the experts the permuted
    tokens (e T k h: k copies, gathered over TP), the activation its n_g'' tensors of T k F_e / t (``elements``: what
    a software stack's activation op scales with). One expert
    (E = 1) routes nothing: no router, no permutation, and the expert keeps the layer input like a dense fc1,
    so that E = k = 1 prices as the dense MLP.
    Source: Megatron-Core MoE (``TopKRouter``, ``MoEAllGatherTokenDispatcher``, ``GroupedMLP``; Shoeybi et al.
    2019 for the TP split); Hugging Face MixtralSparseMoeBlock (fp32 softmax, top-k, index_add_ combine);
    Fedus et al. 2021 (Switch Transformer, arXiv 2101.03961) §2.2 for the capacity of the busiest expert.

    Returns:
        kernel name -> row, in execution order [dict]

    >>> k = moe_mlp_kernels(4096, 1, 4096, 8, 2, 14336)   # a Mixtral 8x7B layer's MLP
    >>> list(k)
    ['router', 'routing', 'permute', 'expert_fc1', 'expert_activation', 'expert_fc2', 'unpermute']
    >>> k["expert_fc1"]["m"], k["expert_fc1"]["n"], k["expert_fc1"]["batch"]
    (1024.0, 28672, 8)
    """
    e = bytes_per_element
    tok = s * b
    r = 1 / tp if sequence_parallel else 1
    unsplit = type(tp) is int and tp == 1
    f_loc = expert_ffn if unsplit else expert_ffn / tp
    gated = ffn_type in ("swiglu", "geglu")
    n_up = 2 if gated else 1
    kept = 3 if gated else (1 if ffn_type == "relu" else 2)
    k = experts_per_token
    x_in = e * tok * h * r
    routed = experts > 1
    t: Table = {}
    if routed:
        t["router"] = {"kind": "gemm", "m": tok * r, "k": h, "n": experts, "batch": 1, "split": "", "saved": x_in,
                       "flops": 2 * tok * h * experts / tp}
        t["routing"] = {"kind": "elementwise", "bytes": tok * r * (experts * (e + 8) + 12 * k),
                        "saved": tok * r * (4 * experts + 8 * k)}
        t["permute"] = {"kind": "elementwise", "bytes": e * tok * h * (1 + k), "saved": 0}
    per_expert = imbalance * tok * k / experts
    t["expert_fc1"] = {"kind": "gemm", "m": per_expert, "k": h, "n": n_up * f_loc, "batch": experts,
                       "split": "column", "saved": e * tok * k * h if routed else x_in,
                       "flops": 2 * tok * k * h * n_up * f_loc}
    t["expert_activation"] = {"kind": "elementwise", "bytes": (3 if gated else 2) * e * tok * k * f_loc,
                              "saved": kept * e * tok * k * f_loc, "elements": tok * k * f_loc}
    t["expert_fc2"] = {"kind": "gemm", "m": per_expert, "k": f_loc, "n": h, "batch": experts, "split": "row",
                       "saved": 0, "flops": 2 * tok * k * f_loc * h}
    if routed:
        t["unpermute"] = {"kind": "elementwise", "bytes": e * tok * h * (k + 1), "saved": e * tok * k * h}
    if shared_experts:
        fs = shared_experts * shared_ffn if unsplit else shared_experts * shared_ffn / tp
        t["shared_fc1"] = {"kind": "gemm", "m": tok, "k": h, "n": n_up * fs, "batch": 1, "split": "column",
                           "saved": 0, "flops": 2 * tok * h * n_up * fs}
        t["shared_activation"] = {"kind": "elementwise", "bytes": (3 if gated else 2) * e * tok * fs,
                                  "saved": kept * e * tok * fs, "elements": tok * fs}
        t["shared_fc2"] = {"kind": "gemm", "m": tok, "k": fs, "n": h, "batch": 1, "split": "row", "saved": 0,
                           "flops": 2 * tok * fs * h}
        if shared_gate:
            t["shared_gate"] = {"kind": "gemm", "m": tok, "k": h, "n": 1, "batch": 1, "split": "", "saved": 0,
                                "flops": 2 * tok * h / tp}
            t["shared_scale"] = {"kind": "elementwise", "bytes": 3 * e * tok * h, "saved": e * tok * (h + 1)}
        t["shared_add"] = {"kind": "elementwise", "bytes": 3 * e * tok * h, "saved": 0}
    return t
