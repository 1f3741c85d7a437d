"""Activation offloading to SSDs (or host memory) during training: SSDTrain as equations.

SSDTrain (Wu et al., "SSDTrain: An Activation Offloading Framework to SSDs for Faster
LLM Training", arXiv 2408.10013, DAC'25; code K-Wu/FlashTrain, ``flashtrain/tensor_cache``)
writes the tensors autograd saves for backward to NVMe drives while the forward pass
runs (GPUDirect Storage, kvikio) and prefetches them back during backward. This module
models it per GPU and per micro-batch, for a pipeline stage of ``l`` identical layers of
which the first ``k`` are offloaded and the last ``l - k`` stay in GPU memory.

Notation: ``A`` bytes a layer saves for backward (:func:`dse.formulas.transformer.activation_terms`),
``A_off`` the part SSDTrain writes (:func:`offloaded_terms`), ``t_f``/``t_b`` one layer's
forward/backward time, ``T_f`` the forward time of a whole micro-batch on the stage,
``BW_w``/``BW_r`` the write/read bandwidth one GPU gets from its drives. SI units.

Behaviour taken from the code (research note docs/reference/activation_offload.md §1.2-1.4):

- never offloaded: parameters and model inputs, tensors with fewer than 8 Mi elements,
  the LM head, the loss and the non-transformer part of the model (so the head and
  embedding activations stay), and the last module of the forward pass;
- deduplication: each tensor is written once even when several ops save it; the terms of
  :func:`~dse.formulas.transformer.activation_terms` are already unique buffers, so they are
  the bytes written;
- forwarding: a tensor whose write has not finished when backward needs it is used from
  GPU memory and not read back, and its pending write is skipped ("adaptive keep passive");
- prefetch: reads run one to two sub-layers ahead of backward, modelled as one layer;
- adaptive keep: the last layers stay in GPU memory when the drives cannot keep up
  (``solve_num_adaptive_keep_layers``, :func:`adaptive_offload_layers`). SSDTrain's rule sizes the
  offload with one measured (write) bandwidth and assumes reads keep pace with backward; this tool
  offloads no more layers than :func:`hidden_offload_layers`, the largest k whose writes and reads
  (one layer ahead, and together within the micro-batch) hide for every k' <= k, so while the GPU has
  room ``auto`` exposes no I/O and more bandwidth never makes it slower (on a full GPU it offloads at
  least the fewest layers that fit, dse/estimate/activation_offload.py);
- pacing (this tool's assumption): a drive array whose read side is capped (PCIe link, host DRAM)
  while its writes still grow can run its writes at the drives' own write:read ratio times the
  read rate (:func:`paced_write_bandwidth`), as a smaller array would; the estimate takes whichever
  of that and full-rate writes exposes less I/O with every layer of the stage offloaded (one choice per
  stage, so more offloaded layers never hold more GPU memory). Faster writes free (evict) more tensors
  that a slower array would still hold and forward, and with the read side capped those come back no
  faster, so without this a bigger array could be slower at a fixed k.

The equations live in one submodule per question; every name is importable from this package:

- :mod:`~dse.formulas.activation_offload.tensors`: which saved tensors are written (8 Mi-element threshold);
- :mod:`~dse.formulas.activation_offload.overlap`: write and read bandwidth needed for the I/O to hide;
- :mod:`~dse.formulas.activation_offload.layer_choice`: how many layers to offload (SSDTrain's adaptive
  rule, this tool's hiding bound, write pacing);
- :mod:`~dse.formulas.activation_offload.timeline`: one micro-batch's write backlog, forwarding, exposed I/O;
- :mod:`~dse.formulas.activation_offload.gpu_memory`: the GPU activation peak, ROK strategies, what the
  freed memory buys;
- :mod:`~dse.formulas.activation_offload.bandwidth`: drives per GPU, shared links, the I/O path (GDS, bounce, host);
- :mod:`~dse.formulas.activation_offload.endurance`: drive capacity, bytes written, rated TBW, lifetime;
- :mod:`~dse.formulas.activation_offload.moe`: what an MoE layer's MLP saves instead of the dense MLP's tensors;
- :mod:`~dse.formulas.activation_offload.hooks`: the other mechanism, PyTorch's saved-tensor hooks
  (``save_on_cpu``): every saved tensor copied out in forward and back in backward on the compute stream.

Every function broadcasts over numpy arrays (use :mod:`dse.formulas._array`).

Symbols:
    s: sequence length [count]
    b: micro-batch size (sequences) [count]
    h: hidden size [count]
    heads: a, attention heads [count]
    kv_heads: kv, key/value heads [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    tp: t, tensor-parallel degree [count]
    sequence_parallel: Megatron sequence parallelism [bool]
    bytes_per_element: e, bytes per activation element [bytes]
    options: keyword arguments of :func:`dse.formulas.transformer.activation_terms` [dict]
    layers: l, layers on the pipeline stage [count]
    offloaded_layers: k, leading layers of the stage whose activations are offloaded [count]
    layer_bytes: A (or A_off where stated), bytes one layer saves (offloads) per micro-batch [bytes]
    layer_offloaded_bytes: A_off, bytes of one layer written to the drives [bytes]
    layer_forward_time: t_f, forward time of one layer [s]
    layer_backward_time: t_b, backward time of one layer [s]
    forward_time: T_f, forward time of the whole micro-batch on the stage [s]
    offloaded_bytes: W = k A_off, bytes offloaded per micro-batch [bytes]
    write_bandwidth: BW_w, write bandwidth one GPU gets from its drives [bytes/s]
    read_bandwidth: BW_r, read bandwidth one GPU gets from its drives [bytes/s]
    bandwidth: BW, write bandwidth one GPU gets from its drives [bytes/s]
    in_flight: n_fl, micro-batches whose activations are alive at once on the stage [count]
    written_per_micro_batch: W_mb, bytes written per micro-batch and GPU [bytes]
    backward_start: B, time from the start of the forward pass until backward reaches the stage's last layer [s]
    window: T_mb, the stage's time per micro-batch [s]
    write_read_ratio: rho, the drives' own write over read bandwidth (1 for host memory) [1]
    ffn_type: gelu, relu, swiglu, geglu or relu2: the MLP's activation (how many tensors it keeps) [choice]
    experts: E, routed experts of an MoE layer [count]
    experts_per_token: k, top-k [count]
    expert_ffn: F_e, a routed expert's FFN inner size [count]
    shared_experts: S, experts every token runs [count]
    shared_ffn: F_s, a shared expert's FFN inner size [count]
    shared_gate: a sigmoid gate on the shared experts' output [bool]
    capacity: C, the experts' capacity factor (None: dropless) [ratio]
    pad: every expert padded to its capacity [bool]
    moe: an MoE layer's options, those of dse.formulas.kernels.moe_mlp_kernels (None: a dense MLP) [dict]
    terms: a layer's saved tensors, name -> bytes [dict]
"""

from __future__ import annotations

from dse.formulas.activation_offload.bandwidth import activation_io_bandwidth, drives_per_gpu, link_bandwidth_left
from dse.formulas.activation_offload.endurance import (
    DAYS_PER_YEAR,
    bytes_written_per_iteration,
    lifetime_years,
    rated_endurance,
    ssd_capacity_needed,
)
from dse.formulas.activation_offload.gpu_memory import (
    activation_peak_extra,
    gpu_activation_bytes_offload,
    largest_micro_batch,
    pipeline_iteration_time,
    rok_activation_peaks,
)
from dse.formulas.activation_offload.hooks import hooks_bytes_per_layer, hooks_copy_time, hooks_saved_terms
from dse.formulas.activation_offload.layer_choice import (
    adaptive_bandwidth_required,
    adaptive_first_kept_scope,
    adaptive_offload_layers,
    hidden_offload_layers,
    paced_write_bandwidth,
)
from dse.formulas.activation_offload.moe import moe_layer_terms, moe_mlp_saved_terms
from dse.formulas.activation_offload.overlap import (
    layer_forward_time,
    prefix_write_bandwidth_required,
    read_bandwidth_required,
    write_bandwidth_required,
)
from dse.formulas.activation_offload.tensors import SMALL_TENSOR_ELEMENTS, offloaded_bytes_per_layer, offloaded_terms
from dse.formulas.activation_offload.timeline import exposed_io_time, forwarded_bytes, write_backlog
from dse.formulas.transformer import activation_terms, backward_working_bytes  # noqa: F401 (public in transformer)

__all__ = ["SMALL_TENSOR_ELEMENTS", "DAYS_PER_YEAR", "offloaded_terms", "offloaded_bytes_per_layer",
           "layer_forward_time", "write_bandwidth_required", "read_bandwidth_required",
           "prefix_write_bandwidth_required", "adaptive_bandwidth_required", "adaptive_offload_layers",
           "adaptive_first_kept_scope", "hidden_offload_layers", "paced_write_bandwidth", "write_backlog",
           "forwarded_bytes", "exposed_io_time", "activation_peak_extra",
           "gpu_activation_bytes_offload", "rok_activation_peaks", "drives_per_gpu", "link_bandwidth_left",
           "activation_io_bandwidth", "ssd_capacity_needed", "bytes_written_per_iteration", "rated_endurance",
           "lifetime_years", "largest_micro_batch", "pipeline_iteration_time", "hooks_saved_terms",
           "hooks_bytes_per_layer", "hooks_copy_time", "moe_mlp_saved_terms", "moe_layer_terms"]
