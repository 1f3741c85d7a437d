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
    for k in ("weights", "gradients", "activations", "boundary", "optimizer"):
        if tr["dram_" + k]:
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

