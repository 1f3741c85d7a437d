"""The MLP of a Mixture-of-Experts layer as kernels: router, top-k, permutation, expert and shared-expert GEMMs.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there). One GPU. Without expert
parallelism (``ep`` 1) every expert's weights are on every GPU and split over tensor parallelism like the dense
MLP (Megatron-Core MoE with expert tensor parallelism equal to tp and the all-gather token dispatcher); with
``ep`` > 1 a GPU holds E/ep experts and the routed tokens reach them by all-to-all (the alltoall dispatcher);
with ``etp`` other than tp (MoE Parallel Folding) each expert splits over etp GPUs instead.
"""

from __future__ import annotations

from dse.formulas._array import Num, minimum, where
from dse.formulas.kernels.rows import Table
from dse.formulas.transformer.moe import dropped_token_fraction

__all__ = ["dispatcher_gathers", "moe_mlp_kernels"]


def _somewhere(x: Num) -> bool:
    """``x`` is true (a bool) or true in some element (an array)."""
    return bool(x) if type(x) is bool else bool(getattr(x, "any", lambda: x)())


def dispatcher_gathers(tp: Num, ep: Num, sequence_parallel: bool, etp: Num | None = None) -> Num:
    """Where the routed experts' tokens gather inside the expert tensor-parallel group by the token dispatcher
    (an ``expert_allreduce`` row), not by the layer's tensor-parallel collective (``mlp_allreduce``).

    Formula: G = (etp != t) or (ep > 1 and SP), element by element (etp None: etp = t).
    Source: Megatron-Core ``megatron/core/transformer/moe/token_dispatcher.py``. The dispatcher's tensor-parallel
    group is the expert one (``MoETokenDispatcher.__init__``: ``self.tp_group = pg_collection.expt_tp``). With
    ep > 1 (``MoEAlltoAllTokenDispatcher``) a rank permutes its own T/t tokens into T k / t routed copies
    (``dispatch_preprocess``), sends them over the ep group (``token_dispatch``), and only then all-gathers what it
    received over the expert-TP group (``dispatch_postprocess``: ``gather_from_sequence_parallel_region(
    global_input_tokens, group=self.tp_group)``) and reduce-scatters the experts' output there
    (``combine_preprocess``): the k routed copies, also where etp = t. The MoE layer itself runs no tensor-parallel
    collective on the routed path (``MoELayer.forward`` requires sequence parallelism with tp > 1 in training).
    With ep = 1 (``MoEAllGatherTokenDispatcher.token_dispatch``) the tokens before routing gather over the tp x ep
    group: with etp = t that is the layer's own TP all-gather of T tokens (``mlp_allreduce``'s message). Without
    sequence parallelism (a plan Megatron-Core refuses with tp > 1) dse keeps the all-reduce of the layer's output.

    Returns:
        a bool (an array of them where an argument is one) [1]

    >>> dispatcher_gathers(4, 8, True), dispatcher_gathers(4, 1, True), dispatcher_gathers(4, 1, True, etp=1)
    (True, False, True)
    """
    folded = False if etp is None else etp != tp
    return folded | ((ep > 1) & sequence_parallel & (tp > 1))


def moe_mlp_kernels(s: Num, b: Num, h: Num, experts: int, experts_per_token: Num, expert_ffn: Num, *, tp: Num = 1,
                    sequence_parallel: bool = False, ffn_type: str = "swiglu", shared_experts: Num = 0,
                    shared_ffn: Num = 0, shared_gate: bool = False, imbalance: Num = 1.0,
                    bytes_per_element: Num = 2, ep: Num = 1, capacity: Num | None = None,
                    pad: bool = False, etp: Num | None = None, dispatch_bytes_per_element: Num | None = None) -> Table:
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
    Expert parallelism (ep > 1): the GPU holds E/ep experts, each with c T k ep / E tokens (the tokens of all ep
    ranks routed to the local experts; the FLOPs per GPU stay T k's); the permuted tokens go out by an all-to-all
    over the ep group before the experts (``ep_dispatch``) and come back by one after them (``ep_combine``), and
    backward runs both again on the gradients: 4 all-to-alls of e T r k h bytes per GPU, of which (ep-1)/ep cross
    to other ranks (:func:`dse.formulas.parallelism.alltoall_time` applies that share). Saved bytes are unchanged:
    a GPU still holds T k routed tokens under balanced routing.
    Capacity factor C (``capacity``; Megatron-Core --moe-expert-capacity-factor): an expert keeps at most C times the
    mean, so the busiest expert's GEMMs run min(c, C) T k / E tokens (the rest are dropped); padded to capacity
    (``pad``, --moe-pad-expert-input-to-capacity) every expert runs C T k / E, and the dispatch and combine
    messages, the routed copies saved and the expert activation carry C T k copies (the padded buffers); without
    padding the router drops the copies over capacity before the dispatch, and those rows carry the kept ones,
    (1 - d) T k (d: :func:`dse.formulas.transformer.dropped_token_fraction` of the T r tokens a GPU routes;
    Megatron-Core ``moe_utils.apply_router_token_dropping``: routing_map AND capacity_mask is what is permuted).
    Expert tensor parallelism other than tp (``etp``; MoE Parallel Folding, Liu et al. 2025, arXiv 2504.14960;
    Megatron-Core --expert-tensor-parallel-size; None: etp = t, the rows above): each routed expert splits over etp
    GPUs, F_e / etp columns each, and the tokens enter the MoE layer sharded over t (sequence parallelism, or t = 1),
    so an expert GPU sees u = etp / t times the layer's tokens T: E grouped GEMMs of c T u k / E tokens (c T u k ep
    / E with ep), permutation and un-permutation of T u tokens, the saved routed copies e T u k h; FLOPs and
    activation per GPU stay T k F_e / t's. The token dispatcher gathers the tokens inside the etp group before the
    experts and reduce-scatters their output after them (``expert_allreduce`` forward, ``expert_dgrad_allreduce``
    backward: an all-gather and a reduce-scatter of e T u h bytes, of the k routed copies e T u k h with ep > 1;
    Megatron-Core ``MoEAllGatherTokenDispatcher`` over tp x ep, ``MoEAlltoAllTokenDispatcher.dispatch_postprocess``
    / ``combine_preprocess``). The alltoall dispatcher does so at etp = t too (with ep > 1, t > 1 and sequence
    parallelism: its expert-TP group is then the tp group, ``group`` "tp"): it gathers the k routed copies it
    received, e T k h, where the layer's own TP collective (``mlp_allreduce``) keeps the shared experts' e T h only
    (:func:`dispatcher_gathers` says where; elsewhere these rows carry 0 bytes and the layer's TP collectives carry
    the tokens, as above).
    FP8 dispatch (``dispatch_bytes_per_element`` e_d, DeepEP's FP8 dispatch: :data:`dse.formulas.parallelism.
    FP8_DISPATCH_BYTES`): the dispatch and the combine's backward (the all-to-alls towards the experts) carry
    e_d T r k h bytes, the combine and the dispatch's backward stay e T r k h (DeepSeek-V3, arXiv 2412.19437
    §3.3.3: activations quantized to FP8 before the dispatch, activation gradients before the down-projections;
    "for both the forward and backward combine components, we retain them in BF16").
    Source: Megatron-Core MoE (``TopKRouter``, ``MoEAllGatherTokenDispatcher``, ``GroupedMLP``; Shoeybi et al.
    2019 for the TP split); Hugging Face MixtralSparseMoeBlock (fp32 softmax, top-k, index_add_ combine);
    Fedus et al. 2021 (Switch Transformer, arXiv 2101.03961) §2.2 for the capacity of the busiest expert;
    Lepikhin et al. 2020 (GShard, arXiv 2006.16668) §2.2 and Rajbhandari et al. 2022 (DeepSpeed-MoE,
    arXiv 2201.05596) §5 for the dispatch and combine all-to-alls; Megatron-Core ``MoEAlltoAllTokenDispatcher``.

    Returns:
        kernel name -> row, in execution order [dict]

    >>> k = moe_mlp_kernels(4096, 1, 4096, 8, 2, 14336)   # a Mixtral 8x7B layer's MLP
    >>> list(k)
    ['router', 'routing', 'permute', 'expert_fc1', 'expert_activation', 'expert_fc2', 'unpermute']
    >>> k["expert_fc1"]["m"], k["expert_fc1"]["n"], k["expert_fc1"]["batch"]
    (1024.0, 28672, 8)
    >>> moe_mlp_kernels(4096, 1, 4096, 8, 2, 14336, imbalance=1.5, capacity=1.25)["expert_fc1"]["m"]   # capped
    1280.0
    >>> k = moe_mlp_kernels(4096, 1, 4096, 8, 2, 14336, ep=8)   # one expert per GPU
    >>> k["expert_fc1"]["m"], k["expert_fc1"]["batch"], k["ep_dispatch"]["comm"] / 2**20   # tokens, MiB per GPU
    (8192.0, 1.0, 64.0)
    """
    e = bytes_per_element
    tok = s * b
    r = 1 / tp if sequence_parallel else 1
    unsplit = type(tp) is int and tp == 1
    f_loc = expert_ffn if unsplit else expert_ffn / tp
    u: Num = 1                              # an expert GPU's tokens over the layer's T (etp / tp)
    if etp is not None:                     # expert tensor parallelism other than tp (MoE Parallel Folding)
        u = etp / tp
        f_loc = expert_ffn if type(etp) is int and etp == 1 else expert_ffn / etp
    gated = ffn_type in ("swiglu", "geglu")
    n_up = 2 if gated else 1
    kept = 3 if gated else (1 if ffn_type == "relu" else 2)
    k = experts_per_token
    x_in = e * tok * h * r
    routed = experts > 1
    parallel = routed and not (type(ep) is int and ep == 1)    # expert parallelism: all-to-all rows
    local = experts / ep if parallel else experts              # experts on this GPU
    t: Table = {}
    if routed:
        t["router"] = {"kind": "gemm", "m": tok * r, "k": h, "n": experts, "batch": 1, "split": "", "saved": x_in,
                       "flops": 2 * tok * h * experts / tp}
        t["routing"] = {"kind": "elementwise", "bytes": tok * r * (experts * (e + 8) + 12 * k),
                        "saved": tok * r * (4 * experts + 8 * k)}
        t["permute"] = {"kind": "elementwise", "bytes": e * tok * u * h * (1 + k), "saved": 0}
    load: Num = imbalance                   # the busiest expert's tokens over the mean
    rows: Num = 1                           # routed copies over T k
    if routed and capacity is not None:     # capacity factor: capped, or padded to it
        load, rows = ((capacity, capacity) if pad else
                      (minimum(imbalance, capacity), 1 - dropped_token_fraction(tok * r, experts, k, capacity,
                                                                                imbalance)))
    a2a = e * tok * r * k * h * rows                           # the routed copies a GPU sends in one all-to-all
    a2a_in = a2a if dispatch_bytes_per_element is None else dispatch_bytes_per_element * tok * r * k * h * rows
    if parallel:
        t["ep_dispatch"] = {"kind": "collective", "op": "alltoall", "group": "ep", "comm": a2a_in, "pass": "forward",
                            "saved": 0}
    gathers = dispatcher_gathers(tp, ep, sequence_parallel, etp) if routed else False
    if etp is not None and routed or _somewhere(gathers):   # the dispatcher's expert-TP all-gather (k copies, ep>1)
        t["expert_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp" if etp is None else "etp",
                                 "pass": "forward", "saved": 0, "optional": True,
                                 "comm": where(gathers, e * tok * u * h * where(ep > 1, k * rows, 1), 0.0)}
    per_expert = load * tok * u * k * ep / experts if parallel else load * tok * u * k / experts
    t["expert_fc1"] = {"kind": "gemm", "m": per_expert, "k": h, "n": n_up * f_loc, "batch": local,
                       "split": "column", "saved": e * tok * u * k * h * rows if routed else x_in,
                       "flops": 2 * tok * u * k * h * n_up * f_loc}
    t["expert_activation"] = {"kind": "elementwise", "bytes": (3 if gated else 2) * e * tok * u * k * f_loc * rows,
                              "saved": kept * e * tok * u * k * f_loc * rows, "elements": tok * u * k * f_loc * rows}
    t["expert_fc2"] = {"kind": "gemm", "m": per_expert, "k": f_loc, "n": h, "batch": local, "split": "row",
                       "saved": 0, "flops": 2 * tok * u * k * f_loc * h}
    if "expert_allreduce" in t:             # backward: the gradients' reduce-scatter and all-gather
        t["expert_dgrad_allreduce"] = {**t["expert_allreduce"], "pass": "backward"}
    if parallel:   # the combine, then backward's two: the gradients of the combine's and the dispatch's outputs
        t["ep_combine"] = {"kind": "collective", "op": "alltoall", "group": "ep", "comm": a2a, "pass": "forward",
                           "saved": 0}
        t["ep_combine_backward"] = {"kind": "collective", "op": "alltoall", "group": "ep", "comm": a2a_in,
                                    "pass": "backward", "saved": 0}
        t["ep_dispatch_backward"] = {"kind": "collective", "op": "alltoall", "group": "ep", "comm": a2a,
                                     "pass": "backward", "saved": 0}
    if routed:
        t["unpermute"] = {"kind": "elementwise", "bytes": e * tok * u * h * (k + 1), "saved": e * tok * u * k * h}
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
