"""The MLP of a Mixture-of-Experts layer as kernels: router, top-k, permutation, expert and shared-expert GEMMs.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there). One GPU. Without expert
parallelism (``ep`` 1) every expert's weights are on every GPU and split over tensor parallelism like the dense
MLP (Megatron-Core MoE with expert tensor parallelism equal to tp and the all-gather token dispatcher); with
``ep`` > 1 a GPU holds E/ep experts and the routed tokens reach them by all-to-all (the alltoall dispatcher);
with ``etp`` other than tp (MoE Parallel Folding) each expert splits over etp GPUs instead.
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, minimum, where
from dse.formulas.kernels.rows import Table
from dse.formulas.transformer.moe import dropped_token_fraction

__all__ = ["dispatcher_gathers", "moe_mlp_kernels", "sort_chunk_rows", "expert_bias_row", "glu_clamp_row"]


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
                    pad: bool = False, etp: Num | None = None, dispatch_bytes_per_element: Num | None = None,
                    bias: bool = False, gemm_per_expert: bool = False, glu_clamp: bool = False,
                    dispatcher: str | None = None) -> Table:
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
    Megatron-Core's experts (``gemm_per_expert``; its ``TEGroupedMLP``): Transformer Engine's ``GroupedLinear``
    runs a grouped GEMM as one cuBLAS GEMM per local expert (``general_grouped_gemm`` ->
    ``nvte_multi_stream_cublas_gemm``, a loop over the GEMMs), so the expert rows carry ``launches`` L: L kernels
    each way for the host and L fixed times t0 (:func:`dse.estimate.kernel_table.kernel_time`); Transformers'
    grouped_mm and torch.compile run one kernel. With L = 16 experts of 1,024 rows (gpt-oss-120b, ep 8) the per-GEMM
    t0 brings the priced loop within 7 % of a loop of torch GEMMs measured on an H200 (data/h200/micro.jsonl,
    tests/test_moe_small_experts.py; also at 256 rows); one t0 per grouped GEMM was 11-54 % short.
    A model with biases on its experts (``bias``: gpt-oss) adds :func:`expert_bias_row` after fc2; with ep > 1 and
    more than one local expert, :func:`sort_chunk_rows` before fc1 and after fc2 (``dispatcher`` alltoall, or unset:
    priced where the ep group lies inside one node; none for flex); a clamped GLU (``glu_clamp``:
    gpt-oss's swiglu_limit under Megatron-Core) :func:`glu_clamp_row` before the activation.
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
    copies = tok * u * k * rows                                 # the routed copies this GPU's experts run
    per_gemm = {"launches": local} if gemm_per_expert and routed else {}   # TE GroupedLinear: a GEMM per expert
    sorts = parallel and dispatcher != "flex"   # the alltoall dispatcher sorts by local expert (unset: in one node)
    sort, unsort = sort_chunk_rows(copies, h, where(ep > 1, local, 1), e, dispatcher is None) if sorts else ({}, {})
    if sort:
        t["sort_chunks"] = sort
    t["expert_fc1"] = {"kind": "gemm", "m": per_expert, "k": h, "n": n_up * f_loc, "batch": local,
                       "split": "column", "saved": e * tok * u * k * h * rows if routed else x_in,
                       "flops": 2 * tok * u * k * h * n_up * f_loc, **per_gemm}
    if glu_clamp and gated and routed:       # gpt-oss: the fc1 output clamped with eager ops before the activation
        t["glu_clamp"] = glu_clamp_row(e * tok * u * k * f_loc * rows)
    t["expert_activation"] = {"kind": "elementwise", "bytes": (3 if gated else 2) * e * tok * u * k * f_loc * rows,
                              "saved": kept * e * tok * u * k * f_loc * rows, "elements": tok * u * k * f_loc * rows}
    t["expert_fc2"] = {"kind": "gemm", "m": per_expert, "k": f_loc, "n": h, "batch": local, "split": "row",
                       "saved": 0, "flops": 2 * tok * u * k * f_loc * h, **per_gemm}
    if routed and bias:                     # the fc2 bias, scaled by each copy's probability, expert by expert
        t["expert_bias"] = expert_bias_row(copies, h, local, e)
    if unsort:
        t["unsort_chunks"] = unsort
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


def sort_chunk_rows(copies: Num, h: Num, local: Num, bytes_per_element: Num = 2, inside_only: bool = True
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The alltoall dispatcher's reordering of the received copies by local expert, and back: two rows.

    Formula: each of ``sort_chunks`` (after the dispatch) and ``unsort_chunks`` (before the combine) reads and writes
    the N = T k copies a GPU's experts run: 2 e N h bytes forward and 2 e N h backward (the inverse order), one
    kernel each way; none with one local expert (L = 1: the received copies are in order).
    Source: Megatron-Core ``MoEAlltoAllTokenDispatcher`` (megatron/core/transformer/moe/token_dispatcher.py):
    the all-to-all delivers the copies ordered by source rank, then local expert; ``dispatch_postprocess`` runs
    ``sort_chunks_by_idxs(..., self.sort_input_by_local_experts)`` "if self.num_local_experts > 1" (Permutation 2)
    and ``combine_preprocess`` the inverse (``restore_output_by_local_experts``, Unpermutation 2); with
    ``--moe-permute-fusion`` both are Transformer Engine's fused ``moe_sort_chunks_by_index`` (a gather of whole
    rows; its backward is the inverse gather). The flex dispatchers (DeepEP, HybridEP: ``plan.moe_dispatcher``
    flex) write the received tokens once into expert order (``get_permuted_hidden_states_by_experts``) and permute
    nothing before sending, one pass in all as the ``permute`` row prices: no rows. With the dispatcher unset
    (dse's default: alltoall in one node, flex across) the rows carry ``alltoall`` (``inside_only``) and
    :func:`dse.estimate.kernel_table.table_time` prices them (their time and launches) only where the expert-parallel
    group lies inside one
    node. The probabilities sorted along (e N) are left out.

    Args:
        copies: N, routed copies on this GPU's experts [count]
        h: hidden size [count]
        local: L, experts on this GPU [count]
        inside_only: price the rows only on an ep link inside one node (the dispatcher unset) [bool]
    Returns:
        (sort_chunks, unsort_chunks) rows, or two empty dicts when L is the number 1 [dict]

    >>> sort, unsort = sort_chunk_rows(16384, 2880, 16)   # gpt-oss-120b, ep 8: MB forward and backward
    >>> sort["bytes"] / 1e6, sort["bytes_backward"] / 1e6, sort["kernels"], unsort["alltoall"]
    (188.74368, 188.74368, 1, True)
    >>> sort_chunk_rows(8192, 4096, 1)   # mixtral-8x7b, ep 8: one expert per GPU
    ({}, {})
    """
    if type(local) in (int, float) and local <= 1:
        return {}, {}
    runs = where(local > 1, 1, 0)
    moved = 2 * bytes_per_element * copies * h * runs
    row = {"kind": "elementwise", "bytes": moved, "bytes_backward": moved, "kernels": runs, "kernels_backward": runs,
           "saved": 0, **({"alltoall": True} if inside_only else {})}
    return row, dict(row)


def expert_bias_row(copies: Num, h: Num, local: Num, bytes_per_element: Num = 2) -> dict[str, Any]:
    """The second expert linear's bias, added expert by expert after the grouped GEMM, scaled by the probabilities.

    Formula: forward, per local expert, b_i p (write e n_i h) and y_i + b_i p (read 2e, write e), then one
    torch.cat of the N copies (read e, write e): 6 e N h bytes, 2 L + 1 kernels; backward, per expert, the
    product's two gradients (grad p summed to b's shape, grad b summed to p's: each a product, read e write e, and
    a reduction, read e), then the two splits' gradients concatenated (the copies': read e, write e; the
    probabilities'): 8 e N h bytes, 4 L + 2 kernels, and each bias gradient's accumulation into its fp32 main
    gradient (Megatron-Core's DDP hook, ``param.main_grad.add_``): 5 L + 2 kernels. Forward and backward counted op
    by op under a TorchDispatchMode on PyTorch (tests/test_moe_small_experts.py).
    Source: Megatron-Core ``TEGroupedMLP._apply_bias`` (megatron/core/transformer/moe/experts.py, core_v0.16):
    ``torch.cat([t + b * p for t, b, p in zip(torch.split(out, tokens_per_expert), bias_parallel,
    torch.split(permuted_probs, tokens_per_expert))])``; linear_fc2 is built with ``skip_bias_add=True`` so that
    the bias is weighted like the rest of the expert's output (y = p (W2 a + b2)), while fc1's bias is added in the
    GEMM's epilogue (``skip_bias_add=False``) and costs nothing here. The probabilities are in the activations'
    dtype (the router's logits' dtype; ``--moe-router-dtype fp32`` would make the products fp32, not modelled).
    Models without expert biases (Mixtral, Qwen, DeepSeek) have no such row; gpt-oss has one.

    Args:
        copies: N, routed copies on this GPU's experts [count]
        h: hidden size [count]
        local: L, experts on this GPU [count]
    Returns:
        the row [dict]

    >>> r = expert_bias_row(16384, 2880, 16)   # gpt-oss-120b, ep 8
    >>> r["bytes"] / 1e6, r["bytes_backward"] / 1e6, r["kernels"], r["kernels_backward"]
    (566.23104, 754.97472, 33, 82)
    """
    e = bytes_per_element
    return {"kind": "elementwise", "bytes": 6 * e * copies * h, "bytes_backward": 8 * e * copies * h,
            "kernels": 2 * local + 1, "kernels_backward": 5 * local + 2, "saved": 0}


def glu_clamp_row(half_bytes: Num) -> dict[str, Any]:
    """The clamp of a gated expert's fc1 output, with eager ops before Megatron-Core's fused activation.

    Formula: with F = e N F_e the bytes of one half (gate or linear part) of the N routed copies' fc1 output,
    forward the gate's clamp (read F, write F), the linear part's (F, F) and their torch.cat (2F, 2F): 8 F bytes, 3
    kernels; backward the two clamps' masked gradients and the chunk's concatenated gradient: 15 F bytes, 9 kernels.
    Saved: not counted (each clamp keeps its input, the fc1 output, beside the clamped copy the activation keeps:
    2 F more; the gpt-oss recipe recomputes the MoE activation, which drops both).
    Source: Megatron-Core ``weighted_bias_quick_geglu_impl`` (megatron/core/fusions/fused_bias_geglu.py,
    core_v0.16): ``if clamp_value is not None: x_glu, x_linear = input.chunk(2, -1); input =
    torch.cat((x_glu.clamp(min=None, max=clamp_value), x_linear.clamp(min=-clamp_value, max=clamp_value)), -1)``
    before the jit-fused weighted quick-GeGLU (TEGroupedMLP with ``activation_func_clamp_value`` 7.0, gpt-oss's
    ``swiglu_limit``); counted op by op under a TorchDispatchMode on PyTorch (tests/test_moe_small_experts.py).

    Args:
        half_bytes: e N F_e, one half of the fc1 output on this GPU [bytes]
    Returns:
        the row [dict]

    >>> r = glu_clamp_row(2 * 16384 * 2880)   # gpt-oss-120b, ep 8: MB forward and backward
    >>> r["bytes"] / 1e6, r["bytes_backward"] / 1e6, r["kernels"], r["kernels_backward"]
    (754.97472, 1415.5776, 3, 9)
    """
    return {"kind": "elementwise", "bytes": 8 * half_bytes, "bytes_backward": 15 * half_bytes, "kernels": 3,
            "kernels_backward": 9, "saved": 0}
