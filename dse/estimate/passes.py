"""A layer's forward, backward and recompute time with the host's share (:func:`layer_passes`), for
:func:`dse.estimate.kernel_table.kernel_times`: the mean layer, and a layer of one kind alone (multi-token
prediction, :mod:`dse.estimate.mtp`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.formulas import kernels as _kernels
from dse.formulas._array import Num, maximum
from dse.formulas.kernels.launches import gemm_launches, host_pass_time, library_memsets
from dse.formulas.kernels.rows import Table

if TYPE_CHECKING:
    from dse.specs.hardware import HostSpec


def layer_passes(lt: dict[str, Num], overhead: Num, dispatch: Num, recompute: str, sync: Num,
                 layer_host: tuple[Num, Num] = (0.0, 0.0)) -> tuple[Num, Num, Num]:
    """A layer's passes: max(GPU, host) each, the host launching every kernel (``dispatch`` each; 0: not counted),
    running the layer's own code (``layer_host``: forward, backward; :func:`~dse.formulas.kernels.host_pass_time`)
    and spending ``overhead`` per pass (backward twice); ``sync``: the MoE dispatcher's host wait, forward and full
    recompute (whose host time is the forward's)."""
    host_f, host_b, host_r = layer_host_times(lt, overhead, dispatch, recompute, layer_host)
    full = recompute == "full"
    return (maximum(lt["forward"], host_f) + sync, maximum(lt["backward"], host_b),
            maximum(lt["recompute"], host_r) + (sync if full else 0.0))


def layer_host_times(lt: dict[str, Num], overhead: Num, dispatch: Num, recompute: str,
                     layer_host: tuple[Num, Num] = (0.0, 0.0)) -> tuple[Num, Num, Num]:
    """The host's time for a layer's forward, backward and recompute pass (what :func:`layer_passes` sets against
    the GPU's).

    Formula: H_f = o + L_f d + D_f, H_b = 2 o + L_b d + D_b, H_r = H_f under full recomputation (else 0), with
    L the pass's launched kernels, d the host time per launch (``dispatch``; 0: the host is not counted, only
    ``overhead`` o), D the layer's own code per pass (``layer_host``; :func:`~dse.formulas.kernels.host_pass_time`).
    """
    host_f = overhead + (host_pass_time(lt["kernels_forward"], dispatch, layer_host[0])
                         + lt.get("memset_host_forward", 0.0) if dispatch else 0.0)
    host_b = 2 * overhead + (host_pass_time(lt["kernels_backward"], dispatch, layer_host[1])
                             + lt.get("memset_host_backward", 0.0) if dispatch else 0.0)
    return host_f, host_b, host_f if recompute == "full" else 0.0 * host_f


def moe_sync_time(table: Table, rows: dict[str, tuple[Num, Num]], dispatch: Num, kernel_overhead: Num = 0.0) -> Num:
    """What Megatron-Core's MoE dispatcher's wait for the token counts adds to a layer's forward pass
    (:func:`~dse.formulas.kernels.restart_exposed_time`; 0 for a table without a router).

    The rows (``rows``: each one's forward GPU time and launches, :func:`dse.estimate.kernel_table.table_time`) in
    the order the host issues them after the wait: from :func:`~dse.formulas.kernels.moe_sync_row` to the table's
    end, then the next layer's rows up to the wait; each row's host time its launches x ``dispatch``. The FP8 casts
    (``fp8_cast``, one row at the table's end) run before the GEMM whose input they cast: each FP8 GEMM's ``cast``
    (bytes, kernels; :func:`dse.formulas.fp8.apply_layer`) places its kernels there, each with its own time: its
    share of the row's byte time by bytes, plus ``kernel_overhead`` (the GPU's fixed time per element-wise kernel)
    per kernel (a split by bytes alone would move the fixed time of a GEMM's casts to the others' when its bytes
    shrink, e.g. under an expert capacity)."""
    first = _kernels.moe_sync_row(table)
    if first is None:
        return 0.0
    cast = rows["fp8_cast"][0] if "fp8_cast" in rows else None
    total = table["fp8_cast"]["bytes"] if "fp8_cast" in table else 0.0
    if cast is not None:
        cast = cast - kernel_overhead * table["fp8_cast"].get("kernels", 0)   # the byte time: split by bytes
    seq: list[tuple[Num, Num, Num]] = []
    for name, (g, n) in rows.items():
        if name == first:
            start = len(seq)
        if name == "fp8_cast":
            continue
        if "cast" in table[name] and cast is not None:
            b, k = table[name]["cast"]
            seq.append((k * dispatch, cast * b / maximum(total, 1e-30) + kernel_overhead * k, k))
        seq.append((n * dispatch, g, n))
    host, gpu, kernels = zip(*(seq[start:] + seq[:start]))
    return _kernels.restart_exposed_time(host, gpu, kernels)


def with_memsets(lt: dict[str, Num], table: Table, recompute: str, per_gemm: float, kernel_overhead: Num,
                 host: Num) -> dict[str, Num]:
    """A table's time (:func:`dse.estimate.kernel_cost.table_time`) with the memsets the libraries issue inside its
    GEMM calls (:func:`dse.formulas.kernels.library_memsets`): their GPU time added to ``forward``, ``backward`` and,
    under full recompute, ``recompute`` (the GEMMs it reaches again), their host time per pass as
    ``memset_host_forward`` and ``memset_host_backward`` (what :func:`layer_host_times` adds; the recompute's host
    time is the forward's). ``per_gemm`` 0 (a stack without them): ``lt`` unchanged."""
    if not per_gemm:
        return lt
    f, b, r = gemm_launches(table)
    gf, hf = library_memsets(f, per_gemm, kernel_overhead, host)
    gb, hb = library_memsets(b, per_gemm, kernel_overhead, host)
    gr = library_memsets(r, per_gemm, kernel_overhead, host)[0] if recompute == "full" else 0.0
    return {**lt, "forward": lt["forward"] + gf, "backward": lt["backward"] + gb, "recompute": lt["recompute"] + gr,
            "memset_host_forward": hf, "memset_host_backward": hb}


def layer_entries(lt: dict[str, Num], overhead: Num, dispatch: Num, recompute: str, sync: Num,
                  layer_host: tuple[Num, Num] = (0.0, 0.0)) -> dict[str, Num]:
    """A layer's entries of :func:`dse.estimate.kernel_table.kernel_times` from its table time ``lt``
    (:func:`dse.estimate.kernel_table.table_time`): GPU time per pass, its TP and EP shares, the passes with the
    host's share (:func:`layer_passes`), their total, the weight-gradient GEMMs' time, the host's excess and the host's
    time per pass (:func:`layer_host_times`)."""
    layer_fwd, layer_bwd, layer_rec = layer_passes(lt, overhead, dispatch, recompute, sync, layer_host)
    layer_total = layer_fwd + layer_bwd + layer_rec
    host_f, host_b, host_r = layer_host_times(lt, overhead, dispatch, recompute, layer_host)
    return {"gpu_fwd": lt["forward"], "gpu_bwd": lt["backward"], "gpu_rec": lt["recompute"],
            "tp_fwd": lt["tp_forward"], "tp_bwd": lt["tp_backward"], "ep_fwd": lt["ep_forward"],
            "ep_bwd": lt["ep_backward"], "layer_fwd": layer_fwd, "layer_bwd": layer_bwd,
            "layer_rec": layer_rec, "layer_total": layer_total, "layer_wgrad": lt["weight_backward"],
            "layer_host_excess": layer_total - (lt["forward"] + lt["backward"] + lt["recompute"]),
            "host_fwd": host_f, "host_bwd": host_b, "host_rec": host_r}


def host_dispatch(dispatch: float, host: HostSpec, stack: str, recompute: str,
                  layer: tuple[float, float] = (0.0, 0.0), checkpoint: float = 1.0) -> tuple[Num, Num, tuple[Num, Num]]:
    """(host time per launch outside the layers, per launch inside a layer, per layer pass beyond its launches:
    forward, backward) of ``stack`` on ``host``.

    Formula: d_host = d_stack x s_host; in a layer d_layer = d_stack x s and D_pass = D_stack,pass x s, with
    s = s_ckpt under full recompute of an eager stack, else s = s_host; s_ckpt is the host's own
    ``checkpoint_dispatch_scale`` where it measured one, else s_host x c_stack (``checkpoint``: the stack's
    ``checkpoint_dispatch``, what checkpointing adds to a layer's host time where the host did not measure
    it). A layer pass's host time is then L d_layer + D_pass
    (:func:`dse.formulas.kernels.host_pass_time`).
    A stack's ``dispatch`` and ``layer_dispatch`` are its host times per launched kernel and per layer pass on the
    reference host (stacks/*.yaml: pytorch's from the layers of five Transformers families on the CPU build of
    torch, data/host_layers_cpu.json, at the level of the reference GPT2Block step, data/host_dispatch_cpu.json);
    a host's scales are its own measurement of that GPT2Block step relative to the reference (``--device cuda``:
    framework, CUDA launch and allocator), 1 for the reference. Under torch.utils.checkpoint (non-reentrant, as
    Transformers checkpoints) every pass costs more host time (saved-tensor hooks, the recomputation's
    bookkeeping) in the same proportion for every family (data/host_layers_cpu.json): the host's checkpointed
    GPT2Block step. Megatron's ``dispatch`` is already the per-launch time of a (reentrant) checkpointed step: its
    layers take the plain scale.
    """
    scale = host.dispatch_scale
    ckpt = host.checkpoint_dispatch_scale
    if recompute == "full" and stack != "megatron":
        inner = ckpt if ckpt is not None else scale * checkpoint
    else:
        inner = scale
    return dispatch * scale, dispatch * inner, (layer[0] * inner, layer[1] * inner)
