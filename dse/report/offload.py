"""Rich tables for storage offload: the ``offload`` section of an estimate and ``dse offload-compare``."""

from __future__ import annotations

from rich import box
from rich.table import Table

from dse.units import fmt

LINK_NAMES = {"gpu_host": "GPU <-> host (PCIe, per GPU)", "host_switch": "host <-> switch (shared uplink)",
              "switch_drives": "switch <-> drives (all drives)",
              "csd_internal": "inside the CSDs (drive <-> FPGA; bytes of all, busy per CSD)",
              "host_cxl": "host <-> CXL memory (all expanders)"}
CLASS_NAMES = {"params_grads": "params + gradients", "optimizer_states": "optimizer states",
               "activation_checkpoints": "activation checkpoints"}


def _bw(x) -> str:
    return "-" if x is None else fmt(x, "bytes/s")


def _params(plan: dict) -> str:
    """What the parameter tier holds: 16-bit weights, or QLoRA's quantized frozen ones."""
    if plan.get("finetune") == "qlora":
        return f"{plan.get('quantization') or 'nf4'} frozen weights"
    if plan.get("finetune") == "lora":
        return "16-bit frozen weights"
    return "16-bit params"


def render(con, r: dict) -> None:
    """The ``offload`` section of ``dse estimate``."""
    o = r["offload"]
    total = r["time"]["iteration"]
    what_if = o["drives"] != o["drives_in_hardware"]
    extra = f" (the hardware has {o['drives_in_hardware']}: a what-if)" if what_if else ""
    con.print(f"[bold]Offload[/]: {o['mode']}; optimizer states on {o['optimizer_tier']}, {_params(r['plan'])} on "
              f"{o['params_tier']}, {int(o['drives'])} drive(s){extra}")
    tab = Table(title="Links per iteration", box=box.SIMPLE_HEAVY, title_justify="left")
    for col, j in (("link", "left"), ("toward storage", "right"), ("toward GPU", "right"), ("bandwidth", "right"),
                   ("busy", "right"), ("of iteration", "right")):
        tab.add_column(col, justify=j)
    for name, link in o["links"].items():
        down = link.get("bytes_down", link.get("bytes_from_gpu", link.get("bytes_written")))
        up = link.get("bytes_up", link.get("bytes_to_gpu", link.get("bytes_read")))
        bw = link.get("bandwidth", link.get("bandwidth_write"))
        busiest = name == o["bottleneck_link"] or (name == "switch_drives" and o["bottleneck_link"] == "drives")
        style = "bold red" if busiest else None
        tab.add_row(LINK_NAMES.get(name, name), fmt(down, "bytes"), fmt(up, "bytes"), _bw(bw), fmt(link["busy_s"], "s"),
                    f"{100 * link['busy_s'] / total:.0f}%", style=style)
    con.print(tab)
    con.print(f"bottleneck link: [bold]{o['bottleneck_link']}[/]")
    acc = o.get("accelerator")
    if acc:
        con.print(f"CSD accelerator: {fmt(acc['share_params'], 'count')} parameters per CSD, transfer-handler buffers "
                  f"{fmt(acc['buffer_bytes'], 'bytes')} of {fmt(acc['dram_capacity'], 'bytes')} DRAM, "
                  f"kernel {fmt(acc['kernel_s'], 's')}")
    en = r.get("endurance")
    if en and "activation_offload" not in r:   # with activation offload its table shows the (shared) drives' wear
        src = ", ".join(f"{k.replace('_', ' ')} {fmt(v, 'bytes')}"
                        for k, v in en["bytes_written_per_iteration_by_source"].items() if v)
        con.print(f"drive writes per iteration: {fmt(en['bytes_written_per_iteration_per_drive'], 'bytes')} per drive "
                  f"({fmt(en['write_rate_per_drive'], 'bytes/s')}); node: {src}")
        con.print(f"drive lifetime: {en['drive']} rated {fmt(en['rated_endurance_per_drive'], 'bytes')} (TBW), "
                  f"reached after [bold]{en['lifetime_years']:.2f} years[/] of training")
    req = Table(title="Bandwidth each tensor class needs (ZeRO-Infinity: eff = ait*bw / (ait*bw + peak))",
                box=box.SIMPLE_HEAVY, title_justify="left")
    for col in ("tensor class", "FLOP/byte", "for 50%", "for 90%", "available here", "efficiency"):
        req.add_column(col, justify="left" if col == "tensor class" else "right")
    for name, row in o["required_bandwidth"].items():
        eff = row["efficiency"]
        req.add_row(CLASS_NAMES.get(name, name), f"{row['ait']:,.0f}", _bw(row["for_50pct"]), _bw(row["for_90pct"]),
                    _bw(row["available"]), "-" if eff is None else fmt(eff, "fraction"))
    con.print(req)


def render_compare(con, result: dict) -> None:
    """``dse offload-compare``: variants side by side, then scaling over the number of drives."""
    con.print(f"[bold]{result['model']}[/] ({fmt(result['params'], 'count')} parameters) — "
              f"{result['drives']} drives; baseline on [bold]{result['baseline_hw']}[/], SmartUpdate on "
              f"[bold]{result['hw']}[/]")
    variants = result["variants"]
    tab = Table(title="One iteration", box=box.SIMPLE_HEAVY, title_justify="left")
    tab.add_column("")
    for v in variants:
        tab.add_column(v["label"], justify="right")
    rows = [
        ("forward", lambda v: fmt(v["time"]["phase_forward"], "s")),
        ("backward + gradient offload", lambda v: fmt(v["time"]["phase_backward"], "s")),
        ("update + state I/O", lambda v: fmt(v["time"]["phase_update"], "s")),
        ("iteration", lambda v: fmt(v["time"]["iteration"], "s")),
        ("speedup over baseline", lambda v: f"{v['speedup']:.2f}x"),
        ("tokens/s", lambda v: f"{v['tokens_per_s']:,.0f}"),
        ("GPU <-> host bytes", lambda v: fmt(v["traffic"]["gpu_host"], "bytes")),
        ("shared uplink bytes", lambda v: fmt(v["traffic"]["host_switch"], "bytes")),
        ("  per parameter", lambda v: f"{v['traffic']['host_switch'] / result['params']:.2f} B"),
        ("drive bytes (all drives)", lambda v: fmt(v["traffic"]["switch_drives"], "bytes")),
        ("inside the CSDs", lambda v: fmt(v["traffic"].get("csd_internal", 0.0), "bytes")),
        ("bottleneck link", lambda v: str(v["bottleneck_link"])),
        ("capital cost", lambda v: fmt(v["cost"]["capital_usd"], "USD")),
        ("tokens/s per k$", lambda v: f"{v['cost']['tokens_per_s_per_kusd']:.3g}"),
        ("throughput per $ vs baseline", lambda v: f"{v['per_dollar_vs_baseline']:.2f}x"),
        ("feasible", lambda v: "yes" if v["feasible"] else "no: " + "; ".join(v["violations"])),
    ]
    for label, f in rows:
        tab.add_row(label, *[f(v) for v in variants])
    con.print(tab)
    sc = result["scaling"]
    st = Table(title="Scaling with the number of drives (iteration time; speedup over the baseline at the same count)",
               box=box.SIMPLE_HEAVY, title_justify="left")
    st.add_column("drives", justify="right")
    for label in sc["labels"]:
        st.add_column(label, justify="right")
    for label in sc["labels"][1:]:
        st.add_column(f"speedup {label}", justify="right")
    for k, n in enumerate(sc["drives"]):
        times = [sc["iteration"][label][k] for label in sc["labels"]]
        base = times[0]
        st.add_row(str(n), *[fmt(x, "s") for x in times], *[f"{base / x:.2f}x" for x in times[1:]])
    con.print(st)
    if result.get("plot"):
        con.print(f"plot written to {result['plot']}")
