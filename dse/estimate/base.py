"""Compose the base formulas into one training-iteration estimate on GPUs.

Works on scalars (``dse estimate``) and, for every numeric plan/hardware field,
on numpy arrays (the vectorised search): only string/boolean choices branch in
Python; numeric ones go through :mod:`dse.formulas._array`.

The pieces, in order: parameter placement per stage; memory per tier (checked
first: a search can stop there); per-layer kernel and communication times; the
pipeline; data-parallel reduction and optimizer step; throughput and MFU.
"""

from __future__ import annotations

from dse.estimate.terms import BaseTerms, TimeTerms
from dse.formulas import (
    compute as _compute,
    memory as _memory,
    optimizer as _optimizer,
    parallelism as _parallelism,
    transformer as _transformer,
)
from dse.formulas._array import ceil, maximum, minimum, where
from dse.formulas.precision import peak_flops, recipe_of


def shapes(model, plan):
    """Keyword arguments shared by the per-layer formulas."""
    return dict(h=model.hidden, heads=model.heads, kv_heads=model.kv_heads, head_dim=model.head_dim,
                ffn=model.ffn_hidden)


def compose(model, system, plan, F=None) -> dict:
    """The base estimate as nested dicts of numbers (or arrays). ``F`` swaps in traced formula modules.

    Equals :func:`compose_time` applied to :func:`compose_memory`; the vectorised search
    calls the two halves itself so that it computes time only for points that fit.
    """
    c = compose_memory(model, system, plan, F)
    compose_time(c, model, system, plan, F)
    return c


def compose_memory(model, system, plan, F=None) -> dict:
    """First half of :func:`compose`: parameters and memory per tier (no time).

    Returns the composed dict with ``terms`` (the memory-side terms, a
    :class:`~dse.estimate.terms.BaseTerms`), ``params``,
    ``params_per_gpu``, ``layer_params``, ``gpus``, ``nodes``, ``micro_batches``,
    ``layers_per_stage``, ``peak_flops``, ``activation_bytes_per_layer`` and ``memory``.
    """
    T = F["transformer"] if F else _transformer
    M = F["memory"] if F else _memory

    node = system.node
    gpu = node.gpu
    G = node.gpus_per_node
    r = recipe_of(plan)                   # bytes per tensor class, dtype per GEMM class
    peak = peak_flops(gpu.peak_flops, r.gemm_dtype)
    e = r.activations
    state_bytes = _optimizer.model_state_bytes_per_param(plan.optimizer, r)
    g_bytes, opt_bytes = state_bytes["gradients"], state_bytes["optimizer"]

    s, b, t, p, d, v = plan.seq_len, plan.micro_batch, plan.tp, plan.pp, plan.dp, plan.virtual_stages
    B = plan.global_batch
    L, h, V = model.layers, model.hidden, model.vocab
    a, kv, hd, Fh = model.heads, model.kv_heads, model.head_dim, model.ffn_hidden
    sp = plan.sequence_parallel
    dropout = model.dropout > 0
    m = B / (d * b)                       # micro-batches per replica per iteration
    gpus = t * p * d
    nodes = ceil(gpus / G)
    tokens = B * s
    tok = s * b                           # tokens per micro-batch

    # ---------------------------------------------------------------- parameters
    p_layer = T.layer_parameters(h, a, kv, hd, Fh, model.ffn_type, model.norm, model.bias, model.qkv_bias)
    p_layer_rep = T.layer_parameters_replicated(h, model.ffn_type, model.norm, model.bias)
    p_layer_gpu = (p_layer - p_layer_rep) / t + p_layer_rep
    p_emb = T.embedding_parameters(h, V, model.position_embeddings, model.token_types, model.embedding_norm, model.norm)
    p_head = T.head_parameters(h, V, model.tied_embeddings, model.final_norm, model.norm, model.pooler,
                               model.mlm_head, model.nsp_head)
    params = p_emb + L * p_layer + p_head
    l_stage = ceil(L / (p * v)) * v       # layers on the most loaded stage
    tied_copy = V * h if model.tied_embeddings else 0
    single = p == 1
    p_first = l_stage * p_layer_gpu + p_emb / t + where(single, p_head / t, 0)
    p_last = l_stage * p_layer_gpu + p_head / t + where(single, 0, tied_copy / t)
    p_gpu = maximum(p_first, p_last)

    # ---------------------------------------------------------------- memory (GPU)
    act_opts = dict(tp=t, sequence_parallel=sp, recompute=plan.recompute, attention=plan.attention,
                    ffn_type=model.ffn_type, norm=model.norm, position=model.position, dropout=dropout,
                    bytes_per_element=e)
    a_layer = T.activation_bytes_per_layer(s, b, h, a, kv, hd, Fh, **act_opts)
    a_work = T.recompute_working_bytes(s, b, h, a, kv, hd, Fh, **act_opts)
    a_head = T.head_activation_bytes(s, b, h, V, tp=t, sequence_parallel=sp, norm=model.norm,
                                     final_norm=model.final_norm, bytes_per_element=e)
    a_emb = T.embedding_activation_bytes(s, b, h, tp=t, sequence_parallel=sp, dropout=dropout,
                                         position=model.position)
    if plan.schedule == "gpipe":
        in_flight = m
    else:
        in_flight = minimum(p, m) * where(v > 1, T.interleave_factor(p, v), 1)
    act_first = in_flight * (l_stage * a_layer + a_emb) + where(single, a_head, 0) + a_work
    act_last = l_stage * a_layer + a_head + where(single, a_emb, 0) + a_work

    w_bytes = state_bytes["weights"]
    states_first = M.model_state_bytes(p_first, d, plan.zero, w_bytes, g_bytes, opt_bytes)
    states_last = M.model_state_bytes(p_last, d, plan.zero, w_bytes, g_bytes, opt_bytes)
    zero3_buf = where(plan.zero >= 3, M.zero3_gather_bytes(p_layer_gpu, r.weight_gathers), 0)
    total_first = states_first["weights"] + states_first["gradients"] + states_first["optimizer"] + act_first
    total_last = states_last["weights"] + states_last["gradients"] + states_last["optimizer"] + act_last
    first_is_max = total_first >= total_last
    pick = lambda x, y: where(first_is_max, x, y)  # noqa: E731
    bwd_work = T.backward_working_bytes(s, b, h, Fh, tp=t, sequence_parallel=sp, ffn_type=model.ffn_type,
                                        bytes_per_element=e)
    buffers = gpu.reserved + zero3_buf + bwd_work
    mem_gpu = {
        "weights": pick(states_first["weights"], states_last["weights"]),
        "gradients": pick(states_first["gradients"], states_last["gradients"]),
        "optimizer": pick(states_first["optimizer"], states_last["optimizer"]),
        "activations": pick(act_first, act_last),
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

    terms = BaseTerms(  # intermediate terms that technique modules (dse/estimate/*.py) build on
        seq_len=s, micro_batch=b, tp=t, pp=p, dp=d, virtual_stages=v, global_batch=B, micro_batches=m,
        bytes_per_element=e, grad_bytes=g_bytes, optimizer_bytes=opt_bytes, peak_flops=peak, tokens=tokens,
        tokens_per_microbatch=tok, layer_params=p_layer, layer_params_per_gpu=p_layer_gpu, embedding_params=p_emb,
        head_params=p_head, params_per_gpu=p_gpu, layers_per_stage=l_stage, layer_activation_bytes=a_layer,
        recompute_working_bytes=a_work, head_activation_bytes=a_head, embedding_activation_bytes=a_emb,
        microbatches_in_flight=in_flight, activation_options=act_opts, first_stage_is_max=first_is_max,
        activations_first_stage=act_first, activations_last_stage=act_last, states_first_stage=states_first,
        states_last_stage=states_last,
    )
    return {
        "terms": terms,
        "params": params,
        "params_per_gpu": p_gpu,
        "layer_params": p_layer,
        "gpus": gpus,
        "nodes": nodes,
        "micro_batches": m,
        "layers_per_stage": l_stage,
        "peak_flops": peak,
        "activation_bytes_per_layer": a_layer,
        "memory": {"gpu": mem_gpu, "host": mem_host, "storage": mem_storage},
    }


def compose_time(c, model, system, plan, F=None) -> dict:
    """Second half of :func:`compose`: adds ``time``, ``flops``, ``throughput`` and ``traffic`` to ``c``.

    ``c`` is the dict :func:`compose_memory` returned (possibly with arrays subset to the
    points that fit in memory); the time-side terms are set as ``c["terms"].time``
    (a :class:`~dse.estimate.terms.TimeTerms`).
    """
    T = F["transformer"] if F else _transformer
    P = F["parallelism"] if F else _parallelism
    C = F["compute"] if F else _compute

    node = system.node
    gpu = node.gpu
    eff = gpu.efficiency
    G = node.gpus_per_node
    i = c["terms"]
    s, b, t, p, d, v, B, m = i.seq_len, i.micro_batch, i.tp, i.pp, i.dp, i.virtual_stages, i.global_batch, i.micro_batches
    peak, tokens, tok = i.peak_flops, i.tokens, i.tokens_per_microbatch
    r = recipe_of(plan)
    e = r.activations
    p_gpu, l_stage = i.params_per_gpu, i.layers_per_stage
    L, h, V = model.layers, model.hidden, model.vocab
    a, kv, hd, Fh = model.heads, model.kv_heads, model.head_dim, model.ffn_hidden
    sp = plan.sequence_parallel
    dropout = model.dropout > 0
    gpus = c["gpus"]
    single = p == 1

    # ---------------------------------------------------------------- bandwidths
    intra = node.gpu_link.bandwidth * node.gpu_link.efficiency if node.gpu_link else float("inf")
    intra_lat = node.gpu_link.latency if node.gpu_link else 0.0
    inter = node.network.bandwidth * node.network.efficiency if node.network else intra / 1e3
    inter_lat = node.network.latency if node.network else 0.0
    tp_inside = t <= G
    bw_tp = P.group_bandwidth(t, 1, G, intra, inter)
    lat_tp = where(tp_inside, intra_lat, inter_lat)
    bw_dp = P.group_bandwidth(d, t, G, intra, inter)
    dp_inside = t * d <= G
    lat_dp = where(dp_inside, intra_lat, inter_lat)
    pp_inside = t * d * 2 <= G
    bw_pp = P.group_bandwidth(2, t * d, G, intra, inter)
    lat_pp = where(pp_inside, intra_lat, inter_lat)

    # ---------------------------------------------------------------- per-layer time
    oh = eff.gemm_overhead
    gemm_eff = eff.gemm
    qkv_n = (a + 2 * kv) * hd / t
    up_n = (2 if model.ffn_type == "swiglu" else 1) * Fh / t
    gemm_fwd = (C.gemm_time(tok, h, qkv_n, peak, gemm_eff, oh) + C.gemm_time(tok, a * hd / t, h, peak, gemm_eff, oh)
                + C.gemm_time(tok, h, up_n, peak, gemm_eff, oh) + C.gemm_time(tok, Fh / t, h, peak, gemm_eff, oh))
    gemm_bwd = 2 * gemm_fwd                 # dgrad + wgrad of each GEMM, same shapes
    causal = model.architecture == "decoder"
    peak_attn = peak_flops(gpu.peak_flops, r.attention_dtype)   # attention and the LM head at their recipe dtype
    peak_head = peak_flops(gpu.peak_flops, r.head_dtype)
    if plan.attention == "math":
        attn_fwd = (C.gemm_time(s, hd, s, peak_attn, gemm_eff, oh, batch=b * a / t)
                    + C.gemm_time(s, s, hd, peak_attn, gemm_eff, oh, batch=b * a / t))
        attn_bwd = 2 * attn_fwd
    else:
        attn_fwd = C.flash_attention_flops(s, b, a / t, hd, causal) / (peak_attn * eff.attention) + oh
        attn_bwd = C.flash_attention_flops(s, b, a / t, hd, causal, backward=True) / (peak_attn * eff.attention) + 2 * oh
    ew_opts = dict(tp=t, sequence_parallel=sp, attention=plan.attention, ffn_type=model.ffn_type,
                   position=model.position, dropout=dropout, bytes_per_element=e)
    ew_fwd = C.memory_time(C.elementwise_bytes(s, b, h, Fh, a, kv, hd, **ew_opts), gpu.hbm_bandwidth, eff.memory)
    ew_bwd = 2 * ew_fwd
    act_msg = r.tp_messages * tok * h       # bytes of one [s, b, h] activation
    ar = P.allreduce_time(act_msg, t, bw_tp, lat_tp)
    tp_fwd = 2 * ar                         # 2 all-reduces (or all-gather + reduce-scatter pairs with SP)
    if plan.async_tp_allreduce and not sp:  # hidden behind the QKV and fc1 weight-gradient GEMMs
        tp_bwd = (maximum(ar - C.gemm_time(h, tok, qkv_n, peak, gemm_eff, oh), 0.0)
                  + maximum(ar - C.gemm_time(h, tok, up_n, peak, gemm_eff, oh), 0.0))
    else:
        tp_bwd = tp_fwd
    gpu_fwd = gemm_fwd + attn_fwd + ew_fwd + tp_fwd
    gpu_bwd = gemm_bwd + attn_bwd + ew_bwd + tp_bwd
    host_t = eff.layer_overhead
    if plan.recompute == "full":
        gpu_rec, host_rec = gpu_fwd, host_t
    elif plan.recompute == "selective":
        soft = C.memory_time(C.elementwise_bytes(s, b, 0, 0, a, 0, hd, **{**ew_opts, "position": "none"}),
                             gpu.hbm_bandwidth, eff.memory)
        gpu_rec, host_rec = attn_fwd + soft, 0.0
    else:
        gpu_rec, host_rec = 0.0, 0.0
    layer_fwd = maximum(gpu_fwd, host_t)
    layer_bwd = maximum(gpu_bwd, 2 * host_t)
    layer_rec = maximum(gpu_rec, host_rec)
    layer_total = layer_fwd + layer_bwd + layer_rec
    layer_host_excess = layer_total - (gpu_fwd + gpu_bwd + gpu_rec)

    # ---------------------------------------------------------------- embedding and head
    head_gemm = C.gemm_time(tok, h, V / t, peak_head, gemm_eff, oh)
    head_ew = C.memory_time(r.logits * tok * V / t * 3, gpu.hbm_bandwidth, eff.memory)   # logits: softmax, loss, grad
    t_head = 3 * head_gemm + 3 * head_ew
    t_embed = ar + C.memory_time(3 * e * tok * h, gpu.hbm_bandwidth, eff.memory)   # ar: the same all-reduce as a layer's

    # ---------------------------------------------------------------- pipeline
    pp_msg = r.pp_messages * tok * h / t   # Megatron scatter-gather p2p: 1/t of the activation per rank
    t_p2p = where(single, 0.0, 2 * P.p2p_time(pp_msg, bw_pp, lat_pp))
    t_mb_fixed = eff.microbatch_overhead
    stage_first = l_stage * layer_total + t_embed + where(single, t_head, 0)
    stage_last = l_stage * layer_total + t_head + where(single, t_embed, 0)
    stage_max = maximum(stage_first, stage_last) + t_p2p + t_mb_fixed
    stage_mean = (L * layer_total + t_embed + t_head) / p + t_p2p + t_mb_fixed
    t_pipe = P.pipeline_time(m, p, stage_max, stage_mean, v)
    bubble = t_pipe - m * stage_max

    # ---------------------------------------------------------------- data parallel, optimizer
    # ZeRO-0: all-reduce the gradients. ZeRO-1/2: reduce-scatter them, all-gather the updated weights after the
    # step. ZeRO-3: every micro-batch gathers the weights in forward and again in backward and reduce-scatters the
    # gradients (Rajbhandari et al. 2020, ZeRO, section 7: 2 Psi, 2 Psi and 3 Psi of traffic). Exposure:
    # overlap_grad_reduce = False (Megatron's default, the measured runs) leaves all of it on the critical path;
    # True overlaps each collective with the compute it can hide behind (gradient reduction with the last
    # micro-batch's backward, ZeRO-1/2's weight gather with the next forward, ZeRO-3's prefetch with each phase),
    # except the first gather / last reduction of a stage (one layer's share), plus a 5 % contention tax on what
    # is overlapped. ZeRO-3 therefore never beats ZeRO-1/2 on time for the same plan: it moves more, as often or
    # more often, under the same overlap rule.
    zero = plan.zero
    grad_b = p_gpu * r.dp_gradients
    gather_b = p_gpu * r.weight_gathers
    dp_ar = P.allreduce_time(grad_b, d, bw_dp, lat_dp)
    rs_grads = P.allgather_time(grad_b, d, bw_dp, lat_dp)             # reduce-scatter of the gradients
    ag_weights = P.allgather_time(gather_b, d, bw_dp, lat_dp)         # all-gather of the weights
    dp_time = where(zero == 0, dp_ar, where(zero < 3, rs_grads + ag_weights, m * (2 * ag_weights + rs_grads)))
    fwd_window = l_stage * layer_fwd
    bwd_window = l_stage * layer_bwd
    if plan.overlap_grad_reduce:
        z3_mb = (maximum(ag_weights - fwd_window, 0.0) + maximum(ag_weights + rs_grads - bwd_window, 0.0)
                 + (ag_weights + rs_grads) / l_stage)
        dp_exposed = where(zero == 0, maximum(dp_ar - bwd_window, 0.0),
                           where(zero < 3, maximum(rs_grads - bwd_window, 0.0) + maximum(ag_weights - fwd_window, 0.0),
                                 m * z3_mb)) + 0.05 * dp_time
    else:
        dp_exposed = dp_time
    if model.tied_embeddings:   # first and last stage both hold the word embedding: sum their gradients
        emb_bytes = V * h / t * r.dp_gradients
        emb_sync = where(single, 0.0, P.allreduce_time(emb_bytes, 2, bw_pp, lat_pp))
    else:
        emb_bytes, emb_sync = 0.0, 0.0
    opt_params = p_gpu / where(zero >= 1, d, 1)
    O = F["optimizer"] if F and "optimizer" in F else _optimizer
    t_opt = C.memory_time(O.step_bytes(opt_params, plan.optimizer, r), gpu.hbm_bandwidth, eff.memory)
    t_iter = t_pipe + dp_exposed + emb_sync + t_opt

    # ---------------------------------------------------------------- breakdown
    compute_mb = l_stage * (gpu_fwd - tp_fwd + gpu_bwd - tp_bwd) + where(single, t_embed + t_head, maximum(t_embed, t_head))
    recompute_mb = l_stage * where(plan.recompute == "full", gpu_rec - tp_fwd, gpu_rec)
    tp_mb = l_stage * (tp_fwd + tp_bwd + where(plan.recompute == "full", tp_fwd, 0.0))
    overhead_mb = l_stage * layer_host_excess + t_mb_fixed
    time = {
        "iteration": t_iter,
        "compute": m * compute_mb,
        "recompute": m * recompute_mb,
        "communication": m * (tp_mb + t_p2p) + dp_exposed + emb_sync,
        "bubble": bubble,
        "optimizer": t_opt,
        "overhead": m * overhead_mb,
        "io_exposed": 0.0,
        "tp_communication": m * tp_mb,
        "pp_communication": m * t_p2p,
        "dp_communication": dp_exposed,
        "embedding_sync": emb_sync,
        "per_microbatch": stage_max,
        "layer_forward": layer_fwd,
        "layer_backward": layer_bwd,
    }

    # ---------------------------------------------------------------- flops, throughput
    f_model = T.model_flops(tokens, L, h, a, kv, hd, Fh, V, s, model.ffn_type)
    f_hw = f_model + T.recompute_flops(tokens, L, h, a, kv, hd, Fh, s, model.ffn_type, plan.recompute)
    throughput = {
        "tokens_per_s": tokens / t_iter,
        "samples_per_s": B / t_iter,
        "mfu": f_model / (t_iter * gpus * peak),
        "hfu": f_hw / (t_iter * gpus * peak),
    }

    # ---------------------------------------------------------------- traffic (bytes per iteration per GPU)
    tp_bytes = m * l_stage * (4 + where(plan.recompute == "full", 2, 0)) * where(t > 1, 2 * (t - 1) / t * act_msg, 0.0)
    dp_bytes = where(d > 1, (d - 1) / d, 0.0) * where(zero == 0, 2 * grad_b, where(zero < 3, grad_b + gather_b,
                                                                                   m * (grad_b + 2 * gather_b)))
    pp_bytes = where(single, 0.0, 2 * m * pp_msg + emb_bytes)     # activations both ways + the embedding sync
    traffic = {
        "intra_node": where(tp_inside, tp_bytes, 0.0) + where(dp_inside, dp_bytes, 0.0) + where(pp_inside, pp_bytes, 0.0),
        "inter_node": where(tp_inside, 0.0, tp_bytes) + where(dp_inside, 0.0, dp_bytes) + where(pp_inside, 0.0, pp_bytes),
        "gpu_host": 0.0,
        "tp": tp_bytes,
        "dp": dp_bytes,
        "pp": pp_bytes,
    }

    i.time = TimeTerms(
        gpu_forward=gpu_fwd, gpu_backward=gpu_bwd, gpu_recompute=gpu_rec, layer_forward=layer_fwd,
        layer_backward=layer_bwd, layer_recompute=layer_rec, layer_total=layer_total, embedding_time=t_embed,
        head_time=t_head, p2p_time=t_p2p, stage_max=stage_max, stage_mean=stage_mean, pipeline_time=t_pipe,
        dp_time=dp_time, dp_exposed=dp_exposed, embedding_sync=emb_sync, optimizer_time=t_opt,
        optimizer_params=opt_params, dp_bandwidth=bw_dp, tp_bandwidth=bw_tp, pp_bandwidth=bw_pp,
    )
    c["time"] = time
    c["flops"] = {"model_per_iteration": f_model, "hardware_per_iteration": f_hw}
    c["throughput"] = throughput
    c["traffic"] = traffic
    return c
