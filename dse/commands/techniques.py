"""The technique commands: ``dse rok`` (activation offload), ``dse offload-compare`` (storage offload),
``dse chiplet-scaling`` (chiplet weak scaling), ``dse chiplet-compare`` (2D scheme vs Megatron 1D)."""
# ruff: noqa: UP006, UP035, UP045
# (typer reads the annotations: Optional[...] and List[...] kept as they were in dse/cli.py)

from __future__ import annotations

from typing import List, Literal, Optional

import typer

from dse.commands.options import (
    ActivationIOPath,
    ActivationOffloadMechanism,
    Attention,
    ExchangeDtype,
    OffloadParams,
    Optimizer,
    Precision,
    Recompute,
    _check_plot,
    _console,
    _int_list,
    _print_json,
    activation_offload_fields,
    flag,
    plan_fields,
    show,
)


def rok(
    model: str = flag.model(),
    hw: str = flag.hw(),
    micro_batches: str = typer.Option("1,2,4,8", "--micro-batches",
                                      help="micro-batch sizes to compare, e.g. 4,8,16,32"),
    tp: Optional[int] = flag.tp(),
    pp: Optional[int] = flag.pp(),
    dp: Optional[int] = flag.dp(),
    global_batch: Optional[int] = flag.global_batch(),
    seq_len: Optional[int] = flag.seq_len(),
    attention: Optional[Attention] = flag.attention(),
    sequence_parallel: Optional[bool] = typer.Option(None, "--sequence-parallel/--no-sequence-parallel"),
    zero: Optional[int] = flag.zero(),
    precision: Optional[Precision] = flag.precision(),
    target: Optional[Literal["ssd", "host"]] = typer.Option(
        None, "--target", help="where offload writes: ssd | host (default: ssd when the hardware has drives)"),
    offload_layers: Optional[str] = typer.Option(None, "--offload-layers", help="N | auto (default auto)"),
    ssds: Optional[int] = typer.Option(None, "--ssds", min=1, help="drives used for offload"),
    activation_io_path: Optional[ActivationIOPath] = typer.Option(None, "--activation-io-path", help="gds | bounce"),
    activation_offload_mechanism: Optional[ActivationOffloadMechanism] = typer.Option(
        None, "--activation-offload-mechanism", help="forwarding (SSDTrain, default) | hooks (PyTorch save_on_cpu; "
                                                     "the offload rows go to host memory)"),
    stages: Optional[str] = typer.Option(None, "--stages", help="pipeline stage counts to scan, e.g. 1,2,4 "
                                         "(default: powers of two the system can hold)"),
    set_: List[str] = flag.set(),
    plot: Optional[str] = typer.Option(None, "--plot", help="write the ROK curve as a PNG (needs the plot extra)"),
    json_out: bool = flag.json(),
):
    """Recompute-offload-keep: activation memory and throughput of keep / selective / full recompute / offload
    across micro-batch sizes, and what the freed memory buys (largest micro-batch, fewest pipeline stages)."""
    from dse.estimate.rok import compare

    fields = plan_fields(tp, pp, dp, None, global_batch, seq_len, None, attention, sequence_parallel, zero, precision)
    fields.update(activation_offload_fields(None, offload_layers, ssds, activation_io_path,
                                            activation_offload_mechanism))
    _check_plot(plot)
    result = compare(model, hw, _int_list(micro_batches, "--micro-batches"), overrides=set_, target=target,
                     stages=_int_list(stages, "--stages") if stages else None, **fields)
    show(result, json_out, "dse.report.activation_offload:render_rok", plot, "dse.report.plots:rok_curve")


def offload_compare(
    model: str = typer.Option(..., "--model", "-m", help="catalog name, YAML file, or HF config.json"),
    hw: str = typer.Option("smart-infinity-a5000", "--hw",
                           help="system with computational storage (SmartUpdate runs here)"),
    baseline_hw: Optional[str] = typer.Option(None, "--baseline-hw",
                                              help="system for the ZeRO-Infinity baseline, e.g. the same box with "
                                                   "plain drives (default: --hw, its drives used and priced as plain "
                                                   "NVMe)"),
    ssds: Optional[int] = typer.Option(None, "--ssds", help="drives for the side-by-side table (default: all)"),
    compression: float = typer.Option(0.02, "--compression", help="top-k ratio of the third variant, in (0, 1]"),
    scaling: Optional[str] = typer.Option(None, "--scaling",
                                          help="drive counts to scale over, e.g. 1,2,4,8 (default: 1..all)"),
    micro_batch: Optional[int] = flag.micro_batch(),
    global_batch: Optional[int] = flag.global_batch(),
    seq_len: Optional[int] = flag.seq_len(),
    recompute: Optional[Recompute] = typer.Option(None, "--recompute", help="none | selective | full (default full)"),
    precision: Optional[Precision] = flag.precision(),
    offload_params: Optional[OffloadParams] = typer.Option(None, "--offload-params",
                                                           help="gpu | cpu | cxl | nvme (default cpu)"),
    optimizer: Optional[Optimizer] = flag.optimizer(),
    exchange_dtype: Optional[ExchangeDtype] = typer.Option(None, "--exchange-dtype",
                                                           help="fp32 (paper) | fp16 (released code)"),
    set_: List[str] = flag.set(),
    plot: Optional[str] = typer.Option(None, "--plot", help="write a PNG of the drive scaling (needs the plot extra)"),
    json_out: bool = flag.json(),
):
    """Compare ZeRO-Infinity, SmartUpdate and SmartUpdate + compression side by side, and over drive counts."""
    from dse.errors import InputError
    from dse.estimate.offload_compare import compare

    counts = None
    if scaling:
        try:
            counts = [int(x) for x in scaling.split(",") if x.strip()]
        except ValueError:
            raise InputError(f"--scaling {scaling!r}: expected comma-separated drive counts, e.g. 1,2,4,8") from None
    _check_plot(plot)
    result = compare(model, hw, baseline_hw, drives=ssds, compression=compression, scaling=counts, overrides=set_,
                     micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len,
                     recompute=recompute, precision=precision, offload_params=offload_params, optimizer=optimizer,
                     exchange_dtype=exchange_dtype)
    show(result, json_out, "dse.report.offload:render_compare", plot, "dse.report.plots:offload_scaling")


def chiplet_scaling(
    hw: str = typer.Option("chiplet-train-8x8", "--hw",
                           help="chiplet package of the first point (catalog name or YAML)"),
    model: str = typer.Option("llama2-70b", "--model", "-m", help="model of the first point"),
    to: str = typer.Option("llama3.1-405b", "--to", help="model of the last point"),
    steps: int = typer.Option(2, "--steps", min=0, max=20, help="interpolated models between the two"),
    scheme: List[str] = typer.Option(["megatron-1d", "summa-2d", "hecaton-2d"], "--scheme",
                                     help="schemes to compare (repeatable): megatron-1d, summa-2d, hecaton-2d"),
    seq_len: int = typer.Option(4096, "--seq-len", "-s", min=1, help="tokens per sequence (fixed across points)"),
    micro_batch: int = typer.Option(1, "--micro-batch", "-b", min=1, help="sequences per micro-batch"),
    global_batch: int = typer.Option(16, "--global-batch", "-B", min=1, help="sequences per iteration on one package"),
    recompute: Recompute = typer.Option("full", "--recompute", help="none | selective | full (full: the minibatch "
                                        "schedule's stored activations fit the catalog package's DRAM)"),
    square: bool = typer.Option(False, "--square/--no-square",
                                help="lay later points out as q x q meshes (SUMMA needs them)"),
    set_: List[str] = typer.Option([], "--set", help="override fields: model.X= (both models), hardware.X=, plan.X="),
    json_out: bool = typer.Option(False, "--json", help="print the rows as JSON"),
    plot: Optional[str] = typer.Option(None, "--plot",
                                       help="also write a PNG of ratio and time per token (needs matplotlib)"),
):
    """Weak scaling on a chiplet package: model and die count grow together; FLOP per NoP byte, time per token."""
    from dse import catalog
    from dse.errors import InputError
    from dse.estimate.chiplet_scaling import weak_scaling
    from dse.specs import _schema

    _check_plot(plot)
    groups = {"model": [], "hardware": [], "plan": []}
    for item in set_:
        path, value = _schema.parse_assignment(item)
        head = {"hw": "hardware", "m": "model", "p": "plan"}.get(path[0], path[0])
        if head not in groups:
            raise InputError(f"--set {item}: the path must start with model., hardware. or plan.")
        groups[head].append((path[1:], value))
    from dse.errors import suggest
    from dse.specs.hardware import CHIPLET_PACKAGE
    from dse.specs.plan import CHIPLET_SCHEMES, Plan

    for sch in scheme:
        if sch not in CHIPLET_SCHEMES:
            raise InputError(f"--scheme {sch!r} is not one of {', '.join(CHIPLET_SCHEMES)}"
                             f"{suggest(sch, CHIPLET_SCHEMES)}")
    package = catalog.load_hardware(hw, groups["hardware"])
    if package.kind != CHIPLET_PACKAGE:
        raise InputError(f"--hw {hw}: not a chiplet package but a {package.kind} (see `dse list hardware`: "
                         f"names with 'chiplet')")
    base = catalog.load_model(model, groups["model"])
    target = catalog.load_model(to, groups["model"])
    if base.ffn_type != target.ffn_type or base.head_dim != target.head_dim:
        raise InputError(f"--model {model} and --to {to} must share the FFN type and head dimension to interpolate")
    extra = {}
    for path, value in groups["plan"]:
        _schema.set_path(extra, path, value, Plan, "--set plan.")
    rows = weak_scaling(base, target, package, steps=steps, schemes=tuple(dict.fromkeys(scheme)), seq_len=seq_len,
                        micro_batch=micro_batch, global_batch=global_batch, recompute=recompute, plan_extra=extra,
                        square=square)
    if plot:
        from dse.report.plots import chiplet_scaling as plot_chiplet_scaling

        plot_chiplet_scaling(rows, plot)
    if json_out:
        _print_json(rows)
        return
    from dse.report.chiplet import render_scaling

    con = _console()
    render_scaling(con, rows)
    if plot:
        con.print(f"plot written to {plot}")


def _quantities(text: str | None, kind: str, flag: str) -> list[float] | None:
    from dse.units import parse

    if not text:
        return None
    return [parse(item.strip(), kind, flag) for item in text.split(",") if item.strip()]


def chiplet_compare(
    hw: str = typer.Option("chiplet-train-8x8", "--hw", help="chiplet package (catalog name or YAML)"),
    model: str = typer.Option("llama2-70b", "--model", "-m", help="model"),
    seq_len: int = typer.Option(4096, "--seq-len", "-s", min=1, help="tokens per sequence"),
    micro_batch: int = typer.Option(1, "--micro-batch", "-b", min=1, help="sequences per micro-batch"),
    global_batch: int = typer.Option(16, "--global-batch", "-B", min=1,
                                     help="sequences per iteration on the package (16: dse validate chiplet's "
                                          "headline scenario)"),
    recompute: Recompute = typer.Option("none", "--recompute", help="none | selective | full"),
    sram: Optional[str] = typer.Option("32 MiB,64 MiB,96 MiB,128 MiB,192 MiB,256 MiB,384 MiB", "--sram",
                                       help="SRAM per die to sweep, comma-separated ('' : the package's only)"),
    dram_bandwidth: Optional[str] = typer.Option("409.5 GB/s,819 GB/s,1638 GB/s", "--dram-bandwidth",
                                                 help="DRAM bandwidth per device to sweep ('' : the package's only)"),
    set_: List[str] = typer.Option([], "--set", help="override fields: hardware.X=, model.X= (as dse estimate)"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
    plot: Optional[str] = typer.Option(None, "--plot", help="also write a PNG of the factors against SRAM per die "
                                                            "(needs matplotlib)"),
):
    """The 2D weight-stationary scheme against Megatron 1D on one package: time and energy factors, what drives
    them, and how they move with SRAM per die and DRAM bandwidth."""
    from dse.estimate.chiplet_compare import compare

    _check_plot(plot)
    srams = _quantities(sram, "bytes", "--sram")
    bws = _quantities(dram_bandwidth, "bytes/s", "--dram-bandwidth")
    result = compare(model, hw, srams=srams, dram_bandwidths=bws, overrides=list(set_), global_batch=global_batch,
                     micro_batch=micro_batch, seq_len=seq_len, recompute=recompute)
    show(result, json_out, "dse.report.chiplet:render_compare", plot, "dse.report.plots:chiplet_compare")
