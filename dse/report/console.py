"""Rich tables for ``dse estimate``, ``dse list``, ``dse show`` and ``dse validate``."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from dse.units import fmt

TIME_ROWS = [
    ("compute", "compute (GEMM, attention, element-wise)"),
    ("recompute", "activation recompute"),
    ("tp_communication", "tensor-parallel communication"),
    ("cp_communication", "context-parallel exchange (exposed)"),
    ("ep_communication", "expert-parallel all-to-all"),
    ("pp_communication", "pipeline point-to-point"),
    ("dp_communication", "data-parallel reduction (exposed)"),
    ("embedding_sync", "word-embedding gradient sync (tied, MTP)"),
    ("bubble", "pipeline bubble"),
    ("optimizer", "optimizer step"),
    ("overhead", "host overhead"),
    ("io_exposed", "storage / host I/O (exposed)"),
]
CLASSES = ["weights", "gradients", "optimizer", "activations", "buffers"]

# Result section -> "module:function(con, result)" that renders it. A technique declares its own in
# its ``report`` (dse/estimate/technique.py); this dict adds or overrides sections.
SECTION_RENDERERS: dict[str, str] = {"fp8": "dse.report.fp8:render_fp8"}


def section_renderers() -> dict[str, str]:
    """Every technique's report renderers (registry order), then :data:`SECTION_RENDERERS`."""
    from dse.estimate import techniques

    return {**{s: f for t in techniques() for s, f in getattr(t, "report", {}).items()}, **SECTION_RENDERERS}


def _pct(x: float, total: float) -> str:
    return f"{100 * x / total:5.1f}%" if total else "-"


def header(r: dict) -> str:
    p = r["plan"]
    par = r["parallelism"]
    bits = [f"tp {p['tp']}", f"pp {p['pp']}", f"dp {p['dp']}", *([f"ep {p['ep']}"] if p.get("ep", 1) > 1 else []),
            *([f"etp {p['etp']}"] if "etp" in p else []),
            f"micro-batch {p['micro_batch']}",
            f"global batch {p['global_batch']}", f"seq {p['seq_len']}", f"recompute {p['recompute']}",
            f"{p['attention']} attention", f"ZeRO-{p['zero']}",
            p["precision"] + (" (FP8 weights only)" if p.get("fp8_param_gather") else "")]
    if p.get("target_len"):    # an encoder-decoder model: seq is the input, target the decoder's tokens
        bits.insert(bits.index(f"seq {p['seq_len']}") + 1, f"target {p['target_len']}")
    if p.get("cp", 1) > 1:
        bits.insert(1, f"cp {p['cp']}")
    if p.get("stack", "megatron") != "megatron":
        bits.append(f"{p['stack']} stack")
    if p.get("sequence_parallel"):
        bits.append("sequence-parallel")
    if p.get("virtual_stages", 1) > 1:
        bits.append(f"interleaved x{p['virtual_stages']}")
    if p.get("schedule") in ("dualpipe", "gpipe"):
        bits.append(p["schedule"] if p["schedule"] == "gpipe" else
                    f"DualPipe ({100 * p['comm_sm_share']:.0f}% of SMs communicating)")
    if p.get("expert_capacity") is not None:
        bits.append(f"expert capacity {p['expert_capacity']:g}" + " (padded)" * bool(p.get("pad_to_capacity"))
                    + f": {100 * r['model']['dropped_tokens']:.2g}% of routed tokens dropped")
    if p.get("finetune", "full") != "full":
        quant = f", {p['quantization']} weights" if p["finetune"] == "qlora" else ""
        share = r["model"]["params_trainable"] / r["model"]["params"]
        bits.append(f"{'QLoRA' if p['finetune'] == 'qlora' else 'LoRA'} r{p['lora_rank']} on {p['lora_targets']}"
                    f"{quant} ({fmt(r['model']['params_trainable'], 'count')} trained, {100 * share:.2g}%)")
    mo = r["model"]
    moe = (f", {fmt(mo['active_params'], 'count')} active: {mo['experts_per_token']} of {mo['experts']} experts"
           if "active_params" in mo else "")
    if "mtp_params" in mo:   # multi-token prediction depths on the last stage
        moe += f"; + {fmt(mo['mtp_params'], 'count')} in {mo['mtp_layers']} MTP depth(s)"
    text = (f"[bold]{mo['name']}[/] ({fmt(mo['params'], 'count')} parameters{moe}) on "
            f"[bold]{r['hardware']['name']}[/] — {int(par['gpus'])} GPUs in {int(par['nodes'])} node(s), "
            + (f"{int(par['hosts'])} host(s), " if "hosts" in par else "") +
            f"{par['micro_batches']:g} micro-batches\n" + " · ".join(bits))
    return text + notes(r)


def notes(r: dict) -> str:
    """The lines under a header: the defaults the plan filled in (dim) and the input warnings (yellow)."""
    from dse.estimate.defaults import line

    text = f"\n[dim]{line(r['defaults'])}[/]" if r.get("defaults") else ""
    for w in r.get("warnings", ()):
        text += f"\n[yellow]warning: {w}[/]"
    return text


def time_table(r: dict) -> Table:
    t = r["time"]
    total = t["iteration"]
    tab = Table(title="Time per iteration", box=box.SIMPLE_HEAVY, title_justify="left")
    tab.add_column("component")
    tab.add_column("time", justify="right")
    tab.add_column("share", justify="right")
    for key, label in TIME_ROWS:
        v = t.get(key, 0.0)
        if v:
            tab.add_row(label, fmt(v, "s"), _pct(v, total))
    if t.get("mtp"):   # of which: the multi-token prediction depths (in the rows above)
        tab.add_row("of which multi-token prediction depths", fmt(t["mtp"], "s"), _pct(t["mtp"], total), style="dim")
    for key, v in t.items():
        if key.startswith("phase_"):
            tab.add_row(key[6:].replace("_", " "), fmt(v, "s"), _pct(v, total), style="dim")
    tab.add_row(Text("iteration", style="bold"), Text(fmt(total, "s"), style="bold"), "100.0%")
    return tab


def memory_table(r: dict) -> Table:
    mem = r["memory"]
    tiers = [k for k in ("gpu", "host", "cxl", "storage") if k in mem and (mem[k]["capacity"] or mem[k]["total"])]
    unit = "host" if "hosts" in r["parallelism"] else "node"   # a node of several hosts (GB200 NVL72)
    tab = Table(title=f"Memory (GPU: per GPU, most loaded stage; host and storage: per {unit})", box=box.SIMPLE_HEAVY,
                title_justify="left")
    tab.add_column("tensor class")
    for tier in tiers:
        tab.add_column(tier, justify="right")
    for cls in CLASSES + sorted({k for tier in tiers for k in mem[tier]} - set(CLASSES) - {"total", "capacity"}):
        vals = [mem[t].get(cls, 0.0) for t in tiers]
        if any(vals):
            tab.add_row(cls, *[fmt(v, "bytes") if v else "-" for v in vals])
    tab.add_row(Text("total", style="bold"), *[Text(fmt(mem[t]["total"], "bytes"), style="bold") for t in tiers])
    cap = []
    for t in tiers:
        c, u = mem[t]["capacity"], mem[t]["total"]
        style = "red" if u > c else "green"
        cap.append(Text(f"{fmt(c, 'bytes')} ({100 * u / c:.0f}%)" if c else "-", style=style))
    tab.add_row("capacity (used)", *cap)
    alloc = r.get("allocator")
    if alloc and "gpu" in tiers and alloc["holes"]:   # PyTorch's max_memory_allocated and max_memory_reserved
        rest = ["-"] * (len(tiers) - 1)
        tab.add_row("PyTorch: peak allocated", fmt(alloc["allocated"], "bytes"), *rest, style="dim")
        tab.add_row("PyTorch: peak reserved", fmt(alloc["reserved"], "bytes"), *rest, style="dim")
    return tab


def traffic_table(r: dict) -> Table | None:
    tr = {k: v for k, v in r["traffic"].items() if v}
    if not tr:
        return None
    tab = Table(title="Traffic per iteration (bytes per GPU unless the link is shared)", box=box.SIMPLE_HEAVY,
                title_justify="left")
    tab.add_column("link / class")
    tab.add_column("bytes", justify="right")
    for k, v in tr.items():
        tab.add_row(k.replace("_", " "), fmt(v, "bytes"))
    return tab


def throughput_table(r: dict) -> Table:
    th = r["throughput"]
    tab = Table(title="Throughput", box=box.SIMPLE_HEAVY, title_justify="left", show_header=False)
    tab.add_column("metric")
    tab.add_column("value", justify="right")
    tab.add_row("tokens/s", f"{th['tokens_per_s']:,.0f}")
    tab.add_row("MFU (model FLOPs / peak)", fmt(th["mfu"], "fraction"))
    tab.add_row("HFU (with recompute)", fmt(th["hfu"], "fraction"))
    tab.add_row("model FLOPs / iteration", fmt(r["flops"]["model_per_iteration"], "flop"))
    tab.add_row("activations / layer / micro-batch", fmt(r["activation_bytes_per_layer"], "bytes"))
    cost = r.get("cost", {})
    if cost:
        tab.add_row("capital cost of the parts used", fmt(cost["capital_usd"], "USD"))
        tab.add_row("cost per million tokens", fmt(cost["per_million_tokens_usd"], "USD"))
    energy = r.get("energy", {})
    if energy:
        tab.add_row("energy per token (at the wall)", fmt(energy["per_token_j"], "J"))
    return tab


def render_estimate(con, r: dict) -> None:
    if r.get("kind") == "chiplet":   # a chiplet-package estimate has its own layout
        from dse.report.chiplet import render_chiplet_estimate

        return render_chiplet_estimate(con, r)
    con.print(header(r))
    con.print(time_table(r))
    con.print(memory_table(r))
    tt = traffic_table(r)
    if tt is not None:
        con.print(tt)
    con.print(throughput_table(r))
    import importlib

    for section, target in section_renderers().items():
        if section in r:
            mod, fn = target.split(":")
            getattr(importlib.import_module(mod), fn)(con, r)
    if r["feasible"]:
        con.print("[green]feasible[/]: fits every memory tier")
    else:
        con.print("[red bold]infeasible[/]:")
        for v in r["violations"]:
            con.print(f"  [red]•[/] {v}")
    con.print(f"[bold]bottleneck[/]: {r['bottleneck']}")
    if "checked_against" in r:
        from dse.validate.regimes import sentence

        con.print(f"[bold]checked against[/]: {sentence(r['checked_against'])}")


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_short(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_short(x)}" for k, x in v.items()) + "}"
    return str(v)


def render_explain(con, rows: list[dict]) -> None:
    """Every formula the estimate evaluated: term = value, then its equation and inputs."""
    n = sum(row.get("context") != "composition" for row in rows)
    con.print(f"[bold]Every formula evaluated[/] ({n} calls, then how they combine; SI units; sources in each "
              "docstring)")
    for i, row in enumerate(rows, 1):
        inputs = ", ".join(f"{k}={_short(v)}" for k, v in row["inputs"].items())
        con.print(f"[dim]{i:3d}.[/] [bold]{row['term']}[/] = {_short(row['value'])}", highlight=False)
        con.print(f"      formula: {row['formula']}", highlight=False, markup=False)
        con.print(f"      inputs:  {inputs}", highlight=False, markup=False)


def render_list(con, what: str, items, hub=None) -> None:
    """The catalog table; ``hub``: the shipped Hugging Face configs (repository id -> file), listed by organization
    after the models' table."""
    tab = Table(box=box.SIMPLE_HEAVY)
    tab.add_column("name", no_wrap=True)   # names must stay whole to be copied into --model/--hw
    if what == "models":
        for col in ("layers", "hidden", "heads", "vocab", "source"):
            tab.add_column(col, overflow="fold")
        for n, d in items:
            tab.add_row(n, *[str(d.get(c, "")) for c in ("layers", "hidden", "heads", "vocab", "source")])
    else:
        tab.add_column("description", overflow="fold")
        for n, d in items:
            tab.add_row(n, str(d.get("description") or d.get("source") or ""))
    con.print(tab)
    if hub:
        orgs: dict[str, list[str]] = {}
        for name in hub:
            org, repo = name.split("/")
            orgs.setdefault(org, []).append(repo)
        con.print(f"[bold]Hugging Face configs shipped[/] ({len(hub)}; --model org/name or the bare name, any case; "
                  "sources: models/hf/SOURCE.md)")
        for org, repos in sorted(orgs.items(), key=lambda kv: kv[0].lower()):
            con.print(f"  {org}/: {', '.join(repos)}", highlight=False, markup=False, soft_wrap=True)


def render_spec(con, kind: str, data: dict) -> None:
    tab = Table(title=f"{kind}: {data.get('name')}", box=box.SIMPLE, title_justify="left", show_header=False)
    tab.add_column("field")
    tab.add_column("value", overflow="fold")

    def walk(prefix, d):
        for k, v in d.items():
            if isinstance(v, dict) and v:
                walk(f"{prefix}{k}.", v)
            else:
                tab.add_row(prefix + k, _short(v))

    walk("", data)
    con.print(tab)


def _quantity_summary(r) -> str:
    """Per-quantity MAPE and signed mean error of a suite that compares several quantities, with their targets."""
    out = ""
    checks = r.target_checks()
    for q, st in r.stats.get("by_quantity", {}).items():
        if "mape" not in st:
            continue
        out += f"; {q} MAPE {100 * st['mape']:.1f}% (mean {100 * st['mean_signed_error']:+.1f}%)"
        target = r.targets.get(q, {})
        if isinstance(target, dict) and "mape" in target:
            key = f"{q} mape"
            miss = "" if checks.get(key) else (", documented miss" if key in r.target_misses else ", MISSED")
            out += f" (target <= {100 * target['mape']:g}%{miss})"
    return out


def render_validation(con, results, verbose: bool) -> None:
    for r in results:
        tab = Table(title=f"suite {r.name}", box=box.SIMPLE_HEAVY, title_justify="left")
        for col, j in (("case", "left"), ("reference", "right"), ("model", "right"), ("error", "right"),
                       ("tolerance", "right"), ("", "left")):
            tab.add_column(col, justify=j, overflow="fold")
        for c in r.cases:
            if not verbose and c.within:
                continue
            unit = c.unit or "count"
            err = f"{100 * c.error:+.1f}%" if c.kind == "relative" else f"{c.error:+.4g}"
            tol = f"±{100 * c.tolerance:g}%" if c.kind == "relative" else f"±{c.tolerance:g}"
            status = "[green]ok[/]" if c.within else ("[yellow]expected miss[/]" if c.expected_miss else "[red]MISS[/]")
            ref = fmt(c.reference, unit) if unit not in ("count",) else f"{c.reference:.6g}"
            val = fmt(c.value, unit) if unit not in ("count",) else f"{c.value:.6g}"
            tab.add_row(c.name, ref, val, err, tol, status)
        if tab.row_count:
            con.print(tab)
        st = r.stats
        line = f"[bold]{r.name}[/]: {st['within_tolerance']}/{st['cases']} within tolerance"
        if st.get("expected_misses"):
            n = st["expected_misses"]
            line += f", {n} documented expected miss{'es' if n != 1 else ''}"
        if "mape" in st:
            line += f"; MAPE {100 * st['mape']:.2f}%"
            if "mape" in r.targets:
                line += f" (target <= {100 * r.targets['mape']:g}%)"
        if "spearman" in st and st["cases"] >= 3:
            line += f"; Spearman {st['spearman']:.3f}"
            if "spearman" in r.targets:
                line += f" (target >= {r.targets['spearman']:g})"
        line += _quantity_summary(r)
        if r.passed:
            line += " — [green]PASS[/]"
        elif r.accepted:
            line += " — [yellow]FAIL only on documented expected misses[/] (accepted with --allow-expected-misses)"
        else:
            line += " — [red]FAIL[/]"
        con.print(line)
        for c in r.cases:
            if c.expected_miss and not c.within and verbose:
                con.print(f"  [yellow]expected miss[/] {c.name}: {c.expected_miss}")
        if verbose:
            for key, why in r.target_misses.items():
                if not r.target_checks().get(key, True):
                    con.print(f"  [yellow]expected target miss[/] {key}: {why}")
