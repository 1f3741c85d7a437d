"""One training iteration on a chiplet package: time, energy, NoP/DRAM traffic, SRAM fit, cost.

``dse estimate --hw <chiplet package>`` comes here (dispatch in :mod:`dse.estimate`).
The iteration runs every layer forward and backward over ``m = global_batch /
micro_batch`` micro-batches of ``T = micro_batch x seq_len`` tokens, split over the
package's dies by the plan's ``chiplet_scheme``; the ``chiplet_schedule`` decides how
often weights and gradients travel to DRAM (see :func:`dse.formulas.chiplet.dram_traffic`).
Each of the two passes is one phase whose compute, NoP and DRAM work overlap
(``chiplet_overlap``); the optimizer step is a DRAM-bound phase after them (its
states also cross the NoP from edge DRAM).

Not modelled (stated, small for the catalog models): the LM head's and embedding's NoP
traffic and weight reads (their FLOPs are counted), element-wise kernels (norms, SwiGLU,
residuals: on-die SRAM traffic only), key/value-head replication when a die holds fewer
than one KV head, and data parallelism across packages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dse.formulas import (
    chiplet as _chiplet,
    compute as _compute,
    cost as _cost,
    kernels as _kernels,
    optimizer as _optimizer,
    package_cost as _package_cost,
    transformer as _transformer,
)
from dse.formulas._array import minimum
from dse.formulas.precision import recipe_of
from dse.specs.chiplet import plan_mesh

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Formulas, Num, Result
    from dse.estimate.trace import Trace
    from dse.specs.chiplet import ChipletPackageSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

Mesh = tuple[int, int]   # (rows, cols) of the dies the plan uses

DEFAULT_SCHEME = "hecaton-2d"
AUTO_SCHEDULE = {"megatron-1d": "microbatch", "summa-2d": "microbatch", "hecaton-2d": "minibatch"}


def scheme_of(plan: Plan) -> str:
    return plan.chiplet_scheme or DEFAULT_SCHEME


def schedule_of(plan: Plan) -> str:
    s = plan.chiplet_schedule or "auto"
    return AUTO_SCHEDULE[scheme_of(plan)] if s == "auto" else s


def batch_of(plan: Plan) -> tuple[Num, Num]:
    """(global batch B, sequence length s) of a resolved plan (:meth:`~dse.specs.plan.Plan.resolved` sets both)."""
    return plan.global_batch, plan.seq_len


def minibatch_of(plan: Plan) -> Num:
    """Micro-batches per mini-batch under the minibatch schedule (default: all of the iteration's)."""
    k = plan.chiplet_minibatch
    return k if k is not None else batch_of(plan)[0] // plan.micro_batch


def _modules(trace: Trace | None) -> Formulas:
    mods: dict[str, ModuleType] = {"chiplet": _chiplet, "compute": _compute, "cost": _cost,
                                   "package_cost": _package_cost, "transformer": _transformer, "kernels": _kernels}
    if trace is None:
        return mods
    from dse.estimate.trace import Tracer

    return {k: Tracer(m, trace) for k, m in mods.items()}


def work(model: ModelSpec, plan: Plan, e: Num, M: Formulas) -> dict[str, Any]:
    """One layer's kernel table (unsplit: the dies split it by the scheme), its GEMMs, parameters and FLOPs.

    The table is the GPU estimate's (:mod:`dse.formulas.kernels`); its weight GEMMs are what
    :func:`~dse.formulas.chiplet.layer_nop` and :func:`~dse.formulas.chiplet.sram_per_die` split.
    """
    K, T, Kn = M["chiplet"], M["transformer"], M["kernels"]
    from dse.errors import InputError

    if model.experts:
        raise InputError(f"model {model.name}: Mixture-of-Experts models are not modelled on chiplet packages "
                         "(experts: GPU systems only)")
    if model.architecture == "encoder-decoder":
        raise InputError(f"model {model.name}: encoder-decoder models are not modelled on chiplet packages "
                         "(GPU systems only)")
    norms = {"layer_norms": model.layer_norms, "qk_norm": model.qk_norm and model.qk_norm_weight}
    B, s = batch_of(plan)
    b = plan.micro_batch
    m = B / b
    L, h, a, kv, hd, ffn, V = (model.layers, model.hidden, model.heads, model.kv_heads, model.head_dim,
                               model.ffn_hidden, model.vocab)
    table = Kn.layer_kernels(s, b, h, a, kv, hd, ffn, recompute=plan.recompute, attention="flash",
                             ffn_type=model.ffn_type, norm=model.norm, position=model.position,
                             dropout=model.dropout > 0, score_dropout=model.attention_dropout,
                             branch_dropouts=model.branch_dropouts, causal=model.architecture == "decoder",
                             bytes_per_element=e,
                             parallel_residual=model.parallel_residual, **norms)
    head = Kn.head_kernels(s, b, h, V, norm=model.norm, final_norm=model.final_norm, bytes_per_element=e)
    executed = Kn.executed_flops(table, plan.recompute)     # as executed: causal attention skips half
    head_fwd = Kn.forward_flops(head)
    layer_f = executed["forward"]
    layer_b = executed["backward"] + executed["recompute"]
    flops_model = 3 * m * (L * Kn.forward_flops(table) + head_fwd)
    return {
        "table": table, "gemm_fwd": K.layer_gemm_flops(s * b, Kn.weight_gemms(table)), "stored": Kn.saved_bytes(table),
        "p_layer": T.layer_parameters(h, a, kv, hd, ffn, model.ffn_type, model.norm_params, model.bias, model.qkv_bias,
                                      **norms),
        "params": T.parameter_count(L, h, a, kv, hd, ffn, V, ffn_type=model.ffn_type, norm=model.norm_params,
                                    bias=model.bias, qkv_bias=model.qkv_bias,
                                    position_embeddings=model.position_embeddings, token_types=model.token_types,
                                    embedding_norm=model.embedding_norm, tied=model.tied_embeddings,
                                    final_norm=model.final_norm, pooler=model.pooler, mlm_head=model.mlm_head,
                                    nsp_head=model.nsp_head, **norms),
        "layer_f": layer_f, "layer_b": layer_b, "head_fwd": head_fwd,
        "flops": {"model_per_iteration": flops_model,
                  "hardware_per_iteration": flops_model + m * L * Kn.recomputed_flops(table, plan.recompute),
                  # executed (causal attention halved): time, energy
                  "executed_per_iteration": m * (L * (layer_f + layer_b) + 3 * head_fwd)},
    }


def sram_and_spill(model: ModelSpec, package: ChipletPackageSpec, plan: Plan, mesh: Mesh, e: Num, g: Num, m: Num,
                   k: Num, K: FormulaModule) -> tuple[dict[str, Any], dict[str, Any]]:
    """SRAM per die (working set, what stays resident, what spills) and the DRAM bytes the spills add.

    A working set over the die's SRAM spills (:mod:`dse.formulas.chiplet.spill`); the estimate is infeasible only
    when the die cannot hold the MAC array's double-buffered tiles.
    """
    rows, cols = mesh
    scheme = scheme_of(plan)
    tok = batch_of(plan)[1] * plan.micro_batch
    shape = (model.hidden, model.heads, model.kv_heads, model.head_dim, model.ffn_hidden, model.ffn_type)
    sram = K.sram_per_die(scheme, tok, *shape, rows, cols, e, g)
    gemms = K.layer_gemms(*shape)
    p_layer = K.gemm_parameters(gemms)
    dies = rows * cols
    ops = []
    for _, kk, n, kind in gemms:
        o = K.gemm_operand_bytes(scheme, tok, kk, n, kind, rows, cols, e)
        ops.append(o["operands"] + o["buffers"])
    sp = K.sram_spill(package.die.sram, p_layer * e / dies, p_layer * g / dies, tuple(ops),
                      tok * model.hidden * e / dies, 2, K.min_tile_sram(package.die.tile, e))
    traffic = K.spill_dram_traffic(sp, m, k, model.layers, dies, plan.recompute == "full")
    # what stays resident, by class (the spilled bytes are in chiplet.sram_spilled, the full need in
    # chiplet.sram_working_set); unchanged when nothing spills
    weights = sram["weights"] - sp["prefetch"] - sp["weights"]
    grads = sram["gradients"] - sp["gradients"]
    left = sp["resident"] - weights - grads
    acts = minimum(sram["activations"], left)
    resident = {"weights": weights, "gradients": grads, "activations": acts, "buffers": left - acts,
                "total": sp["resident"], "capacity": package.die.sram}
    spill = {"working_set": sram["total"], "spilled": {c: sp[c] for c in ("prefetch", "weights", "gradients",
                                                                          "activations")}, **traffic}
    return resident, spill


def phases(model: ModelSpec, package: ChipletPackageSpec, plan: Plan, w: dict[str, Any], mesh: Mesh, e: Num, g: Num,
           o: Num, step: Num, K: FormulaModule) -> dict[str, Any]:
    """NoP, DRAM and compute of the forward and backward phases and the optimizer step; the iteration time."""
    scheme, schedule = scheme_of(plan), schedule_of(plan)
    rows, cols = mesh
    dies = rows * cols
    die, nop_spec, dram_spec = package.die, package.nop, package.dram
    B, s = batch_of(plan)
    b, L, h = plan.micro_batch, model.layers, model.hidden
    m, tok = B / b, s * b
    shape = (h, model.heads, model.kv_heads, model.head_dim, model.ffn_hidden, model.ffn_type)
    # per micro-batch, per layer, per die
    rate = dies * die.peak_flops * die.utilization
    nop = K.layer_nop(scheme, tok, b, *shape, rows, cols, e)
    t_nop_f = K.nop_time(nop["forward_critical"], nop["forward_steps"], nop_spec.link_bandwidth, nop_spec.hop_latency)
    t_nop_b = K.nop_time(nop["backward_critical"], nop["backward_steps"], nop_spec.link_bandwidth, nop_spec.hop_latency)
    if plan.recompute == "full":  # the recomputed forward repeats its collectives
        t_nop_b = t_nop_b + t_nop_f
    # DRAM
    k = minibatch_of(plan) if schedule == "minibatch" else 1
    dram = K.dram_traffic(m, k, L, w["p_layer"], w["params"], w["stored"], tok, h, e, g, o, step_bytes=step)
    sram, spill = sram_and_spill(model, package, plan, mesh, e, g, m, k, K)
    dram = {**dram, "forward": dram["forward"] + spill["forward"], "backward": dram["backward"] + spill["backward"],
            "spill": spill["total"], "total": dram["total"] + spill["total"]}
    devices = K.dram_attach_points(rows, cols, dram_spec.placement, dram_spec.per_attach)
    dram_bw = devices * dram_spec.bandwidth
    # phases: compute, NoP (with the edge DRAM's injection) and DRAM overlap by chiplet_overlap
    c_f = m * (L * w["layer_f"] + w["head_fwd"]) / rate
    c_b = m * (L * w["layer_b"] + 2 * w["head_fwd"]) / rate
    inj = {p: K.edge_injection_time(dram[p], rows, cols, nop_spec.link_bandwidth, dram_spec.placement)
           for p in ("forward", "backward", "optimizer")}
    n_f = m * L * t_nop_f + inj["forward"]
    n_b = m * L * t_nop_b + inj["backward"]
    d_f = dram["forward"] / dram_bw
    d_b = dram["backward"] / dram_bw
    eta = plan.chiplet_overlap
    t_f = K.overlapped_time(c_f, n_f, d_f, eta)
    t_b = K.overlapped_time(c_b, n_b, d_b, eta)
    t_opt = K.overlapped_time(0.0, inj["optimizer"], dram["optimizer"] / dram_bw, eta)   # states stream through
    t_iter = t_f + t_b + t_opt
    time = {"iteration": t_iter, "forward": t_f, "backward": t_b, "optimizer": t_opt,
            "compute": c_f + c_b, "nop": n_f + n_b, "dram": d_f + d_b,
            "exposed": t_f + t_b - (c_f + c_b), "per_token": t_iter / (B * s),
            "nop_collectives": m * L * (t_nop_f + t_nop_b), "nop_dram": inj["forward"] + inj["backward"],
            "phase_forward": {"compute": c_f, "nop": n_f, "dram": d_f},
            "phase_backward": {"compute": c_b, "nop": n_b, "dram": d_b}}
    return {"time": time, "nop": nop, "dram": dram, "sram": sram, "spill": spill, "devices": devices,
            "dram_bw": dram_bw, "minibatch": k,
            "footprint": K.dram_footprint(k, L, w["params"], w["stored"], tok, h, e, g, o),
            "ratio": 3 * w["gemm_fwd"] / dies / (nop["forward"] + nop["backward"])}   # = compute_to_communication


def energy_section(package: ChipletPackageSpec, plan: Plan, flops_exec: Num, nop_total: Num, dram_total: Num,
                   mesh: Mesh, t_iter: Num, e: Num, K: FormulaModule) -> tuple[dict[str, Any], Num]:
    """Energy of one iteration (compute, SRAM, NoP, DRAM, static, facility) and the mean DRAM hops."""
    die, nop_spec, dram_spec, site = package.die, package.nop, package.dram, package.site
    dies = mesh[0] * mesh[1]
    B, s = batch_of(plan)
    tokens = B * s
    hops = 0.0 if dram_spec.placement == "per-die" else K.edge_hops(*mesh)
    sram_bytes = K.sram_operand_bytes(flops_exec, die.tile, e) + 2 * (nop_total + dram_total)
    parts = K.iteration_energy(flops_exec, sram_bytes, nop_total + dram_total * hops, dram_total, die.flop_energy,
                               die.sram_energy, nop_spec.energy, dram_spec.energy, die.static_power * dies, t_iter)
    chip_j = parts.pop("total_j")
    facility = chip_j * (site.pue - 1)
    energy_j = chip_j + facility
    return {"iteration_j": energy_j, "per_token_j": energy_j / tokens, "power_w": energy_j / t_iter,
            "package_j": chip_j, "components": {**parts, "facility_j": facility}}, hops


def cost_section(package: ChipletPackageSpec, devices: Num, dies: Num, energy_j: Num, tokens: Num, t_iter: Num,
                 P: FormulaModule, Co: FormulaModule) -> tuple[dict[str, Any], Num]:
    """Capital cost of the package (dies, packaging, DRAM, assembly) and the cost per token; the die area.

    Die area: the spec's, or Chiplet Cloud's 7 nm model from the die's peak, SRAM and its four links (both
    directions), so that SRAM and link bandwidth cost silicon in a search.
    """
    die, nop_spec, dram_spec, site = package.die, package.nop, package.dram, package.site
    area = die.area if die.area is not None else P.die_area(die.peak_flops, die.sram, 8 * nop_spec.link_bandwidth)
    pkg = P.package_re_cost(dies, area, die.node, package.packaging)
    dram_usd = devices * dram_spec.price
    capital = pkg["total"] + dram_usd + package.assembly_price
    tps = tokens / t_iter
    usd_token = Co.cost_per_token(capital, energy_j / tokens, tps, site.amortization_years, site.utilization,
                                  site.electricity)
    node = P.node_constants(die.node)
    return {"package_usd": capital, "capital_usd": capital, "dies_usd": pkg["chips"] + pkg["chip_defects"],
            "packaging_usd": pkg["package"] + pkg["package_defects"] + pkg["wasted_kgd"], "dram_usd": dram_usd,
            "assembly_usd": package.assembly_price,
            "die_yield": P.die_yield(area, node["defect_density"]),
            "known_good_die_usd": P.known_good_die_cost(area, node["wafer_cost"], node["defect_density"]),
            "per_million_tokens_usd": usd_token * 1e6,
            "tokens_per_s_per_kusd": tps / (capital / 1e3)}, area


def compose(model: ModelSpec, package: ChipletPackageSpec, plan: Plan, M: Formulas | None = None) -> Result:
    """The numeric estimate (every number broadcasts over numpy arrays in the package's numeric fields).

    ``M`` maps formula-module names to modules or tracers (:func:`_modules`).
    """
    M = M or _modules(None)
    K = M["chiplet"]
    scheme, schedule = scheme_of(plan), schedule_of(plan)
    rows, cols = plan_mesh(plan, package)
    dies = rows * cols
    die, nop_spec, dram_spec = package.die, package.nop, package.dram
    r = recipe_of(plan)
    e = r.activations   # one element size for the chiplet formulas' activations, weights and NoP messages
    g = r.gradients
    o = _optimizer.state_bytes_per_param(plan.optimizer, r)
    step = _optimizer.step_bytes_per_param(plan.optimizer, r)
    B, s = batch_of(plan)
    m = B / plan.micro_batch
    tok = s * plan.micro_batch
    tokens = B * s
    L = model.layers

    w = work(model, plan, e, M)
    ph = phases(model, package, plan, w, (rows, cols), e, g, o, step, K)
    time, nop, dram = ph["time"], ph["nop"], ph["dram"]
    t_iter = time["iteration"]
    sram = ph["sram"]
    nop_die = m * L * (nop["forward"] + nop["backward"] + (nop["forward"] if plan.recompute == "full" else 0.0))
    nop_total = dies * nop_die
    fl = w["flops"]
    energy, hops = energy_section(package, plan, fl["executed_per_iteration"], nop_total, dram["total"],
                             (rows, cols), t_iter, e, K)
    cost, area = cost_section(package, ph["devices"], dies, energy["iteration_j"], tokens, t_iter, M["package_cost"],
                         M["cost"])
    dram_cap = ph["devices"] * dram_spec.capacity
    return {"kind": "chiplet",
            "model": {"name": model.name, "params": w["params"], "layers": L, "hidden": model.hidden,
                      "heads": model.heads, "kv_heads": model.kv_heads, "ffn_hidden": model.ffn_hidden,
                      "vocab": model.vocab, "layer_params": w["p_layer"]},
            "hardware": {"name": package.name, "kind": "chiplet-package", "dies": dies, "rows": rows,
                         "cols": cols, "peak_flops_per_die": die.peak_flops, "sram_per_die": die.sram,
                         "link_bandwidth": nop_spec.link_bandwidth, "dram_bandwidth": ph["dram_bw"],
                         "dram_capacity": dram_cap, "packaging": package.packaging, "node": die.node,
                         "die_area_mm2": area},
            "chiplet": {"scheme": scheme, "schedule": schedule, "mesh": f"{rows}x{cols}", "dies": dies,
                        "micro_batches": m, "minibatch": ph["minibatch"], "tokens_per_micro_batch": tok,
                        "compute_to_communication": ph["ratio"],
                        "layer_nop_bytes_per_die": {"forward": nop["forward"], "backward": nop["backward"]},
                        "dram_devices": ph["devices"], "edge_hops": hops,
                        "sram_working_set": ph["spill"]["working_set"], "sram_spilled": ph["spill"]["spilled"]},
            "flops": fl,
            "time": time,
            "memory": {"sram": sram, "dram": {**ph["footprint"], "capacity": dram_cap}},
            "traffic": {"nop_bytes_per_die": nop_die, "nop_bytes": nop_total, "dram_bytes": dram["total"],
                        "dram_weights": dram["weights"], "dram_gradients": dram["gradients"],
                        "dram_activations": dram["activations"], "dram_boundary": dram["boundary"],
                        "dram_optimizer": dram["optimizer"], "dram_spill": dram["spill"]},
            "throughput": {"tokens_per_s": tokens / t_iter,
                           "mfu": fl["model_per_iteration"] / (t_iter * dies * die.peak_flops),
                           "hfu": fl["hardware_per_iteration"] / (t_iter * dies * die.peak_flops)},
            "energy": energy,
            "cost": cost,
            }


def run(model: ModelSpec, package: ChipletPackageSpec, plan: Plan, *, trace: Trace | None = None) -> Result:
    """Estimate one iteration of ``model`` on chiplet ``package`` under ``plan`` (resolved specs, scalars)."""
    r = numbers(model, package, plan, trace=trace)
    r["feasible"], r["violations"], r["bottleneck"] = verdict(r, package, plan)
    return r


def numbers(model: ModelSpec, package: ChipletPackageSpec, plan: Plan, *, trace: Trace | None = None) -> Result:
    """Every number of the estimate, without the verdict (array-safe in the plan's numeric fields)."""
    r = compose(model, package, plan, _modules(trace))
    ch = r["chiplet"]
    fields = {k: v for k, v in dataclasses.asdict(plan).items() if k != "target_len"}   # decoders only here
    r["plan"] = {**fields, "chiplet_scheme": ch["scheme"], "chiplet_schedule": ch["schedule"],
                 "chiplet_mesh": ch["mesh"]}
    return r


def _describe(r: Result, package: ChipletPackageSpec) -> Callable[[str, dict[str, Any]], Callable[[], str] | None]:
    """Message functions of the chiplet memory tiers (SRAM per die, DRAM of the package) with their breakdown."""
    from dse.units import fmt

    scheme = r["chiplet"]["scheme"]

    def describe(tier: str, mem: dict[str, Any]) -> Callable[[], str] | None:
        if tier == "sram":
            return lambda: (f"SRAM: {scheme} needs {fmt(mem['total'], 'bytes')} per die (weights "
                            f"{fmt(mem['weights'], 'bytes')}, gradients {fmt(mem['gradients'], 'bytes')}, activations "
                            f"{fmt(mem['activations'], 'bytes')}"
                            + (f", broadcast buffers {fmt(mem['buffers'], 'bytes')}" if mem["buffers"] else "")
                            + f"); the die has {fmt(package.die.sram, 'bytes')}")
        if tier == "dram":
            return lambda: (f"DRAM: needs {fmt(mem['total'], 'bytes')} (model states {fmt(mem['states'], 'bytes')}, "
                            f"activations in flight {fmt(mem['activations'], 'bytes')}); the package has "
                            f"{fmt(mem['capacity'], 'bytes')}")
        return None
    return describe


def verdict(r: Result, package: ChipletPackageSpec, plan: Plan) -> tuple[bool, list[str], str]:
    """Feasibility, violated constraints and bottleneck sentence of one scalar result.

    The constraints are :func:`dse.estimate.feasibility.check`'s (SRAM per die, package DRAM);
    their structured form is set as ``r["violation_details"]``.
    """
    from dse.estimate import feasibility
    from dse.units import fmt

    bad = feasibility.violated(feasibility.check(r["memory"], package, plan, describe=_describe(r, package)))
    violations = [v.message for v in bad]
    r["violation_details"] = [v.as_dict(msg) for v, msg in zip(bad, violations)]
    t = r["time"]
    shares = {"compute": t["compute"], "NoP communication": t["nop"], "DRAM traffic": t["dram"]}
    top = max(shares, key=lambda k: float(shares[k]))
    if violations:
        bottleneck = "Infeasible: " + "; ".join(violations) + "."
    else:
        share = 100 * float(shares[top]) / float(t["iteration"])
        bottleneck = (f"{top[0].upper() + top[1:]}-bound: {top} alone would take {share:.0f}% "
                      f"of the iteration (compute {fmt(t['compute'], 's')}, NoP {fmt(t['nop'], 's')}, "
                      f"DRAM {fmt(t['dram'], 's')}, optimizer step {fmt(t['optimizer'], 's')}).")
    return not violations, violations, bottleneck
