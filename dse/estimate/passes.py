"""A layer's forward, backward and recompute time with the host's share (:func:`layer_passes`), for
:func:`dse.estimate.kernel_table.kernel_times`: the mean layer, and a layer of one kind alone (multi-token
prediction, :mod:`dse.estimate.mtp`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.formulas._array import Num, maximum

if TYPE_CHECKING:
    from dse.specs.hardware import HostSpec


def layer_passes(lt: dict[str, Num], overhead: Num, dispatch: Num, recompute: str, sync: Num) -> tuple[Num, Num, Num]:
    """A layer's passes: max(GPU, host) each, the host launching every kernel (``dispatch`` each; 0: not counted) and
    spending ``overhead`` per pass; ``sync``: the MoE dispatcher's host wait, forward and full recompute."""
    host_f = overhead + (dispatch * lt["kernels_forward"] if dispatch else 0.0)
    host_b = 2 * overhead + (dispatch * lt["kernels_backward"] if dispatch else 0.0)
    full = recompute == "full"
    return (maximum(lt["forward"], host_f) + sync, maximum(lt["backward"], host_b),
            maximum(lt["recompute"], host_f if full else 0.0) + (sync if full else 0.0))


def layer_entries(lt: dict[str, Num], overhead: Num, dispatch: Num, recompute: str, sync: Num) -> dict[str, Num]:
    """A layer's entries of :func:`dse.estimate.kernel_table.kernel_times` from its table time ``lt``
    (:func:`dse.estimate.kernel_table.table_time`): GPU time per pass, its TP and EP shares, the passes with the
    host's share (:func:`layer_passes`), their total, the weight-gradient GEMMs' time and the host's excess."""
    layer_fwd, layer_bwd, layer_rec = layer_passes(lt, overhead, dispatch, recompute, sync)
    layer_total = layer_fwd + layer_bwd + layer_rec
    return {"gpu_fwd": lt["forward"], "gpu_bwd": lt["backward"], "gpu_rec": lt["recompute"],
            "tp_fwd": lt["tp_forward"], "tp_bwd": lt["tp_backward"], "ep_fwd": lt["ep_forward"],
            "ep_bwd": lt["ep_backward"], "layer_fwd": layer_fwd, "layer_bwd": layer_bwd,
            "layer_rec": layer_rec, "layer_total": layer_total, "layer_wgrad": lt["weight_backward"],
            "layer_host_excess": layer_total - (lt["forward"] + lt["backward"] + lt["recompute"])}


def host_dispatch(dispatch: float, host: HostSpec, stack: str, recompute: str) -> tuple[Num, Num]:
    """(host time per launch outside the layers, and inside a layer) of ``stack`` on ``host``.

    Formula: d_host = d_stack x s_host; in a layer under full recompute of an eager stack d_layer = d_stack x
    s_ckpt (the host's ``checkpoint_dispatch_scale``, default ``dispatch_scale``), else d_layer = d_host.
    A stack's ``dispatch`` is the host time per launched kernel on the reference host it was measured on
    (data/host_dispatch_cpu.json, scripts/measure_host.py); a host's scales are its own measurement of the same
    step relative to that reference (``--device cuda``: framework, CUDA launch and allocator), 1 for the
    reference. Under torch.utils.checkpoint (non-reentrant, as Transformers checkpoints) every op of the layer's
    forward, recompute and backward costs more host time (saved-tensor hooks, the recomputation's bookkeeping):
    measured per op of a checkpointed GPT2Block step. Megatron's ``dispatch`` is already the per-launch time of a
    (reentrant) checkpointed step: its layers take the plain scale.
    """
    scaled = dispatch * host.dispatch_scale
    ckpt = host.checkpoint_dispatch_scale
    if recompute == "full" and stack != "megatron" and ckpt is not None:
        return scaled, dispatch * ckpt
    return scaled, scaled
