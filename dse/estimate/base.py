"""Compose the base formulas into one training-iteration estimate on GPUs.

Works on scalars (``dse estimate``) and, for every numeric plan/hardware field, on numpy arrays (the vectorised
search): only string/boolean choices branch in Python; numeric ones go through :mod:`dse.formulas._array`.

The pieces, in order: the kernel tables of a layer, the embedding and the head (:mod:`dse.formulas.kernels`, built
once); parameter placement per stage; memory per tier (checked first: a search can stop there); the time of each
table (:mod:`dse.estimate.kernel_table`); the pipeline (DualPipe: :mod:`dse.estimate.dualpipe`); data-parallel
reduction and optimizer step; the breakdown, FLOPs, throughput and traffic (:mod:`dse.estimate.totals`). Parameter
counts and link bandwidths of scalar plans are kept per spec (:mod:`dse.estimate.memo`).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from dse.estimate import (
    context as _context,
    dualpipe as _dualpipe,
    fp8 as _fp8,
    frozen as _frozen,
    mtp as _mtp,
    stages as _stages,
)
from dse.estimate.data_parallel import data_parallel, expert_parallel as _expert_parallel
from dse.estimate.kernel_cost import Link
from dse.estimate.kernel_table import kernel_tables, kernel_times
from dse.estimate.links import expert_replicas, links
from dse.estimate.parameters import parameters
from dse.estimate.terms import BaseTerms, TimeTerms
from dse.estimate.totals import breakdown, flops, traffic
from dse.formulas import (
    compute as _compute,
    kernels as _kernels,
    memory as _memory,
    optimizer as _optimizer,
    parallelism as _parallelism,
    transformer as _transformer,
)
from dse.formulas._array import ceil, maximum, minimum, where
from dse.formulas.precision import peak_flops, recipe_of

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Formulas, Num, Result, Section
    from dse.formulas.precision import Recipe
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def shapes(model: ModelSpec, plan: Plan) -> dict[str, Any]:
    """Keyword arguments shared by the per-layer formulas."""
    return dict(h=model.hidden, heads=model.heads, kv_heads=model.kv_heads, head_dim=model.head_dim,
                ffn=model.ffn_hidden)


def _modules(F: Formulas | None
             ) -> tuple[FormulaModule, FormulaModule, FormulaModule, FormulaModule, FormulaModule]:
    if F:
        return F["transformer"], F["memory"], F["parallelism"], F["compute"], F["kernels"]
    return _transformer, _memory, _parallelism, _compute, _kernels


def compose(model: ModelSpec, system: SystemSpec, plan: Plan, F: Formulas | None = None) -> Result:
    """The base estimate as nested dicts of numbers (or arrays). ``F`` swaps in traced formula modules.

    Equals :func:`compose_time` applied to :func:`compose_memory`; the vectorised search
    calls the two halves itself so that it computes time only for points that fit.
    """
    c = compose_memory(model, system, plan, F)
    compose_time(c, model, system, plan, F)
    return c


# ------------------------------------------------------------------------------------------ memory side


def activations(sums: Section, plan: Plan, m: Num, l_stage: Num, T: FormulaModule = _transformer) -> Section:
    """Activation bytes per layer, head and embedding, and on the first and last stage's GPU."""
    p, v, dual = plan.pp, plan.virtual_stages, plan.schedule == "dualpipe"
    single = (p == 1) | dual      # DualPipe: rank 0 holds the first and the last stage
    a_layer, a_work, a_head, a_emb = sums["a_layer"], sums["a_work"], sums["a_head"], sums["a_emb"]
    a_mtp = sums.get("a_mtp", 0)   # multi-token prediction depths on the last stage (dse.estimate.mtp)
    if plan.schedule == "gpipe" or dual:
        in_flight = m if not dual else minimum(p + 1, m)   # DualPipe: p + 1 (DeepSeek-V3 Table 2)
    else:
        in_flight = minimum(p, m) * where(v > 1, T.interleave_factor(p, v), 1)
    return {"a_layer": a_layer, "a_work": a_work, "a_head": a_head, "a_emb": a_emb, "in_flight": in_flight,
            # the head's saved tensors and the loss's buffers are freed by its backward, before any layer is
            # recomputed: a stage holding both peaks at the larger of the two
            "act_first": in_flight * (l_stage * a_layer + a_emb)
            + where(single, maximum(a_head, a_work) + a_mtp, a_work),
            "act_last": l_stage * a_layer + maximum(a_head, a_work) + where(single, a_emb, 0) + a_mtp}


def _widest_mlp(model: ModelSpec) -> Num:
    """The widest MLP a token passes through, as elements per token: F dense; k F_e routed and S F_s shared (MoE)."""
    dense: Num = model.ffn_hidden       # resolved specs: set
    if not model.experts:
        return dense
    k: Num = model.experts_per_token
    routed: Num = model.expert_ffn
    widest = maximum(k * routed, model.shared_experts * (model.shared_expert_ffn or 0))
    return maximum(widest, dense) if model.moe_layers < model.layers else widest


def _expert_states(M: FormulaModule, p_stage: Num, p_expert: Num, d: Num, edp: Num, zero: Num,
                   state_bytes: Section) -> Section:
    """Model states of a stage's GPU under expert parallelism: dense parameters sharded over d = dp cp, experts over
    the ``edp`` ranks of the expert-data-parallel group, which reduce their gradients and shard their optimizer
    states (Megatron-Core's distributed optimizer, ``expert_data_parallel_group``; :func:`expert_replicas`)."""
    w, g, o = state_bytes["weights"], state_bytes["gradients"], state_bytes["optimizer"]
    dense = M.model_state_bytes(p_stage - p_expert, d, zero, w, g, o)
    experts = M.model_state_bytes(p_expert, edp, zero, w, g, o)
    return {k: dense[k] + experts[k] for k in dense}


def memory_tiers(model: ModelSpec, system: SystemSpec, plan: Plan, prm: Section, act: Section, r: Recipe,
                 state_bytes: Section, T: FormulaModule = _transformer, M: FormulaModule = _memory
                 ) -> tuple[dict[str, Section], Section]:
    """Memory per tier (GPU, host, storage) of the fullest stage, and the model states of both end stages.

    ``r`` is the precision recipe, ``state_bytes`` the bytes per parameter of weights, gradients and optimizer.
    """
    node = system.node
    gpu = node.gpu
    d: Num = _context.grad_ranks(plan)   # dp x cp replicas of the states (a resolved plan: dp, zero set)
    zero: Num = plan.zero
    t = plan.tp
    w_bytes, g_bytes, opt_bytes = state_bytes["weights"], state_bytes["gradients"], state_bytes["optimizer"]
    if plan.finetune == "full":
        states_first = M.model_state_bytes(prm["p_first"], d, zero, w_bytes, g_bytes, opt_bytes)
        states_last = M.model_state_bytes(prm["p_last"], d, zero, w_bytes, g_bytes, opt_bytes)
        pe = _mtp.end_experts(prm, plan.pp)   # the routed experts on a GPU of the first and of the last stage
        if _expert_parallel(plan, model):   # the experts' ZeRO shards split over the dp/ep ranks holding them
            edp = expert_replicas(plan, d)
            states_first, states_last = (_expert_states(M, prm[st], p_e, d, edp, zero, state_bytes)
                                         for st, p_e in zip(("p_first", "p_last"), pe))
    else:
        states_first, states_last = (_frozen.states(prm, stage, model, plan, r, state_bytes, M)
                                     for stage in ("p_first", "p_last"))
    fp8_meta = 0.0
    if r.weight_copies:   # FP8: the linear weights' FP8 copies and transposes beside the bf16 ones (dse.estimate.fp8)
        copies, fp8_meta = _fp8.memory(model, plan, r, prm["l_stage"])
        states_first, states_last = ({**st, "weights": st["weights"] + copies} for st in (states_first, states_last))
    total_first = states_first["weights"] + states_first["gradients"] + states_first["optimizer"] + act["act_first"]
    total_last = states_last["weights"] + states_last["gradients"] + states_last["optimizer"] + act["act_last"]
    first_is_max = total_first >= total_last
    pick = partial(where, first_is_max)     # (first, last) -> the fuller stage's value
    frozen = pick(*(_frozen.frozen_bytes(prm, st, model, plan, r) for st in ("p_first", "p_last"))) \
        if plan.finetune != "full" else 0.0
    chunks = _dualpipe.gathered_layers(plan)   # DualPipe: a forward and a backward chunk gathered at once
    if plan.finetune == "full":
        zero3_buf = where(zero >= 3, chunks * M.zero3_gather_bytes(prm["p_layer_gpu"], r.weight_gathers), 0)
    else:   # a layer's frozen weights are gathered as stored (QLoRA: packed), its adapters at the gather dtype
        layer = (frozen + prm["p_train_gpu"] * r.weight_gathers) / prm["l_stage"]
        if plan.schedule == "dualpipe":   # the rank's two stages: l_stage layers of each
            layer = layer / 2
        zero3_buf = where(zero >= 3, chunks * M.zero3_gather_bytes(layer, 1), 0)

    bwd_work = T.backward_working_bytes(_context.local_seq(plan), plan.micro_batch, model.hidden, _widest_mlp(model),
                                        tp=t, sequence_parallel=plan.sequence_parallel, ffn_type=model.ffn_type,
                                        bytes_per_element=r.activations)
    buffers = gpu.reserved + zero3_buf + bwd_work + fp8_meta
    if plan.finetune == "qlora":   # the dequantized copy of the largest linear weight, alive during its GEMM
        buffers = buffers + _frozen.dequantized_buffer(model, r, t)
    mem_gpu = {
        "weights": pick(states_first["weights"], states_last["weights"]),
        "gradients": pick(states_first["gradients"], states_last["gradients"]),
        "optimizer": pick(states_first["optimizer"], states_last["optimizer"]),
        "activations": pick(act["act_first"], act["act_last"]),
        "buffers": buffers,
    }
    mem_gpu["total"] = pick(total_first, total_last) + buffers
    mem_gpu["capacity"] = gpu.hbm_capacity
    host = node.host
    mem_host = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0, "activations": 0.0, "buffers": host.reserved,
                "total": host.reserved, "capacity": host.dram_capacity}
    storage_cap = node.storage.count * node.storage.device.capacity if node.storage else 0.0
    mem_storage = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0, "activations": 0.0, "buffers": 0.0,
                   "total": 0.0, "capacity": storage_cap}
    memory = {"gpu": mem_gpu, "host": mem_host, "storage": mem_storage}
    return memory, {"first_is_max": first_is_max, "states_first": states_first, "states_last": states_last,
                    "frozen": frozen, "frozen_experts": _frozen.frozen_expert_bytes(prm, plan, r),
                    "constants": _frozen.quantization_constants(prm, model, plan)}


def compose_memory(model: ModelSpec, system: SystemSpec, plan: Plan, F: Formulas | None = None) -> Result:
    """First half of :func:`compose`: parameters and memory per tier (no time).

    Returns the composed dict with ``terms`` (the memory-side terms, a
    :class:`~dse.estimate.terms.BaseTerms`), ``params``,
    ``params_per_gpu``, ``layer_params``, ``gpus``, ``nodes``, ``micro_batches``, ``layers_per_stage``, ``peak_flops``,
    ``activation_bytes_per_layer``, ``memory`` (and ``params_mtp``).
    """
    T, M, _, _, K = _modules(F)
    gpu = system.node.gpu
    r = recipe_of(plan)                   # bytes per tensor class, dtype per GEMM class
    peak = peak_flops(gpu.peak_flops, r.gemm_dtype)
    e = r.activations
    state_bytes = _optimizer.model_state_bytes_per_param(plan.optimizer, r)
    g_bytes, opt_bytes = state_bytes["gradients"], state_bytes["optimizer"]
    s: Num = plan.seq_len       # a resolved plan (Plan.resolved): seq_len, dp and global_batch are set
    d: Num = plan.dp
    B: Num = plan.global_batch
    b, t, p = plan.micro_batch, plan.tp, plan.pp
    m = B / (d * b)                       # micro-batches per replica per iteration
    cp = plan.cp
    gpus = t * p * d * cp

    tables = kernel_tables(model, plan, r, K)
    prm = parameters(model, plan, T)
    act = activations(tables["sums"], plan, m, prm["l_stage"], T)
    hold = _stages.holdings(model, plan)
    per_stage = None
    if hold is None:
        memory, stages = memory_tiers(model, system, plan, prm, act, r, state_bytes, T, M)
    else:   # a custom stage layout: the fullest rank's memory (dse.estimate.stages), and each rank's
        prm, act, memory, stages, totals = _stages.memory(hold, model, plan, prm, act, tables, m, lambda p_, a_:
                                                          memory_tiers(model, system, plan, p_, a_, r, state_bytes, T,
                                                                       M))
        per_stage = {"layers": [h[0] + h[1] for h in hold], "gpu_memory": totals}
    if _context.exchanged(tables):   # context parallelism: the ring's (or Ulysses') receive buffers
        kv_buffers = _context.ring_buffers(tables, plan, system)
        memory["gpu"]["buffers"] = memory["gpu"]["buffers"] + kv_buffers
        memory["gpu"]["total"] = memory["gpu"]["total"] + kv_buffers
    act_opts = dict(tp=t, sequence_parallel=plan.sequence_parallel, recompute=plan.recompute,
                    attention=plan.attention, ffn_type=model.ffn_type, norm=model.norm, position=model.position,
                    dropout=model.dropout > 0, bytes_per_element=e, score_dropout=model.attention_dropout,
                    branch_dropouts=model.branch_dropouts)
    terms = BaseTerms(  # intermediate terms that technique modules (dse/estimate/*.py) build on
        seq_len=s, micro_batch=b, tp=t, pp=p, dp=d, virtual_stages=plan.virtual_stages, global_batch=B,
        micro_batches=m, bytes_per_element=e, grad_bytes=g_bytes, optimizer_bytes=opt_bytes, peak_flops=peak,
        tokens=B * s, tokens_per_microbatch=_context.local_seq(plan) * b, layer_params=prm["p_layer"],
        layer_params_per_gpu=prm["p_layer_gpu"],
        embedding_params=prm["p_emb"], head_params=prm["p_head"], params_per_gpu=prm["p_gpu"],
        layers_per_stage=prm["l_stage"], layer_activation_bytes=act["a_layer"], recompute_working_bytes=act["a_work"],
        head_activation_bytes=act["a_head"], embedding_activation_bytes=act["a_emb"],
        microbatches_in_flight=act["in_flight"], activation_options=act_opts,
        first_stage_is_max=stages["first_is_max"], activations_first_stage=act["act_first"],
        activations_last_stage=act["act_last"], states_first_stage=stages["states_first"],
        states_last_stage=stages["states_last"], kernels=tables, trainable_params_per_gpu=prm["p_train_gpu"],
        expert_params_per_gpu=_mtp.stage_experts(prm) if _expert_parallel(plan, model) else 0.0,
        frozen_weight_bytes=stages["frozen"], frozen_expert_bytes=stages["frozen_experts"],
        quantization_constant_bytes=stages["constants"],
    )
    return {
        "terms": terms,
        "params": prm["params"],
        "params_trainable": prm["p_train"],
        "params_active": prm["params_active"],
        "params_per_gpu": prm["p_gpu"],
        "layer_params": prm["p_layer"],
        "gpus": gpus,
        "nodes": ceil(gpus / system.node.gpus_per_node),
        "hosts": ceil(gpus / system.node.host_gpus),   # CPU + DRAM + host link + drives units (a node by default)
        "micro_batches": m,
        "layers_per_stage": prm["l_stage"],
        "peak_flops": peak,
        "activation_bytes_per_layer": act["a_layer"],
        "memory": memory,
        **({"params_mtp": prm["params_mtp"]} if "params_mtp" in prm else {}),
        **({"stages": per_stage} if per_stage is not None else {}),
    }


# ------------------------------------------------------------------------------------------ time side


def pipeline(model: ModelSpec, system: SystemSpec, plan: Plan, i: BaseTerms, r: Recipe, kt: Section,
             lk: dict[str, Link], P: FormulaModule = _parallelism) -> Section:
    """One micro-batch on the slowest and the mean stage, and the pipeline schedule of the iteration."""
    p, v, m, l_stage = plan.pp, plan.virtual_stages, i.micro_batches, i.layers_per_stage
    single = p == 1
    # Megatron's scatter-gather p2p sends 1/t of the [s, b, h] activation per rank
    pp_msg = r.pp_messages * i.tokens_per_microbatch * model.hidden / plan.tp
    t_p2p = where(single, 0.0, 2 * P.p2p_time(pp_msg, lk["pp"].bandwidth, path=lk["pp"].path))
    t_mb_fixed = system.node.gpu.efficiency.microbatch_overhead
    hold = _stages.holdings(model, plan)
    if hold is not None:   # a custom stage layout: each rank's own layers, ends and MTP depths
        return _stages.pipeline(hold, model, plan, i, kt, pp_msg, t_p2p, t_mb_fixed, P)
    kt = {**kt, "t_head": kt["t_head"] + kt["t_mtp"]} if "t_mtp" in kt else kt   # MTP: with the head, last stage
    if plan.schedule == "dualpipe":
        return _dualpipe.schedule(model, plan, i, kt, pp_msg, t_p2p, t_mb_fixed, P)
    layer_total, t_embed, t_head = kt["layer_total"], kt["t_embed"], kt["t_head"]
    stage_first = l_stage * layer_total + t_embed + where(single, t_head, 0)
    stage_last = l_stage * layer_total + t_head + where(single, t_embed, 0)
    stage_max = maximum(stage_first, stage_last) + t_p2p + t_mb_fixed
    stage_mean = (model.layers * layer_total + t_embed + t_head) / p + t_p2p + t_mb_fixed
    t_pipe = P.pipeline_time(m, p, stage_max, stage_mean, v)
    return {"pp_msg": pp_msg, "t_p2p": t_p2p, "t_mb_fixed": t_mb_fixed, "stage_max": stage_max,
            "stage_mean": stage_mean, "t_pipe": t_pipe, "bubble": t_pipe - m * stage_max}


def optimizer_step(system: SystemSpec, plan: Plan, i: BaseTerms, r: Recipe, C: FormulaModule = _compute,
                   O: FormulaModule = _optimizer, model: ModelSpec | None = None) -> Section:
    """The optimizer step on the GPU: its ZeRO partition of the parameters, HBM-bound (the plan's optimizer)."""
    gpu = system.node.gpu
    zero: Num = plan.zero       # a resolved plan: zero and dp are set
    d: Num = _context.grad_ranks(plan)
    opt_params = i.trainable_params_per_gpu / where(zero >= 1, d, 1)
    if model is not None and _expert_parallel(plan, model):   # the experts' ZeRO shard: over the EDP ranks
        e = i.expert_params_per_gpu                             # (ZeRO-0: every parameter of the GPU, as above)
        opt_params = opt_params + where(zero >= 1, e / expert_replicas(plan, d) - e / d, 0.0)
    t_opt = C.memory_time(O.step_bytes(opt_params, plan.optimizer, r), gpu.hbm_bandwidth, gpu.efficiency.memory)
    return {"opt_params": opt_params, "t_opt": t_opt}


def _attention_cost(system: SystemSpec, plan: Plan, peak: Num) -> Any:
    """The kernel costs of the plan's GEMM classes on the system's GPU (:func:`dse.estimate.kernel_table.cost_of`)."""
    from dse.estimate.kernel_cost import cost_of

    r = recipe_of(plan)
    g = system.node.gpu.peak_flops
    return cost_of(system.node.gpu, peak, peak_flops(g, r.attention_dtype), peak_flops(g, r.head_dtype), r.activations)


def compose_time(c: Result, model: ModelSpec, system: SystemSpec, plan: Plan, F: Formulas | None = None) -> Result:
    """Second half of :func:`compose`: adds ``time``, ``flops``, ``throughput`` and ``traffic`` to ``c``.

    ``c`` is the dict :func:`compose_memory` returned (possibly with arrays subset to the
    points that fit in memory); the time-side terms are set as ``c["terms"].time``
    (a :class:`~dse.estimate.terms.TimeTerms`).
    """
    _, _, P, C, K = _modules(F)
    O = F["optimizer"] if F and "optimizer" in F else _optimizer
    i = c["terms"]
    r = recipe_of(plan)
    tables = i.kernels
    lk = links(system, plan, P, model)
    kt = kernel_times(tables, system, plan, i.peak_flops, lk, C, P)
    if _context.exchanged(tables):   # context parallelism: the K/V ring's (or Ulysses' all-to-alls') exposed time
        cost = None if plan.cp_comm in ("a2a", "allgather") else _attention_cost(system, plan, i.peak_flops)
        kt = _context.add_ring(kt, _context.times(tables, cost, lk, plan, C, P))
    kt = {**kt, **_mtp.time(kt, model.mtp_layers)} if "mtp" in tables else kt   # MTP depths on the last stage
    pp = pipeline(model, system, plan, i, r, kt, lk, P)
    if "stage_times" in pp:   # a custom stage layout: each rank's micro-batch
        c["stages"] = {**c["stages"], "time_per_microbatch": pp["stage_times"]}
    dp = data_parallel(model, plan, i, r, kt, lk, P)
    opt = optimizer_step(system, plan, i, r, C, O, model)
    t_cast = (_fp8.weight_cast_time(model, plan, system.node.gpu, r, i.layers_per_stage, _context.grad_ranks(plan))
              if r.weight_copies else 0.0)
    # FP8: the weights' cast follows the step
    time = breakdown(plan, i, kt, pp, dp, opt["t_opt"] + t_cast, bool(model.moe_layers))
    fl = flops(model, plan, tables["sums"])
    t_iter = time["iteration"]
    i.time = TimeTerms(
        gpu_forward=kt["gpu_fwd"], gpu_backward=kt["gpu_bwd"], gpu_recompute=kt["gpu_rec"],
        layer_forward=kt["layer_fwd"], layer_backward=kt["layer_bwd"], layer_recompute=kt["layer_rec"],
        layer_total=kt["layer_total"], embedding_time=kt["t_embed"], head_time=kt["t_head"], p2p_time=pp["t_p2p"],
        stage_max=pp["stage_max"], stage_mean=pp["stage_mean"], pipeline_time=pp["t_pipe"], dp_time=dp["dp_time"],
        dp_exposed=dp["dp_exposed"], embedding_sync=dp["emb_sync"], optimizer_time=opt["t_opt"] + t_cast,
        optimizer_params=opt["opt_params"], dp_bandwidth=lk["dp"].bandwidth, tp_bandwidth=lk["tp"].bandwidth,
        pp_bandwidth=lk["pp"].bandwidth,
    )
    c["time"] = time
    c["flops"] = fl
    c["throughput"] = {
        "tokens_per_s": i.tokens / t_iter,
        "samples_per_s": plan.global_batch / t_iter,
        "mfu": fl["model_per_iteration"] / (t_iter * c["gpus"] * i.peak_flops),
        "hfu": fl["hardware_per_iteration"] / (t_iter * c["gpus"] * i.peak_flops),
    }
    c["traffic"] = traffic(model, plan, i, lk, pp, dp)
    if r.weight_copies:   # FP8: where a layer's time goes (the report's "why not 2x")
        c["fp8"] = _fp8.breakdown(tables["layer"], system.node.gpu, r, i.peak_flops, t_cast, t_iter)
    return c
