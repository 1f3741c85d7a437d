"""Memory as PyTorch's CUDA caching allocator sees it: peak allocated and peak reserved bytes per GPU.

``allocated`` is the GPU total less the runtime's allowance (``gpu.reserved``: CUDA context, NCCL), what
``torch.cuda.max_memory_allocated`` reports (``dse validate h100-hf`` checks it); ``reserved`` adds the
cached free blocks the allocator holds at that peak (:mod:`dse.formulas.allocator`), what
``torch.cuda.max_memory_reserved`` reports. Feasibility stays on the GPU total (allocated plus the runtime
allowance): the allocator returns whole cached segments to CUDA and retries before it runs out of memory.

The holes follow the software stack: the loss's freed logits where the stack's loss keeps fp32 gradient
buffers live at the peak (``transient``: pytorch, compiled), the vocabulary table's gradient temporary where
gradients accumulate into existing ones (a ``grad_accumulate`` row: pytorch, compiled) and the table is
trained; none for Megatron's fused loss and gradient buffers (not traced: no hole is modelled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.formulas import allocator as A
from dse.formulas._array import where
from dse.formulas.precision import recipe_of

if TYPE_CHECKING:
    from dse.estimate.aliases import Result, Section
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def allocator_memory(c: Result, model: ModelSpec, system: SystemSpec, plan: Plan) -> Section:
    """``allocated``, ``reserved`` and the holes between them (``logits_hole``, ``gradient_hole``), per GPU.

    ``c`` is the composed estimate (its ``memory`` and ``terms`` after every technique).
    """
    i = c["terms"]
    tables: Any = i.kernels
    r = recipe_of(plan)
    allocated = c["memory"]["gpu"]["total"] - system.node.gpu.reserved
    upcast = tables["head"].get("loss", {}).get("transient", 0)
    logits = where(upcast > 0, A.logits_hole_bytes(i.tokens_per_microbatch, model.vocab, plan.tp, r.activations), 0)
    last = where(i.first_stage_is_max, plan.pp == 1, True)    # the loss lives on the last stage
    logits = where(last, logits, 0)
    accumulates = "grad_accumulate" in tables["layer"] and plan.finetune == "full"
    grad = A.gradient_hole_bytes(model.vocab, model.hidden, plan.tp, r.gradients) if accumulates else 0 * logits
    holes = logits + grad
    return {"allocated": allocated, "reserved": A.reserved_bytes(allocated, holes), "holes": holes,
            "logits_hole": logits, "gradient_hole": grad}
