"""Paged optimizer states (bitsandbytes' ``paged_adamw_*``, QLoRA): evicted to CPU memory when the GPU runs short.

A :class:`~dse.estimate.technique.Technique` active with ``plan.paged_optimizer``. bitsandbytes allocates the
optimizer's state buffers (not the fp32 master weights: those are the model's parameters) in CUDA unified
memory. When the rest of the step needs more GPU memory than there is, the driver evicts state pages to CPU
memory; the optimizer prefetches them back for its update. The memory half moves the evicted bytes ``E`` (per
GPU, :func:`dse.formulas.optimizer.paged_evicted_bytes`) from the GPU's optimizer class to the host's (all the
node's GPUs); the time half adds ``2 E`` per GPU and iteration on the GPU<->host link (paged in for the step,
out again when the next forward allocates its activations) to ``io_exposed``: page migration stalls the kernel
that faults, and the prefetch precedes the update, so neither hides behind compute (an upper bound on the speed:
the link's copy rate, above what demand paging reaches). When the GPU has room, nothing moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.estimate.technique import TechniqueBase
from dse.estimate.terms import gpus_per_host
from dse.formulas import optimizer as _optimizer
from dse.formulas.precision import recipe_of

if TYPE_CHECKING:
    from dse.estimate.aliases import Formulas, Result
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

__all__ = ["TECHNIQUE", "PagedOptimizer"]


class PagedOptimizer(TechniqueBase):
    """Paged optimizer states (see the module docstring)."""

    name = "paged_optimizer"
    sections = ("paged_optimizer",)
    after = ("storage_offload",)
    memory = "exact"

    def active(self, plan: Plan) -> bool:
        return bool(plan.paged_optimizer)

    def apply_memory(self, c: Result, model: ModelSpec, system: SystemSpec, plan: Plan, F: Formulas | None = None
                     ) -> Any:
        O = F["optimizer"] if F and "optimizer" in F else _optimizer
        r = recipe_of(plan)
        gpu, host = c["memory"]["gpu"], c["memory"]["host"]
        total = O.state_bytes_per_param(plan.optimizer, r)
        share = O.paged_state_bytes(plan.optimizer, r) / total if total else 0.0   # states / (master + states)
        evicted = O.paged_evicted_bytes(gpu["total"], gpu["capacity"], share * gpu["optimizer"])
        g_node = gpus_per_host(c, system)          # GPUs whose evicted states share one host's DRAM
        for tier, sign in ((gpu, -1.0), (host, g_node)):
            tier["optimizer"] = tier["optimizer"] + sign * evicted
            tier["total"] = tier["total"] + sign * evicted
        return evicted

    def apply_time(self, c: Result, state: Any, model: ModelSpec, system: SystemSpec, plan: Plan,
                   F: Formulas | None = None) -> None:
        from dse.formulas.offload import link_bandwidth

        hl = system.node.host_link
        b_host = link_bandwidth(hl.bandwidth, hl.efficiency) if hl else float("inf")
        moved = 2 * state
        t_page = moved / b_host
        t, tp = c["time"], c["throughput"]
        old = t["iteration"]
        t["io_exposed"] = t.get("io_exposed", 0.0) + t_page
        t["iteration"] = old + t_page
        for k in ("tokens_per_s", "samples_per_s", "mfu", "hfu"):
            tp[k] = tp[k] * old / t["iteration"]
        c["traffic"]["gpu_host"] = c["traffic"].get("gpu_host", 0.0) + moved
        c["paged_optimizer"] = {"evicted_bytes": state, "paged_bytes_per_iteration": moved, "time": t_page}


TECHNIQUE = PagedOptimizer()
