"""Host offload through saved-tensor hooks (``torch.autograd.graph.save_on_cpu``): copies on the compute stream.

Part of :mod:`dse.formulas.activation_offload` (notation and symbols there). What a PyTorch user writes
first to move activations to host memory is ``with torch.autograd.graph.save_on_cpu(pin_memory=True):``
around the forward pass. Its pack hook runs for every tensor an op saves for backward (parameters
included), allocates a pinned host tensor of that tensor's size and copies into it; its unpack hook copies
it back to the GPU when backward needs it (torch/autograd/graph.py, ``save_on_cpu``, PyTorch 2.13:
``packed.copy_(tensor, non_blocking=True)`` and ``tensor.to(device, non_blocking=True)``). Both copies are
issued on the current stream, the compute stream, so they do not overlap compute: the step time grows by the
copied bytes over the pinned PCIe bandwidth, each way. There is no deduplication (a tensor saved by two ops is
copied twice; a view is copied at its own size), no small-tensor threshold, no forwarding and no prefetch:
the opposite of SSDTrain's tensor cache (:mod:`~dse.formulas.activation_offload.timeline`).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, where
from dse.formulas.activation_offload.moe import moe_layer_terms
from dse.formulas.transformer import activation_terms

__all__ = ["hooks_saved_terms", "hooks_bytes_per_layer", "hooks_copy_time"]


def hooks_saved_terms(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, *,
                      layer_weight_bytes: Num = 0.0, tp: Num = 1, recompute: str = "none", attention: str = "flash",
                      position: str = "learned", dropout: bool = True, bytes_per_element: Num = 2,
                      moe: dict[str, Any] | None = None, **options: Any) -> dict[str, Num]:
    """Bytes the pack hook of ``save_on_cpu`` copies for one layer, per GPU and micro-batch, tensor by tensor.

    Formula: A_hooks = A - qkv_output + qkv_views + O_again + P_again + rope + W (terms below; A = activation_terms)
    Source: PyTorch 2.13 torch/autograd/graph.py ``save_on_cpu`` (one pinned copy of every packed tensor, at the
    tensor's own size); measured on tests/torch_reference.py's layers (tests/test_activation_hooks_torch.py).

    :func:`dse.formulas.transformer.activation_terms` counts unique buffers (what stays alive on the GPU);
    the hook copies every saved tensor, so, where the two differ:

    - ``qkv_output`` becomes the views of the fused QKV buffer that ops save: V always, K unless rotated,
      Q unless rotated or copied for GQA, e s b (hd_q [no rope, kv = a] + hd_kv [no rope] + hd_kv), none
      when math attention repeats K and V to a heads (the repeated copies are saved instead);
    - ``attention_output_again``: flash attention saves its output O, and the out-projection GEMM saves it
      again as its input, e s b hd_q (no recompute);
    - ``softmax_output_again``: math attention without score dropout (``score_dropout`` in ``options``) saves the
      softmax output twice (softmax and the PV GEMM), e a s^2 b / t (no recompute);
    - ``rotary_tables``: the cos and sin tables, saved by Q's and K's rotation, 4 e s d (rotary);
    - ``weights``: every GEMM saves its weight and every norm its weight and bias, W = the layer's parameter
      bytes on one GPU (GEMM biases are not saved; counted here, < 0.1 %). They stay on the GPU as parameters:
      copied, not freed.

    An MoE layer (``moe``: the MoE options of :func:`dse.formulas.kernels.moe_mlp_kernels`) saves its MLP's
    tensors instead of the dense fc1 input and activation (:func:`~dse.formulas.activation_offload.moe.
    moe_layer_terms`), each once: the router's input, probabilities and indices, the routed copies, the
    experts' activations and outputs; the experts' weights are in ``weights``.

    Full recompute saves only the checkpoint's input (the layer input, as ``activation_terms``); with
    selective recompute core attention saves only Q, K, V (as views) and the out-projection input once.

    Args:
        layer_weight_bytes: W, parameter bytes of one layer on one GPU (compute dtype) [bytes]
        recompute: none, selective or full [choice]
        attention: flash or math [choice]
        position: learned or rotary [choice]
        dropout: the layer has dropout [bool]
        moe: an MoE layer's options (None: a dense MLP) [dict]
        options: other keyword arguments of ``activation_terms`` (sequence_parallel, ffn_type, norm) [dict]
    Returns:
        dict tensor name -> bytes copied [bytes]

    >>> t = hooks_saved_terms(1024, 4, 1024, 16, 16, 64, 4096, layer_weight_bytes=2 * 12 * 1024**2)  # GPT-2 medium
    >>> t["attention_output_again"] / 2**20, t["weights"] / 2**20, round(sum(t.values()) / 2**20, 1)   # MiB
    (8.0, 24.0, 168.3)
    """
    e = bytes_per_element
    terms = dict(activation_terms(s, b, h, heads, kv_heads, head_dim, ffn, tp=tp, recompute=recompute,
                                  attention=attention, position=position, dropout=dropout, bytes_per_element=e,
                                  **options))
    terms = moe_layer_terms(terms, moe, s, b, h, tp=tp, bytes_per_element=e, **options)
    if recompute == "full":
        return terms
    sb = s * b
    hd_q = heads * head_dim / tp
    hd_kv = kv_heads * head_dim / tp
    grouped = where(kv_heads < heads, 1, 0)
    rotary = 1 if position == "rotary" else 0
    expanded = grouped if attention == "math" and recompute != "selective" else 0
    q_view = (1 - rotary) * (1 - grouped)
    terms["qkv_output"] = e * sb * (q_view * hd_q + (1 - rotary) * hd_kv + hd_kv) * (1 - expanded)
    if recompute == "none" and attention == "flash":
        terms["attention_output_again"] = e * sb * hd_q
    if recompute == "none" and attention == "math" and not (dropout and options.get("score_dropout", True)):
        terms["softmax_output_again"] = e * (heads / tp) * s * s * b
    if rotary:
        terms["rotary_tables"] = 4 * e * s * head_dim + 0 * sb
    terms["weights"] = layer_weight_bytes + 0 * sb
    return terms


def hooks_bytes_per_layer(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num,
                          **options: Any) -> Num:
    """Bytes ``save_on_cpu`` copies to the host (and back) per layer and micro-batch: sum of :func:`hooks_saved_terms`.

    Formula: A_hooks = sum_i bytes_i of every tensor the layer's ops save, parameters included
    Source: PyTorch 2.13 torch/autograd/graph.py ``save_on_cpu``; tests/test_activation_hooks_torch.py.

    Returns:
        bytes per layer, micro-batch and GPU [bytes]

    >>> import numpy as np
    >>> np.round(hooks_bytes_per_layer(1024, np.array([1, 4]), 1024, 16, 16, 64, 4096,
    ...                                layer_weight_bytes=2 * 12 * 1024**2) / 2**20, 1)   # MiB
    array([ 60.1, 168.3])
    """
    total: Num = 0
    for v in hooks_saved_terms(s, b, h, heads, kv_heads, head_dim, ffn, **options).values():
        total = total + v
    return total


def hooks_copy_time(offloaded_layers: Num, layer_copied_bytes: Num, d2h_bandwidth: Num, h2d_bandwidth: Num) -> Num:
    """Time per micro-batch the compute stream spends copying saved tensors out in forward and back in backward.

    Formula: t_hooks = k A_hooks / BW_d2h + k A_hooks / BW_h2d
    Source: PyTorch 2.13 torch/autograd/graph.py ``save_on_cpu(pin_memory=True)``: the pack hook's
    ``copy_(tensor, non_blocking=True)`` and the unpack hook's ``to(device, non_blocking=True)`` run on the
    current (compute) stream, so nothing overlaps them.

    The two directions never run at once (forward copies out, backward copies in, in stream order), so each
    runs at the one-way pinned bandwidth, not the both-ways one (an H100 measured 55 GB/s each way pinned,
    94 GB/s with both at once: the shared data set h100_hf_training.jsonl, ``kind: micro``).

    Args:
        offloaded_layers: k, layers of the stage under the hooks [count]
        layer_copied_bytes: A_hooks, bytes one layer's hooks copy (:func:`hooks_bytes_per_layer`) [bytes]
        d2h_bandwidth: BW_d2h, pinned device-to-host copy bandwidth [bytes/s]
        h2d_bandwidth: BW_h2d, pinned host-to-device copy bandwidth [bytes/s]
    Returns:
        time [s]

    >>> round(hooks_copy_time(24, 168.3125 * 2**20, 52.92e9, 52.92e9) * 1e3, 1)   # GPT-2 medium, b = 4: ms
    160.1
    """
    copied = offloaded_layers * layer_copied_bytes
    return copied / d2h_bandwidth + copied / h2d_bandwidth
