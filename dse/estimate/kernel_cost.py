"""What a kernel table costs on one GPU and its links: :func:`kernel_time` is the one place where a kernel's cost is
decided (a GEMM at the GEMM efficiency plus the fixed per-kernel overhead, a flash-attention kernel at the attention
efficiency, an element-wise kernel as bytes over HBM bandwidth: a shape-dependent GEMM efficiency or a per-kernel
launch floor belongs there); :func:`collective_time` prices a collective row on its link, and :func:`table_time`
sums a table's rows per pass. The tables come from :func:`dse.estimate.kernel_table.kernel_tables`.

Array-safe: the table's numbers and the hardware's may be numpy arrays; only the kernel kinds and the plan's
string/boolean choices branch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from dse.formulas import kernels as _kernels
from dse.formulas._array import Num, maximum, where
from dse.formulas.parallelism.nccl import Path

if TYPE_CHECKING:
    from dse.specs.hardware import GPUSpec

#: A kernel-table row and a table (dse.formulas.kernels), and a formulas module or its tracer (--explain).
Row = dict[str, Any]
Table = dict[str, Row]
Module = Any


class KernelCost(NamedTuple):
    """The hardware numbers a compute kernel's time depends on (one GPU)."""

    peak: Num          # dense peak of the GEMM dtype [FLOP/s]
    gemm: Num          # achieved share of the peak in GEMMs [fraction]
    attention: Num     # achieved share of the peak in a fused attention kernel [fraction]
    overhead: Num      # fixed time per GEMM / attention kernel [s]
    bandwidth: Num     # HBM bandwidth [bytes/s]
    memory: Num        # achieved share of the HBM bandwidth [fraction]
    attention_peak: Num | None = None   # dense peak of the attention GEMMs' dtype (None: peak) [FLOP/s]
    head_peak: Num | None = None        # dense peak of the LM head's dtype (None: peak) [FLOP/s]
    unaligned: Num | None = None        # achieved share of the peak in a GEMM with unaligned dimensions [fraction]
    operand_bytes: Num | None = None    # bytes per GEMM operand element for the roofline (None: compute-bound only)
    kernel_overhead: Num = 0.0          # fixed time per element-wise kernel of a row that counts its kernels [s]
    depth: Num = 0.0                    # k0 of a GEMM tile's prologue and epilogue (compute.gemm_time) [count]
    fp8: Num | None = None              # achieved share of the FP8 peak in an FP8 GEMM (None: gemm) [fraction]
    fp8_depth: Num | None = None        # k0 of an FP8 GEMM (None: depth) [count]
    strided: Num | None = None          # achieved share of the HBM bandwidth on the non-vectorized path (None: memory)
    softmax: Num | None = None          # row softmax forward elements per second (None: bytes-bound only) [1/s]
    softmax_backward: Num | None = None  # row softmax backward elements per second (None: bytes-bound only) [1/s]
    unvectorized: Num | None = None     # achieved share of the HBM bandwidth on the non-vectorized path with
                                        # operands in one order (broadcast, slice, cast; None: strided) [fraction]
    grouped: dict[str, dict[str, float]] | None = None   # measured grouped-GEMM rates: shape -> rows -> fraction
                                                         # of peak (compute.grouped_gemm_time; None: none)


class Link(NamedTuple):
    """The group a collective runs on: ranks, per-rank bandwidth, its NCCL path, inside one node or not."""

    ranks: Num
    bandwidth: Num     # [bytes/s]
    path: Path         # nodes spanned and per-protocol latencies (dse.formulas.parallelism.nccl)
    inside: Num = True   # the group's ranks share a node (bool, or an array of them)
    per_node: Num = 1    # ep only: ranks of the group in one node
    share: Num = 0.0     # ep only: share of an all-to-all's bytes that leave the node
    network: Num = 0.0   # ep only: the GPU's share of its node's network bandwidth [bytes/s]
    stage: Num | None = None     # ep only: shares of an all-to-all's bytes its NVLink stage moves and that cross
    nvlink: Num | None = None    # NVLink (dse.formulas.parallelism.dispatch_shares; None: (q-1)/q)


def cost_of(gpu: GPUSpec, peak: Num, attention_peak: Num | None = None, head_peak: Num | None = None,
            operand_bytes: Num | None = None) -> KernelCost:
    """The :class:`KernelCost` of a GPU spec with its dense peaks for the plan's precision (per GEMM class)."""
    eff = gpu.efficiency
    return KernelCost(peak, eff.gemm, eff.attention, eff.gemm_overhead, gpu.hbm_bandwidth, eff.memory,
                      peak if attention_peak is None else attention_peak, peak if head_peak is None else head_peak,
                      eff.gemm if eff.gemm_unaligned is None else eff.gemm_unaligned, operand_bytes,
                      eff.kernel_overhead, eff.gemm_depth, eff.gemm_fp8, eff.gemm_fp8_depth, eff.memory_strided,
                      eff.softmax_rate, eff.softmax_rate_backward, eff.memory_unvectorized,
                      eff.gemm_grouped or None)


def kernel_time(row: Row, hw: KernelCost, C: Module) -> tuple[Num, Num]:
    """(forward, backward) time of one compute kernel; ``C`` is :mod:`dse.formulas.compute` (or its tracer).

    GEMM: 2 m k n batch / (peak eta_gemm) + t0 forward (+ (L - 1) t0 for a grouped GEMM that runs as L GEMMs,
    ``launches``: Transformer Engine's GroupedLinear), twice that backward (data and weight gradients of the
    same shapes; once for a ``frozen`` weight, which has no weight gradient); a GEMM whose dimensions are not
    multiples of 16 bytes (``aligned`` false: an unpadded vocabulary) runs at ``eta_unaligned`` instead, an FP8
    GEMM (``fp8``: precision fp8's linear layers) at ``eta_fp8`` with its own k0 and ``operand_bytes``, a
    ``grouped_mm`` row (torch._grouped_mm: Transformers' experts) at the GPU's measured grouped rate where it has one
    (:func:`dse.formulas.compute.grouped_gemm_time`; twice that backward). Flash
    attention: executed FLOPs / (peak eta_attn) + t0 forward, backward FLOPs + 2 t0 backward (FlashAttention-2's
    backward is two kernels). Element-wise: bytes /
    (B_hbm eta_mem), twice the bytes backward unless the row states its backward bytes (a software stack's).
    """
    kind = row["kind"]
    cls = row.get("class")
    peak: Any = hw.peak if cls is None else (hw.attention_peak if cls == "attention" else hw.head_peak)
    if kind == "gemm":
        slow: Any = hw.gemm if hw.unaligned is None else hw.unaligned
        eff = hw.gemm if "aligned" not in row else where(row["aligned"], hw.gemm, slow)
        depth = hw.depth
        if "fp8" in row and hw.fp8 is not None:
            eff, depth = hw.fp8, (hw.depth if hw.fp8_depth is None else hw.fp8_depth)
        if "grouped_mm" in row and hw.grouped:   # torch._grouped_mm (Transformers' experts): its measured rate
            f = C.grouped_gemm_time(row["m"], row["k"], row["n"], row["batch"], peak, hw.grouped)
            return f, 2 * f
        f = C.gemm_time(row["m"], row["k"], row["n"], peak, eff, hw.overhead, row["batch"], depth)
        if "launches" in row:   # a grouped GEMM run as one GEMM per expert: each its own fixed time
            f = f + (row["launches"] - 1) * hw.overhead
        if hw.operand_bytes is not None:   # roofline: a GEMM that moves more than it computes waits on HBM
            m, k, n = row["m"], row["k"], row["n"]
            moved = row.get("operand_bytes", hw.operand_bytes) * row["batch"] * (m * k + k * n + m * n)
            f = maximum(f, C.memory_time(moved, hw.bandwidth, hw.memory) + hw.overhead)
        return f, (f if "frozen" in row else 2 * f)    # a frozen weight: the data-gradient GEMM only
    if kind == "flash":
        rate = peak * hw.attention
        return row["executed"] / rate + hw.overhead, row["executed_backward"] / rate + 2 * hw.overhead
    f = C.memory_time(row["bytes"], hw.bandwidth, hw.memory)
    if "bytes_backward" in row:     # a software stack's row: its own backward bytes, and its kernels' fixed time
        b = C.memory_time(row["bytes_backward"], hw.bandwidth, hw.memory)
        if _RATED.intersection(row):     # slower parts named by the stack (strided, softmax)
            f, b = f + _rated_extra(row, "", hw, C), b + _rated_extra(row, "_backward", hw, C)
        return f + hw.kernel_overhead * row.get("kernels", 0), b + hw.kernel_overhead * row["kernels_backward"]
    return f, 2 * f


_RATED = frozenset(("strided", "strided_backward", "unvectorized", "unvectorized_backward", "softmax",
                    "softmax_backward"))


def _rated_extra(row: Row, side: str, hw: KernelCost, C: Module) -> Num:
    """Time a stack row's slow parts add to its bytes at the plain element-wise rate.

    Formula: strided passes / (B eta_strided) - strided bytes / (B eta_mem)
             + unvectorized passes / (B eta_unvectorized) - unvectorized bytes / (B eta_mem)
             + max(0, softmax elements / R_softmax - softmax bytes / (B eta_mem))
    (passes: the part's bytes at the activation's width, whatever each pass's dtype; a row without them: its
    bytes. eta_unvectorized defaults to eta_strided.)
    Source: PyTorch's TensorIterator vectorizes (16-byte accesses) only when every operand is contiguous and of one
    dtype (aten/src/ATen/native/cuda/CUDALoops.cuh: ``gpu_kernel_impl`` takes ``unrolled_elementwise_kernel``
    with per-element casts when the dtypes differ, ``elementwise_kernel`` with per-element offsets when an operand
    is strided or broadcast); both are bound per element, not per byte, and slowest where the operands' orders
    differ (a transposing copy: uncoalesced accesses); the warp softmax is instruction-bound (an exp, a max and a
    sum per element). Rates measured on an H200 from kernel profiles (scripts/kernel_rates.py,
    data/h200/gpt2_hf.jsonl).
    """
    extra: Num = 0.0
    for part, eff in (("strided", hw.strided), ("unvectorized", hw.strided if hw.unvectorized is None
                                                 else hw.unvectorized)):
        moved = row.get(part + side)
        if moved is not None and eff is not None:
            slow = row.get(part + "_passes" + side, moved)
            extra = extra + C.memory_time(slow, hw.bandwidth, eff) - C.memory_time(moved, hw.bandwidth, hw.memory)
    rate = hw.softmax if side == "" else hw.softmax_backward
    elements = row.get("softmax_elements" + side)
    if elements is not None and rate is not None:
        extra = extra + maximum(elements / rate - C.memory_time(row["softmax" + side], hw.bandwidth, hw.memory), 0.0)
    return extra


def collective_time(row: Row, link: Link, P: Module) -> Num:
    """Time of one collective on its group's link: ring all-reduce, all-gather or reduce-scatter, or an all-to-all."""
    t: Num
    if row["op"] == "allreduce":
        t = P.allreduce_time(row["comm"], link.ranks, link.bandwidth, path=link.path)
    elif row["op"] == "alltoall":   # the MoE token dispatch and combine over the ep group: NVLink, then the network
        t = P.hierarchical_alltoall_time(row["comm"], link.ranks, link.per_node, link.share, link.network,
                                         link.bandwidth, path=link.path, intra_share=link.stage)
    else:   # all-gather, reduce-scatter
        t = P.allgather_time(row["comm"], link.ranks, link.bandwidth, path=link.path)
    return t


def table_time(table: Table, hw: KernelCost, link: Link, C: Module, P: Module, *, recompute: str = "none",
               async_tp: bool = False, count: bool = False, ep_link: Link | None = None,
               launches: dict[str, tuple[int, int]] | None = None, etp_link: Link | None = None,
               rows: dict[str, tuple[Num, Num]] | None = None) -> dict[str, Num]:
    """Forward, backward and recompute time of the kernels of ``table`` on one GPU (``P``: parallelism module).

    Returns ``forward``, ``backward``, ``recompute`` (GPU time, collectives included), ``weight_backward`` (the
    weight-gradient GEMMs' share of backward: a weight GEMM's forward time, not frozen) and ``tp_forward``,
    ``tp_backward`` (the collectives' share), ``ep_forward`` and ``ep_backward`` (the expert-parallel all-to-alls'
    share: rows of group ``ep`` run on ``ep_link``, of group ``etp`` on ``etp_link``); with ``count``, also
    ``kernels_forward`` and ``kernels_backward`` (the host's launches: :func:`dse.formulas.kernels.table_launches`
    with the stack's ``launches``, for the launch floor; and, given ``rows``, each row's forward time and launches in
    it, in table order: a host synchronisation's pipeline, :func:`dse.estimate.passes.moe_sync_time`). Other
    collectives run on ``link`` (:func:`collective_time`);
    with ``async_tp``
    a backward one hides behind the weight-gradient GEMM it names (``hidden_by``), which takes as long as
    that GEMM's forward. Full recompute runs the whole forward again, collectives included, but the rows flagged
    ``stopped`` (a non-reentrant checkpoint's early stop: :func:`dse.formulas.kernels.early_stop`); selective runs
    the kernels flagged ``selective`` (the attention core).
    """
    times: dict[str, tuple[Num, Num]] = {}
    fwd, bwd, wgrad, sel, stop = _kernel_sums(table, hw, C, ep_link, times)
    tp_f, tp_b, ep_f, ep_b = _collective_sums(table, link, P, async_tp, ep_link, etp_link, times)
    fwd, bwd = fwd + tp_f + ep_f, bwd + tp_b + ep_b
    rec = fwd - stop if recompute == "full" else (sel if recompute == "selective" else 0.0)
    out = {"forward": fwd, "backward": bwd, "recompute": rec, "tp_forward": tp_f, "tp_backward": tp_b,
           "ep_forward": ep_f, "ep_backward": ep_b, "weight_backward": wgrad}
    if count:
        ranks = (link.ranks, link.ranks if ep_link is None else ep_link.ranks,
                 None if etp_link is None else etp_link.ranks)
        # the alltoall dispatcher's rows launch only where they run (ep inside one node, as _kernel_sums prices them)
        runs = {name: where(ep_link.inside, 1.0, 0.0) for name, row in table.items()
                if "alltoall" in row and ep_link is not None}
        lf, lb = _kernels.table_launches(table, launches, *ranks)
        for name, on in runs.items():
            af, ab = _kernels.row_launches(name, table[name], launches, *ranks)
            lf, lb = lf - (1 - on) * af, lb - (1 - on) * ab
        out["kernels_forward"], out["kernels_backward"] = lf, lb
        if rows is not None:
            rows.update({name: (times[name][0], _kernels.row_launches(name, row, launches, *ranks)[0]
                                * runs.get(name, 1.0)) for name, row in table.items() if name in times})
    return out


def _kernel_sums(table: Table, hw: KernelCost, C: Module, ep_link: Link | None,
                 times: dict[str, tuple[Num, Num]]) -> tuple[Num, Num, Num, Num, Num]:
    """The compute kernels of :func:`table_time`: (forward, backward, weight-gradient GEMMs' share, selective
    recompute, rows a non-reentrant checkpoint never reaches again); each row's (forward, backward) into ``times``."""
    fwd: Num = 0.0
    bwd: Num = 0.0
    sel: Num = 0.0
    wgrad: Num = 0.0
    stop: Num = 0.0                   # full recompute: the rows a non-reentrant checkpoint never reaches again
    for name, row in table.items():
        if row["kind"] == "collective":
            continue
        f, b = kernel_time(row, hw, C)
        if "alltoall" in row and ep_link is not None:   # the alltoall dispatcher's rows: ep inside one node
            inside = where(ep_link.inside, 1.0, 0.0)
            f, b = f * inside, b * inside
        times[name] = f, b
        fwd, bwd = fwd + f, bwd + b
        if row["kind"] == "gemm" and (row.get("split") or "adapter" in row) and "frozen" not in row:
            wgrad = wgrad + f              # a weight's gradient GEMM (a LoRA adapter's A or B too)
        if "selective" in row:
            sel = sel + f
        if "stopped" in row:
            stop = stop + f
    return fwd, bwd, wgrad, sel, stop


def _collective_sums(table: Table, link: Link, P: Module, async_tp: bool, ep_link: Link | None,
                     etp_link: Link | None, times: dict[str, tuple[Num, Num]]) -> tuple[Num, Num, Num, Num]:
    """The collectives of :func:`table_time`: (tp forward, tp backward, ep forward, ep backward); each forward
    collective's time into ``times`` (which holds the kernels' already: an async-TP collective hides under its GEMM)."""
    tp_f: Num = 0.0
    tp_b: Num = 0.0
    ep_f: Num = 0.0
    ep_b: Num = 0.0
    hidden: list[tuple[Num, str]] = []
    msg: Any = None
    op: Any = None
    ar: Num = 0.0
    for name, row in table.items():
        if row["kind"] != "collective":
            continue
        if row["group"] == "ep":
            a2a = collective_time(row, ep_link or link, P)
            if row["pass"] == "forward":
                ep_f = ep_f + a2a
                times[name] = a2a, 0.0
            else:
                ep_b = ep_b + a2a
            continue
        if row["comm"] is not msg or row["op"] != op:   # a layer's collectives share one message: one time
            msg, op = row["comm"], row["op"]
            ar = collective_time(row, (etp_link or link) if row["group"] == "etp" else link, P)
            if "optional" in row:                         # no bytes, no collective (expert TP other than tp)
                ar = where(msg > 0, ar, 0.0)
        if row["pass"] == "forward":
            tp_f = tp_f + ar
            times[name] = ar, 0.0
        elif async_tp and "hidden_by" in row:
            hidden.append((ar, row["hidden_by"]))
        else:
            tp_b = tp_b + ar
    for ar, gemm in hidden:                   # after the loop: the GEMM may come later in the table
        under = 0.0 if "frozen" in table[gemm] else times[gemm][0]   # a frozen weight has no gradient GEMM
        tp_b = tp_b + maximum(ar - under, 0.0)
    return tp_f, tp_b, ep_f, ep_b
