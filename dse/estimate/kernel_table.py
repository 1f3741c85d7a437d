"""The kernel tables of a scenario (:mod:`dse.formulas.kernels`) and their time on one GPU.

:func:`kernel_tables` builds the tables of one micro-batch (a layer, the embedding, the head) from the model, the
plan and the precision, with the sums the memory and FLOP counts read; :func:`kernel_times` prices them with the
host's share and memoises the result. What one row costs (:func:`kernel_time`, :func:`collective_time`,
:func:`table_time`, the GPU's :class:`KernelCost` and a group's :class:`Link`) lives in
:mod:`dse.estimate.kernel_cost`, re-exported here.

Array-safe: the table's numbers and the hardware's may be numpy arrays; only the
kernel kinds and the plan's string/boolean choices branch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.estimate import context as _context, encoder_decoder as _encdec, frozen as _frozen, mtp as _mtp
from dse.estimate.kernel_cost import (  # noqa: F401 (re-exported: the estimate's and the tests' names)
    _RATED,
    KernelCost,
    Link,
    Module,
    Row,
    Table,
    _rated_extra,
    collective_time,
    cost_of,
    kernel_time,
    table_time,
)
from dse.estimate.passes import host_dispatch, layer_entries, moe_sync_time, with_memsets
from dse.estimate.table_inputs import (
    END_SUMS,
    attention_shares,
    mla_options,
    moe_options,
    stack_inputs,
    stack_spec,
    table_sums,
)
from dse.formulas import compute as _compute, kernels as _kernels, parallelism as _parallelism, stacks as _stacks
from dse.formulas._array import Num, maximum
from dse.formulas.finetune import GATED
from dse.formulas.precision import Recipe, peak_flops, recipe_of
from dse.specs.plan import expert_tp

if TYPE_CHECKING:
    from dse.specs.hardware import GPUSpec, HostSpec, SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

# memo of kernel_tables for scalar plans: (model id, plan fields, e, formulas) -> (model, result)
_TABLES: dict[tuple[Any, ...], tuple[Any, dict[str, Any]]] = {}
# the formulas kernel_tables and table_sums call: part of the memo's key, so that a replaced one (a test, the
# reference page's perturbation) is never served a stale table
_FORMULAS = ("layer_kernels", "embedding_kernels", "head_kernels", "saved_bytes", "packed_bytes", "rerun_bytes",
             "forward_flops", "backward_flops", "recomputed_flops", "message_bytes", "mtp_kernels",
             "unfused_grad_accumulation")


def kernel_tables(model: ModelSpec, plan: Plan, r: Recipe, K: Module = _kernels) -> dict[str, Any]:
    """The kernel tables of one micro-batch on one GPU (``layer``, ``embedding``, ``head``) and their ``sums``.

    ``r`` is the plan's precision recipe (:func:`dse.formulas.precision.recipe_of`): bytes per element of the
    activations, of the tensor-parallel messages and of the logits.

    ``sums`` holds what the estimate reads off the tables besides time (:func:`table_sums`). A scalar plan's
    result is kept per model and plan fields (the search and the validation suites meet the same micro-batch,
    TP degree and recompute mode again and again); array plans and traced runs build afresh. The tables are
    shared: read them, do not change them.
    """
    s, b, t, sp = _context.local_seq(plan), plan.micro_batch, plan.tp, plan.sequence_parallel   # s/cp tokens
    e, comm = r.activations, r.tp_messages   # bytes per element (the precision recipe)
    stack = getattr(plan, "stack", "megatron")
    fp8 = plan.fp8_scaling if r.gemm_dtype == "fp8" else None     # FP8 linear layers (dse.formulas.fp8)
    key = _tables_key(model, plan, r, s, fp8) if K is _kernels else None   # traced: the trace records every call
    if key is not None:
        try:
            hit = _TABLES.get(key)
        except TypeError:                  # array plan fields: not hashable, not memoised
            hit = key = None
        if hit is not None and hit[0] is model:
            return hit[1]
    h = model.hidden
    dropout = model.dropout > 0
    ops, size, choices = stack_inputs(model, plan, stack)
    share, executed = attention_shares(model, plan, stack)   # sliding-window / chunked layers (None: all full)
    opts = dict(tp=t, sequence_parallel=sp, recompute=plan.recompute, attention=plan.attention,
                ffn_type=model.ffn_type, norm=model.norm, position=model.position, dropout=dropout,
                causal=model.architecture == "decoder", bytes_per_element=e, comm_bytes_per_element=comm, stack=ops,
                stack_sizes=size, stack_choices=choices, grad_bytes=r.gradients, layer_norms=model.layer_norms,
                qk_norm=model.qk_norm, finetune=_frozen.kernel_inputs(model, plan), fp8=fp8,
                softmax_fallback=stack == "megatron", mla=mla_options(model),
                parallel_residual=model.parallel_residual, rotary_fraction=model.rotary_fraction,
                rotary_unfused=stack == "megatron" and model.rotary_attention_factor != 1,
                score_dropout=model.attention_dropout, branch_dropouts=model.branch_dropouts)
    if share is not None:
        opts.update(attention_share=share, executed_share=executed)
    shape = (s, b, h, model.heads, model.kv_heads, model.head_dim, model.ffn_hidden)
    layer, dense, n_moe = _layer_tables(model, plan, K, shape, opts)
    if stack != "megatron":   # Transformers' modules: q, k, v (and gate, up) each their own nn.Linear GEMM
        qkv = 3 if model.qkv_projection == "separate" else 1
        fc1 = 2 if model.ffn_type in GATED and not model.projection_slices else 1   # Phi-3's gate_up_proj: one
        layer = _kernels.separate_linears(layer, qkv, 2 if qkv == 3 else 1, fc1)
        dense = None if dense is None else _kernels.separate_linears(dense, qkv, 2 if qkv == 3 else 1, fc1)
    if model.nope_layers:               # NoPE layers: the mean layer's rotary rows at the rotary layers' share
        share = 1 - model.nope_layers / model.layers
        layer = rotary_share(layer, share)
        dense = None if dense is None else rotary_share(dense, share)
    if plan.recompute == "full" and stack_spec(stack).checkpoint_early_stop:   # the recomputation stops early
        layer = K.early_stop(layer, model.parallel_residual)
        dense = None if dense is None else K.early_stop(dense, model.parallel_residual)
    embedding, head = _end_tables(model, plan, r, K, s, (ops, size, choices))
    if stack == "megatron" and not getattr(plan, "grad_accumulation_fusion", True) and plan.finetune == "full":
        layer, dense, head = _unfused_accumulation(model, plan, r, K, (layer, dense, head))
    out: dict[str, Any] = {"layer": layer, "embedding": embedding, "head": head}
    # biases, learned positions, dropout: the host's launches per row (dse.formulas.kernels.megatron_launches)
    out["bias"] = {"bias": model.bias, "qkv_bias": model.bias if model.qkv_bias is None else model.qkv_bias,
                   "learned_positions": model.position == "learned",
                   "dropout": dropout and model.embedding_dropout}     # Megatron's: the embedding's dropout launch
    out["sums"] = table_sums(out, plan.recompute, K)
    if _mtp.depths(model):   # multi-token prediction: D depths of the last layer kind, head and embedding
        out["sums"].update(_mtp.sums(out["sums"], out.setdefault("mtp", _mtp.extra_table(model, plan, r, K, s)),
                                     _mtp.depths(model), plan.recompute, K))
    if dense is not None:   # dense and MoE layers, or encoder and decoder ones: the mean layer (sums; kernel_times)
        share = n_moe / model.layers
        out["dense_layer"], out["moe_share"] = dense, share
        dense_sums = table_sums({**out, "layer": dense}, plan.recompute, K)
        out["kind_a_layer"] = {"dense": dense_sums["a_layer"], "moe": out["sums"]["a_layer"]}   # dse.estimate.stages
        out["sums"] = {k: v if k in END_SUMS else v * share + dense_sums[k] * (1 - share)
                       for k, v in out["sums"].items()}
    if key is not None:
        if len(_TABLES) >= 512:        # bounded: a few MB at most
            _TABLES.clear()
        _TABLES[key] = (model, out)
    return out


#: The rows a layer without rotary positions does not run (apply_rotary_pos_emb and what it brings along).
ROTARY_ROWS = ("rotary", "rotary_grads", "rotary_fp32", "rotary_upcast", "rotary_tables")


def rotary_share(table: Table, share: Num) -> Table:
    """A layer table whose rotary rows are priced on ``share`` of the layers (the others NoPE), as the mean layer.

    Formula: each :data:`ROTARY_ROWS` row's bytes, passes, saved and packed bytes and kernels (forward and backward)
    times ``share``. Source: SmolLM3Attention applies the rotary only where ``no_rope_layers[layer_idx]`` is 1
    (transformers 5.24 modeling_smollm3.py:192, 215); traced (scripts/trace_paths.py on SmolLM3-3B, b 1, s 32:
    layers 1 -> 2 a RoPE layer, 3 -> 4 a NoPE one) the NoPE layer runs 10 forward and 16 backward aten ops fewer under
    SDPA -- the rotary row's 10 and 18 kernels (its two slice_backwards two kernels each on CUDA) and rotary_grads' 2
    copies -- and the rotary row's 10 and 18 under eager attention, nothing else.

    >>> rotary_share({"rotary": {"kind": "elementwise", "bytes": 8, "kernels": 10, "kernels_backward": 18}}, 0.75)
    {'rotary': {'kind': 'elementwise', 'bytes': 6.0, 'kernels': 7.5, 'kernels_backward': 13.5}}
    """
    return {k: {f: v * share if f != "kind" and isinstance(v, (int, float)) and not isinstance(v, bool) else v
                for f, v in row.items()} if k in ROTARY_ROWS else row for k, row in table.items()}


def _tables_key(model: ModelSpec, plan: Plan, r: Recipe, s: Num, fp8: str | None) -> tuple[Any, ...]:
    """The memo key of :func:`kernel_tables`: every plan field and recipe width the tables read, and the formulas
    they call (``s``: the tokens per sequence on one GPU)."""
    return (id(model), s, getattr(plan, "target_len", None), plan.cp, getattr(plan, "cp_comm", "p2p"),
            plan.micro_batch, plan.tp, getattr(plan, "ep", 1), getattr(plan, "moe_dispatch_dtype", "bf16"),
            getattr(plan, "moe_dispatcher", None),
            getattr(plan, "expert_capacity", None), getattr(plan, "pad_to_capacity", False), plan.sequence_parallel,
            plan.recompute, plan.attention, r.activations, r.tp_messages, r.logits, getattr(plan, "stack", "megatron"),
            r.gradients, expert_tp(plan),
            plan.finetune, plan.lora_rank, plan.lora_targets, plan.quantization, plan.lora_dropout, fp8,
            getattr(plan, "kv_cache", None), getattr(plan, "cross_entropy_fusion", None),
            *_accumulation_key(plan), *map(_kernels.__getattribute__, _FORMULAS))


def _accumulation_key(plan: Plan) -> tuple[Any, ...]:
    """The plan fields the unfused gradient accumulation's rows read (:func:`_unfused_accumulation`)."""
    if getattr(plan, "grad_accumulation_fusion", True):
        return (True,)
    return False, plan.global_batch, plan.dp, plan.pp, plan.virtual_stages, plan.schedule


def _unfused_accumulation(model: ModelSpec, plan: Plan, r: Recipe, K: Module,
                          tables: tuple[Table, Table | None, Table]) -> tuple[Table, Table | None, Table]:
    """(layer, other layer kind, head) with the unfused gradient accumulation's rows
    (:func:`dse.formulas.kernels.unfused_grad_accumulation`): a layer's parameters on this GPU in its parameter
    tensors, and the LM head's weight V/t h where the head's GEMM writes its gradient; fp32 main grads: Megatron's
    main-grad hook, every micro-batch; half gradients: the 2021 code's AccumulateGrad into ``.grad``, m - 1 of the m
    micro-batches (:func:`~dse.formulas.kernels.unfused_grad_accumulation` states both from the source). The word
    embedding's own gradient is accumulated unfused whatever the plan (its ``embedding_grad`` row)."""
    from dse.estimate.parameters import parameters

    layer, dense, head = tables
    e, g = r.activations, r.gradients
    B: Any = plan.global_batch   # a resolved plan: global_batch and dp are set
    d: Any = plan.dp
    m = B / (d * plan.micro_batch)   # micro-batches per replica per iteration
    passes = (m - 1) / m if plan.grad_dtype == "half" else 1
    per_gpu = parameters(model, plan)
    kw = dict(passes=passes, bytes_per_element=e, grad_bytes=g)
    n = megatron_param_tensors(model, plan)
    mean = per_gpu["p_layer_gpu"]
    kinds = ("p_moe_gpu", "p_dense_gpu") if dense is not None and "p_moe_gpu" in per_gpu else None
    layer = {**layer, **K.unfused_grad_accumulation(per_gpu[kinds[0]] if kinds else mean, n, **kw)}
    if dense is not None:
        dense = {**dense, **K.unfused_grad_accumulation(per_gpu[kinds[1]] if kinds else mean, n, **kw)}
    if "lm_head" in head and not head["lm_head"].get("frozen"):
        vocab = head["lm_head"]["n"]    # V/t columns on this GPU
        head = {**head, **K.unfused_grad_accumulation(vocab * model.hidden, 1, name="head_grad_accum", **kw)}
    return layer, dense, head


def megatron_param_tensors(model: ModelSpec, plan: Plan) -> Any:
    """Parameter tensors of one Megatron layer on one GPU (one accumulation add each, unfused).

    Weights: the fused QKV, the output projection, fc1 (gate and up fused) and fc2; a bias per linear (or on QKV only,
    on the MLP only); the norms' weights (and biases: LayerNorm); a QK-norm's two; an MoE layer's router and each of
    its E/ep local experts' fc1 and fc2 (Transformer Engine's GroupedLinear: a weight per expert)."""
    mlp_bias = model.bias if model.mlp_bias is None else model.mlp_bias
    qkv_bias = model.bias if model.qkv_bias is None else model.qkv_bias
    biases = int(qkv_bias) + int(model.bias) + 2 * int(mlp_bias)
    norms = model.layer_norms * (2 if model.norm == "layernorm" and model.norm_bias else 1)
    qk = 2 if model.qk_norm and model.qk_norm_weight else 0
    experts = 1 + 2 * model.experts / plan.ep if model.experts else 0
    return 4 + biases + norms + qk + experts


def _end_tables(model: ModelSpec, plan: Plan, r: Recipe, K: Module, s: Num,
                stack_in: tuple[Any, Any, Any]) -> tuple[Table, Table]:
    """(embedding, head): the tables of the ends of one micro-batch (``s``: tokens per sequence on one GPU;
    ``stack_in``: :func:`stack_inputs`' ops, sizes and choices)."""
    ops, size, choices = stack_in
    b, t, sp, h, e = plan.micro_batch, plan.tp, plan.sequence_parallel, model.hidden, r.activations
    s_in, s_out = _encdec.lengths(model, plan, s)    # encoder-decoder: both stacks' tokens in, the target's out
    embedding = K.embedding_kernels(s_in, b, h, tp=t, sequence_parallel=sp,
                                    dropout=model.dropout > 0 and model.embedding_dropout,
                                    position=model.position, bytes_per_element=e,
                                    comm_bytes_per_element=r.tp_messages, vocab=model.vocab, grad_bytes=r.gradients)
    head = K.head_kernels(s_out, b, h, model.vocab, tp=t, sequence_parallel=sp, norm=model.norm,
                          final_norm=model.final_norm, bytes_per_element=e, logits_bytes=r.logits,
                          fusion=getattr(plan, "cross_entropy_fusion", None))
    if _encdec.is_encoder_decoder(model):
        head = _encdec.encoder_output(head, model, s, b, tp=t, sequence_parallel=sp, bytes_per_element=e)
    if model.embedding_dim:   # OPT-350m: project_in after the lookup, project_out before a narrower LM head
        head, embedding = _kernels.embedding_projections(head, embedding, s_out * b, h, model.embedding_dim,
                                                         bytes_per_element=e)
    if ops:
        embedding = _stacks.apply_embedding(embedding, ops, size, bytes_per_element=e, choices=choices)
        head = _stacks.apply_head(head, ops, size, bytes_per_element=e, choices=choices)
        if not stack_spec(getattr(plan, "stack", "megatron")).pads_vocab:   # the LM head's n may be unaligned
            head["lm_head"] = {**head["lm_head"], "aligned": _stacks.aligned(head["lm_head"]["n"], e)}
    if plan.finetune != "full":   # the LM head's weight and the embedding table are frozen too
        head, embedding = _frozen_ends(head, embedding)
    return embedding, head


def _frozen_ends(head: Table, embedding: Table) -> tuple[Table, Table]:
    """The head and embedding tables of a frozen LM head and embedding table: no weight gradient, no table gradient."""
    emb = {k: v for k, v in embedding.items() if k != "embedding_grad"}
    emb["embedding"] = {**emb["embedding"], "bytes_backward": 0, "kernels_backward": 0}
    if "project_in" in emb:    # OPT-350m's embedding projections are frozen weights too
        emb["project_in"] = {**emb["project_in"], "frozen": True}
        head = {**head, "project_out": {**head["project_out"], "frozen": True}}
    return {**head, "lm_head": {**head["lm_head"], "frozen": True}}, emb


def _layer_tables(model: ModelSpec, plan: Plan, K: Module, shape: tuple[Any, ...],
                  opts: dict[str, Any]) -> tuple[Table, Table | None, int]:
    """(the layer's table, the other kind of layer's or None, how many layers are of the first kind): an MoE layer
    and a dense one where the model has both, a decoder and an encoder layer for an encoder-decoder model."""
    if _encdec.is_encoder_decoder(model):
        return _encdec.layer_tables(model, plan, K, shape, opts)
    n_moe = model.moe_layers
    layer = K.layer_kernels(*shape, **opts, moe=moe_options(model, plan) if n_moe else None)
    dense = K.layer_kernels(*shape, **opts) if 0 < n_moe < model.layers else None
    layer, dense = _context.split_tables(layer, dense, model, plan, opts["bytes_per_element"])   # cp: whole sequence
    return layer, dense, n_moe


def kernel_times(tables: dict[str, Any], system: SystemSpec, plan: Plan, peak: Num, lk: dict[str, Link],
                 C: Module = _compute, P: Module = _parallelism) -> dict[str, Num]:
    """Time of one layer (forward, backward, recompute, with the host's launch floor), the head and embedding.

    GEMMs run at the peak of their class's dtype (the precision recipe: attention and LM head may differ).
    Scalar inputs' times are kept (see :func:`_times_key`) and shared: read them, do not change them.
    """
    gpu = system.node.gpu
    async_tp = plan.async_tp_allreduce and not plan.sequence_parallel   # hidden behind the weight-gradient GEMMs
    host_spec = system.node.host
    key = _times_key(tables, gpu, host_spec, plan, peak, lk["tp"], async_tp, C, P, lk.get("ep"), lk.get("etp"))
    hit = _TIMES.get(key) if key is not None else None
    if hit is not None and hit[0] is tables and hit[1] is gpu:
        return hit[2]
    eff = gpu.efficiency
    r = recipe_of(plan)
    hw = cost_of(gpu, peak, peak_flops(gpu.peak_flops, r.attention_dtype), peak_flops(gpu.peak_flops, r.head_dtype),
                 r.activations)
    stack = getattr(plan, "stack", "megatron")
    spec = stack_spec(stack)
    dispatch, layer_dispatch, layer_host = host_dispatch(spec.dispatch, host_spec, stack, plan.recompute,
                                                         spec.layer_dispatch, spec.checkpoint_dispatch)
    count = bool(dispatch)
    ends = spec.ends_dispatch * host_spec.dispatch_scale if spec.ends_dispatch else dispatch   # embedding, head
    launches = _kernels.megatron_launches(**tables.get("bias", {})) if stack == "megatron" else None
    rows: dict[str, tuple[Num, Num]] = {}     # the layer's rows in order: the MoE dispatcher's wait (below)
    lt = table_time(tables["layer"], hw, lk["tp"], C, P, recompute=plan.recompute, async_tp=async_tp, count=count,
                    ep_link=lk.get("ep"), launches=launches, etp_link=lk.get("etp"), rows=rows)
    # the memsets cuBLAS and PyTorch's reductions issue inside the GEMM calls (stacks/pytorch.yaml gemm_memsets)
    memsets = (spec.gemm_memsets, hw.kernel_overhead, spec.memset_host * host_spec.dispatch_scale)
    lt = last = with_memsets(lt, tables["layer"], plan.recompute, *memsets)
    if "dense_layer" in tables:   # a mixed dense/MoE model: the mean layer's time
        dt = with_memsets(table_time(tables["dense_layer"], hw, lk["tp"], C, P, recompute=plan.recompute,
                                     async_tp=async_tp, count=count, launches=launches),
                          tables["dense_layer"], plan.recompute, *memsets)
        share = tables["moe_share"]
        lt = {k: v * share + dt[k] * (1 - share) for k, v in lt.items()}
    head = with_memsets(table_time(tables["head"], hw, lk["tp"], C, P, count=count, launches=launches),
                        tables["head"], "none", *memsets)
    emb = with_memsets(table_time(tables["embedding"], hw, lk["tp"], C, P, count=count, launches=launches),
                       tables["embedding"], "none", *memsets)
    if count:
        for part in (head, emb):
            part["forward"] = maximum(part["forward"], ends * part["kernels_forward"]
                                      + part.get("memset_host_forward", 0.0))
            part["backward"] = maximum(part["backward"], ends * part["kernels_backward"]
                                       + part.get("memset_host_backward", 0.0))
    # Megatron-Core's dropless token dispatcher waits for the per-expert token counts once per MoE layer forward
    # (and its full recompute): the pipeline restarts from an empty GPU queue (dse.estimate.passes.moe_sync_time)
    sync: Num = 0.0
    if launches is not None and "router" in tables["layer"]:
        pad = bool(getattr(plan, "pad_to_capacity", False))
        syncs = _kernels.moe_host_syncs(tables["layer"]["router"]["n"], pad=pad)[0]
        sync = syncs * moe_sync_time(tables["layer"], rows, layer_dispatch, hw.kernel_overhead) if syncs and rows \
            else 0.0
    host = (eff.layer_overhead, layer_dispatch if count else 0, plan.recompute)
    out = {**layer_entries(lt, *host, sync * tables.get("moe_share", 1.0), layer_host),
           "t_head": head["forward"] + head["backward"], "t_embed": emb["forward"] + emb["backward"]}
    if "dense_layer" in tables:   # each kind's layer alone (a custom pipeline layout's stages: dse.estimate.stages)
        for kind, table, wait in (("moe", last, sync), ("dense", dt, 0.0)):
            out.update({f"{kind}:{k}": v for k, v in layer_entries(table, *host, wait, layer_host).items()})
    if "mtp" in tables:   # multi-token prediction: a layer of the last kind alone, and the depth's own kernels
        own = table_time(tables["mtp"], hw, lk["tp"], C, P, recompute=plan.recompute, async_tp=async_tp)
        out.update(_mtp.pass_times(last, own, eff.layer_overhead, layer_dispatch if count else 0, plan.recompute,
                                   sync, layer_host))
    if key is not None and set(map(type, out.values())) <= _SCALARS:   # a vector system's arrays: not kept
        if len(_TIMES) >= 512:         # bounded like _TABLES
            _TIMES.clear()
        _TIMES[key] = (tables, gpu, out)
    return out


def _plain(link: Link | None) -> tuple[Any, ...]:
    """A link's values as the memo checks them: its path by the nodes it spans (its latencies are Python floats);
    an unset (None) share is no value."""
    return () if link is None else (*link[:2], link.path.nodes, *(v for v in link[3:] if v is not None))


# memo of kernel_times for scalar hardware and plans: see _times_key
_TIMES: dict[tuple[Any, ...], tuple[Any, GPUSpec, dict[str, Num]]] = {}
_SCALARS = frozenset((int, float, bool))


def _times_key(tables: dict[str, Any], gpu: GPUSpec, host: HostSpec, plan: Plan, peak: Num, link: Link,
               async_tp: bool, C: Module, P: Module, ep_link: Link | None = None, etp_link: Link | None = None
               ) -> tuple[Any, ...] | None:
    """The memo key of :func:`kernel_times`, or None when it is not memoised (arrays, traced or replaced formulas).

    Every input of the times is in it: the tables and the GPU spec (by identity: the tables come from the
    :func:`kernel_tables` memo, the frozen spec from the catalog; a hit must be for the same objects), the host's
    dispatch scales, the precision recipe the GPU's kernel costs are read with (the plan's precision and gradient
    dtype), the GEMM peak, the TP and EP links, the recompute mode, async TP, the stack (its dispatch), padding to
    capacity (the MoE dispatcher's host sync), and the formulas called (so that a replaced one is never served a
    stale time).
    Only Python numbers: a search's numpy values are computed afresh, and array times (a vector system) not kept.
    """
    scales = (host.dispatch_scale, host.checkpoint_dispatch_scale or 0.0)
    if C is not _compute or P is not _parallelism or not {*map(type, (peak, *_plain(link), *_plain(ep_link),
                                                                        *_plain(etp_link), *scales))} <= _SCALARS:
        return None
    return (id(tables), id(gpu), scales, plan.precision, plan.grad_dtype, peak, link, ep_link, etp_link,
            plan.recompute, async_tp,
            getattr(plan, "stack", "megatron"), bool(getattr(plan, "pad_to_capacity", False)),
            C.gemm_time, C.grouped_gemm_time, C.memory_time, P.allreduce_time, P.allgather_time,
            P.hierarchical_alltoall_time,
            _kernels.table_launches, _kernels.row_launches, _kernels.megatron_launches, _kernels.moe_host_syncs,
            _kernels.restart_exposed_time, _kernels.stream_time, _kernels.moe_sync_row, _kernels.host_pass_time,
            _kernels.library_memsets, _kernels.gemm_launches)
