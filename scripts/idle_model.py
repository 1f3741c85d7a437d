"""Does CUDA's launch queue explain the GPU's idle time in the profiled eager PyTorch steps? dse's kernel rows through
the queue, beside each measured profile's idle (docs/accuracy.md, "Known optimistic regimes": the verdict).

    PYTHONPATH=$PWD python scripts/idle_model.py [--list] [--rows] [--start] [SET ...]

SET: h200 (data/h200/hf_families.jsonl, gpt2_hf.jsonl), holdout (vm2/dense_families.jsonl), repeat
(vm2/repeat_families.jsonl), moe (vm2/moe_families.jsonl) on system h200-vm; h100-vm (data/h100/gpt2_hf.jsonl) on
h100-vm; h100-hf (data/h100_hf_training.jsonl on dgx-h100: no profiles, dse's error only); default all. Plans:
dse.calibrate.measurements.plan_for, as the suites use them. ``--list``: one line per row.

Measured idle: step_s - the profile's summed device seconds (``device_s_by_category``), as a share of step_s.

Predicted: each timed pass (the harness synchronises after the forward and after the backward: dse/measure/gpt.py
train_steps, CUDA events) starts with an empty queue. Its kernel-table rows in issue order -- forward: embedding,
the layer table's rows x layers, head (with the loss); backward: the head's rows reversed, then per layer (last
first) the forward rows a full recompute runs again (the early-stopped ones with no GPU time, their launches still
in the host's time, as dse.estimate.passes.layer_host_times counts them) and the layer's rows reversed, then the
embedding's rows reversed -- each with dse's GPU time g (dse.estimate.kernel_cost.kernel_time) and host time n x d
(n its launches: row_launches; d the stack's dispatch x the host's scale: dse.estimate.passes.host_dispatch; the
ends' ``ends_dispatch``). The layer's own code per pass D is spread evenly over the layer's launches (Python runs
between the ops it launches; ``--start``: all of it before the layer's first launch instead), the layer overhead o
(the GPU's layer_overhead) at the layer's start. The queue: a row of n kernels each g/n, h/n, issued from H_(i-1)
with the GPU free at G_(i-1), ends at G_i = max(G_(i-1) + g, H_(i-1) + h/n + g, H_(i-1) + h + g/n)
(dse.formulas.kernels.stream_time's extremes; ``--rows``: the whole row at once, G_i = max(G_(i-1), H_i) + g); the
backlog carries across layers. Predicted idle = sum over the two passes of (finish - sum g).

dse's own time for the same passes: max(GPU, host) per layer pass, per end (dse.estimate.passes.layer_passes);
"queue" error: dse's step - those passes + the queue's finishes (what the estimate would be with the queue). Also per
group: the GPU's own idle between kernels (GAP, already in dse's kernel_overhead) x the profiled kernels, the median
measured idle per profiled kernel, and profiled kernels / dse's launches.
"""

from __future__ import annotations

import statistics
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])   # device_by_category, beside this file

SETS = {"h200": ("h200-vm", ("h200/hf_families.jsonl", "h200/gpt2_hf.jsonl")),
        "holdout": ("h200-vm", ("h200/vm2/dense_families.jsonl",)),
        "repeat": ("h200-vm", ("h200/vm2/repeat_families.jsonl",)),
        "moe": ("h200-vm", ("h200/vm2/moe_families.jsonl",)),
        "h100-vm": ("h100-vm", ("h100/gpt2_hf.jsonl",)),
        "h100-hf": ("dgx-h100", ("h100_hf_training.jsonl",))}    # 2 profiles of 16 rows: the errors only


# the GPU's own idle between two kernels of a busy stream (hwspecs/gpus/h200-sxm-141gb.yaml, h100-sxm-80gb.yaml:
# part of kernel_overhead, median over the profiled steps the GPU is busy >= 95 % of), which dse's g already holds
GAP = {"h200-vm": 2.15e-6, "h100-vm": 2.27e-6}


def queue(seq, whole_rows: bool = False) -> tuple[float, float, float]:
    """(finish, GPU sum, host sum) of rows ``seq`` = [(host h, GPU g, kernels n)] from an empty queue."""
    hs = gf = gs = 0.0
    for h, g, n in seq:
        if n <= 0:                   # no launch of its own (host code, or GPU time issued with the previous row's)
            hs, gf, gs = hs + h, gf + g, gs + g
            continue
        if whole_rows:
            gf = max(gf, hs + h) + g
        else:
            gf = max(gf + g, hs + h / n + g, hs + h + g / n)
        hs, gs = hs + h, gs + g
    return gf, gs, hs


def passes(m, system, at_start: bool = False):
    """(forward rows, backward rows, dse's forward and backward pass time) of measurement ``m`` on ``system``."""
    from dse.calibrate.measurements import plan_for
    from dse.estimate.kernel_table import cost_of, kernel_tables, kernel_time, stack_spec
    from dse.estimate.passes import host_dispatch
    from dse.formulas import compute as C, kernels as K
    from dse.formulas.precision import peak_flops, recipe_of

    plan = plan_for(m, system)
    r, gpu, host = recipe_of(plan), system.node.gpu, system.node.host
    hw = cost_of(gpu, peak_flops(gpu.peak_flops, r.gemm_dtype), peak_flops(gpu.peak_flops, r.attention_dtype),
                 peak_flops(gpu.peak_flops, r.head_dtype), r.activations)
    spec = stack_spec(plan.stack)
    d_ends, d, (D_f, D_b) = host_dispatch(spec.dispatch, host, plan.stack, plan.recompute, spec.layer_dispatch,
                                          spec.checkpoint_dispatch)
    if spec.ends_dispatch:
        d_ends = spec.ends_dispatch * host.dispatch_scale
    o = gpu.efficiency.layer_overhead
    t = kernel_tables(m.model, plan, r)
    full = plan.recompute == "full"

    def rows(table, dispatch, backward=False, rerun=False):
        out = []
        for name, row in table.items():
            if row["kind"] == "collective":
                continue
            f, b = kernel_time(row, hw, C)
            if rerun and "stopped" in row:   # not run again (early stop); its launches in dse's host time as there
                f = 0.0
            nf, nb = K.row_launches(name, row, None, 1, 1, None)
            g, n = (b, nb) if backward else (f, nf)
            out.append([n * dispatch, float(g), n])
        return out[::-1] if backward else out

    def layer(seq, extra, overheads):   # the layer's own code: over its launches, or before its first
        n = sum(x[2] for x in seq)
        pre = o * overheads + (extra if at_start or not n else 0.0)
        body = seq if at_start or not n else [[h + extra * k / n, g, k] for h, g, k in seq]
        return [[pre, 0.0, 0], *body]

    def dse_pass(seq):               # max(GPU, host) of a layer pass or an end
        return max(sum(x[1] for x in seq), sum(x[0] for x in seq))

    layers = [t["layer"]] * m.model.layers if "dense_layer" not in t else \
        [t["layer"]] * m.model.moe_layers + [t["dense_layer"]] * (m.model.layers - m.model.moe_layers)
    emb_f, head_f = rows(t["embedding"], d_ends), rows(t["head"], d_ends)
    emb_b, head_b = rows(t["embedding"], d_ends, True), rows(t["head"], d_ends, True)
    fwd, bwd = list(emb_f), list(head_b)
    dse_f, dse_b = dse_pass(emb_f) + dse_pass(head_f), dse_pass(emb_b) + dse_pass(head_b)
    for lt in layers:
        lf = layer(rows(lt, d), D_f, 1)
        fwd += lf
        dse_f += dse_pass(lf)
    for lt in reversed(layers):
        lb = layer(rows(lt, d, backward=True), D_b, 2)
        rec = layer(rows(lt, d, rerun=True), D_f, 1) if full else []
        bwd += rec + lb
        dse_b += dse_pass(lb) + (dse_pass(rec) if rec else 0.0)
    fwd += head_f
    bwd += emb_b
    return fwd, bwd, dse_f, dse_b


def records(sets, at_start=False, whole_rows=False) -> list[dict]:
    """One record per row of ``sets`` (profiled only, but for h100-hf): the measured and the predicted idle."""
    from device_by_category import base_rows

    from dse.calibrate.measurements import predict
    from dse.validate import h200_holdout as H

    out = []
    for tag in sets:
        for _, system, m, prof in base_rows(SETS, [tag], (lambda name: name) if tag == "h100-hf" else None):
            if tag == "h100-hf":
                prof = None                   # its two profile rows are of other steps
            elif prof is None:
                continue
            dev = sum(prof["device_s_by_category"].values()) if prof else float("nan")
            n_prof = sum(prof["kernels_by_category"].values()) if prof else 1
            fwd, bwd, dse_f, dse_b = passes(m, system, at_start)
            (ff, gf, hf), (fb, gb, hb) = queue(fwd, whole_rows), queue(bwd, whole_rows)
            pred = predict(m, system)[0]
            out.append({"set": tag, "label": H.label(m), "step": m.time_s, "busy": dev / m.time_s,
                        "idle": 1 - dev / m.time_s, "q_idle": (ff - gf + fb - gb) / m.time_s,
                        "gpu": gf + gb, "host": hf + hb, "finish": ff + fb, "dse": pred,
                        "dse_q": pred - dse_f - dse_b + ff + fb, "ratio": (hf + hb) / (gf + gb),
                        "moe": bool(getattr(m.model, "experts", 0)), "n_prof": n_prof,
                        "n_dse": sum(x[2] for x in fwd + bwd),
                        "gap_idle": GAP.get(SETS[tag][0], 2.27e-6) * n_prof / m.time_s})
    return out


def _summary(name: str, rs: list[dict]) -> str:
    if not rs:
        return f"{name}: no rows"
    if any(r["idle"] != r["idle"] for r in rs):      # no profile: dse's error now and with the queue
        b0, b1 = (100 * statistics.mean(r[k] / r["step"] - 1 for r in rs) for k in ("dse", "dse_q"))
        e0, e1 = (100 * statistics.mean(abs(r[k] / r["step"] - 1) for r in rs) for k in ("dse", "dse_q"))
        return (f"{name:34s} n={len(rs):3d} (no profiles) dse err mean {b0:+5.1f} % abs {e0:4.1f} % -> queue "
                f"{b1:+5.1f} % abs {e1:4.1f} %")
    mi = 100 * statistics.mean(r["idle"] for r in rs)
    qi = 100 * statistics.mean(r["q_idle"] for r in rs)
    e0 = 100 * statistics.mean(abs(r["dse"] / r["step"] - 1) for r in rs)
    e1 = 100 * statistics.mean(abs(r["dse_q"] / r["step"] - 1) for r in rs)
    b0 = 100 * statistics.mean(r["dse"] / r["step"] - 1 for r in rs)
    b1 = 100 * statistics.mean(r["dse_q"] / r["step"] - 1 for r in rs)
    err = statistics.mean(abs(r["q_idle"] - r["idle"]) for r in rs) * 100
    gap = 100 * statistics.mean(r["gap_idle"] for r in rs)
    per = 1e6 * statistics.median((r["idle"] * r["step"]) / r["n_prof"] for r in rs)
    nk = statistics.mean(r["n_prof"] / r["n_dse"] for r in rs)
    corr = statistics.correlation([r["idle"] for r in rs], [r["q_idle"] for r in rs]) if len(rs) > 2 else float("nan")
    return (f"{name:34s} n={len(rs):3d} idle meas {mi:5.1f} % pred {qi:5.1f} % |pred-meas| {err:4.1f} pp "
            f"corr {corr:+.2f} | gap x kernels {gap:4.1f} %, idle/kernel {per:4.2f} us, kernels prof/dse {nk:4.2f} "
            f"| dse err mean {b0:+5.1f} % abs {e0:4.1f} % -> queue {b1:+5.1f} % abs {e1:4.1f} %")


def main(argv: list[str]) -> None:
    flags = {a for a in argv if a.startswith("--")}
    sets = [a for a in argv if not a.startswith("--")] or list(SETS)
    unknown = [s for s in sets if s not in SETS] + sorted(flags - {"--rows", "--start", "--list"})
    if unknown:
        sys.exit(f"idle_model.py: unknown argument {unknown[0]!r}; sets: {', '.join(SETS)}; "
                 "flags: --rows --start --list")
    recs = records(sets, "--start" in flags, "--rows" in flags)
    if "--list" in flags:
        print(f"{'row':52s} busy  idle%  pred%  err%  q-err%  host/gpu")
        for r in recs:
            err, q_err = (100 * (r[k] / r["step"] - 1) for k in ("dse", "dse_q"))
            print(f"{r['set'] + ': ' + r['label']:52s} {r['busy']:4.2f} {100 * r['idle']:5.1f} "
                  f"{100 * r['q_idle']:6.1f} {err:+5.1f} {q_err:+6.1f}  {r['ratio']:5.2f}")
    for tag in sets:
        print(_summary(tag, [r for r in recs if r["set"] == tag]))
    recs = [r for r in recs if r["idle"] == r["idle"]]     # the profiled rows
    if not recs:
        return
    bound = [r for r in recs if r["busy"] >= 0.8]
    print(_summary("all profiled", recs))
    print(_summary("GPU-bound (busy >= 0.8)", bound))
    print(_summary("  host/GPU >= 0.6", [r for r in bound if r["ratio"] >= 0.6]))
    print(_summary("  host/GPU < 0.6", [r for r in bound if r["ratio"] < 0.6]))
    print(_summary("host-bound (busy < 0.8)", [r for r in recs if r["busy"] < 0.8]))


if __name__ == "__main__":
    main(sys.argv[1:])
