"""Rich tables for activation offloading: the ``dse estimate`` section and ``dse rok``."""

from __future__ import annotations

from rich import box
from rich.table import Table

from dse.units import fmt


def _ok(have, need) -> str:
    return "[green]yes[/]" if have >= need else "[red]no[/]"


def _render_hooks(con, ao: dict) -> None:
    """The ``activation_offload`` section of the saved-tensor hooks mechanism (save_on_cpu)."""
    tab = Table(title="Activation offload to pinned host memory through saved-tensor hooks (save_on_cpu) — per GPU, "
                      "most loaded stage", box=box.SIMPLE_HEAVY, title_justify="left", show_header=False)
    tab.add_column("quantity")
    tab.add_column("value", justify="right")
    how = "auto: every layer" if ao["rule"] == "all" else "--offload-layers"
    fit = ao["layers_to_fit"]
    if fit:
        how += ", no count fits" if fit > ao["layers_per_stage"] else f", {fit:g} would fit"
    tab.add_row("layers offloaded / kept (per stage)", f"{ao['layers_offloaded']:g} / {ao['layers_kept']:g} ({how})")
    tab.add_row("saved per layer / copied per layer (every save, weights)",
                f"{fmt(ao['saved_bytes_per_layer'], 'bytes')} / {fmt(ao['copied_bytes_per_layer'], 'bytes')}")
    tab.add_row("copied out per iteration (and back)", fmt(ao["bytes_offloaded_per_iteration"], "bytes"))
    tab.add_row("pinned bandwidth: to host / to GPU",
                f"{fmt(ao['write_bandwidth_available'], 'bytes/s')} / {fmt(ao['read_bandwidth_available'], 'bytes/s')}")
    tab.add_row("copies per micro-batch on the compute stream: out / in",
                f"{fmt(ao['copy_out_s_per_microbatch'], 's')} / {fmt(ao['copy_in_s_per_microbatch'], 's')}")
    tab.add_row("exposed I/O per iteration (nothing hides)", fmt(ao["exposed_io_s"], "s"))
    tab.add_row("GPU activations: without -> with offload",
                f"{fmt(ao['gpu_activations_without_offload'], 'bytes')} -> {fmt(ao['gpu_activations'], 'bytes')} "
                f"(-{100 * ao['activation_peak_reduction']:.0f}%)")
    tab.add_row("largest micro-batch: without -> with",
                f"{ao['max_micro_batch_without_offload']:g} -> {ao['max_micro_batch']:g}")
    tab.add_row("pinned host DRAM (in-flight): per GPU / node",
                f"{fmt(ao['capacity_needed_per_gpu'], 'bytes')} / {fmt(ao['capacity_needed_per_node'], 'bytes')}")
    con.print(tab)


def render(con, r: dict) -> None:
    """The ``activation_offload`` (and ``endurance``) sections of an estimate."""
    ao = r["activation_offload"]
    if ao.get("mechanism") == "hooks":
        _render_hooks(con, ao)
        return
    target = "SSD (GPUDirect Storage)" if ao["path"] == "gds" else (
        "SSD via host memory" if ao["path"] == "bounce" else "pinned host memory")
    tab = Table(title=f"Activation offload to {target} — per GPU, most loaded stage", box=box.SIMPLE_HEAVY,
                title_justify="left", show_header=False)
    tab.add_column("quantity")
    tab.add_column("value", justify="right")
    if ao["rule"] == "adaptive":
        how = (f"auto: I/O hides for {ao['layers_io_hides']:g}, SSDTrain's rule {ao['layers_by_ssdtrain_rule']:g}"
               + ("" if not ao["layers_to_fit"] else ", no count fits" if ao["layers_to_fit"] > ao["layers_per_stage"]
                  else f", {ao['layers_to_fit']:g} to fit"))
    else:
        how = "--offload-layers"
    tab.add_row("layers offloaded / kept (per stage)", f"{ao['layers_offloaded']:g} / {ao['layers_kept']:g} ({how})")
    tab.add_row("saved per layer (offloaded: >= 8 Mi elements)",
                f"{fmt(ao['saved_bytes_per_layer'], 'bytes')} ({fmt(ao['offloaded_bytes_per_layer'], 'bytes')})")
    tab.add_row("written per iteration (and read back)", fmt(ao["bytes_offloaded_per_iteration"], "bytes"))
    if ao["bytes_forwarded_per_microbatch"]:
        tab.add_row("forwarded per micro-batch (kept, not read)",
                    fmt(ao["bytes_forwarded_per_microbatch"], "bytes"))
    tab.add_row("write BW: need per layer / rule for all / have",
                f"{fmt(ao['write_bandwidth_required_per_layer'], 'bytes/s')} / "
                f"{fmt(ao['write_bandwidth_to_offload_all_layers'], 'bytes/s')} / "
                f"{fmt(ao['write_bandwidth_available'], 'bytes/s')}")
    tab.add_row("read BW: need per layer / have (hides?)",
                f"{fmt(ao['read_bandwidth_required_per_layer'], 'bytes/s')} / "
                f"{fmt(ao['read_bandwidth_available'], 'bytes/s')} "
                f"({_ok(ao['read_bandwidth_available'], ao['read_bandwidth_required_per_layer'])})")
    tab.add_row("exposed I/O per iteration", fmt(ao["exposed_io_s"], "s"))
    tab.add_row("GPU activations: without -> with offload",
                f"{fmt(ao['gpu_activations_without_offload'], 'bytes')} -> {fmt(ao['gpu_activations'], 'bytes')} "
                f"(-{100 * ao['activation_peak_reduction']:.0f}%)")
    if ao["write_backlog_bytes"]:
        tab.add_row("  of which write backlog after forward", fmt(ao["write_backlog_bytes"], "bytes"))
    tab.add_row("largest micro-batch: without -> with",
                f"{ao['max_micro_batch_without_offload']:g} -> {ao['max_micro_batch']:g}")
    where = "drive" if ao["target"] == "ssd" else "host DRAM"
    tab.add_row(f"{where} space (in-flight): per GPU / node",
                f"{fmt(ao['capacity_needed_per_gpu'], 'bytes')} / {fmt(ao['capacity_needed_per_node'], 'bytes')}")
    if ao["target"] == "ssd":
        tab.add_row("drives per GPU (slowest array)", f"{ao['drives_per_gpu']:g}")
    en = r.get("endurance")
    if en:
        tab.add_row("drive writes: per iteration (node) / rate",
                    f"{fmt(en['bytes_written_per_iteration'], 'bytes')} / {fmt(en['write_rate_per_drive'], 'bytes/s')}")
        tab.add_row(f"{en['drive']} TBW / years to reach it",
                    f"{fmt(en['rated_endurance_per_drive'], 'bytes')} / {en['lifetime_years']:.2f} years")
    con.print(tab)


def render_rok(con, res: dict) -> None:
    """``dse rok``: the recompute-offload-keep comparison across micro-batches, then what memory buys."""
    cap = fmt(res["rows"][0]["gpu_capacity"], "bytes") if res["rows"] else "-"
    tab = Table(title=f"Recompute-offload-keep: {res['model']} on {res['hardware']} (per GPU, {cap} each, red: "
                      f"does not fit; offload to {res['target']}"
                      f"{' through saved-tensor hooks' if res.get('mechanism') == 'hooks' else ''})",
                box=box.SIMPLE_HEAVY, title_justify="left", pad_edge=False)
    for col, j in (("b", "right"), ("strategy", "left"), ("activations", "right"), ("total", "right"),
                   ("iteration", "right"), ("tok/s", "right"), ("I/O wait", "right"), ("offl", "right")):
        tab.add_column(col, justify=j, no_wrap=True)
    for row in res["rows"]:
        total = fmt(row["gpu_total"], "bytes")
        tab.add_row(str(row["micro_batch"]), row["strategy"], fmt(row["gpu_activations"], "bytes"),
                    f"[green]{total}[/]" if row["fits"] else f"[red]{total}[/]", fmt(row["iteration_s"], "s"),
                    f"{row['tokens_per_s']:,.0f}", fmt(row["exposed_io_s"], "s") if row["exposed_io_s"] else "-",
                    f"{row['layers_offloaded']:g}" if row["strategy"] == "offload" else "-")
    con.print(tab)
    best = Table(title="What the memory buys: the largest micro-batch that fits, and its throughput",
                 box=box.SIMPLE_HEAVY, title_justify="left")
    for col in ("strategy", "largest micro-batch", "tokens/s there", "vs keep's best"):
        best.add_column(col, justify="left" if col == "strategy" else "right")
    for s in res["best"]:
        best.add_row(s["strategy"], str(s["micro_batch"]) if s["micro_batch"] else "none fits",
                     f"{s['tokens_per_s']:,.0f}" if s["micro_batch"] else "-",
                     f"{100 * s['speedup_vs_keep'] - 100:+.1f}%" if s.get("speedup_vs_keep") else "-")
    con.print(best)
    if res.get("stages"):
        st = Table(title=f"Fewest pipeline stages that fit (micro-batch {res['stages_micro_batch']}, "
                         f"global batch {res['stages_global_batch']})", box=box.SIMPLE_HEAVY, title_justify="left")
        for col in ("strategy", "stages", "bubble", "iteration", "tokens/s"):
            st.add_column(col, justify="left" if col == "strategy" else "right")
        for s in res["stages"]:
            fits = s["pp"] is not None
            st.add_row(s["strategy"], str(s["pp"]) if fits else "none of those tried",
                       f"{100 * s['bubble_fraction']:.1f}%" if fits else "-",
                       fmt(s["iteration_s"], "s") if fits else "-", f"{s['tokens_per_s']:,.0f}" if fits else "-")
        con.print(st)
    if res.get("plot"):
        con.print(f"plot written to {res['plot']}")
