"""Plan rules of the pipeline: the DualPipe schedule (DeepSeek-V3 §3.2.1: what ``plan.schedule = dualpipe`` needs
and what it is not modelled with) and a custom stage layout (``plan.pipeline_layout``: what Megatron-LM refuses,
:mod:`dse.specs.pipeline_layout`, and what it is not modelled with). Read with the other tables of
:mod:`dse.specs.rules`.

What composes with DualPipe (docs/moe.md): LoRA and QLoRA (adapters change a layer's kernels and which parameters
train, not the schedule); ZeRO-Offload of the optimizer to host or CXL memory (the optimizer step runs after the
pipeline flush, as under 1F1B: Megatron-Core's ``--optimizer-cpu-offload`` works beside its pipeline schedules);
ZeRO-3 and parameter offload to host or CXL memory: torchtitan applies FSDP2 (``fully_shard``, with
``enable_cpu_offload``'s ``CPUOffloadPolicy``) to the stages of every pipeline schedule, DualPipeV included
(``torchtitan/distributed/fsdp.py`` ``apply_fsdp_to_decoder``, ``pipeline_parallel.py``). What does not, and why:
ZeRO-Infinity's drives (``--offload-optimizer nvme|csd``, ``--offload-params nvme``): only DeepSpeed offloads to
NVMe, and its pipeline engine refuses ZeRO-2/3 (``runtime/pipe/engine.py``: "ZeRO-2 and ZeRO-3 are incompatible
with pipeline parallelism"); activation offload: DualPipe runs in DeepSeek's reference code and
torchtitan's DualPipeV, neither of which offloads activations; Megatron-Core's fine-grained activation offloading
(``PipelineOffloadManager``) runs with Megatron's own schedules, which have no DualPipe, and SSDTrain on
Megatron's 1F1B.
"""

from __future__ import annotations

from dse.specs.hardware import GPU_SYSTEM
from dse.specs.rule import Rule


def _dual(p, m, s) -> bool:
    return p.schedule == "dualpipe"


def _not_with_dualpipe(p) -> str:
    """The first plan choice DualPipe does not compose with, and why ('' if none)."""
    if p.offload_activations != "none":
        return (f"--offload-activations {p.offload_activations} is not a combination any framework runs "
                "(DeepSeek's DualPipe and torchtitan's DualPipeV offload no activations; Megatron-Core's activation "
                "offload has no DualPipe schedule)")
    drives = [f"--offload-optimizer {p.offload_optimizer}"] * (p.offload_optimizer in ("nvme", "csd"))
    drives += [f"--offload-params {p.offload_params}"] * (p.offload_params == "nvme")
    if drives:
        return (f"{drives[0]} is not a combination any framework runs (ZeRO-Infinity's drive offload is "
                "DeepSpeed's, whose pipeline engine refuses ZeRO-3)")
    return ""


DUALPIPE_RULES = (
    Rule("dualpipe needs an even number of pipeline ranks", ("schedule", "pp"),
         when=_dual, ok=lambda p, m, s: p.pp % 2 == 0,
         message=lambda p, m, s: f"schedule dualpipe feeds micro-batches from both ends of the pipeline: --pp "
                                 f"must be even (2, 4, ...), got --pp {p.pp}"),
    Rule("dualpipe needs an even number of micro-batches", ("schedule", "global_batch", "dp", "micro_batch"),
         when=lambda p, m, s: _dual(p, m, s) and p.global_batch is not None and p.dp is not None,
         ok=lambda p, m, s: (p.global_batch // (p.dp * p.micro_batch)) % 2 == 0,
         message=lambda p, m, s: f"schedule dualpipe splits the micro-batches into two directions: "
                                 f"--global-batch / (--dp x --micro-batch) = {p.global_batch} / ({p.dp} x "
                                 f"{p.micro_batch}) must be even"),
    Rule("dualpipe with offload that no pipeline engine runs", ("schedule", "offload_optimizer", "offload_params",
                                                                "offload_activations"),
         when=_dual, ok=lambda p, m, s: not _not_with_dualpipe(p),
         message=lambda p, m, s: f"schedule dualpipe with {_not_with_dualpipe(p)}; allowed: --offload-optimizer "
                                 "gpu, cpu or cxl, --offload-params gpu, cpu or cxl (with --zero 3), "
                                 "--offload-activations none"),
)
#: a chiplet package has no pipeline ranks in dse's sense
DUALPIPE_NOT_ON_CHIPLETS = Rule("dualpipe on a chiplet package", ("schedule",), when=_dual, ok=lambda p, m, s: False,
                                message=lambda p, m, s: "schedule dualpipe does not apply to a chiplet package; "
                                                        "allowed: 1f1b, interleaved, gpipe")


def layout_problem(p, m) -> str:
    """Why Megatron refuses the plan's ``pipeline_layout`` for this model and pp ('' if it does not), with the flag."""
    from dse.specs.pipeline_layout import LayoutError, parse

    try:
        _, v = parse(p.pipeline_layout, int(p.pp), m.layers, getattr(m, "mtp_layers", 0) or 0)
    except LayoutError as e:
        return str(e)
    if v != p.virtual_stages:
        return (f"{v * p.pp} stages = --pp {p.pp} x {v} model chunks per rank, the plan has virtual_stages "
                f"{p.virtual_stages}; allowed: --set plan.virtual_stages={v}"
                + " plan.schedule=interleaved" * (v > 1))
    return ""


def _layout_ok(p, m, s):
    if isinstance(p.pp, int) and isinstance(p.virtual_stages, int):
        return not layout_problem(p, m)
    import numpy as np

    from dse.specs.plan import Plan

    def one(pp, v) -> bool:   # a search's columns: each (pp, v) pair checked once
        return not layout_problem(Plan(pp=int(pp), pipeline_layout=p.pipeline_layout, virtual_stages=int(v)), m)

    return np.vectorize(one, otypes=[bool])(p.pp, p.virtual_stages)


def _layout_off(p, m, s) -> str:
    """The first plan choice a custom layout is not modelled with ('' if none)."""
    off = [f"--finetune {p.finetune}"] * (p.finetune != "full")
    off += [f"--offload-optimizer {p.offload_optimizer}"] * (p.offload_optimizer != "gpu")
    off += [f"--offload-params {p.offload_params}"] * (p.offload_params != "gpu")
    off += [f"--offload-activations {p.offload_activations}"] * (p.offload_activations != "none")
    off += [f"an {m.architecture} model"] * (m.architecture != "decoder")
    return (off + ["a chiplet package"] * (s is not None and s.kind != GPU_SYSTEM) + [""])[0]


def _layout(p, m, s) -> bool:
    return getattr(p, "pipeline_layout", None) is not None


LAYOUT_RULES = (
    Rule("pipeline layout Megatron refuses", ("pipeline_layout", "pp", "virtual_stages", "model.layers"),
         when=_layout, ok=_layout_ok,
         message=lambda p, m, s: f"--pp-layout {p.pipeline_layout!r}: {layout_problem(p, m)}"),
    Rule("pipeline layout beyond what is modelled", ("pipeline_layout", "finetune", "offload_optimizer",
                                                     "offload_params", "offload_activations", "hardware.kind"),
         when=_layout, ok=lambda p, m, s: not _layout_off(p, m, s),
         message=lambda p, m, s: f"--pp-layout is not modelled with {_layout_off(p, m, s)} (a layout's stages are "
                                 "priced one by one; the offload and fine-tuning terms, and a node's host bytes, take "
                                 "one stage for all); allowed: full training of a decoder on a GPU system with every "
                                 "state and activation on the GPU"),
)
