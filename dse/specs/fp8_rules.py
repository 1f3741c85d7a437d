"""Plan rules of FP8 training (Transformer Engine): what ``--precision fp8`` needs and what it is not modelled
with. Read with the other tables of :mod:`dse.specs.rules`.

FP8 composes with ZeRO-Offload of the optimizer to host or CXL memory under ZeRO 1-2: Megatron-LM runs
``--optimizer-cpu-offload`` (its HybridDeviceOptimizer, with ``--use-precision-aware-optimizer``) beside FP8
training (``megatron/training/arguments.py`` asserts only ``--fp8-recipe delayed`` when ``--fp8-param-gather`` is
also on); the FP8 weight copies stay on the GPU and are re-cast after the updated weights come back
(:func:`dse.estimate.offload_time.update`). Not modelled: ZeRO-3 (and the offloads that need it) and
``fp8_param_gather`` with offload.
"""

from __future__ import annotations

from dse.specs.rule import Rule


def _fp8(p, m, s) -> bool:
    return p.precision == "fp8"


def _gpu_name(s) -> str:
    return s.node.gpu.name


FP8_RULES = (
    Rule("fp8 needs FP8 tensor cores and their stated GEMM efficiency",
         ("precision", "hardware.node.gpu.peak_flops", "hardware.node.gpu.efficiency.gemm_fp8"),
         when=lambda p, m, s: _fp8(p, m, s) and s is not None,
         ok=lambda p, m, s: "fp8" in s.node.gpu.peak_flops and s.node.gpu.efficiency.gemm_fp8 is not None,
         message=lambda p, m, s: f"--precision fp8: GPU '{_gpu_name(s)}' has no FP8 tensor cores (no peak_flops.fp8 "
                                 "in its spec); allowed precisions: bf16, fp16, bf16-pure"
                                 if "fp8" not in s.node.gpu.peak_flops else
                                 f"--precision fp8: GPU '{_gpu_name(s)}' states no efficiency.gemm_fp8 (the share of "
                                 "its fp8 peak an FP8 GEMM reaches); set it in the GPU spec or with --set "
                                 "hardware.node.gpu.efficiency.gemm_fp8=0.7"),
    Rule("fp8 is modelled for full training with Megatron's kernels", ("precision", "finetune", "stack"),
         when=_fp8, ok=lambda p, m, s: p.finetune == "full" and p.stack == "megatron",
         message=lambda p, m, s: f"--precision fp8 with --finetune {p.finetune} --stack {p.stack} is not modelled; "
                                 "allowed: --finetune full --stack megatron (Transformer Engine's layers)"),
    Rule("fp8 with ZeRO-3 or offload is not modelled", ("precision", "zero", "offload_optimizer", "fp8_param_gather"),
         when=_fp8, ok=lambda p, m, s: (p.zero < 3) & ((p.offload_optimizer == "gpu") | (
             (p.offload_optimizer in ("cpu", "cxl")) & (not p.fp8_param_gather))),
         message=lambda p, m, s: f"--precision fp8 with --zero {p.zero} --offload-optimizer {p.offload_optimizer}"
                                 + " --set plan.fp8_param_gather=true" * bool(p.fp8_param_gather)
                                 + " is not modelled (ZeRO-3's gathers of FP8 weights, FSDP2's float8 all-gather, "
                                 "and the fp32 shard cast to FP8 on the host are not priced); allowed: --zero 0, 1 "
                                 "or 2 with --offload-optimizer gpu, cpu or cxl (cpu/cxl without fp8_param_gather: "
                                 "Megatron's --optimizer-cpu-offload)"),
    Rule("fp8_param_gather needs fp8 and the distributed optimizer", ("fp8_param_gather", "precision", "zero"),
         when=lambda p, m, s: p.fp8_param_gather,
         ok=lambda p, m, s: (p.precision == "fp8") & (p.zero >= 1) & (p.zero <= 2),
         message=lambda p, m, s: "--set plan.fp8_param_gather=true needs --precision fp8 with --zero 1 or 2 "
                                 f"(Megatron's distributed optimizer); got --precision {p.precision} --zero {p.zero}"),
)

FP8_NOT_ON_CHIPLETS = Rule(
    "fp8 on chiplet packages is not modelled", ("precision",), when=_fp8, ok=lambda p, m, s: False,
    message=lambda p, m, s: "--precision fp8 is not modelled on chiplet packages; allowed: bf16, fp16, bf16-pure")
