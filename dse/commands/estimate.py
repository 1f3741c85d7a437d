"""``dse estimate``: one training scenario (time, memory per tier, traffic, bottleneck; ``--explain``)."""
# ruff: noqa: UP006, UP035, UP045
# (typer reads the annotations: Optional[...] and List[...] kept as they were in dse/cli.py)

from __future__ import annotations

import sys
from typing import List, Optional, Tuple

import typer

from dse.commands.options import (
    ActivationIOPath,
    ActivationOffloadMechanism,
    Attention,
    ChipletScheme,
    CpComm,
    ExchangeDtype,
    Finetune,
    Fp8Scaling,
    LoraTargets,
    MoeDispatcher,
    OffloadActivations,
    OffloadOptimizer,
    OffloadParams,
    Optimizer,
    Precision,
    Quantization,
    Recompute,
    Stack,
    _console,
    _print_json,
    activation_offload_fields,
    finetune_fields,
    flag,
    offload_fields,
    plan_fields,
)


def estimate(
    ctx: typer.Context,
    model: str = flag.model(),
    hw: str = flag.hw(),
    tp: Optional[int] = flag.tp(),
    pp: Optional[int] = flag.pp(),
    dp: Optional[int] = flag.dp(),
    cp: Optional[int] = flag.cp(),
    cp_comm: Optional[CpComm] = flag.cp_comm(),
    cp_a2a: Optional[int] = flag.cp_a2a(),
    ep: Optional[int] = typer.Option(None, "--ep", min=1, help="expert-parallel degree of an MoE model (divides "
                                     "the experts; ep x etp divides tp x cp x dp; default 1)"),
    etp: Optional[int] = typer.Option(None, "--etp", min=1, help="expert tensor-parallel degree of an MoE model "
                                      "(Megatron --expert-tensor-parallel-size; default: --tp); docs/moe.md"),
    moe_dispatcher: Optional[MoeDispatcher] = typer.Option(None, "--moe-dispatcher", help="token dispatcher of "
                                                            "expert parallelism: alltoall (NCCL) | flex (DeepEP: "
                                                            "once per node over RDMA, then NVLink); default: "
                                                            "alltoall in one node, flex across nodes; docs/moe.md"),
    pp_layout: Optional[str] = flag.pp_layout(),
    micro_batch: Optional[int] = flag.micro_batch(),
    global_batch: Optional[int] = flag.global_batch(),
    seq_len: Optional[int] = flag.seq_len(),
    target_len: Optional[int] = typer.Option(None, "--target-len", min=1, help="decoder tokens per sequence of an "
                                             "encoder-decoder model (T5; --seq-len is its input length)"),
    recompute: Optional[Recompute] = typer.Option(None, "--recompute", help="none | selective | full"),
    attention: Optional[Attention] = flag.attention(),
    stack: Optional[Stack] = typer.Option(None, "--stack", help="software stack: megatron (fused kernels) | pytorch "
                                          "(eager, as Hugging Face Transformers) | compiled (torch.compile)"),
    sequence_parallel: Optional[bool] = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                                     help="Megatron sequence parallelism"),
    zero: Optional[int] = flag.zero(),
    precision: Optional[Precision] = flag.precision(),
    offload_optimizer: Optional[OffloadOptimizer] = typer.Option(
        None, "--offload-optimizer",
        help="optimizer states: gpu | cpu | cxl (CXL memory) | nvme (ZeRO-Infinity) | csd (update on the drives)"),
    offload_params: Optional[OffloadParams] = typer.Option(None, "--offload-params",
                                                           help="fp16 parameters: gpu | cpu | cxl | nvme"),
    gradient_compression: Optional[float] = typer.Option(
        None, "--gradient-compression",
        help="gradient bytes sent / dense, in (0, 1] (csd only; 0.02 = top-1% with indices)"),
    ssds: Optional[int] = typer.Option(None, "--ssds", min=1,
                                       help="drives used for offload (default: all of the hardware's)"),
    optimizer: Optional[Optimizer] = flag.optimizer(),
    exchange_dtype: Optional[ExchangeDtype] = typer.Option(
        None, "--exchange-dtype",
        help="gradients/params exchanged with the drives' accelerators: fp32 (paper) | fp16 (released code)"),
    offload_activations: Optional[OffloadActivations] = typer.Option(
        None, "--offload-activations", help="none | ssd (SSDTrain: to the drives) | host (pinned host memory)"),
    offload_layers: Optional[str] = typer.Option(
        None, "--offload-layers", help="N | auto: leading layers per stage to offload (auto: what hides, capped by "
                                       "SSDTrain's rule; on a full GPU the fewest that fit)"),
    activation_io_path: Optional[ActivationIOPath] = typer.Option(
        None, "--activation-io-path", help="gds (GPUDirect Storage, default) | bounce (through host memory)"),
    activation_offload_mechanism: Optional[ActivationOffloadMechanism] = typer.Option(
        None, "--activation-offload-mechanism", help="forwarding (SSDTrain's tensor cache, default) | hooks (PyTorch "
                                                     "save_on_cpu: every saved tensor copied on the compute stream; "
                                                     "needs --offload-activations host)"),
    finetune: Optional[Finetune] = typer.Option(
        None, "--finetune", help="full (every weight trained) | lora (frozen weights, low-rank adapters) | qlora "
                                 "(lora on quantized frozen weights)"),
    lora_rank: Optional[int] = typer.Option(None, "--lora-rank", min=1, help="LoRA rank r (default 16)"),
    lora_targets: Optional[LoraTargets] = typer.Option(
        None, "--lora-targets", help="linear layers with adapters: all (default) | attention | qv | mlp"),
    quantization: Optional[Quantization] = typer.Option(
        None, "--quantization", help="qlora's frozen linear weights: nf4 (default, double-quantized) | int8"),
    lora_dropout: Optional[float] = typer.Option(
        None, "--lora-dropout", help="PEFT's lora_dropout in [0, 1): each adapter keeps a dropped copy of its input "
                                     "and the mask (default 0)"),
    paged_optimizer: Optional[bool] = typer.Option(
        None, "--paged-optimizer/--no-paged-optimizer", help="bitsandbytes' paged optimizer: states evicted to CPU "
                                                             "memory when the GPU runs short (docs/finetune.md)"),
    fp8_scaling: Optional[Fp8Scaling] = typer.Option(
        None, "--fp8-scaling", help="--precision fp8's scaling: delayed (default: amax history, casts fused into "
                                    "norms and activation) | current (each tensor's own amax: one more pass per cast)"),
    grad_accumulation_fusion: Optional[bool] = typer.Option(
        None, "--grad-accumulation-fusion/--no-grad-accumulation-fusion", help="megatron stack: the weight-gradient "
        "GEMMs accumulate into the main gradients (default); --no-...: one add per parameter tensor and micro-batch "
        "(Megatron-LM --no-gradient-accumulation-fusion, or the 2021 code)"),
    set_: List[str] = flag.set(),
    json_out: bool = flag.json(),
    explain: bool = typer.Option(False, "--explain", help="print every term with its formula, inputs and value"),
    chiplet_scheme: Optional[ChipletScheme] = typer.Option(
        None, "--chiplet-scheme", help="chiplet packages: megatron-1d | summa-2d | hecaton-2d"),
    mesh: Optional[str] = typer.Option(None, "--mesh",
                                       help="chiplet packages: RxC layout of the dies, e.g. 4x16 (same die count)"),
    from_: Optional[Tuple[str, str]] = typer.Option(
        (None, None), "--from", metavar="FRAMEWORK SOURCE",
        help="read a framework config onto the plan: megatron \"ARGS\" (or a launch script) | deepspeed "
             "ds_config.json | torchtitan job.toml; explicit flags win (docs/frameworks.md)"),
    emit: Optional[str] = typer.Option(
        None, "--emit", help="print the plan as megatron launch arguments | deepspeed ds_config.json | torchtitan "
                             "TOML instead of the tables (with --json: under 'emit')"),
    html: Optional[str] = typer.Option(None, "--html", help="also write a self-contained HTML page: time and "
                                       "memory breakdowns, hover for values (docs/estimate.md)"),
):
    """Estimate one training scenario: time, memory per tier, traffic, bottleneck."""
    from dse.errors import InputError
    from dse.estimate import filled_defaults, input_warnings, load, make_plan, run
    from dse.validate.regimes import checked_against

    if html:
        from dse.report.page import check_path

        check_path(html)                 # one line naming --html before any work
    fields = plan_fields(tp, pp, dp, micro_batch, global_batch, seq_len, recompute, attention, sequence_parallel,
                         zero, precision)
    fields.update({k: v for k, v in (("chiplet_scheme", chiplet_scheme), ("chiplet_mesh", mesh), ("stack", stack),
                                     ("cp", cp), ("cp_comm", cp_comm), ("cp_a2a", cp_a2a),
                                     ("target_len", target_len), ("pipeline_layout", pp_layout))
                   if v is not None})
    fields.update(offload_fields(offload_optimizer, offload_params, gradient_compression, ssds, optimizer,
                                 exchange_dtype))
    fields.update(activation_offload_fields(offload_activations, offload_layers, None, activation_io_path,
                                            activation_offload_mechanism))
    fields.update(finetune_fields(finetune, lora_rank, lora_targets, quantization, paged_optimizer, lora_dropout))
    if fp8_scaling is not None:
        fields["fp8_scaling"] = fp8_scaling
    if grad_accumulation_fusion is not None:
        fields["grad_accumulation_fusion"] = grad_accumulation_fusion
    fields.update({k: v for k, v in (("ep", ep), ("etp", etp), ("moe_dispatcher", moe_dispatcher)) if v is not None})
    imported = None
    if from_ and from_[0] is not None:
        from dse.frameworks.apply import apply, read

        source = ctx.get_parameter_source("model")      # typer may vendor click: compare the enum by name
        given = getattr(source, "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")
        m, s, p, imported = apply(read(*from_), model=model, model_given=given, hw=hw, overrides=set_,
                                  explicit=fields)
        data = {**fields, **dict.fromkeys(imported["plan"]), "dp": p.dp}   # dp: the import fills it (its notes)
    else:
        m, s, data = load(model, hw, None, set_, **fields)
        p = make_plan(m, s, data)
    if fp8_scaling is not None and p.precision != "fp8":   # a scaling recipe of bf16 GEMMs changes nothing
        raise InputError(f"--fp8-scaling {fp8_scaling} needs --precision fp8 (got --precision {p.precision}); "
                         "allowed: drop --fp8-scaling, or --precision fp8")
    emitted = None
    if emit is not None:
        from dse.frameworks.emit import emit as emit_config, show

        emitted = emit_config(emit, m, s, p)
        if not json_out:
            if imported is not None:         # what was read, on stderr: stdout holds the config alone
                from rich.console import Console

                from dse.frameworks.apply import render

                render(Console(stderr=True), imported)
            if html:
                _write_html(html, run(m, s, p))
            show(emitted)
            return
    trace = None
    if explain:
        from dse.estimate.trace import Trace

        trace = Trace()
    result = run(m, s, p, trace=trace)
    if p.precision == "fp8":            # the same plan in bf16: the report's speedup and why it is below 2x
        from dse.estimate.fp8 import compare

        compare(result, m, s, p)
    if trace is not None:
        from dse.estimate.trace import composition_rows

        trace.rows.extend(composition_rows(result))
    result["defaults"] = filled_defaults(m, s, p, data)
    result["warnings"] = input_warnings(m, p, s)
    result["checked_against"] = checked_against(m, s, p)
    if html:
        _write_html(html, result)
    if json_out:
        for w in result["warnings"]:    # seen beside the JSON too (the console prints them under the header)
            sys.stderr.write(f"dse: warning: {w}\n")
        if trace is not None:
            result["explain"] = trace.rows
        if imported is not None:
            result["imported"] = imported
        if emitted is not None:
            result["emit"] = emitted
        _print_json(result)
        return
    from dse.report.console import render_estimate, render_explain

    con = _console()
    if imported is not None:
        from dse.frameworks.apply import render

        render(con, imported)
    render_estimate(con, result)
    if trace is not None:
        render_explain(con, trace.rows)


def _write_html(path: str, result: dict) -> None:
    """``--html FILE``: the page of :mod:`dse.report.page`; its path on stderr (stdout may hold JSON or a config)."""
    import shlex

    from dse.report.page import write_estimate

    write_estimate(path, result, shlex.join(["dse", *sys.argv[1:]]))
    sys.stderr.write(f"dse: HTML report written to {path}\n")
