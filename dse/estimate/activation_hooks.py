"""Host activation offload through PyTorch's saved-tensor hooks: ``--activation-offload-mechanism hooks``.

The time half of :class:`dse.estimate.activation_offload.ActivationOffload` for a plan with
``offload_activations: host`` and ``activation_offload_mechanism: hooks``: what
``torch.autograd.graph.save_on_cpu(pin_memory=True)`` around the layers does (formulas:
:mod:`dse.formulas.activation_offload.hooks`). Per GPU on the most loaded stage:

- which layers: ``auto`` = every layer of the stage (the context manager around the model's layers);
  ``offload_layers N`` = the first N;
- bytes: every tensor those layers' ops save is copied, once per save, weights included
  (``hooks_bytes_per_layer``); out in forward, back in backward, per micro-batch;
- time: the copies run on the compute stream, so each micro-batch waits ``k A_hooks / BW`` each way at
  the pinned host bandwidth (the GPU's PCIe link, shared with other techniques' GPU<->host bytes, and
  host DRAM shared by the node's GPUs: the same bandwidths as the forwarding mechanism's host target);
  nothing hides, no forwarding;
- GPU memory: the offloaded layers' saved activations leave the GPU (their weights stay: parameters);
  what stays is the kept layers, and the layer being run in backward (its tensors copied back);
- host memory: the pinned copies of every micro-batch in flight, per node (the host tier's
  feasibility check).

The ``activation_offload`` section has the forwarding mechanism's keys (``layers_io_hides`` is 0: no copy
hides; ``layers_by_ssdtrain_rule`` is what SSDTrain's rule would offload on the same link) and
``mechanism``, ``copied_bytes_per_layer``, ``copy_out_s_per_microbatch``, ``copy_in_s_per_microbatch``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dse.estimate.context import local_seq
from dse.estimate.table_inputs import mean_layer
from dse.formulas._array import minimum, where

if TYPE_CHECKING:
    from dse.estimate.activation_offload import Before, Times
    from dse.estimate.aliases import FormulaModule, Num, Result
    from dse.estimate.terms import Layers, MicrobatchIO
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

    # offloaded_layers of dse.estimate.activation_offload: (c, before, times, write bw, read bw, plan, formulas)
    ChooseLayers = Callable[[Result, Before, Times, Num, Num, Plan, FormulaModule], Layers]


def copied_bytes_per_layer(c: Result, model: ModelSpec, plan: Plan, A: FormulaModule) -> Num:
    """Bytes the hooks copy per layer and micro-batch on one GPU (saved tensors, once per save, and weights).

    Megatron's fused kernels in full training: :func:`~dse.formulas.activation_offload.hooks_bytes_per_layer`
    (an MoE layer's MLP tensors in place of the dense MLP's; a model with dense and MoE layers: the mean layer).
    Another software stack, multi-head latent attention (its latent projections and norms are not GPT's tensors),
    or frozen weights (LoRA: a frozen linear layer saves no input, an adapter its ``A x``):
    what the kernel table's rows pack (:func:`~dse.formulas.kernels.packed_bytes`, the stack file's ``packed``;
    the Megatron table's rows pack what they keep), plus the layer's weights, which every GEMM and norm saves
    (not under full recompute: the checkpoint packs only the layer's input).
    """
    i = c["terms"]
    if plan.stack != "megatron" or plan.finetune != "full" or model.mla:   # MLA: its rows, not GPT's tensors
        params = i.layer_params_per_gpu
        if plan.finetune != "full":     # the adapters' A and B are saved too (their GEMMs' weights)
            params = params + i.trainable_params_per_gpu / i.layers_per_stage
        weights = 0 if plan.recompute == "full" else params * i.bytes_per_element
        return i.kernels["sums"]["a_packed"] + weights
    return mean_layer(model, plan, lambda moe: A.hooks_bytes_per_layer(
        local_seq(plan), i.micro_batch, model.hidden, model.heads, model.kv_heads, model.head_dim, model.ffn_hidden,
        layer_weight_bytes=i.layer_params_per_gpu * i.bytes_per_element, moe=moe, **i.activation_options))


def layers_and_io(c: Result, model: ModelSpec, before: Before, tm: Times, bw: tuple[Num, Num], plan: Plan,
                  A: FormulaModule, choose: ChooseLayers) -> tuple[Layers, MicrobatchIO]:
    """The layers under the hooks (``ks``) and one micro-batch's copies (``io``, the forwarding keys + hooks')."""
    i = c["terms"]
    layers = i.layers_per_stage
    bw_w, bw_r = bw
    chosen = choose(c, before, tm, bw_w, bw_r, plan, A)   # SSDTrain's rule and the fewest layers that fit (section)
    if plan.offload_layers is None:
        k, rule = layers + 0 * chosen["k_fit"], "all"
    else:
        k, rule = minimum(plan.offload_layers, layers), "fixed"
    ks: Layers = {**chosen, "k": k, "rule": rule, "k_hide": 0 * chosen["k_hide"]}
    a_hooks = copied_bytes_per_layer(c, model, plan, A)
    copied = k * a_hooks
    out_s = A.hooks_copy_time(k, a_hooks, bw_w, float("inf"))
    in_s = A.hooks_copy_time(k, a_hooks, float("inf"), bw_r)
    io: MicrobatchIO = {"bw_used": bw_w, "backlog": 0 * copied, "forwarded": 0 * copied, "written": copied,
                        "read": copied, "exposed": A.hooks_copy_time(k, a_hooks, bw_w, bw_r), "a_hooks": a_hooks,
                        "out_s": out_s, "in_s": in_s}
    return ks, io


def section_extras(section: dict[str, Any], io: MicrobatchIO) -> dict[str, Any]:
    """The hooks' keys in the ``activation_offload`` section (and its bandwidth needs over the copied bytes)."""
    section["copied_bytes_per_layer"] = io["a_hooks"]
    section["copy_out_s_per_microbatch"] = io["out_s"]
    section["copy_in_s_per_microbatch"] = io["in_s"]
    return section


def section_before(before: Before, io: MicrobatchIO) -> Before:
    """``before`` with the copied bytes per layer as the offloaded ones (what the section's bandwidths are over)."""
    return dataclasses.replace(before, offloaded_per_layer=io["a_hooks"])


def table_offloaded_bytes(c: Result, model: ModelSpec, plan: Plan, A: FormulaModule) -> Num:
    """Bytes SSDTrain offloads per layer and micro-batch on one GPU, counted on the kernel table's rows: the saved
    bytes of each row whose tensors reach the size threshold (the mean layer of a model with dense and MoE layers).

    Formula: A_off = sum over rows r of saved_r [saved_r / e >= 8 Mi] (e: bytes per activation element)
    Source: K-Wu/FlashTrain tensor_cache.py ``skip_small_tensors`` (:data:`~dse.formulas.activation_offload.
    SMALL_TENSOR_ELEMENTS`), applied to what each kernel saves for backward. Used for multi-head latent attention,
    whose latent projections and norms (``q_down``, ``kv_norm``, ...) :func:`~dse.formulas.activation_offload.
    offloaded_bytes_per_layer` (GPT's tensors) does not know; on GPT and Llama layers the two counts agree within
    2 % (a row may hold several tensors, each over the threshold there).
    """
    i = c["terms"]
    e = i.bytes_per_element
    kernels = i.kernels

    def of_layer(moe: Any) -> Num:
        rows = kernels["dense_layer"] if moe is None and "dense_layer" in kernels else kernels["layer"]
        total: Num = 0.0
        for row in rows.values():
            saved = row.get("saved", 0)
            total = total + where(saved / e >= A.SMALL_TENSOR_ELEMENTS, saved, 0.0)
        return total

    return mean_layer(model, plan, of_layer)
