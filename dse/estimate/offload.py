"""Storage offload (ZeRO-Infinity) and near-storage update (Smart-Infinity) in an estimate.

A :class:`~dse.estimate.technique.Technique` (:data:`TECHNIQUE`), active when the plan offloads
optimizer state or parameters (``--offload-optimizer cpu|cxl|nvme|csd``, ``--offload-params cpu|cxl|nvme``).
Its memory half (:meth:`StorageOffload.apply_memory`, exact) places the model state; its time
half (:mod:`dse.estimate.offload_time`) adds the I/O. It

- moves the model-state bytes between the memory tiers (GPU, host DRAM, CXL memory, drives) and
  adds the pinned host swap buffers;
- replaces the iteration by three serial segments, ``phase_forward``,
  ``phase_backward`` (backward + gradient offload) and ``phase_update`` (update +
  optimizer-state I/O), keeping the base's compute terms and putting what the I/O
  adds in ``io_exposed`` and the optimizer compute in ``optimizer``, so the time
  components still add up to the iteration;
- records the bytes per iteration on every link in ``traffic`` (``gpu_host`` per GPU;
  ``host_switch``, ``switch_drives`` and ``csd_internal`` per node) and the link
  details, the bottleneck link, the accelerator buffers and the bandwidth each tensor
  class needs (ZeRO-Infinity's efficiency model) in an ``offload`` section;
- when the plan writes to the drives (optimizer on ``nvme``/``csd``, parameters on ``nvme``), records
  the bytes the drives absorb per iteration by source (fp32 gradients, optimizer states, fp16
  parameters; for a CSD the states its accelerator writes back to its NAND) as its drive-write
  contribution; :mod:`dse.estimate.wear` turns every technique's writes into the ``endurance``
  section at the final iteration time.

Every numeric input may be a numpy array (e.g. ``plan.ssds``); only the offload tier
names and booleans branch in Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from dse.estimate import frozen as _frozen
from dse.estimate.context import grad_ranks, local_seq
from dse.estimate.feasibility import Violation
from dse.estimate.links import expert_replicas
from dse.estimate.technique import TechniqueBase
from dse.estimate.terms import DriveWrites, drive_use, gpus_per_host, near_storage
from dse.estimate.wear import apply_wear, drive_endurance
from dse.formulas import optimizer as _optimizer
from dse.formulas._array import is_scalar, minimum, where
from dse.formulas.precision import recipe_of
from dse.specs.plan import folded

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Formulas, Num, Result
    from dse.estimate.offload_time import Bandwidths, Flows, Partition
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

EXCHANGE_BYTES = {"fp32": 4, "fp16": 2}
INF = float("inf")
__all__ = ["EXCHANGE_BYTES", "TECHNIQUE", "StorageOffload", "active", "apply", "drive_endurance",
           "drives_used", "mode_label", "required_bandwidths"]


def active(plan: Plan) -> bool:
    """Does the plan offload anything (and so need this module)?"""
    return plan.offload_optimizer != "gpu" or plan.offload_params != "gpu"


def _formulas(F: Formulas | None = None) -> tuple[FormulaModule, FormulaModule]:
    """The offload and near-storage formula modules (their traced forms from ``F``).

    Imported on first use, like the time half (:mod:`dse.estimate.offload_time`): most plans offload
    nothing, and ``dse estimate`` starts faster without them.
    """
    from dse.formulas import near_storage, offload

    return (F["offload"] if F and "offload" in F else offload, F["near_storage"] if F and "near_storage" in F
            else near_storage)


def drives_used(system: SystemSpec, plan: Plan) -> Num:
    """Drives the plan uses: ``plan.ssds`` if given, else every drive of a node (0 without drives)."""
    return drive_use(system, plan).count


def mode_label(plan: Plan) -> Any:
    opt = plan.offload_optimizer
    if opt == "csd":
        label = "SmartUpdate" + (" (transfer handler)" if plan.transfer_overlap else " (naive)")
        cr = plan.gradient_compression
        if not is_scalar(cr):   # an array of ratios: one label per scenario
            import numpy as np

            return np.asarray([label + (f" + top-k compression {x:g}" if x < 1 else "")
                               for x in np.ravel(cr).tolist()]).reshape(np.shape(cr))
        return label + (f" + top-k compression {cr:g}" if cr < 1 else "")
    if opt == "nvme":
        return "ZeRO-Infinity (optimizer on NVMe, CPU update)"
    if opt == "cxl":
        return "ZeRO-Offload (optimizer in CXL memory, CPU update)"
    if opt == "cpu":
        return "ZeRO-Offload (optimizer in host DRAM, CPU update)"
    return "ZeRO-3 with parameters offloaded"


def _argmax_name(busy: dict[str, Num]) -> Any:
    """Name of the busiest link (an array of names when the inputs are arrays); a tie goes to the first link listed,
    as numpy's argmax breaks it for an array plan."""
    names = list(busy)
    values = list(busy.values())
    if all(is_scalar(v) for v in values):
        return names[values.index(max(values))]
    import numpy as np

    stack = np.stack(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in values]))
    return np.asarray(names)[np.argmax(stack, axis=0)]


def _cxl_read(system: SystemSpec) -> Num:
    """Read bandwidth of the node's CXL memory expanders (inf without them: no plan reads them)."""
    from dse.estimate.offload_cxl import cxl_bandwidths

    return cxl_bandwidths(system)[0]


def _drive_name(system: SystemSpec) -> str:
    storage = system.node.storage
    return storage.device.name if storage is not None else "no drive"


def partition(c: Result, system: SystemSpec, plan: Plan, F: Formulas | None = None) -> Partition:
    """What one GPU and one node hold of the model state under the plan's ZeRO stage, and its bytes per element."""
    from dse.estimate.offload_time import Partition

    OPT = F["optimizer"] if F and "optimizer" in F else _optimizer
    r = recipe_of(plan)
    i = c["terms"]
    zero: Num = plan.zero                                    # resolved: a stage (an array of them in a search)
    d, pe = grad_ranks(plan), i.expert_params_per_gpu         # dp (DualPipe: 2 dp, each stage on two ranks)
    p_gpu = i.trainable_params_per_gpu                       # LoRA/QLoRA: the adapters (full: every parameter)
    g_node = gpus_per_host(c, system)                         # GPUs sharing one host and its drives
    # ZeRO partitions of one GPU: dense parameters over dp; with expert parallelism the experts over the dp/ep
    # ranks holding them (DeepSpeed-MoE and Megatron-Core shard expert states over the expert-data-parallel group)
    if folded(plan):   # etp other than tp: the experts over the tp dp / (etp ep) ranks holding them
        sharded = (p_gpu - pe) / d + pe / expert_replicas(plan, d)
    else:
        sharded = (p_gpu + pe * (getattr(plan, "ep", 1) - 1)) / d   # (p - pe)/d + pe/(d/ep)
    shard_opt = where(zero >= 1, sharded, p_gpu)              # optimizer partition of one GPU
    shard_w = where(zero >= 3, sharded, p_gpu)                # fp16 parameter partition of one GPU
    frozen = _frozen.zero3_frozen_shard(i.frozen_weight_bytes, i.frozen_expert_bytes, zero, d,
                                        expert_replicas(plan, d)) if plan.finetune != "full" else 0.0
    return Partition(gpus_node=g_node, shard_opt=shard_opt, shard_w=shard_w, node_opt=shard_opt * g_node,
                     node_w=shard_w * g_node, frozen_w=frozen, node_frozen_w=frozen * g_node,
                     state_bytes=OPT.state_bytes_per_param(plan.optimizer, r),   # master + states (mixed Adam: 12)
                     drives=drives_used(system, plan), exchange_bytes=EXCHANGE_BYTES[plan.exchange_dtype],
                     weight_bytes=r.weights, gather_bytes=r.weight_gathers, grad_bytes=r.offload_gradients,
                     master_grad_bytes=r.offload_master_gradients)


def place_model_state(c: Result, part: Partition, system: SystemSpec, plan: Plan, O: FormulaModule) -> None:
    """Move the model-state bytes between GPU, host DRAM and drives; pinned swap buffers; drive capacity."""
    g16, g32 = part.grad_bytes, part.master_grad_bytes
    opt, par = plan.offload_optimizer, plan.offload_params
    P_opt, P_w, g_node, state = part.node_opt, part.node_w, part.gpus_node, part.state_bytes
    mem = c["memory"]
    mg, mh, ms = mem["gpu"], mem["host"], mem["storage"]
    mc = mem.get("cxl", {})                                 # CXL memory expanders (a node with them only)
    if opt != "gpu":
        mg["optimizer"] = 0.0 * c["terms"].params_per_gpu
        mg["gradients"] = O.reduce_bucket_bytes(part.shard_opt, grad_bytes=g16)
        mh["gradients"] = mh["gradients"] + g16 * P_opt     # fp16 gradient partitions in pinned host memory
    if par != "gpu":
        # only the gathered layers, counted in buffers (and QLoRA's constants, which ZeRO-3 does not partition)
        mg["weights"] = 0.0 * c["terms"].params_per_gpu + c["terms"].quantization_constant_bytes
    if par in ("cpu", "cxl"):   # cxl: host memory on the expanders' NUMA node
        tier = mh if par == "cpu" else mc
        tier["weights"] = tier["weights"] + part.weight_bytes * P_w + part.node_frozen_w
    if opt in ("cpu", "cxl"):
        tier = mh if opt == "cpu" else mc
        tier["gradients"] = tier["gradients"] + g32 * P_opt
        tier["optimizer"] = tier["optimizer"] + state * P_opt
    if opt in ("nvme", "csd"):
        mh["buffers"] = mh["buffers"] + g_node * O.optimizer_swap_buffer_bytes(plan.sub_group_size,
                                                                                plan.optimizer_buffer_count)
        ms["optimizer"] = ms["optimizer"] + state * P_opt
        ms["gradients"] = ms["gradients"] + (O.gradient_offload_bytes(P_opt, g32) if opt == "nvme"
                                             else O.gradient_offload_bytes(P_opt, part.exchange_bytes,
                                                                           plan.gradient_compression))
    if par == "nvme":
        mh["buffers"] = mh["buffers"] + g_node * O.param_swap_buffer_bytes(plan.param_buffer_count,
                                                                            plan.param_buffer_size)
        ms["weights"] = ms["weights"] + part.weight_bytes * P_w + part.node_frozen_w
    for tier in (mg, mh, ms, mc) if mc else (mg, mh, ms):
        tier["total"] = tier["weights"] + tier["gradients"] + tier["optimizer"] + tier["activations"] + tier["buffers"]
    if system.node.storage is not None:
        ms["capacity"] = part.drives * system.node.storage.device.capacity


def _section(c: Result, part: Partition, f: Flows, links: dict[str, dict[str, Any]], busy: dict[str, Num],
             bws: Bandwidths, model: ModelSpec, system: SystemSpec, plan: Plan, O: FormulaModule, NS: FormulaModule
             ) -> dict[str, Any]:
    """The ``offload`` section: mode, placement, links, bottleneck link, accelerator, required bandwidths."""
    opt, par, N = plan.offload_optimizer, plan.offload_params, part.drives
    storage = system.node.storage
    section = {"mode": mode_label(plan), "optimizer_tier": opt, "params_tier": par, "drives": N,
               "drives_in_hardware": storage.count if storage is not None else 0,
               "placement": O.placement(3, opt, par, plan.optimizer),   # par != gpu implies ZeRO-3 (check_offload)
               "links": links, "bottleneck_link": _argmax_name(busy)}
    if opt == "csd":
        ns = near_storage(system)
        x, cr, P_opt = part.exchange_bytes, plan.gradient_compression, part.node_opt
        sub_group: Num = plan.sub_group_size                 # resolved: set
        sg = minimum(sub_group, P_opt / N)
        kept = where(cr < 1, NS.kept_fraction(cr, 2, 4, x) * sg, 0.0)
        need = NS.handler_buffer_bytes(sg, part.state_bytes, x, 2 if x == 2 else 0, kept, 6)
        section["accelerator"] = {"buffer_bytes": need, "dram_capacity": ns.dram_capacity,
                                  "kernel_s": f.t_kernel, "share_params": P_opt / N}
    b_host, _, b_read, _ = bws
    section["required_bandwidth"] = required_bandwidths(c, model, system, plan, b_host, b_read, N)
    return section


class StorageOffload(TechniqueBase):
    """ZeRO-Offload / ZeRO-Infinity / Smart-Infinity (see the module docstring)."""

    name = "storage_offload"
    sections = ("offload",)
    memory = "exact"
    report: ClassVar[dict[str, str]] = {"offload": "dse.report.offload:render"}

    def active(self, plan: Plan) -> bool:
        return active(plan)

    def apply_memory(self, c: Result, model: ModelSpec, system: SystemSpec, plan: Plan, F: Formulas | None = None
                     ) -> Partition:
        O, _ = _formulas(F)
        part = partition(c, system, plan, F)
        cxl = system.node.cxl
        if cxl is not None:   # the expanders' tier, checked against their capacity like the others
            c["memory"]["cxl"] = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0, "activations": 0.0,
                                  "buffers": 0.0, "total": 0.0, "capacity": cxl.count * cxl.device.capacity}
        place_model_state(c, part, system, plan, O)
        return part

    def apply_time(self, c: Result, state: Partition, model: ModelSpec, system: SystemSpec, plan: Plan,
                   F: Formulas | None = None) -> None:
        from dse.estimate import offload_time

        O, NS = _formulas(F)
        f, links, busy, bws = offload_time.compose(c, state, model, system, plan, O, NS)
        c["offload"] = _section(c, state, f, links, busy, bws, model, system, plan, O, NS)
        opt, par = plan.offload_optimizer, plan.offload_params
        if system.node.storage is not None and (opt in ("nvme", "csd") or par == "nvme"):
            by_source = {"gradients": f.w_grads, "optimizer_states": f.w_states, "parameters": f.w_params}
            # RAID0 (nvme) stripes every tensor over the N drives; SmartUpdate gives each CSD 1/N of the parameters
            per_drive = (f.w_grads + f.w_states + f.w_params) / state.drives
            c["terms"].drive_writes[self.name] = DriveWrites(by_source=by_source, per_drive=per_drive)

    def violations(self, c: Result, system: SystemSpec, plan: Plan) -> list[Violation]:
        """The CSD accelerator's DRAM must hold the transfer handler's buffers."""
        acc = c.get("offload", {}).get("accelerator")
        if acc is None:
            return []

        def text() -> str:
            from dse.units import fmt

            return (f"accelerator DRAM: the transfer handler needs {fmt(acc['buffer_bytes'], 'bytes')} per CSD, "
                    f"{_drive_name(system)} has {fmt(acc['dram_capacity'], 'bytes')} "
                    "(lower plan.sub_group_size)")
        return [Violation("accelerator_dram", "csd", acc["buffer_bytes"], acc["dram_capacity"], text)]


TECHNIQUE = StorageOffload()


def apply(c: Result, model: ModelSpec, system: SystemSpec, plan: Plan, F: Formulas | None = None) -> None:
    """Storage offload on a fully composed estimate (both halves) and the drive wear of its writes."""
    TECHNIQUE.apply(c, model, system, plan, F)
    if TECHNIQUE.active(plan):
        apply_wear(c, system, F)


def required_bandwidths(c: Result, model: ModelSpec, system: SystemSpec, plan: Plan, b_host: Num, b_read: Num, N: Num
                        ) -> dict[str, dict[str, Any]]:
    """ZeRO-Infinity's efficiency model for each tensor class: what bandwidth 50 % / 90 % efficiency needs.

    Peak is the GPU's achievable GEMM rate (dense peak x gemm efficiency), as
    ZeRO-Infinity uses 70 TFLOP/s achievable on V100. ``available`` is the bandwidth
    of the tier the class is offloaded to in this plan (None when it stays on the GPU).
    """
    O, _ = _formulas()
    i = c["terms"]
    gpu = system.node.gpu
    opt = plan.offload_optimizer
    peak = i.peak_flops * gpu.efficiency.gemm
    s, b, m = local_seq(plan), i.micro_batch, i.micro_batches   # a GPU's tokens (cp: s/cp)
    avail_opt = None
    b_cxl = _cxl_read(system)
    if opt == "cpu":
        avail_opt = system.node.host.dram_bandwidth       # the CPU updates the states where they are
    elif opt == "cxl":
        avail_opt = b_cxl
    elif opt == "nvme":
        avail_opt = b_read
    elif opt == "csd":
        ns = near_storage(system)
        avail_opt = N * minimum(ns.internal_read_bandwidth, ns.device_link)
    avail_par = {"gpu": None, "cpu": b_host, "cxl": minimum(b_host, b_cxl), "nvme": minimum(b_host, b_read)
                 }[plan.offload_params]
    rows = {
        "params_grads": (O.arithmetic_intensity("params", s, b), avail_par),
        "optimizer_states": (O.arithmetic_intensity("optimizer", s, b * m), avail_opt),
        "activation_checkpoints": (O.arithmetic_intensity("activations", s, b, model.hidden, 1), None),
    }
    out = {}
    for name, (ait, avail) in rows.items():
        row = {"ait": ait, "for_50pct": O.required_bandwidth(0.5, ait, peak),
               "for_90pct": O.required_bandwidth(0.9, ait, peak), "available": avail}
        row["efficiency"] = None if avail is None else O.offload_efficiency(ait, avail, peak)
        out[name] = row
    return out
