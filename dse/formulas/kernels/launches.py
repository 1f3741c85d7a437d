"""Kernels the host launches per row of a kernel table: what a launch floor multiplies by the host time per launch.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, where
from dse.formulas.kernels.rows import Row, Table

__all__ = ["MEGATRON_LAUNCHES", "megatron_launches", "separate_linears", "row_launches", "table_launches", "host_pass_time",
           "step_host_time", "moe_host_syncs", "sync_exposed_time", "gemm_launches", "library_memsets"]

#: (forward, backward) kernels Megatron-LM launches for a row of its layer, counted from microsoft/Megatron-DeepSpeed
#: megatron/model/transformer.py (ParallelTransformerLayer, ParallelAttention, ParallelMLP), megatron/mpu/layers.py
#: (Column/RowParallelLinear: F.linear, the bias gradient ``grad_output.sum(0)``), megatron/model/fused_layer_norm.py
#: (apex's fused LayerNorm: one forward kernel; backward cuComputePartGradGammaBeta, cuComputeGradGammaBeta,
#: cuComputeGradInput), fused_bias_gelu.py (one fused kernel each way, and the bias gradient's reduction) and
#: fused_softmax.py (one kernel each way). Rows not listed launch as their kind: a GEMM 1 and 2 (data and weight
#: gradients), a flash kernel 1 and 2, an element-wise kernel 1 and 1, a collective 1 in its own pass.
MEGATRON_LAUNCHES: dict[str, tuple[int, int]] = {
    "norm1": (1, 3), "norm2": (1, 3), "post_attn_norm": (1, 3), "post_mlp_norm": (1, 3),
    "qkv": (1, 3),            # QKV linear with its bias: addmm; dgrad, wgrad, the bias gradient's column sum
    "context": (2, 3),        # bmm, then the [b, np, s, hn] -> [s, b, np, hn] permute's contiguous copy (and back)
    # the TorchScript-fused bias-dropout-add: one kernel forward; backward the dropout mask's product, the bias
    # gradient's column sum, and the add of the two gradients of the residual stream
    "attn_residual": (1, 3), "mlp_residual": (1, 3),
    "activation": (1, 2),     # bias-GeLU (GeLUFunction): one kernel each way, and the fc1 bias gradient's sum
    "final_norm": (1, 3),     # apex's fused LayerNorm before the LM head, as norm1
    # the embedding (megatron/model/language_model.py Embedding.forward): the word and position lookups, their sum,
    # the [b s h] -> [s b h] copy and the dropout; backward the dropout's and the copy's, and the position table's
    # dense gradient (its fill, its scatter-add, its accumulation); the word table's: the embedding_grad row
    "embedding": (5, 5),
}


def megatron_launches(bias: bool = True, qkv_bias: bool | None = None, learned_positions: bool = True,
                      dropout: bool = True) -> dict[str, tuple[int, int]]:
    """:data:`MEGATRON_LAUNCHES` for a model with or without biases on its linear layers, learned positions and
    dropout.

    Formula: each bias-gradient column sum counted there (``grad_output.sum(0)`` of a linear with a bias; the
    bias-dropout-add's and bias-GeLU's bias gradient) is one backward launch that a bias-free layer does not make:
    qkv (1, 2 + [qkv bias]), attn_residual and mlp_residual (1, 2 + [bias]), activation (1, 1 + [bias]); the
    embedding (5, 5) loses the position lookup and sum and the position table's gradient without learned positions
    (-2, -3), the dropout each way without dropout (-1, -1)
    Source: the files :data:`MEGATRON_LAUNCHES` is counted from (Megatron-DeepSpeed mpu/layers.py computes the
    bias gradient only ``if use_bias``); Megatron-Core's bias_dropout_add and bias_geglu/bias_swiglu skip the bias
    when it is None; Megatron-LM megatron/model/language_model.py Embedding.forward (``add_position_embedding``).

    Args:
        bias: biases on the linear layers [bool]
        qkv_bias: a bias on Q/K/V (None: ``bias``) [bool]
        learned_positions: a learned position table [bool]
    Returns:
        (forward, backward) launches per row name [count]

    >>> megatron_launches() == MEGATRON_LAUNCHES, megatron_launches(False)["activation"], megatron_launches(False)["qkv"]
    (True, (1, 1), (1, 2))
    >>> megatron_launches(False, qkv_bias=True)["qkv"], megatron_launches(False, qkv_bias=True)["mlp_residual"]
    ((1, 3), (1, 2))
    >>> megatron_launches(False, learned_positions=False, dropout=False)["embedding"]   # Llama: lookup and copy
    (2, 1)
    """
    qkv = bias if qkv_bias is None else qkv_bias
    if bias and qkv and learned_positions and dropout:
        return MEGATRON_LAUNCHES
    emb = (5 - 2 * (not learned_positions) - (not dropout), 5 - 3 * (not learned_positions) - (not dropout))
    return {**MEGATRON_LAUNCHES, "qkv": (1, 2 + int(qkv)), "attn_residual": (1, 2 + int(bias)),
            "mlp_residual": (1, 2 + int(bias)), "activation": (1, 1 + int(bias)), "embedding": emb}


def separate_linears(table: Table, qkv: int = 1, kv: int = 1, fc1: int = 1) -> Table:
    """``table`` with the GEMM rows that a stack runs as several ``nn.Linear`` modules marked with how many
    (``linears``: one GEMM kernel each per pass, :func:`row_launches`).

    Formula: qkv: ``qkv`` linears (3: q_proj, k_proj, v_proj), cross_kv: ``kv`` (2: k and v of a cross-attention),
    fc1 and shared_fc1: ``fc1`` (2: gate_proj and up_proj of a gated MLP); 1 leaves a row as it is
    Source: Transformers 5.24 modeling files (LlamaAttention: ``self.q_proj(hidden_states)``, ``self.k_proj``,
    ``self.v_proj``; LlamaMLP: ``self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))``; T5Attention's
    k and v; GPT2Attention's fused c_attn, GPTNeoX's query_key_value and Phi-3's qkv_proj / gate_up_proj one GEMM);
    the H200 profiles count each (data/h200/hf_families.jsonl ``kind: profile``: Qwen3-0.6B 592 GEMM kernels a step
    = 28 layers x 7 linears x 3 + the head's 4; scripts/launch_counts.py)

    Args:
        table: a layer's kernel table [dict]
        qkv: linear modules of the qkv row (1 fused, 3 separate q, k, v) [count]
        kv: linear modules of a cross-attention's cross_kv row (1 fused, 2 separate k, v) [count]
        fc1: linear modules of the MLP's first row (1 fused or ungated, 2 separate gate, up) [count]
    Returns:
        the table, its rows with more than one linear marked ``linears`` [dict]

    >>> t = separate_linears({"qkv": {"kind": "gemm"}, "fc1": {"kind": "gemm"}, "fc2": {"kind": "gemm"}}, 3, fc1=2)
    >>> [row_launches(k, r) for k, r in t.items()]
    [(3, 6), (2, 4), (1, 2)]
    """
    count = {"qkv": qkv, "cross_kv": kv, "fc1": fc1, "shared_fc1": fc1}
    return {k: {**r, "linears": count[k]} if r["kind"] == "gemm" and count.get(k, 1) > 1 else r
            for k, r in table.items()}


def row_launches(name: str, row: Row, launches: dict[str, tuple[int, int]] | None = None,
                 ranks: Num = 2, ep_ranks: Num = 2, etp_ranks: Num | None = None) -> tuple[Num, Num]:
    """(forward, backward) kernels the host launches for one row.

    Formula: the stack's count for the row where it has one (``launches``; a software stack's element-wise rows:
    their ``kernels``, ``kernels_backward``), else by kind: GEMM (1, 2) (n, 2n for a row run as n GEMMs: its
    ``linears`` separate linear modules (:func:`separate_linears`) times its ``launches``, a grouped GEMM that
    launches one GEMM per expert; (n, n) for a frozen weight under LoRA, no weight gradient, as
    :mod:`dse.estimate.kernel_cost` prices its time): Transformer Engine's ``GroupedLinear`` loops over the local
    experts' cuBLAS GEMMs in ``general_grouped_gemm``, Transformers' MoE blocks over the experts in Python), flash (1, 2),
    element-wise (1, 1), a collective 1 in its pass when its group has more than one rank (``ranks``; an
    expert-parallel one: ``ep_ranks``, an expert tensor-parallel one: ``etp_ranks``) and, where the row may be empty
    (``optional``), bytes to move
    Source: the host issues one launch per CUDA kernel (CUDA C++ Programming Guide, "Asynchronous Concurrent
    Execution"); counts: :data:`MEGATRON_LAUNCHES`, the stack files.

    Returns:
        (forward, backward) launches [count]

    >>> row_launches("qkv", {"kind": "gemm"}, MEGATRON_LAUNCHES), row_launches("out", {"kind": "gemm"})
    ((1, 3), (1, 2))
    >>> row_launches("expert_fc1", {"kind": "gemm", "launches": 16})   # gpt-oss-120b's 16 local experts
    (16, 32)
    >>> row_launches("x", {"kind": "collective", "pass": "backward"}, ranks=8)
    (0, 1)
    """
    kind = row["kind"]
    if kind == "collective":
        group = row.get("group")
        n: Any = where((ep_ranks if group == "ep" else etp_ranks if group == "etp" and etp_ranks is not None
                        else ranks) > 1, 1, 0)
        if row.get("optional"):
            n = n * where(row["comm"] > 0, 1, 0)
        return (0, n) if row.get("pass") == "backward" else (n, 0)
    if launches is not None and name in launches and not ("kernels" in row or "bytes_backward" in row):
        return launches[name]
    if kind in ("gemm", "flash"):   # a grouped GEMM run as one GEMM per expert: ``launches`` of them each way
        n = row.get("launches", 1) * row.get("linears", 1)
        return n, (n if "frozen" in row else 2 * n)     # a frozen weight: the data gradient's GEMM only
    return row.get("kernels", 1), row.get("kernels_backward", 1)


def table_launches(table: Table, launches: dict[str, tuple[int, int]] | None = None,
                   ranks: Num = 2, ep_ranks: Num = 2, etp_ranks: Num | None = None) -> tuple[Num, Num]:
    """(forward, backward) kernels the host launches for a whole table: :func:`row_launches` summed.

    Formula: L_f = sum of the rows' forward launches, L_b = sum of their backward launches
    Source: :func:`row_launches`; what a launch floor multiplies by the host time per launch (a stack's
    ``dispatch``: asynchronous execution keeps the GPU busy only while the host issues kernels faster than they run,
    Horace He, "Making Deep Learning Go Brrrr From First Principles", 2022, "Overhead").

    Returns:
        (forward, backward) launches [count]

    >>> from dse.formulas.kernels import layer_kernels
    >>> t = layer_kernels(2048, 1, 1024, 16, 16, 64, 4096, tp=8, attention="math")   # a GPT layer, math attention
    >>> table_launches(t, MEGATRON_LAUNCHES, ranks=8)
    (16, 32)
    """
    f: Num = 0
    b: Num = 0
    for name, row in table.items():
        rf, rb = row_launches(name, row, launches, ranks, ep_ranks, etp_ranks)
        f, b = f + rf, b + rb
    return f, b


def gemm_launches(table: Table) -> tuple[Num, Num, Num]:
    """(forward, backward, recomputed forward) GEMM kernels of a table: the cuBLAS calls its passes make.

    Formula: :func:`row_launches` summed over the ``gemm`` rows (a row of n ``linears`` n, 2n; a frozen weight n, n);
    the recomputed forward leaves out the rows a non-reentrant checkpoint never reaches again (``stopped``:
    :func:`dse.formulas.kernels.early_stop`)
    Source: :func:`row_launches`

    Args:
        table: a layer's (or an end's) kernel table [dict]
    Returns:
        (forward, backward, recomputed forward) GEMM kernels [count]

    >>> gemm_launches({"qkv": {"kind": "gemm", "linears": 3}, "ln": {"kind": "elementwise"},
    ...                "fc2": {"kind": "gemm", "stopped": True}})
    (4, 8, 3)
    """
    f: Num = 0
    b: Num = 0
    r: Num = 0
    for name, row in table.items():
        if row["kind"] == "gemm":
            rf, rb = row_launches(name, row)
            f, b, r = f + rf, b + rb, r + (0 if row.get("stopped") else rf)
    return f, b, r


def library_memsets(gemms: Num, per_gemm: Num, kernel_overhead: Num, host: Num) -> tuple[Num, Num]:
    """(GPU time, host time) of the memsets the libraries under eager PyTorch issue inside a pass's GEMM calls.

    Formula: n = r g memsets for g GEMM calls; GPU t = n t_k, host t = n t_m, with r the stack's memsets per GEMM
    call (``gemm_memsets``), t_k the GPU's fixed time per element-wise kernel (``kernel_overhead``: each memset is one
    more operation on the stream, its own ~1 us and the GPU's idle between two operations; its bytes, a workspace's
    counters, are negligible) and t_m the host's time per cudaMemsetAsync (the stack's ``memset_host`` x the host's
    ``dispatch_scale``: a driver call made inside the library, never a PyTorch operator's dispatch)
    Source: the H200 profiles of eager Transformers steps (data/h200/hf_families.jsonl, gpt2_hf.jsonl,
    vm2/dense_families.jsonl; data/h100/gpt2_hf.jsonl: ``Memset (Device)`` beside the GEMM kernels): 140-1,164
    memsets a step, 0.15-1.44 per GEMM kernel (median 0.57), each 0.75-1.25 us of device time whatever the
    micro-batch (a workspace's counters, not a tensor); their count changes with the micro-batch at equal operators
    (Qwen2-0.5B b2 171, b8 253: cuBLAS's choice of kernel per GEMM shape) and with the batched GEMMs of eager attention
    (0 or 4 a layer). PyTorch's own reductions over the tokens (bias and norm-weight gradients) memset their
    semaphores as well (aten/src/ATen/native/cuda/Reduce.cuh ``launch_reduce_kernel``: ``cudaMemsetAsync(semaphores)``
    when ``config.should_global_reduce()``), counted in the same rate. Host: cudaMemsetAsync as cudaLaunchKernel,
    2.5 us on the reference host (data/host_dispatch_cpu.json ``cuda_launch_us``).

    Args:
        gemms: GEMM calls in the pass (:func:`gemm_launches`) [count]
        per_gemm: memsets per GEMM call [count]
        kernel_overhead: GPU time per memset [s]
        host: host time per memset on the host at hand [s]
    Returns:
        (GPU time, host time) of the pass's memsets [s]

    >>> [round(t * 1e6, 1) for t in library_memsets(21, 0.57, 3.82e-6, 2.5e-6 * 4.58)]   # a Llama layer's backward
    [45.7, 137.1]
    """
    n = gemms * per_gemm
    return n * kernel_overhead, n * host


def host_pass_time(launches: Num, dispatch: Num, layer: Num = 0.0) -> Num:
    """Host time of one pass of a layer: the kernels it launches and the layer's own framework code.

    Formula: t_host = L d + D, with L the pass's launches (:func:`table_launches`), d the host time per launch and D
    the host time per layer pass that does not grow with its launches, both on the host at hand (a stack's
    reference times x the host's scale: :func:`dse.estimate.passes.host_dispatch`).
    Source: eager PyTorch issues each kernel after Python, the dispatcher and autograd have run for its op (d); a
    Transformers decoder layer also runs the Python of its layer and attention modules, the attention interface
    and the arguments it passes on once per pass, however many kernels it launches (D). Measured on the CPU build
    of torch for the layers of five Transformers families, 93-227 launches per layer step (scripts/
    measure_host_layers.py -> data/host_layers_cpu.json): L d + D with one (d, D_forward, D_backward) fits their
    steps within 6 % (mean; 13 % max), L d alone within 13-18 % (42-48 % max: a family with many small element-wise
    kernels, Gemma 3, takes 25-40 % less host time per launch than GPT-2). Megatron's ``dispatch`` is per launch of a
    whole checkpointed step (D = 0).

    Args:
        launches: kernels the pass launches [count]
        dispatch: host time per launch [s]
        layer: host time per layer pass beyond the launches [s]
    Returns:
        host time of the pass [s]

    >>> round(host_pass_time(70, 3.42e-6, 299e-6) * 1e6, 1)   # a GPT2Block step on the reference host
    538.4
    """
    return launches * dispatch + layer


def step_host_time(launches: tuple[Num, Num], dispatch: Num, layer: tuple[Num, Num] = (0.0, 0.0),
                   recompute: str = "none") -> Num:
    """Host time of one layer's training step: its forward and backward passes (:func:`host_pass_time`), the forward
    twice under full recompute (torch.utils.checkpoint runs it again in the backward pass).

    Formula: t = k (L_f d + D_f) + L_b d + D_b, k = 2 under full recompute, else 1
    Source: :func:`host_pass_time`; what a host's ``dispatch_scale`` divides its measured GPT2Block step by.

    Args:
        launches: (forward, backward) launches of the layer [count]
        dispatch: host time per launch [s]
        layer: (forward, backward) host time per layer pass beyond the launches [s]
        recompute: "full" runs the forward twice; anything else once [choice]
    Returns:
        host time of the step [s]

    >>> round(step_host_time((20, 50), 3.42e-6, (128e-6, 171e-6), "full") * 1e6, 1)   # a checkpointed GPT2Block
    734.8
    """
    k = 2 if recompute == "full" else 1
    return k * host_pass_time(launches[0], dispatch, layer[0]) + host_pass_time(launches[1], dispatch, layer[1])


def moe_host_syncs(experts: int, pad: bool = False) -> tuple[int, int]:
    """(forward, backward) blocking device-to-host synchronisations of one MoE layer in Megatron-Core.

    Formula: (1, 0) for a routed layer (E > 1) whose experts take a variable number of tokens, (0, 0) when every
    expert's input is padded to its capacity (``pad``) or the layer has one expert (nothing is routed).
    Source: Megatron-Core ``MoEAlltoAllTokenDispatcher.preprocess`` (megatron/core/transformer/moe/
    token_dispatcher.py): the per-expert token counts the router computes on the GPU are copied to the host (a
    non-blocking copy on a side stream at ``cuda_dtoh_point``) and the host waits for them once per forward, at
    ``cuda_sync_point`` (``before_ep_alltoall`` when ep or tp > 1: NCCL's all-to-all takes its split sizes on the
    host; ``before_permutation_1`` when tokens are dropped without padding; ``before_finish`` otherwise: the grouped
    GEMM takes its ``m_splits`` as a host list); ``drop_and_pad`` (``--moe-pad-expert-input-to-capacity``) returns
    fixed counts before any copy and leaves ``cuda_sync_point`` at ``no_sync``; ``MoEAllGatherTokenDispatcher``
    calls ``.cpu()`` on its counts (one sync). Backward reuses the host split sizes the forward kept (the
    all-to-all's autograd function and the grouped GEMM's saved ``m_splits``): no sync. What the wait costs a pass:
    :func:`dse.formulas.kernels.restart_exposed_time` from the row :func:`dse.formulas.kernels.moe_sync_row` names.

    Args:
        experts: routed experts of the layer [count]
        pad: every expert's input padded to its capacity (Megatron's ``drop_and_pad``) [bool]
    Returns:
        (forward, backward) synchronisations per MoE layer [count]

    >>> moe_host_syncs(128), moe_host_syncs(128, pad=True), moe_host_syncs(1)
    ((1, 0), (0, 0), (0, 0))
    """
    return (0, 0) if experts <= 1 or pad else (1, 0)


def sync_exposed_time(syncs: Num, dispatch: Num) -> Num:
    """GPU idle time that host synchronisations add to a layer pass: the host's launch after each one.

    Formula: t = n_sync d, with d the stack's host time per launch (``dispatch``). A synchronisation drains the
    GPU's queue (the host waits until every kernel issued before it has run), so the host's lead is lost: the
    kernel after it reaches the GPU only d after the wait ends, and the pass takes max(GPU, host) + n_sync d.
    Assumes the GPU-bound case (a host-bound pass also waits for the GPU's last queued kernel: not counted) and
    the device-to-host copy finished before the wait (Megatron issues it early on a side stream): the GPU-bound
    limit of :func:`dse.formulas.kernels.restart_exposed_time`, which the estimate prices.
    Source: CUDA C++ Programming Guide, "Asynchronous Concurrent Execution" (cudaStreamSynchronize blocks the host
    until the stream's preceding work completes); the launch floor of :func:`table_launches`.

    Args:
        syncs: synchronisations in the pass [count]
        dispatch: host time per kernel launch (the stack's ``dispatch``) [s]
    Returns:
        exposed time per pass [s]

    >>> round(sync_exposed_time(1, 13.5e-6) * 1e6, 1)
    13.5
    """
    return syncs * dispatch
