"""Activation offloading (SSDTrain) applied to a composed estimate: ``--offload-activations ssd|host``.

A :class:`~dse.estimate.technique.Technique` (:data:`TECHNIQUE`). Its memory half gives a floor of
the GPU memory (the most offloading can free: every layer offloaded, no write backlog; for a fixed
``offload_layers``, that many layers without backlog), since which layers are offloaded depends on
the bandwidths and times; its time half decides the layers and sets the exact memory. It runs
after storage offload, whose PCIe and drive traffic it shares.

Reads the base estimate's per-layer activation bytes and times (``c["terms"]``, a
:class:`~dse.estimate.terms.BaseTerms`) and
changes, per GPU on the most loaded stage:

- GPU memory: the activations the offloaded layers no longer keep (``memory.gpu.activations``
  and ``total``), plus what stays transiently (write backlog, one reloaded layer);
- the storage tier (``ssd``) or host DRAM (``host``): the offloaded bytes of every
  micro-batch in flight, per node;
- time: the I/O the compute cannot hide goes to ``time.io_exposed`` and the iteration
  (throughput and MFU rescaled), so the components still sum to the iteration. ``auto``
  offloads the layers whose I/O hides (at most SSDTrain's rule's k), and, when the GPU is full,
  at least the fewest layers that make it fit if the rule says the drives can absorb them
  (``layers_to_fit``); writes run at full rate or paced to the drives' write:read ratio, decided
  once per stage (``write_bandwidth_used``), so more drives never make a fixed k slower and more
  offloaded layers never hold more GPU memory;
- traffic (added to whatever other techniques put there): ``gpu_host`` (the GPU's PCIe
  link, both directions), ``storage_write``/``storage_read`` (the GPU's drives), per GPU;
  ``switch_drives`` (and ``host_switch`` behind a switch uplink) per node; ``host_dram``
  (staging through host memory);
- bandwidth left by other techniques: their ``gpu_host`` bytes share the GPU's PCIe link and
  their ``switch_drives`` bytes the drives, time-shared over the iteration;
- sections ``activation_offload`` (bytes, layers, required vs available bandwidth, exposed
  time, memory saved, what it buys) and ``endurance`` (drive wear, ``ssd`` only, plus the writes of
  storage offload to the same drives: :func:`dse.estimate.offload.drive_endurance`).

With ``activation_offload_mechanism: hooks`` (PyTorch's ``save_on_cpu``, host target only) the
time half is :mod:`dse.estimate.activation_hooks` instead: every layer's saved tensors copied out
and back on the compute stream, nothing hidden.

The formulas are in :mod:`dse.formulas.activation_offload`. Array-safe: numeric plan fields
may be numpy arrays; only the offload target and I/O path branch in Python.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from dse.estimate import activation_hooks as _hooks
from dse.estimate.context import local_seq
from dse.estimate.table_inputs import mean_layer
from dse.estimate.technique import TechniqueBase
from dse.estimate.terms import DriveWrites, Layers, MicrobatchIO, Num, _Mappable, drive_use, drives, gpus_per_host
from dse.estimate.wear import apply_wear
from dse.formulas._array import ceil, maximum, minimum, where

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Formulas, Result
    from dse.estimate.terms import BaseTerms
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def active(plan: Plan) -> bool:
    """Does the plan offload activations (and so need this module)? Depends on a string field only."""
    return plan.offload_activations != "none"


def _formulas(F: Formulas | None = None) -> FormulaModule:
    """:mod:`dse.formulas.activation_offload` (its traced form from ``F``), imported on first use: most plans
    offload no activations, and ``dse estimate`` starts faster without it."""
    if F and "activation_offload" in F:
        return F["activation_offload"]
    from dse.formulas import activation_offload

    return activation_offload


def drives_used(system: SystemSpec, plan: Plan) -> Num:
    """Drives of one node used for offload: ``plan.ssds`` when given, else every drive of the node."""
    return drive_use(system, plan).count


@dataclasses.dataclass
class Before(_Mappable):
    """GPU memory before offloading activations (the memory half's result, for the time half)."""

    offloaded_per_layer: Num   # bytes one layer offloads (A_off)
    activations: Num           # GPU activation bytes without offload
    total: Num                 # GPU total without offload
    fixed: Num                 # GPU bytes offload does not change (states, buffers, what other techniques left)


@dataclasses.dataclass
class Times:
    """One micro-batch on the most loaded stage [s]."""

    layer_fwd: Num        # one layer's forward
    layer_bwd: Num        # one layer's backward (+ recompute)
    microbatch: Num       # the whole stage
    non_layer: Num        # head, embedding, p2p, fixed: 1/3 forward, 2/3 backward
    forward: Num          # the stage's forward
    backward_start: Num   # when backward reaches the stage's last layer


def _other(i: BaseTerms, layers: Num, a: Num) -> tuple[Num, Num]:
    """Activation bytes never offloaded (embedding, head, recompute working set), first and last stage."""
    return (i.activations_first_stage - i.microbatches_in_flight * layers * a, i.activations_last_stage - layers * a)


def memory_floor(c: Result, before: Before, plan: Plan, A: FormulaModule) -> Num:
    """GPU activation bytes offloading cannot go below: k = every layer (auto) or ``offload_layers``, no backlog."""
    i = c["terms"]
    layers, a = i.layers_per_stage, i.layer_activation_bytes
    other_first, other_last = _other(i, layers, a)
    a_off = before.offloaded_per_layer
    if plan.offload_layers is None:       # auto: k <= layers, the reload/backlog peak >= 0
        first = i.microbatches_in_flight * (layers * a - layers * a_off) + other_first
        last = layers * a - layers * a_off + other_last
    else:
        k = minimum(plan.offload_layers, layers)
        first = A.gpu_activation_bytes_offload(layers, k, a, a_off, i.microbatches_in_flight, 0.0, other_first)
        last = A.gpu_activation_bytes_offload(layers, k, a, a_off, 1, 0.0, other_last)
    return where(i.first_stage_is_max, first, last)


def stage_times(c: Result) -> Times:
    i, ti = c["terms"], c["terms"].timed()
    layers = i.layers_per_stage
    t_mb = ti.stage_max
    non_layer = maximum(t_mb - layers * ti.layer_total, 0.0)
    t_fwd = layers * ti.layer_forward + non_layer / 3
    return Times(layer_fwd=ti.layer_forward, layer_bwd=ti.layer_backward + ti.layer_recompute, microbatch=t_mb,
                 non_layer=non_layer, forward=t_fwd, backward_start=t_fwd + 2 * non_layer / 3)


def io_bandwidths(c: Result, system: SystemSpec, plan: Plan, gpus_node: Num, A: FormulaModule
                  ) -> tuple[Num, Num, str, Num | None]:
    """(write, read) bandwidth per GPU for activations, the I/O path, and the drives per GPU (ssd; else None)."""
    node = system.node
    mode = plan.offload_activations
    link = node.host_link
    link_bw = link.bandwidth * link.efficiency if link is not None else float("inf")
    link_left = A.link_bandwidth_left(link_bw, c["traffic"].get("gpu_host", 0.0), c["time"]["iteration"])
    per_gpu = None
    if mode == "ssd":
        storage = drives(system)
        device = storage.device
        per_gpu = A.drives_per_gpu(drives_used(system, plan), gpus_node)
        array_w = per_gpu * device.write_bandwidth
        array_r = per_gpu * device.read_bandwidth
        if storage.uplink is not None:   # all drives behind one switch uplink, shared by the node's GPUs
            up = storage.uplink.bandwidth * storage.uplink.efficiency / gpus_node
            array_w, array_r = minimum(array_w, up), minimum(array_r, up)
        # drive time other techniques use (e.g. optimizer or parameter swaps), shared over the iteration
        other_drive = c["traffic"].get("switch_drives", 0.0) / gpus_node
        array_w = A.link_bandwidth_left(array_w, other_drive, c["time"]["iteration"])
        array_r = A.link_bandwidth_left(array_r, other_drive, c["time"]["iteration"])
        path = plan.activation_io_path
    else:
        array_w = array_r = float("inf")
        path = "host"
    dram = node.host.dram_bandwidth
    bw_w = A.activation_io_bandwidth(array_w, link_left, path, dram, gpus_node)
    bw_r = A.activation_io_bandwidth(array_r, link_left, path, dram, gpus_node)
    return bw_w, bw_r, path, per_gpu


def offloaded_layers(c: Result, before: Before, tm: Times, bw_w: Num, bw_r: Num, plan: Plan, A: FormulaModule
                     ) -> Layers:
    """Which layers: SSDTrain's rule, the layers whose I/O hides, the fewest that make the GPU fit; ``k``."""
    i = c["terms"]
    layers, a_off = i.layers_per_stage, before.offloaded_per_layer
    k_rule = A.adaptive_offload_layers(bw_w, a_off, tm.layer_fwd, tm.forward, layers)        # SSDTrain's (write) rule
    k_hide = A.hidden_offload_layers(bw_w, bw_r, a_off, tm.layer_bwd, tm.backward_start, tm.microbatch, layers)
    # fewest layers whose offload brings the GPU under its capacity (each frees its offloaded bytes on every
    # micro-batch in flight of the fullest stage; the write backlog is left out, so this is a lower bound)
    per_layer = where(i.first_stage_is_max, i.microbatches_in_flight, 1) * a_off
    excess = maximum(before.total - c["memory"]["gpu"]["capacity"], 0.0)
    k_fit = where(excess > 0, ceil(minimum(excess / maximum(per_layer, 1.0), layers + 1)), 0.0 * excess)  # > l: none
    if plan.offload_layers is None:
        # auto: the layers whose I/O hides behind compute (free); when the GPU is full, at least the fewest
        # layers that make it fit, if SSDTrain's rule says the drives can absorb that many during forward
        # (past it the unwritten backlog stays on the GPU, so more layers free nothing). For a plan that fits,
        # more bandwidth never adds exposed I/O: the hidden layers expose none and k_fit does not depend on it.
        k_hidden = minimum(k_rule, k_hide)
        k = where(k_fit <= k_rule, maximum(k_hidden, k_fit), k_hidden)
        rule = "adaptive"
    else:
        k = minimum(plan.offload_layers, layers)
        rule = "fixed"
    return {"k": k, "rule": rule, "k_rule": k_rule, "k_hide": k_hide, "k_fit": k_fit}


def microbatch_io(layers: Num, k: Num, a_off: Num, tm: Times, bw_w: Num, bw_r: Num, ratio: Num, A: FormulaModule
                  ) -> MicrobatchIO:
    """One micro-batch: write rate used, backlog, bytes forwarded / written / read, exposed I/O time."""
    a_div = maximum(a_off, 1e-300)
    offloaded = k * a_off
    first_reload = tm.backward_start + (layers - k) * tm.layer_bwd
    # full-rate writes, or writes paced to the drives' write:read ratio when the read side is capped,
    # decided once for the stage (as if every layer were offloaded), not per k: more offloaded layers then
    # never hold more GPU memory
    paced_w = A.paced_write_bandwidth(bw_w, bw_r, ratio)
    all_off = layers * a_off

    def exposed_all(w: Num) -> Num:
        # writes at w: what is unwritten when backward needs it is forwarded, the rest read back
        wr = all_off - A.forwarded_bytes(all_off, w, tm.backward_start)
        return A.exposed_io_time(wr, wr, wr / a_div, a_off, w, bw_r, tm.layer_bwd, tm.microbatch)

    bw_used = where(exposed_all(paced_w) < exposed_all(bw_w) * (1 - 1e-12), paced_w, bw_w)
    backlog = A.write_backlog(offloaded, bw_used, tm.forward)
    forwarded = A.forwarded_bytes(offloaded, bw_used, first_reload)
    written = offloaded - forwarded
    read = written
    exposed = A.exposed_io_time(written, read, read / a_div, a_off, bw_used, bw_r, tm.layer_bwd, tm.microbatch)
    return {"bw_used": bw_used, "backlog": backlog, "forwarded": forwarded, "written": written, "read": read,
            "exposed": exposed}


def add_time_and_traffic(c: Result, io: MicrobatchIO, m: Num, p: Num, v: Num, gpus_node: Num, path: str, plan: Plan,
                         system: SystemSpec) -> None:
    """Exposed I/O into the iteration (throughput rescaled); bytes per link added to ``traffic``."""
    t = c["time"]
    exposed = (m + (p - 1) / v) * io["exposed"]                 # every pipeline slot waits, the bubble's too
    t_before = t["iteration"]
    t["io_exposed"] = t["io_exposed"] + exposed
    t["iteration"] = t_before + exposed
    th = c["throughput"]
    for key in ("tokens_per_s", "samples_per_s", "mfu", "hfu"):
        th[key] = th[key] * t_before / t["iteration"]
    tr = c["traffic"]
    written, read = io["written"], io["read"]
    moved = m * (written + read)
    tr["gpu_host"] = tr.get("gpu_host", 0.0) + moved
    if plan.offload_activations == "ssd":
        tr["storage_write"] = tr.get("storage_write", 0.0) + m * written
        tr["storage_read"] = tr.get("storage_read", 0.0) + m * read
        tr["switch_drives"] = tr.get("switch_drives", 0.0) + gpus_node * moved      # per node, all drives
        if drives(system).uplink is not None:
            tr["host_switch"] = tr.get("host_switch", 0.0) + gpus_node * moved
    if path in ("bounce", "host"):
        tr["host_dram"] = tr.get("host_dram", 0.0) + (2 if path == "bounce" else 1) * moved
    io["exposed_s"] = exposed


def _section(c: Result, before: Before, ks: Layers, tm: Times, io: MicrobatchIO, bw: tuple[Num, Num], after: Num,
             per_gpu_bytes: Num, node_bytes: Num, path: str, plan: Plan, A: FormulaModule) -> dict[str, Any]:
    """The ``activation_offload`` section."""
    i = c["terms"]
    m, layers, a, a_off = i.micro_batches, i.layers_per_stage, i.layer_activation_bytes, before.offloaded_per_layer
    k, written, read = ks["k"], io["written"], io["read"]
    bw_w, bw_r = bw
    saved = before.activations - after
    budget = c["memory"]["gpu"]["capacity"]
    return {
        "target": plan.offload_activations,
        "mechanism": plan.activation_offload_mechanism,
        "path": path,
        "rule": ks["rule"],
        "layers_per_stage": layers,
        "layers_offloaded": k,
        "layers_kept": layers - k,
        "saved_bytes_per_layer": a,
        "offloaded_bytes_per_layer": a_off,
        "bytes_offloaded_per_microbatch": written,
        "bytes_forwarded_per_microbatch": io["forwarded"],
        "bytes_offloaded_per_iteration": m * written,
        "bytes_read_per_iteration": m * read,
        "layer_forward_s": tm.layer_fwd,
        "layer_backward_s": tm.layer_bwd,
        "forward_s_per_microbatch": tm.forward,
        "write_bandwidth_required_per_layer": A.write_bandwidth_required(a_off, tm.layer_fwd),
        "read_bandwidth_required_per_layer": A.read_bandwidth_required(a_off, tm.layer_bwd),
        "write_bandwidth_to_offload_all_layers": A.adaptive_bandwidth_required(layers - 1, a_off, tm.layer_fwd,
                                                                               tm.forward),
        "write_bandwidth_available": bw_w,
        "write_bandwidth_used": io["bw_used"],
        "layers_by_ssdtrain_rule": ks["k_rule"],
        "layers_io_hides": ks["k_hide"],
        "layers_to_fit": ks["k_fit"],
        "read_bandwidth_available": bw_r,
        "write_backlog_bytes": io["backlog"],
        "exposed_io_per_microbatch_s": io["exposed"],
        "exposed_io_s": io["exposed_s"],
        "gpu_activations_without_offload": before.activations,
        "gpu_activations": after,
        "gpu_memory_saved": saved,
        "activation_peak_reduction": saved / before.activations,
        "capacity_needed_per_gpu": per_gpu_bytes,
        "capacity_needed_per_node": node_bytes,
        "max_micro_batch_without_offload": A.largest_micro_batch(budget, before.fixed,
                                                                 before.activations / i.micro_batch),
        "max_micro_batch": A.largest_micro_batch(budget, before.fixed, after / i.micro_batch),
    }


class ActivationOffload(TechniqueBase):
    """SSDTrain-style activation offload (see the module docstring)."""

    name = "activation_offload"
    sections = ("activation_offload",)
    after = ("storage_offload",)
    memory = "floor"
    report: ClassVar[dict[str, str]] = {"activation_offload": "dse.report.activation_offload:render"}

    def active(self, plan: Plan) -> bool:
        return active(plan)

    def apply_memory(self, c: Result, model: ModelSpec, system: SystemSpec, plan: Plan, F: Formulas | None = None
                     ) -> Before:
        A = _formulas(F)
        i = c["terms"]
        if plan.activation_offload_mechanism == "hooks":
            # every saved buffer leaves the GPU (dse/estimate/activation_hooks.py)
            a_off = i.layer_activation_bytes
        else:
            # context parallelism: a rank saves the tensors of its s/cp tokens (Transformer Engine's ring keeps
            # its own chunk's q, k, v and output for backward, not the keys it received)
            a_off = _hooks.table_offloaded_bytes(c, model, plan, A) if model.mla else mean_layer(
                model, plan, lambda moe: A.offloaded_bytes_per_layer(
                    local_seq(plan), i.micro_batch, model.hidden, model.heads, model.kv_heads, model.head_dim,
                    model.ffn_hidden, moe=moe, **i.activation_options))  # an MoE layer: its MLP's tensors
            # SSDTrain's tensors are Megatron's; a stack that saves fewer bytes (torch.compile's partitioner)
            # cannot offload more than the layer saves
            a_off = minimum(a_off, i.layer_activation_bytes)
        gpu = c["memory"]["gpu"]
        before = Before(offloaded_per_layer=a_off, activations=gpu["activations"], total=gpu["total"],
                        fixed=gpu["total"] - gpu["activations"])
        floor = memory_floor(c, before, plan, _formulas())     # not traced: a bound for the search, not a result
        gpu["activations"] = floor
        gpu["total"] = before.fixed + floor
        if plan.offload_activations == "ssd" and plan.ssds is not None:
            c["memory"]["storage"]["capacity"] = drives_used(system, plan) * drives(system).device.capacity
        return before

    def apply_time(self, c: Result, state: Before, model: ModelSpec, system: SystemSpec, plan: Plan,
                   F: Formulas | None = None) -> None:
        A = _formulas(F)
        i = c["terms"]
        mode = plan.offload_activations
        gpus_node = gpus_per_host(c, system)   # GPUs of one host sharing its drives and DRAM
        layers, a, a_off = i.layers_per_stage, i.layer_activation_bytes, state.offloaded_per_layer
        tm = stage_times(c)
        bw_w, bw_r, path, per_gpu = io_bandwidths(c, system, plan, gpus_node, A)
        hooks = plan.activation_offload_mechanism == "hooks"
        if hooks:
            ks, io = _hooks.layers_and_io(c, model, state, tm, (bw_w, bw_r), plan, A, offloaded_layers)
        else:
            ks = offloaded_layers(c, state, tm, bw_w, bw_r, plan, A)
            device = drives(system).device if mode == "ssd" else None
            ratio = device.write_bandwidth / device.read_bandwidth if device is not None else 1.0
            io = microbatch_io(layers, ks["k"], a_off, tm, bw_w, bw_r, ratio, A)

        # GPU memory: what the offloaded layers no longer keep, plus the backlog / one reloaded layer
        other_first, other_last = _other(i, layers, a)
        act_first = A.gpu_activation_bytes_offload(layers, ks["k"], a, a_off, i.microbatches_in_flight, io["backlog"],
                                                   other_first)
        act_last = A.gpu_activation_bytes_offload(layers, ks["k"], a, a_off, 1, io["backlog"], other_last)
        after = where(i.first_stage_is_max, act_first, act_last)
        gpu = c["memory"]["gpu"]
        gpu["activations"] = after
        gpu["total"] = state.fixed + after
        # where the offloaded bytes live (per node)
        per_gpu_bytes = A.ssd_capacity_needed(i.microbatches_in_flight, io["written"])
        node_bytes = gpus_node * per_gpu_bytes
        tier = c["memory"]["storage" if mode == "ssd" else "host"]
        tier["activations"] = tier["activations"] + node_bytes
        tier["total"] = tier["total"] + node_bytes

        add_time_and_traffic(c, io, i.micro_batches, i.pp, i.virtual_stages, gpus_node, path, plan, system)
        section = _section(c, _hooks.section_before(state, io) if hooks else state, ks, tm, io, (bw_w, bw_r), after,
                           per_gpu_bytes, node_bytes, path, plan, A)
        if hooks:
            _hooks.section_extras(section, io)
        if mode == "ssd":
            section["drives_per_gpu"] = per_gpu
            section["capacity_available_per_node"] = tier["capacity"]
            w_gpu = A.bytes_written_per_iteration(i.micro_batches, io["written"])
            # the most loaded drive (smallest per-GPU array); wear: dse.estimate.wear, with storage offload's writes
            c["terms"].drive_writes[self.name] = DriveWrites(by_source={"activations": gpus_node * w_gpu},
                                                             per_drive=w_gpu / per_gpu)
        c["activation_offload"] = section


TECHNIQUE = ActivationOffload()


def apply(c: Result, model: ModelSpec, system: SystemSpec, plan: Plan, F: Formulas | None = None) -> None:
    """Activation offload on a fully composed estimate (both halves) and the drive wear of every write so far."""
    TECHNIQUE.apply(c, model, system, plan, F)
    if TECHNIQUE.active(plan):
        apply_wear(c, system, F)
