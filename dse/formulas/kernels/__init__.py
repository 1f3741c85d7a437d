"""A training step as a table of kernels: what each op of a layer computes, moves, saves and communicates.

One row per kernel that one GPU runs for one micro-batch, in execution order, as Calculon's
layer list does (Isaev et al., SC'23, ``calculon/llm``): the transformer layer (norms, QKV,
rotary, attention core, output projection, residual adds, MLP), the embedding, and the LM
head with its loss. The estimate's numbers are reductions over the table:

- time: every row through one per-kernel cost function (``dse.estimate.layer.kernel_time``:
  GEMM at the GEMM efficiency, flash attention at the attention efficiency, element-wise bytes
  at the HBM efficiency, collectives on the tensor-parallel group);
- activation memory: the sum of ``saved`` (:func:`saved_bytes`), plus ``rerun`` while a
  layer is recomputed (:func:`rerun_bytes`); what saved-tensor hooks copy: ``packed`` (:func:`packed_bytes`);
- FLOPs: the sum of ``flops`` (:func:`forward_flops`, :func:`recomputed_flops`);
- tensor-parallel traffic: the collectives' ``comm`` (:func:`message_bytes`);
- the host's launches, which a launch floor multiplies by the host time per launch (:func:`table_launches`).

A row is a dict; every row has ``kind`` and ``saved``, the other keys belong to its kind:

- ``kind``: ``gemm`` (``m``, ``k``, ``n``, ``batch``: ``batch`` GEMMs of (m x k)(k x n) on this GPU;
  ``split``: ``column`` or ``row`` for a Megatron tensor-parallel weight GEMM, ``""`` for the
  attention products), ``flash`` (a fused attention kernel: ``executed``, ``executed_backward``
  FLOPs as it runs them), ``elementwise`` (``bytes``: HBM bytes read and written in the forward
  pass) or ``collective`` (``op``: allreduce, allgather or reduce_scatter; ``group``: tp; ``comm``:
  message bytes, the whole tensor; ``pass``: forward or backward; ``hidden_by``: the GEMM whose weight
  gradient can hide it);
- ``flops``: forward FLOPs in the model convention (full s x s score matrix);
- ``saved``: bytes kept from the forward to the backward pass under the plan's recompute;
  ``rerun``: bytes the kernel holds while its layer is recomputed in the backward pass (full
  recompute); ``packed``: bytes saved-tensor hooks pack, where not ``saved`` (a stack's rows: a tensor saved by
  two autograd nodes is packed twice, a view at its own size);
- ``selective``: True for the kernels selective recompute runs again (the attention core);
- ``class``: the GEMM class whose dtype (precision recipe) sets the peak: ``attention`` or ``head``
  (absent: the layer's weight GEMMs).

Backward costs twice the forward for GEMMs (data and weight gradients, same shapes) and for
element-wise kernels; a flash kernel has its own backward FLOPs. The rows and their bytes are
those of Megatron-LM's fused kernels (the ``megatron`` software stack), the kernels that
:func:`dse.formulas.compute.elementwise_bytes` and :func:`dse.formulas.transformer.activation_terms`
count in closed form; tests check that the reductions equal those closed forms.

Symbols:
    s: sequence length [count]
    b: micro-batch size (sequences) [count]
    h: hidden size [count]
    heads: a, attention (query) heads [count]
    kv_heads: kv, key/value heads [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    vocab: V, vocabulary size [count]
    tp: t, tensor-parallel degree [count]
    sequence_parallel: Megatron sequence parallelism (shards norm/dropout tensors over t) [bool]
    recompute: none, selective or full activation recomputation [choice]
    attention: flash (fused) or math (materialised softmax) [choice]
    ffn_type: gelu, relu, swiglu, geglu or relu2 (squared ReLU: two tensors kept, as gelu) [choice]
    norm: layernorm or rmsnorm [choice]
    position: learned, rotary or none (position embeddings) [choice]
    dropout: dropout layers present [bool]
    score_dropout: with dropout, also on the attention probabilities (math attention's score mask; a flash kernel
        drops inside itself, nothing priced apart) [bool]
    branch_dropouts: with dropout, the branch outputs of a layer dropped before their residual add (2: attention and
        MLP; 1: the MLP's only, or a parallel layer's one sum; 0: none) [count]
    causal: decoder (causal) attention: a flash kernel skips the masked half [bool]
    final_norm: a norm before the LM head [bool]
    bytes_per_element: e, bytes per activation element (2 for bf16/fp16) [bytes]
    comm_bytes_per_element: bytes per element of the TP collectives' messages (None: e) [bytes]
    dispatch_bytes_per_element: e_d, bytes per element of the all-to-alls towards the experts (None: e) [bytes]
    logits_bytes: e_l, bytes per logit the loss kernels read and write (fp32: 4) [bytes]
    table: kernel name -> row, as :func:`layer_kernels` returns [dict]
    stack: a software stack's ops resolved for the model (dse.specs.stack); None: Megatron's fused kernels [dict]
    stack_sizes: element counts the stack's amounts name (dse.formulas.stacks.sizes) [dict]
    stack_choices: the plan's attention, recompute, bias and dropout, for the stack's conditional rows [dict]
    finetune: frozen weights and LoRA adapters: dse.formulas.finetune.apply_layer's keywords (None: full training) [dict]
    grad_bytes: bytes per gradient element [bytes]
    fp8: FP8 linear layers' scaling, delayed or current (None: GEMMs in the activations' dtype; dse.formulas.fp8) [choice]
    fusion: the fused vocab-parallel cross-entropy, native (Megatron-Core) or te (Transformer Engine); None: unfused [choice]
    group: the parallel group of a collective (tp: tensor parallel; ep: expert parallel; etp: expert tensor
        parallel) [choice]
    layer_norms: norms per layer (2 pre-LN; 4 Gemma 2) [count]
    qk_norm: an RMSNorm of each query and key head (Qwen3) [bool]
    moe: the MoE MLP's keyword arguments (experts, experts_per_token, expert_ffn, ...); None: a dense MLP [dict]
    attention_share: the share of the s x s score matrix the model's attention computes, mean over the layers
        (transformer.attention_share; None: 1/2 causal, 1 bidirectional) [fraction]
    executed_share: the share a flash kernel executes (None: attention_share; SDPA's explicit window mask: the
        whole matrix of each windowed layer) [fraction]
    experts: E, routed experts of an MoE layer [count]
    experts_per_token: k, routed experts each token runs (top-k) [count]
    expert_ffn: F_e, FFN inner size of a routed expert [count]
    shared_experts: S, experts every token runs [count]
    shared_ffn: F_s, FFN inner size of one shared expert [count]
    shared_gate: a sigmoid gate (h x 1) on the shared experts' output [bool]
    imbalance: c, tokens of the busiest expert over the mean T k / E [ratio]
    mla: multi-head latent attention's keyword arguments (q_lora, kv_lora, nope, rope, v_dim); None: standard [dict]
    q_lora: d_c', rank of the MLA query latent (0: a plain query projection) [count]
    kv_lora: d_c, rank of the MLA key/value latent [count]
    nope: d_nope, MLA per-head query/key dims without positions [count]
    rope: d_R, MLA per-head decoupled rotary dims (one rotary key shared by the heads) [count]
    v_dim: d_v, MLA per-head value dims [count]
    ep: expert-parallel degree: E/ep experts per GPU, routed tokens exchanged by all-to-all over ep ranks [count]
    softmax_fallback: price Megatron's unfused fp32 softmax where its fused kernel does not run (megatron stack) [bool]
    name: a kernel-table row's name [str]
    row: one kernel-table row [dict]
    launches: a stack's (forward, backward) launches per row name (None: by kind) [dict]
    ranks: ranks of the tensor-parallel group (a collective launches only when > 1) [count]
    ep_ranks: ranks of the expert-parallel group [count]
    etp: expert tensor-parallel degree: each routed expert split over etp GPUs (None: tp) [count]
    etp_ranks: ranks of the expert tensor-parallel group (None: the tensor-parallel group's) [count]
    capacity: C, capacity factor of the experts (None: dropless) [ratio]
    pad: pad every expert's tokens to its capacity [bool]
    parallel_residual: attention and MLP read the same layer input, one forward all-reduce (GPT-NeoX, Falcon) [bool]
    rotary_fraction: rho, share of each head's dimensions the rotary positions rotate [fraction]
    rotary_unfused: Megatron-Core's eager RoPE (a YaRN attention factor other than 1) instead of the fused one [bool]
    bias: the routed experts have biases (gpt-oss: the fc2 bias added expert by expert) [bool]
    gemm_per_expert: a grouped GEMM runs as one GEMM per local expert (Transformer Engine's GroupedLinear) [bool]
    glu_clamp: the gated experts' fc1 output is clamped with eager ops (gpt-oss's swiglu_limit, Megatron) [bool]
    dispatcher: the MoE token dispatcher, alltoall (NCCL) or flex (DeepEP, HybridEP); None: alltoall inside one
        node, flex across [choice]
    s_q: decoder (query) tokens per sequence of a cross-attention [count]
    s_k: encoder (key/value) tokens per sequence of a cross-attention [count]
    params: P, parameters on this GPU whose gradients accumulate [count]
    tensors: n, parameter tensors holding them [count]
    passes: accumulation adds per micro-batch (mean over the iteration) [count]
"""

from __future__ import annotations

from dse.formulas.kernels.accumulate import unfused_grad_accumulation
from dse.formulas.kernels.checkpoint import early_stop
from dse.formulas.kernels.cross import cross_attention_kernels, position_bias_kernel
from dse.formulas.kernels.ends import (
    CROSS_ENTROPY_KERNELS,
    LOSS_KERNELS,
    embedding_gradient,
    embedding_kernels,
    embedding_mask_row,
    embedding_projections,
    head_kernels,
    vocab_parallel_loss,
)
from dse.formulas.kernels.launches import (
    MEGATRON_LAUNCHES,
    gemm_launches,
    host_pass_time,
    library_memsets,
    megatron_launches,
    moe_host_syncs,
    row_launches,
    separate_linears,
    step_host_time,
    sync_exposed_time,
    table_launches,
)
from dse.formulas.kernels.layer import fused_softmax_available, layer_kernels, softmax_row, unfused_rotary_row
from dse.formulas.kernels.mla import mla_attention_kernels
from dse.formulas.kernels.moe import (
    dispatcher_gathers,
    expert_bias_row,
    glu_clamp_row,
    moe_mlp_kernels,
    sort_chunk_rows,
)
from dse.formulas.kernels.mtp import mtp_kernels
from dse.formulas.kernels.rows import KINDS, Row, Table  # noqa: F401 (Row, Table: the types, as before the split)
from dse.formulas.kernels.sums import (
    backward_flops,
    executed_flops,
    forward_flops,
    message_bytes,
    packed_bytes,
    recomputed_flops,
    rerun_bytes,
    saved_bytes,
    weight_gemms,
)
from dse.formulas.kernels.sync import moe_sync_row, restart_exposed_time, stream_time

__all__ = ["KINDS", "layer_kernels", "moe_mlp_kernels", "dispatcher_gathers", "mla_attention_kernels",
           "cross_attention_kernels", "position_bias_kernel", "embedding_kernels", "embedding_mask_row", "embedding_gradient", "embedding_projections", "head_kernels", "vocab_parallel_loss", "LOSS_KERNELS", "CROSS_ENTROPY_KERNELS", "mtp_kernels", "weight_gemms",
           "forward_flops", "recomputed_flops", "executed_flops", "backward_flops", "saved_bytes", "packed_bytes",
           "rerun_bytes", "message_bytes", "MEGATRON_LAUNCHES", "megatron_launches", "row_launches", "table_launches",
           "separate_linears", "gemm_launches", "library_memsets",
           "host_pass_time", "step_host_time", "softmax_row",
           "fused_softmax_available", "moe_host_syncs", "sync_exposed_time", "stream_time", "restart_exposed_time",
           "moe_sync_row",
           "sort_chunk_rows", "expert_bias_row",
           "unfused_rotary_row", "glu_clamp_row", "early_stop", "unfused_grad_accumulation"]
