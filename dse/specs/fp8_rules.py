"""Plan rules of FP8 training (Transformer Engine): what ``--precision fp8`` needs and what it is not modelled
with. Read with the other tables of :mod:`dse.specs.rules`."""

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
    Rule("fp8 with ZeRO-3 or offload is not modelled", ("precision", "zero", "offload_optimizer"),
         when=_fp8, ok=lambda p, m, s: (p.zero < 3) & (p.offload_optimizer == "gpu"),
         message=lambda p, m, s: f"--precision fp8 with --zero {p.zero} --offload-optimizer {p.offload_optimizer} is "
                                 "not modelled; allowed: --zero 0, 1 or 2 with --offload-optimizer gpu"),
    Rule("fp8_param_gather needs fp8 and the distributed optimizer", ("fp8_param_gather", "precision", "zero"),
         when=lambda p, m, s: p.fp8_param_gather,
         ok=lambda p, m, s: (p.precision == "fp8") & (p.zero >= 1) & (p.zero <= 2),
         message=lambda p, m, s: "--set plan.fp8_param_gather=true needs --precision fp8 with --zero 1 or 2 "
                                 f"(Megatron's distributed optimizer); got --precision {p.precision} --zero {p.zero}"),
)

FP8_NOT_ON_CHIPLETS = Rule(
    "fp8 on chiplet packages is not modelled", ("precision",), when=_fp8, ok=lambda p, m, s: False,
    message=lambda p, m, s: "--precision fp8 is not modelled on chiplet packages; allowed: bf16, fp16, bf16-pure")
