"""Data-parallel gradient reduction and weight gathers of the base estimate (ZeRO 0-3, expert parallelism, FP8
weight gathers, the tied-embedding sync); called by :func:`dse.estimate.base.compose_time`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.estimate import context as _context, dualpipe as _dualpipe, fp8 as _fp8
from dse.formulas import parallelism as _parallelism
from dse.formulas._array import maximum, where
from dse.specs.plan import folded

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Num, Section
    from dse.estimate.kernel_cost import Link
    from dse.estimate.terms import BaseTerms
    from dse.formulas.precision import Recipe
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def expert_parallel(plan: Plan, model: ModelSpec) -> bool:
    """Expert parallelism applies: an MoE model, ep not the Python int 1 or etp not tp (``p_expert_gpu`` counts)."""
    return bool(model.moe_layers) and (folded(plan) or not (type(plan.ep) is int and plan.ep == 1))


def data_parallel(model: ModelSpec, plan: Plan, i: BaseTerms, r: Recipe, kt: Section, lk: dict[str, Link],
                  P: FormulaModule = _parallelism) -> Section:
    """Data-parallel gradient reduction (exposed part) and the tied-embedding gradient sync.

    ZeRO-0: all-reduce the gradients. ZeRO-1/2: reduce-scatter them, all-gather the updated weights after the
    step. ZeRO-3: every micro-batch gathers the weights in forward and again in backward and reduce-scatters the
    gradients (Rajbhandari et al. 2020, ZeRO, section 7: 2 Psi, 2 Psi and 3 Psi of traffic). Exposure:
    overlap_grad_reduce = False (Megatron's default, the measured runs) leaves all of it on the critical path;
    True overlaps each collective with the compute it can hide behind (gradient reduction with the last
    micro-batch's backward, ZeRO-1/2's weight gather with the next forward, ZeRO-3's prefetch with each phase),
    except the first gather / last reduction of a stage (one layer's share), plus a 5 % contention tax on what
    is overlapped. ZeRO-3 therefore never beats ZeRO-1/2 on time for the same plan: it moves more, as often or
    more often, under the same overlap rule. With expert parallelism the experts' share of each collective runs
    over the dp/ep ranks holding the same experts (link ``edp``), after the dense share over dp. Under DualPipe
    a micro-batch runs one of the rank's two stages: ZeRO-3's per micro-batch collectives move that stage's half
    (:func:`dse.estimate.dualpipe.microbatch_share`).
    """
    zero: Num = plan.zero       # a resolved plan: zero and dp are set
    d: Num = _context.grad_ranks(plan)
    m, l_stage = i.micro_batches, i.layers_per_stage
    train = i.trainable_params_per_gpu          # LoRA: the adapters; ZeRO-3 still gathers every weight
    gathered = i.params_per_gpu if plan.finetune == "full" else train
    ep_on = expert_parallel(plan, model)
    expert = i.expert_params_per_gpu if ep_on else 0.0
    if ep_on:   # the experts' gradients and weights go over the dp/ep ranks that hold them
        train, gathered = train - expert, gathered - expert
    grad_b = train * r.dp_gradients
    fp8_dense, fp8_exp = (_fp8.gathered_fp8_bytes(model, plan, r, l_stage) if r.weight_copies
                          else (0.0, 0.0))   # FP8 weights gathered at 1 B (fp8_param_gather)
    gather_b = gathered * r.weight_gathers - fp8_dense - (0.0 if ep_on else fp8_exp)
    frozen_exp = i.frozen_expert_bytes if ep_on and plan.finetune != "full" else 0.0
    if plan.finetune != "full":   # ZeRO-3 gathers the frozen weights as stored (QLoRA: the packed 4-bit bytes),
        gather_b = gather_b + where(zero >= 3, i.frozen_weight_bytes - frozen_exp, 0.0)   # the experts' over EDP
    exp_grad_b = expert * r.dp_gradients
    exp_gather_b = expert * r.weight_gathers - (fp8_exp if ep_on else 0.0) + where(zero >= 3, frozen_exp, 0.0)
    dp_ar, rs_grads, ag_weights = _collectives(lk, d, P, ep_on, (grad_b, gather_b, exp_grad_b, exp_gather_b))
    share = _dualpipe.microbatch_share(plan)   # DualPipe: ZeRO-3's per micro-batch collectives are one stage's
    rs_mb, ag_mb = (rs_grads, ag_weights) if share == 1.0 else _collectives(
        lk, d, P, ep_on, (grad_b * share, gather_b * share, exp_grad_b * share, exp_gather_b * share))[1:]
    dp_time = where(zero == 0, dp_ar, where(zero < 3, rs_grads + ag_weights, m * (2 * ag_mb + rs_mb)))
    fwd_window = l_stage * kt["layer_fwd"]
    bwd_window = l_stage * kt["layer_bwd"]
    if plan.overlap_grad_reduce:
        z3_mb = (maximum(ag_mb - fwd_window, 0.0) + maximum(ag_mb + rs_mb - bwd_window, 0.0)
                 + (ag_mb + rs_mb) / l_stage)
        dp_exposed = where(zero == 0, maximum(dp_ar - bwd_window, 0.0),
                           where(zero < 3, maximum(rs_grads - bwd_window, 0.0) + maximum(ag_weights - fwd_window, 0.0),
                                 m * z3_mb)) + 0.05 * dp_time
    else:
        dp_exposed = dp_time
    if (model.tied_embeddings or model.mtp_layers) and plan.finetune == "full":   # both end stages hold it: sum grads
        emb_bytes = model.vocab * model.hidden / plan.tp * r.dp_gradients
        emb_sync = where(plan.pp == 1, 0.0, P.allreduce_time(emb_bytes, 2, lk["pp"].bandwidth, path=lk["pp"].path))
    else:
        emb_bytes, emb_sync = 0.0, 0.0
    return {"grad_b": grad_b, "gather_b": gather_b, "dp_time": dp_time, "dp_exposed": dp_exposed,
            "emb_bytes": emb_bytes, "emb_sync": emb_sync, "expert_grad_b": exp_grad_b, "expert_gather_b": exp_gather_b}


def _collectives(lk: dict[str, Link], d: Num, P: FormulaModule, ep_on: bool,
                 nbytes: tuple[Num, Num, Num, Num]) -> tuple[Num, Num, Num]:
    """(all-reduce, reduce-scatter, all-gather) times of the dense gradient / weight bytes over the d gradient ranks
    and, with expert parallelism, of the experts' over the dp/ep ranks holding them (link ``edp``; one collective of
    both shares where that group is the dense one). ``nbytes``: dense gradients, dense gathers, expert gradients,
    expert gathers."""
    grad_b, gather_b, exp_grad_b, exp_gather_b = nbytes
    bw_dp, path_dp = lk["dp"].bandwidth, lk["dp"].path
    dp_ar = P.allreduce_time(grad_b, d, bw_dp, path=path_dp)
    rs_grads = P.allgather_time(grad_b, d, bw_dp, path=path_dp)             # reduce-scatter of the gradients
    ag_weights = P.allgather_time(gather_b, d, bw_dp, path=path_dp)         # all-gather of the weights
    if not ep_on:
        return dp_ar, rs_grads, ag_weights
    n_e, bw_e, path_e = lk["edp"][:3]
    apart = n_e != d   # EDP = dp cp (an array's ep 1): one group, one collective of both shares

    def expert(fn: Any, dense: Num, dense_b: Num, nbytes: Num) -> Num:
        own = dense + fn(nbytes, n_e, bw_e, path=path_e) if apart is not False else 0.0
        joint = fn(dense_b + nbytes, d, bw_dp, path=path_dp) if apart is not True else 0.0
        return where(apart, own, joint)

    return (expert(P.allreduce_time, dp_ar, grad_b, exp_grad_b), expert(P.allgather_time, rs_grads, grad_b, exp_grad_b),
            expert(P.allgather_time, ag_weights, gather_b, exp_gather_b))
