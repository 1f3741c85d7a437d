"""What the commands share: the choice types of their flags, flag values -> plan fields, output helpers."""
# ruff: noqa: UP006, UP035, UP045
# (typer reads the annotations: Optional[...] and List[...] kept as they were in dse/cli.py)

from __future__ import annotations

import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Literal

import typer

Recompute = Literal["none", "selective", "full"]
Attention = Literal["flash", "math"]
CpComm = Literal["p2p", "a2a", "a2a+p2p", "allgather"]
MoeDispatcher = Literal["alltoall", "flex"]
Stack = Literal["megatron", "pytorch", "compiled"]
Precision = Literal["bf16", "fp16", "bf16-pure", "fp8"]
ChipletScheme = Literal["megatron-1d", "summa-2d", "hecaton-2d"]
OffloadOptimizer = Literal["gpu", "cpu", "cxl", "nvme", "csd"]
OffloadParams = Literal["gpu", "cpu", "cxl", "nvme"]
Optimizer = Literal["adam", "adam-8bit", "sgd-momentum", "adagrad"]
ExchangeDtype = Literal["fp32", "fp16"]
OffloadActivations = Literal["none", "ssd", "host"]
ActivationIOPath = Literal["gds", "bounce"]
ActivationOffloadMechanism = Literal["forwarding", "hooks"]
Finetune = Literal["full", "lora", "qlora"]
LoraTargets = Literal["all", "attention", "qv", "mlp"]
Quantization = Literal["nf4", "int8"]
Fp8Scaling = Literal["delayed", "current"]


# ----------------------------------------------------------------------------- flags several commands declare
# Each is declared once, with its default and help; a command's parameter calls it (``tp: Optional[int] =
# flag.tp()``),
# so that every command that has the flag shows it alike. Flags whose default or help differs per command stay
# in that command.


def _flag(default: Any, *names: str, **kwargs: Any) -> Callable[[], Any]:
    """A typer option made afresh for each command that declares it (a list default is never shared)."""
    return lambda: typer.Option([] if default == [] else default, *names, **kwargs)


flag = SimpleNamespace(
    model=_flag("llama2-7b", "--model", "-m", help="catalog name, YAML file, HF config.json, a directory holding "
                "one, a shipped Hugging Face model (org/name or name: `dse list`), or org/name from the local "
                "Hugging Face cache"),
    hw=_flag("dgx-a100-80gb", "--hw", help="hardware system: catalog name or YAML file"),
    tp=_flag(None, "--tp", min=1, help="tensor-parallel degree"),
    pp=_flag(None, "--pp", min=1, help="pipeline stages"),
    dp=_flag(None, "--dp", min=1, help="data-parallel replicas"),
    pp_layout=_flag(None, "--pp-layout", help="custom pipeline stage layout, Megatron-LM's "
                    "--pipeline-model-parallel-layout string, e.g. 'Et*4|(t*4|)*14tmL' (E embedding, t layer, m MTP "
                    "depth, L loss; stages split by |); default: layers split evenly (docs/estimate.md)"),
    cp=_flag(None, "--cp", min=1, help="context-parallel degree: the sequence split over cp GPUs, ring attention "
             "(docs/long-context.md)"),
    cp_comm=_flag(None, "--cp-comm", help="context-parallel communication: p2p (the K/V ring, default) | a2a "
                  "(DeepSpeed-Ulysses all-to-all over the heads) | a2a+p2p (hierarchical: a2a in --cp-a2a ranks, "
                  "the ring across) | allgather (the whole K/V gathered); docs/long-context.md"),
    cp_a2a=_flag(None, "--cp-a2a", min=1, help="--cp-comm a2a+p2p: ranks of the a2a level (Megatron "
                 "--hierarchical-context-parallel-sizes A cp/A); default: the cp ranks in one node"),
    micro_batch=_flag(None, "--micro-batch", "-b", min=1, help="sequences per micro-batch"),
    global_batch=_flag(None, "--global-batch", "-B", min=1, help="sequences per iteration"),
    seq_len=_flag(None, "--seq-len", "-s", min=1, help="tokens per sequence"),
    attention=_flag(None, "--attention", help="flash | math (default flash; math for an ALiBi model: BLOOM)"),
    zero=_flag(None, "--zero", min=0, max=3, help="ZeRO stage 0-3"),
    precision=_flag(None, "--precision", help="bf16 | fp16 | bf16-pure | fp8 (FP8 linear GEMMs, Transformer Engine)"),
    optimizer=_flag(None, "--optimizer", help="adam | adam-8bit (bitsandbytes, block-wise 8-bit states) | "
                    "sgd-momentum | adagrad"),
    set=_flag([], "--set", help="override any field: model.X=, hardware.X=, plan.X= (repeatable)"),
    json=_flag(False, "--json", help="print one JSON object"),
)


def _console():
    from rich.console import Console

    return Console()


def _print_json(obj) -> None:
    from dse.report.jsonout import dumps

    sys.stdout.write(dumps(obj) + "\n")


def plan_fields(tp, pp, dp, micro_batch, global_batch, seq_len, recompute, attention, sequence_parallel, zero,
                precision) -> dict:
    """Plan fields given on the command line (unset flags keep the plan defaults)."""
    fields = dict(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len,
                  recompute=recompute, attention=attention, sequence_parallel=sequence_parallel, zero=zero,
                  precision=precision)
    return {k: v for k, v in fields.items() if v is not None}


def finetune_fields(finetune, lora_rank, lora_targets, quantization, paged_optimizer=None, lora_dropout=None) -> dict:
    """Fine-tuning plan fields given on the command line (unset flags keep the plan defaults)."""
    fields = dict(finetune=finetune, lora_rank=lora_rank, lora_targets=lora_targets, quantization=quantization,
                  paged_optimizer=paged_optimizer, lora_dropout=lora_dropout)
    return {k: v for k, v in fields.items() if v is not None}


def activation_offload_fields(offload_activations, offload_layers, ssds, activation_io_path,
                              activation_offload_mechanism=None) -> dict:
    """Activation-offload plan fields from the command line (``--offload-layers auto`` = the adaptive rule)."""
    from dse.errors import InputError

    layers = None
    if offload_layers is not None and offload_layers.strip().lower() != "auto":
        try:
            layers = int(offload_layers)
        except ValueError:
            raise InputError(f"--offload-layers {offload_layers!r}: expected a number of layers (0 or more) "
                             "or auto") from None
        if layers < 0:
            raise InputError(f"--offload-layers {layers}: must be 0 or more, or auto")
    fields = dict(offload_activations=offload_activations, offload_layers=layers, ssds=ssds,
                  activation_io_path=activation_io_path, activation_offload_mechanism=activation_offload_mechanism)
    return {k: v for k, v in fields.items() if v is not None}


def offload_fields(offload_optimizer, offload_params, gradient_compression, ssds, optimizer, exchange_dtype) -> dict:
    """Storage-offload plan fields given on the command line (see dse/specs/plan.py)."""
    fields = dict(offload_optimizer=offload_optimizer, offload_params=offload_params,
                  gradient_compression=gradient_compression, ssds=ssds, optimizer=optimizer,
                  exchange_dtype=exchange_dtype)
    return {k: v for k, v in fields.items() if v is not None}


def show(result: dict, json_out: bool, render: str, plot: str | None = None, plotter: str = "") -> None:
    """A technique command's output: with ``plot``, the figure first (``plotter`` "module:function" writes it;
    its path goes in ``result["plot"]``); then ``result`` as JSON, or as the tables ``render`` ("module:function")
    prints. The report and plot modules are imported only here (``dse estimate`` starts without them)."""
    import importlib

    def named(ref: str) -> Any:
        module, function = ref.split(":")
        return getattr(importlib.import_module(module), function)

    if plot:
        result["plot"] = named(plotter)(result, plot)
    if json_out:
        _print_json(result)
        return
    named(render)(_console(), result)


def _check_plot(path: str | None) -> None:
    """``--plot`` without matplotlib fails in one line before any work (the figures: :mod:`dse.report.plots`)."""
    if path:
        from dse.report.plots import check

        check(path)


def _int_list(text: str, flag: str) -> list[int]:
    from dse.errors import InputError

    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected positive integers separated by commas, e.g. 4,8,16") from None
    if not values or any(v < 1 for v in values):
        raise InputError(f"{flag} {text!r}: expected positive integers separated by commas, e.g. 4,8,16")
    return values
