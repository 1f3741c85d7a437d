"""A custom pipeline layout priced stage by stage (``plan.pipeline_layout``: :mod:`dse.specs.pipeline_layout`).

Without a layout the base estimate prices ``ceil(L / (p v)) v`` mean layers on every stage, the embedding on the
first, the head (and the MTP depths) on the last. With one, each pipeline rank r holds what the layout gives it
(Megatron-Core builds exactly that: ``get_num_layers_to_build``, ``get_mtp_num_layers_to_build``): ``d_r`` dense
and ``e_r`` MoE layers (of the model's own layer pattern: DeepSeek-V3's three dense layers first), the embedding
``E_r``, the loss ``L_r`` and the MTP depths ``M_r`` (all D or none), summed over its model chunks.

- time per micro-batch of rank r: ``T_r = d_r t_dense + e_r t_moe + E_r t_embed + L_r t_head + [M_r] t_mtp``
  (each kind's layer time with its host floor and the MoE dispatcher's sync, :func:`dse.estimate.kernel_table.
  kernel_times`); the slowest rank sets the step: ``max_r T_r`` in 1F1B, interleaved and GPipe
  (:func:`dse.formulas.parallelism.pipeline_time`, its mean stage unchanged: the same work over p ranks), the
  slowest pair of stages (r, p-1-r) under DualPipe, each pair's compute and all-to-alls overlapped
  (:func:`dse.estimate.dualpipe.rank_time`); the breakdown splits that rank's micro-batch.
- memory per rank: its parameters ``d_r P_dense + e_r P_moe + E_r P_emb/t + L_r P_head/t`` (+ the word-embedding
  copy on a rank with the loss of a tied model or the MTP depths, + the depths' parameters), their gradients and
  optimizer states (:func:`dse.estimate.base.memory_tiers`), and the activations of the micro-batches in flight
  there (1F1B: min(p - r, m), the first rank the most, Narayanan et al. 2021 §2.2; interleaved: Megatron's
  warm-up of (p - r - 1) 2 + (v - 1) p + 1 chunks, 1/v of the rank's layers each; GPipe: m; DualPipe: p + 1, the
  mean of the rank's two stages' layers, DeepSeek-V3 Table 2). Feasibility reads the fullest rank.

Unchanged: the pipeline's point-to-point sends (one activation each way per micro-batch and stage boundary), the
data-parallel reduction (of the rank with the most parameters) and the FLOPs. A uniform layout of a model with one
kind of layer gives today's numbers exactly (tests/test_pipeline_layout.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.errors import InputError
from dse.estimate import dualpipe as _dualpipe, mtp as _mtp
from dse.formulas._array import maximum, minimum, where
from dse.specs.pipeline_layout import parse

if TYPE_CHECKING:
    from collections.abc import Callable

    from dse.estimate.aliases import FormulaModule, Num, Section
    from dse.estimate.terms import BaseTerms
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

#: a rank's holdings: (dense layers, MoE layers, embedding, loss, MTP depths)
Holding = tuple[int, int, int, int, int]
#: the per-layer entries of dse.estimate.kernel_table.kernel_times (a kind's: "dense:KEY", "moe:KEY")
LAYER_KEYS = ("gpu_fwd", "gpu_bwd", "gpu_rec", "tp_fwd", "tp_bwd", "ep_fwd", "ep_bwd", "layer_fwd", "layer_bwd",
              "layer_rec", "layer_total", "layer_wgrad", "layer_host_excess", "host_fwd", "host_bwd", "host_rec")


def is_moe(model: ModelSpec, i: int) -> bool:
    """Layer i (from 0) has an MoE MLP (:func:`dse.formulas.transformer.moe_layer_count`'s rule)."""
    return bool(model.experts) and i >= model.first_dense_layers and (i + 1) % model.moe_layer_step == 0 \
        and i not in model.dense_layers


def holdings(model: ModelSpec, plan: Plan) -> tuple[Holding, ...] | None:
    """What each pipeline rank holds under the plan's layout (None: no custom layout)."""
    text = getattr(plan, "pipeline_layout", None)
    if text is None:
        return None
    ranks, _ = parse(text, _one_pp(plan.pp), model.layers, _mtp.depths(model))
    out = []
    for st in ranks:
        moe = sum(is_moe(model, i) for i in st.layers)
        out.append((len(st.layers) - moe, moe, st.embedding, st.loss, st.mtp))
    return tuple(out)


def _one_pp(pp: Any) -> int:
    """The plan's pipeline ranks: one number (a search's array of them: all equal, the layout fixes pp)."""
    if isinstance(pp, int):
        return pp
    import numpy as np

    values = np.unique(pp)
    if len(values) != 1:
        raise InputError(f"--pp-layout fixes the pipeline ranks; the plan varies pp over {values.tolist()}: search "
                         "one pp per layout (plan.pp fixed, or a layout per pp)")
    return int(values[0])


def _kind(kt: Section, kind: str) -> Section:
    """One kind's layer entries (with the context-parallel ring's exposed time, as :func:`dse.estimate.context.
    add_ring` adds it to the mean layer)."""
    out = {k: kt[f"{kind}:{k}"] for k in LAYER_KEYS}
    if "cp_fwd" in kt:
        for gpu_key, layer_key, part in (("gpu_fwd", "layer_fwd", "cp_fwd"), ("gpu_bwd", "layer_bwd", "cp_bwd"),
                                         ("gpu_rec", "layer_rec", "cp_rec")):
            out[gpu_key] = out[gpu_key] + kt[part]
            out[layer_key] = out[layer_key] + kt[part]
        out["layer_total"] = out["layer_fwd"] + out["layer_bwd"] + out["layer_rec"]
    return out


def stage_layer(kt: Section, dense: Num, moe: Num) -> Section:
    """The layer entries of a stage's mean layer: ``dense`` and ``moe`` layers of a mixed model weighted; a model
    with one kind of layer (or a stage without layers): the kernel times' own."""
    if "moe:layer_total" not in kt or (dense == 0 and moe == 0):
        return {k: kt[k] for k in LAYER_KEYS}
    if moe == 0 or dense == 0:
        return _kind(kt, "dense" if moe == 0 else "moe")
    d, e, n = _kind(kt, "dense"), _kind(kt, "moe"), dense + moe
    return {k: (dense * d[k] + moe * e[k]) / n for k in LAYER_KEYS}


def _ends(kt: Section, emb: Num, loss: Num, mtp: Num) -> Num:
    """A stage's embedding, head and MTP time per micro-batch (``mtp``: the share of the D depths there)."""
    return emb * kt["t_embed"] + (loss * kt["t_head"] + mtp * kt["t_mtp"] if "t_mtp" in kt else loss * kt["t_head"])


def _slowest(times: list[Num], infos: list[Any]) -> tuple[Num, Any]:
    """The largest of ``times`` and the info of its rank (element-wise for arrays; the first of equal ones)."""
    best, info = times[0], infos[0]
    for t, other in zip(times[1:], infos[1:]):
        take = t > best
        best, info = maximum(best, t), _pick(take, other, info)
    return best, info


def _pick(take: Any, a: Any, b: Any) -> Any:
    """``a`` where ``take`` else ``b``, through dicts and tuples."""
    if isinstance(a, dict):
        return {k: _pick(take, a[k], b[k]) for k in a}
    if isinstance(a, tuple):
        return tuple(_pick(take, x, y) for x, y in zip(a, b))
    return where(take, a, b)


def pipeline(hold: tuple[Holding, ...], model: ModelSpec, plan: Plan, i: BaseTerms, kt: Section, pp_msg: Num,
             t_p2p: Num, t_mb_fixed: Num, P: FormulaModule) -> Section:
    """The pipeline section of :func:`dse.estimate.base.pipeline` under a custom layout (see the module)."""
    p, v, m = plan.pp, plan.virtual_stages, i.micro_batches
    head = kt["t_head"] + kt["t_mtp"] if "t_mtp" in kt else kt["t_head"]
    stage_mean = (model.layers * kt["layer_total"] + kt["t_embed"] + head) / p + t_p2p + t_mb_fixed
    if plan.schedule == "dualpipe":
        return _dualpipe_layout(hold, model, plan, i, kt, pp_msg, t_p2p, t_mb_fixed, P)
    times, infos = [], []
    for d, e, emb, loss, mtp in hold:
        lk = stage_layer(kt, d, e)
        on = 1 if mtp else 0
        times.append((d + e) * lk["layer_total"] + _ends(kt, emb, loss, on))
        infos.append({"layers": d + e, "kt": lk, "ends": _ends(kt, emb, loss, 0), "mtp": on})
    slow, info = _slowest(times, infos)
    stage_max = slow + t_p2p + t_mb_fixed
    t_pipe = P.pipeline_time(m, p, stage_max, stage_mean, v)
    return {"pp_msg": pp_msg, "t_p2p": t_p2p, "t_mb_fixed": t_mb_fixed, "stage_max": stage_max,
            "stage_mean": stage_mean, "t_pipe": t_pipe, "bubble": t_pipe - m * stage_max, "stage": info,
            "stage_times": [t + t_p2p + t_mb_fixed for t in times]}


def _dualpipe_layout(hold: tuple[Holding, ...], model: ModelSpec, plan: Plan, i: BaseTerms, kt: Section, pp_msg: Num,
                     t_p2p: Num, t_mb_fixed: Num, P: FormulaModule) -> Section:
    """DualPipe under a layout: rank r runs stages r and p-1-r, half the micro-batches each (their mean per
    micro-batch); the slowest such pair sets the schedule (:func:`dse.estimate.dualpipe.schedule`)."""
    p = plan.pp
    pairs, infos = [], []
    for r in range(p // 2):
        a, b = hold[r], hold[p - 1 - r]
        d, e = a[0] + b[0], a[1] + b[1]
        lk = stage_layer(kt, d, e)
        on = ((1 if a[4] else 0) + (1 if b[4] else 0)) / 2
        ends = _ends(kt, a[2] + b[2], a[3] + b[3], 2 * on) / 2
        rank = _dualpipe.rank_time(plan, (d + e) / 2, lk, ends, t_p2p, P)
        pairs.append(rank["pair"])
        infos.append({"rank": rank, "stage": {"layers": (d + e) / 2, "kt": lk, "ends": ends, "mtp": on}})
    _, info = _slowest(pairs, infos)
    times = [x + t_mb_fixed for x in pairs]
    head = kt["t_head"] + kt["t_mtp"] if "t_mtp" in kt else kt["t_head"]   # the mean stage: every depth, once
    out = _dualpipe.schedule(model, plan, i, {**kt, "t_head": head}, pp_msg, t_p2p, t_mb_fixed, P, info["rank"])
    return {**out, "stage": info["stage"], "stage_times": times + times[::-1]}


def in_flight(plan: Plan, r: int, m: Num) -> Num:
    """Micro-batches whose activations rank r holds at its peak (see the module)."""
    p, v = plan.pp, plan.virtual_stages
    if plan.schedule == "gpipe":
        return m
    if plan.schedule == "dualpipe":
        return minimum(p + 1, m)
    if v > 1:
        return minimum(((p - r - 1) * 2 + (v - 1) * p + 1) / v, m)
    return minimum(p - r, m)


def _rank_bytes(model: ModelSpec, plan: Plan, prm: Section, act: Section, tables: dict[str, Any], h: Holding, r: int,
                m: Num, half: bool = False) -> tuple[Num, Num, Num]:
    """(parameters, routed experts, activations) on a GPU of rank r holding ``h`` (``half``: a DualPipe rank's two
    stages, the micro-batches in flight holding their mean layers' activations)."""
    d, e, emb, loss, mtp = h
    t = plan.tp
    one = prm["p_layer_gpu"]   # a model with one kind of layer; a mixed one has each kind's
    layers = d * (prm["p_dense_gpu"] if "p_dense_gpu" in prm else one) + e * (prm["p_moe_gpu"] if "p_moe_gpu" in prm
                                                                            else one)
    h_: Any = model.hidden   # resolved specs: set
    copy = model.vocab * h_ / t if not emb and ((loss and model.tied_embeddings) or mtp) else 0.0
    params = layers + emb * prm["p_emb_gpu"] + loss * prm["p_head_gpu"] + copy + (prm["p_mtp_gpu"] if mtp else 0)
    per_layer = prm["p_moe_expert_gpu"] if "p_moe_expert_gpu" in prm else prm["p_layer_expert_gpu"]
    experts = e * per_layer + (prm["p_expert_mtp"] if mtp and "p_expert_mtp" in prm else 0)
    kinds = tables.get("kind_a_layer", {"dense": act["a_layer"], "moe": act["a_layer"]})
    a_end = maximum(act["a_head"], act["a_work"]) if loss else act["a_work"]
    a_mtp = tables["sums"].get("a_mtp", 0) if mtp else 0
    a_layers = d * kinds["dense"] + e * kinds["moe"]
    return params, experts, in_flight(plan, r, m) * ((a_layers / 2 if half else a_layers) + emb * act["a_emb"]) \
        + a_end + a_mtp


def memory(hold: tuple[Holding, ...], model: ModelSpec, plan: Plan, prm: Section, act: Section,
           tables: dict[str, Any], m: Num, tiers: Callable[[Section, Section], tuple[dict[str, Section], Section]]
           ) -> tuple[Section, Section, dict[str, Section], Section, list[Num]]:
    """(parameters, activations, memory per tier, model states) of the fullest rank under a layout, and each rank's
    GPU memory: ``tiers(prm, act)`` (:func:`dse.estimate.base.memory_tiers`) of each rank's holdings, the one with
    the most GPU memory kept (element-wise). The parameters' ``p_gpu`` is the largest of any rank (the
    data-parallel reduction and the optimizer step wait for it), ``l_stage`` the most layers a stage holds."""
    p, dual = plan.pp, plan.schedule == "dualpipe"
    ranks: Any = [tuple(x + y for x, y in zip(hold[r], hold[p - 1 - r])) for r in range(p)] if dual else hold
    per = [_rank_bytes(model, plan, prm, act, tables, h, r, m, half=dual) for r, h in enumerate(ranks)]
    base = {k: v for k, v in prm.items() if k != "p_expert_mtp"}
    best: Any = None
    totals = []
    for (params, experts, acts), h in zip(per, ranks):
        layers = (h[0] + h[1]) / 2 if dual else h[0] + h[1]   # a stage's layers (DualPipe: the rank's two, mean)
        prm_r = {**base, "p_first": params, "p_last": params, "l_stage": layers, "p_expert_gpu": experts}
        mem, st = tiers(prm_r, {**act, "act_first": acts, "act_last": acts})
        st = {**st, "first_is_max": not h[3]}     # the fullest rank holds the loss (the allocator's logits hole)
        here = (mem, st, acts, params, experts)
        totals.append(mem["gpu"]["total"])
        best = here if best is None else _pick(mem["gpu"]["total"] > best[0]["gpu"]["total"], here, best)
    most, experts = per[0][0], per[0][1]
    for params, ex, _ in per[1:]:
        take = params > most
        most, experts = maximum(most, params), where(take, ex, experts)
    prm_out = {**base, "p_first": most, "p_last": most, "p_gpu": most, "p_train_gpu": most, "p_expert_gpu": experts,
               "l_stage": max(h[0] + h[1] for h in hold)}
    return prm_out, {**act, "act_first": best[2], "act_last": best[2]}, best[0], best[1], totals
