"""Plan rules of the DualPipe schedule (DeepSeek-V3 §3.2.1): what ``plan.schedule = dualpipe`` needs and what it
is not modelled with. Read with the other tables of :mod:`dse.specs.rules`."""

from __future__ import annotations

from dse.specs.rule import Rule


def _dual(p, m, s) -> bool:
    return p.schedule == "dualpipe"


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
    Rule("dualpipe is modelled for full training without offload", ("schedule", "finetune", "zero",
                                                                     "offload_optimizer", "offload_params",
                                                                     "offload_activations"),
         when=_dual, ok=lambda p, m, s: (p.zero <= 2) & (p.finetune == "full" and p.offload_optimizer == "gpu"
                                                        and p.offload_params == "gpu"
                                                        and p.offload_activations == "none"),
         message=lambda p, m, s: "schedule dualpipe is modelled for full training with ZeRO 0-2 and every "
                                 "state on the GPU (its two parameter copies per rank are not modelled with "
                                 "ZeRO-3, offload or adapters); allowed schedules here: 1f1b, interleaved, gpipe"),
)
#: a chiplet package has no pipeline ranks in dse's sense
DUALPIPE_NOT_ON_CHIPLETS = Rule("dualpipe on a chiplet package", ("schedule",), when=_dual, ok=lambda p, m, s: False,
                                message=lambda p, m, s: "schedule dualpipe does not apply to a chiplet package; "
                                                        "allowed: 1f1b, interleaved, gpipe")
