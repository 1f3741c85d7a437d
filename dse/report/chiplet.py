"""Rich tables for chiplet-package estimates and the weak-scaling report (its PNG: :mod:`dse.report.plots`)."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from dse.units import fmt


def _pct(x, total) -> str:
    return f"{100 * x / total:5.1f}%" if total else "-"


def header(r: dict) -> str:
    from dse.report.console import notes

    ch, hw, p = r["chiplet"], r["hardware"], r["plan"]
    return (f"[bold]{r['model']['name']}[/] ({fmt(r['model']['params'], 'count')} parameters) on "
            f"[bold]{hw['name']}[/] — {ch['dies']} dies as a {ch['mesh']} mesh, {ch['scheme']}, "
            f"{ch['schedule']} schedule (mini-batch of {ch['minibatch']:g} of {ch['micro_batches']:g} micro-batches)\n"
            f"micro-batch {p['micro_batch']} x seq {p['seq_len']} = {ch['tokens_per_micro_batch']:g} tokens · "
            f"global batch {p['global_batch']} · recompute {p['recompute']} · overlap {p['chiplet_overlap']:g}"
            + notes(r))


def time_table(r: dict) -> Table:
    t = r["time"]
    total = t["iteration"]
    tab = Table(title="Time per iteration (each pass overlaps compute, NoP and DRAM)", box=box.SIMPLE_HEAVY,
                title_justify="left")
    for col, j in (("phase", "left"), ("compute", "right"), ("NoP", "right"), ("DRAM", "right"), ("time", "right"),
                   ("share", "right")):
        tab.add_column(col, justify=j)
    for name, key in (("forward", "phase_forward"), ("backward", "phase_backward")):
        ph = t[key]
        tab.add_row(name, fmt(ph["compute"], "s"), fmt(ph["nop"], "s"), fmt(ph["dram"], "s"), fmt(t[name], "s"),
                    _pct(t[name], total))
    tab.add_row("optimizer step", "-", "-", fmt(t["optimizer"], "s"), fmt(t["optimizer"], "s"),
                _pct(t["optimizer"], total))
    tab.add_row(Text("iteration", style="bold"), fmt(t["compute"], "s"), fmt(t["nop"], "s"), fmt(t["dram"], "s"),
                Text(fmt(total, "s"), style="bold"), "100.0%")
    return tab


def memory_table(r: dict) -> Table:
    sram, dram = r["memory"]["sram"], r["memory"]["dram"]
    tab = Table(title="Memory (SRAM per die, DRAM per package)", box=box.SIMPLE_HEAVY, title_justify="left")
    tab.add_column("class")
    tab.add_column("SRAM / die", justify="right")
    tab.add_column("DRAM", justify="right")
    rows = [("weights", sram["weights"], None), ("gradients", sram["gradients"], None),
            ("activations", sram["activations"], dram["activations"]), ("broadcast buffers", sram["buffers"], None),
            ("model states", None, dram["states"])]
    for name, a, b in rows:
        if a or b:
            tab.add_row(name, fmt(a, "bytes") if a else "-", fmt(b, "bytes") if b else "-")
    spilled = r["chiplet"].get("sram_spilled", {})
    if sum(spilled.values()) > 0:      # the working set exceeds SRAM: the classes above are what stays resident
        tab.add_row("working set (spills)", fmt(r["chiplet"]["sram_working_set"], "bytes"), "-")
        tab.add_row("  spilled to DRAM", fmt(sum(spilled.values()), "bytes"), "-")
    tab.add_row(Text("total", style="bold"), Text(fmt(sram["total"], "bytes"), style="bold"),
                Text(fmt(dram["total"], "bytes"), style="bold"))
    cap = []
    for m in (sram, dram):
        style = "red" if m["total"] > m["capacity"] else "green"
        cap.append(Text(f"{fmt(m['capacity'], 'bytes')} ({100 * m['total'] / m['capacity']:.0f}%)", style=style))
    tab.add_row("capacity (used)", *cap)
    return tab


def traffic_table(r: dict) -> Table:
    tr = r["traffic"]
    tab = Table(title="Traffic per iteration", box=box.SIMPLE_HEAVY, title_justify="left", show_header=False)
    tab.add_column("what")
    tab.add_column("bytes", justify="right")
    tab.add_row("NoP, received per die", fmt(tr["nop_bytes_per_die"], "bytes"))
    tab.add_row("NoP, whole package", fmt(tr["nop_bytes"], "bytes"))
    for k in ("weights", "gradients", "activations", "boundary", "optimizer", "spill"):
        if tr.get("dram_" + k):
            tab.add_row(f"DRAM {k}", fmt(tr["dram_" + k], "bytes"))
    tab.add_row(Text("DRAM total", style="bold"), Text(fmt(tr["dram_bytes"], "bytes"), style="bold"))
    return tab


def summary_table(r: dict) -> Table:
    th, en, co, ch = r["throughput"], r["energy"], r["cost"], r["chiplet"]
    tab = Table(title="Throughput, energy, cost", box=box.SIMPLE_HEAVY, title_justify="left", show_header=False)
    tab.add_column("metric")
    tab.add_column("value", justify="right")
    tab.add_row("tokens/s", f"{th['tokens_per_s']:,.0f}")
    tab.add_row("time per token", fmt(r["time"]["per_token"], "s"))
    tab.add_row("MFU (model FLOPs / peak)", fmt(th["mfu"], "fraction"))
    tab.add_row("compute / NoP (FLOP per NoP byte per die, one layer)", f"{ch['compute_to_communication']:,.1f}")
    tab.add_row("energy per iteration (at the wall)", fmt(en["iteration_j"], "J"))
    for k, v in en["components"].items():
        if v:
            tab.add_row(f"  {k[:-2].replace('_', ' ')}", f"{fmt(v, 'J')} ({_pct(v, en['iteration_j']).strip()})")
    tab.add_row("energy per token", fmt(en["per_token_j"], "J"))
    tab.add_row("package cost (dies + packaging + DRAM)", fmt(co["package_usd"], "USD"))
    tab.add_row("  dies (known-good) / packaging / DRAM",
                f"{fmt(co['dies_usd'], 'USD')} / {fmt(co['packaging_usd'], 'USD')} / {fmt(co['dram_usd'], 'USD')}")
    tab.add_row("  die yield, known-good-die cost", f"{co['die_yield']:.4f}, {fmt(co['known_good_die_usd'], 'USD')}")
    tab.add_row("cost per million tokens", fmt(co["per_million_tokens_usd"], "USD"))
    return tab


def render_chiplet_estimate(con, r: dict) -> None:
    con.print(header(r))
    con.print(time_table(r))
    con.print(memory_table(r))
    con.print(traffic_table(r))
    con.print(summary_table(r))
    if r["feasible"]:
        con.print("[green]feasible[/]: fits SRAM and DRAM")
    else:
        con.print("[red bold]infeasible[/]:")
        for v in r["violations"]:
            con.print(f"  [red]•[/] {v}")
    con.print(f"[bold]bottleneck[/]: {r['bottleneck']}")


# ------------------------------------------------------------------ weak scaling


def render_scaling(con, rows: list[dict]) -> None:
    tab = Table(title="Weak scaling: dies grow with the per-layer parameters, the die stays the same",
                box=box.SIMPLE_HEAVY, title_justify="left")
    for col, j in (("model", "left"), ("dies", "right"), ("mesh", "left"), ("scheme", "left"),
                   ("FLOP/NoP B", "right"), ("vs 1st", "right"), ("time/token", "right"), ("per layer vs 1st", "right"),
                   ("MFU", "right"), ("status", "left")):
        tab.add_column(col, justify=j, overflow="fold")
    first, first_t = {}, {}
    last_point = None
    for row in rows:
        sch = row["scheme"]
        ok = row.get("ratio") is not None
        if ok:
            first.setdefault(sch, row["ratio"])
            first_t.setdefault(sch, row["time_per_token_layer"])
        new_point = row["model"] != last_point
        if new_point and last_point is not None:
            tab.add_section()
        last_point = row["model"]
        tab.add_row(row["model"] if new_point else "", str(row["dies"]) if new_point else "",
                    row["mesh"] if new_point else "", sch,
                    f"{row['ratio']:,.1f}" if ok else "n/a",
                    f"{row['ratio'] / first[sch]:.3f}" if ok else "-",
                    fmt(row["time_per_token"], "s") if ok else "-",
                    f"{row['time_per_token_layer'] / first_t[sch]:.2f}x" if ok else "-",
                    fmt(row["mfu"], "fraction") if ok else "-",
                    Text(row["status"], style="" if row.get("feasible") else "red"))
    con.print(tab)
    con.print("FLOP/NoP B: GEMM FLOP per NoP byte per die, one layer forward + backward; constant = weak scaling. "
              "per layer vs 1st: time per token per layer relative to the first point (1.00x = ideal). "
              "Infeasible points are still timed.")



# ------------------------------------------------------------------ 2D scheme vs Megatron 1D


def _compare_rows(a: dict, b: dict) -> list[tuple[str, float, float, str]]:
    rows = [("iteration", a["time_s"], b["time_s"], "s"),
            ("  forward pass", a["phases"]["forward"]["time"], b["phases"]["forward"]["time"], "s"),
            ("  backward pass", a["phases"]["backward"]["time"], b["phases"]["backward"]["time"], "s"),
            ("  optimizer step", a["optimizer_s"], b["optimizer_s"], "s"),
            ("compute (both passes)", a["compute_s"], b["compute_s"], "s"),
            ("NoP: collectives", a["nop_collectives_s"], b["nop_collectives_s"], "s"),
            ("NoP: edge DRAM to the dies", a["nop_dram_s"], b["nop_dram_s"], "s"),
            ("DRAM (both passes)", a["dram_s"], b["dram_s"], "s"),
            ("NoP bytes received per die", a["nop_bytes_per_die"], b["nop_bytes_per_die"], "bytes")]
    rows += [(f"DRAM {k}", a["dram_bytes"][k], b["dram_bytes"][k], "bytes") for k in a["dram_bytes"]
             if a["dram_bytes"][k] or b["dram_bytes"][k]]
    rows += [("SRAM working set per die", a["sram_working_set"], b["sram_working_set"], "bytes"),
             ("  spilled to DRAM", a["sram_spilled"], b["sram_spilled"], "bytes"),
             ("energy per iteration", a["energy_j"], b["energy_j"], "J")]
    rows += [(f"  {k[:-2]}", v, b["energy"][k], "J") for k, v in a["energy"].items() if v or b["energy"][k]]
    return rows


def render_compare(con, out: dict) -> None:
    base = out["base"]
    a, b = base["megatron-1d"], base["hecaton-2d"]
    p = out["plan"]
    con.print(f"[bold]{out['model']}[/] on [bold]{out['hardware']}[/]: Megatron 1D (micro-batch-major) vs the 2D "
              f"weight-stationary scheme (layer-major, mini-batch of {b['minibatch']:g} tuned from "
              f"{', '.join(str(k) for k in base['minibatches_tried'])})\nglobal batch {p.get('global_batch')} x seq "
              f"{p.get('seq_len')}, micro-batch {p.get('micro_batch')}, recompute {p.get('recompute')}")
    tab = Table(title="Where the factors come from (one iteration)", box=box.SIMPLE_HEAVY, title_justify="left")
    for col in ("", "megatron-1d", "hecaton-2d", "1D / 2D"):
        tab.add_column(col, justify="left" if not col else "right")
    for name, x, y, unit in _compare_rows(a, b):
        tab.add_row(name, fmt(x, unit), fmt(y, unit), f"{x / y:.2f}x" if y else "-")
    tab.add_row("bound", a["bottleneck"], b["bottleneck"], "")
    con.print(tab)
    pub = out["published"]
    con.print(f"[bold]time factor {base['time_factor']:.2f}x, energy factor {base['energy_factor']:.2f}x[/] "
              f"(Hecaton v1 abstract: {pub['time_factor']}x and {pub['energy_factor']}x on hardware it does not "
              "state). Time saved per phase: " + ", ".join(f"{k} {fmt(v, 's')}" for k, v in
                                                           base["drivers"]["time_s"].items()) + ".")
    if len(out["grid"]) > 1:
        srams = list(dict.fromkeys(g["sram"] for g in out["grid"]))
        bws = list(dict.fromkeys(g["dram_bandwidth"] for g in out["grid"]))
        grid = Table(title="Time / energy factor (and tuned mini-batch) by SRAM per die and DRAM bandwidth per "
                     "device", box=box.SIMPLE_HEAVY, title_justify="left")
        grid.add_column("SRAM / die")
        for bw in bws:
            grid.add_column(fmt(bw, "bytes/s"), justify="right")
        cell = {(g["sram"], g["dram_bandwidth"]): g for g in out["grid"]}
        for sr in srams:
            marks = []
            for bw in bws:
                g = cell[(sr, bw)]
                flag = "" if g["feasible"] else " !"
                marks.append(f"{g['time_factor']:.2f}x / {g['energy_factor']:.2f}x (k {g['minibatch']:g}){flag}")
            grid.add_row(fmt(sr, "bytes"), *marks)
        con.print(grid)
        con.print("k: the 2D scheme's tuned mini-batch; !: a run is infeasible (timed anyway). Below a scheme's "
                  "working set its blocks spill to DRAM (see docs/chiplets.md).")
