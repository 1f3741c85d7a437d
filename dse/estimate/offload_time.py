"""The time half of storage offload (:mod:`dse.estimate.offload`): bytes and seconds on every link.

One iteration becomes three serial segments, ``phase_forward``, ``phase_backward``
(backward + gradient offload) and ``phase_update`` (update + optimizer-state I/O), keeping
the base's compute terms; what the I/O adds goes to ``io_exposed`` and the optimizer compute
to ``optimizer``, so the time components still add up to the iteration. The bytes per
iteration on every link go to ``traffic`` and the link details to ``offload.links``.

Each step adds to a :class:`Flows` record (bytes per link, seconds per segment) in the order
the hardware does it: parameter fetch (ZeRO-3), gradients off the GPU, the update, the
updated parameters back. Array-safe: only the tier names and booleans branch.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dse.estimate import dualpipe as _dualpipe, offload_cxl as _cxl
from dse.estimate.terms import Num, _Mappable, near_storage
from dse.formulas import offload as _offload
from dse.formulas._array import is_scalar, maximum, minimum, where

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Result
    from dse.specs.hardware import GPUSpec, SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

INF = float("inf")
Bandwidths = tuple[Num, Num, Num, Num]   # GPU<->host, switch uplink, drive array read, drive array write [bytes/s]


@dataclasses.dataclass
class Partition(_Mappable):
    """What one GPU and one node hold of the model state under the plan (the memory half's result)."""

    gpus_node: Num       # GPUs sharing one host and its drives
    shard_opt: Num       # optimizer partition of one GPU [parameters]
    shard_w: Num         # fp16 parameter partition of one GPU [parameters]
    node_opt: Num        # optimizer partitions a node holds [parameters]
    node_w: Num          # parameter partitions a node holds [parameters]
    state_bytes: Num     # optimizer-state bytes per parameter
    drives: Num          # drives per node the plan uses
    exchange_bytes: Num  # bytes per element exchanged with a CSD (plan.exchange_dtype)
    weight_bytes: Num    # bytes per parameter of the weights held off the GPU (precision recipe)
    gather_bytes: Num    # bytes per parameter moved when weights are fetched / written back (recipe)
    grad_bytes: Num      # bytes per element of the gradient partitions sent off the GPU (recipe, fp16)
    master_grad_bytes: Num  # bytes per element of the gradients swapped to the drives / CPU step (recipe, fp32)
    frozen_w: Num = 0.0      # bytes of the frozen weights' partition of one GPU as stored (LoRA, QLoRA: fetched,
                             # never written back; shard_w, node_w, shard_opt then count the adapters only)
    node_frozen_w: Num = 0.0  # ... of the GPUs of one node [bytes]


@dataclasses.dataclass
class Flows:
    """Bytes per iteration on each link (per GPU: h2d/d2h; per node: the rest) and segment times [s]."""

    h2d: Num             # host -> GPU
    d2h: Num             # GPU -> host
    up_read: Num         # drives -> host over the shared link
    up_write: Num        # host -> drives
    w_grads: Num         # bytes the drives' NAND absorbs per iteration (node): gradients
    w_states: Num        # ... optimizer states
    w_params: Num        # ... fp16 parameters
    csd_read: Num = 0.0  # inside the CSDs (all of them): NAND -> FPGA
    csd_write: Num = 0.0  # FPGA -> NAND
    cxl_read: Num = 0.0   # CXL memory expanders -> host / GPUs (node)
    cxl_write: Num = 0.0  # host / GPUs -> CXL memory expanders (node)
    t_fetch_fw: Num = 0.0
    t_fetch_bw: Num = 0.0
    t_grad: Num = 0.0
    t_tier: Num = 0.0
    t_comp: Num = 0.0
    t_update: Num = 0.0
    t_kernel: Num = 0.0
    optimizer: Num = 0.0


def bandwidths(system: SystemSpec, N: Num, O: FormulaModule, plan: Plan | None = None) -> Bandwidths:
    """(GPU<->host, switch uplink, drive array read, drive array write) bandwidths [bytes/s].

    One drive: its sequential rate, capped by its port (``storage.port``) and by the requests DeepSpeed's
    swapper keeps in flight on it (``plan.aio_*``, Little's law with the drive's datasheet latency); the
    array: N drives behind the shared uplink.
    """
    inf = float("inf")
    node = system.node
    hl = node.host_link
    b_host = O.link_bandwidth(hl.bandwidth, hl.efficiency) if hl else inf
    storage = node.storage
    if storage is None:
        return b_host, inf, inf, inf
    up = storage.uplink
    b_up = O.link_bandwidth(up.bandwidth, up.efficiency) if up else inf
    dev = storage.device
    port = O.link_bandwidth(storage.port.bandwidth, storage.port.efficiency) if storage.port else inf
    per_drive = []
    for peak, latency in ((dev.read_bandwidth, dev.read_latency), (dev.write_bandwidth, dev.write_latency)):
        b = minimum(peak, port)
        if plan is not None and latency > 0:
            q = O.aio_inflight_bytes(plan.aio_block_size, plan.aio_queue_depth, plan.aio_thread_count)
            b = O.queue_limited_bandwidth(q / N, O.drive_request_bytes(plan.aio_block_size, N), latency, b,
                                          plan.aio_overlap_events)
        per_drive.append(b)
    return b_host, b_up, O.array_bandwidth(N, per_drive[0], b_up), O.array_bandwidth(N, per_drive[1], b_up)


def param_fetch(f: Flows, part: Partition, m: Num, plan: Plan, b_host: Num, b_read: Num, O: FormulaModule,
                bc: tuple[Num, Num] = (INF, INF)) -> None:
    """ZeRO-3 parameters to the GPU every micro-batch (from host DRAM, CXL memory or the drives)."""
    par = plan.offload_params
    if par == "gpu":
        return
    e = part.gather_bytes
    passes = O.fetch_passes(plan.recompute)
    # frozen weights (LoRA, QLoRA) come in as stored, the trained ones at the gather dtype: bytes per pass
    # DualPipe: a micro-batch runs one of the rank's two stages, and fetches that stage's half
    share = _dualpipe.microbatch_share(plan)
    gpu_pass = share * (O.param_fetch_bytes(part.shard_w, e, 1) + part.frozen_w)
    node_pass = share * (O.param_fetch_bytes(part.node_w, e, 1) + part.node_frozen_w)
    t_pass = O.transfer_time(gpu_pass, b_host)
    if par == "nvme":
        t_pass = maximum(t_pass, O.transfer_time(node_pass, b_read))
        f.up_read = f.up_read + m * O.param_fetch_bytes(node_pass, 1, passes)
    elif par == "cxl":
        t_pass = _cxl.fetch(f, t_pass, node_pass, m, passes, bc, O)
    f.t_fetch_fw = m * t_pass
    f.t_fetch_bw = m * (passes - 1) * t_pass
    f.h2d = f.h2d + m * O.param_fetch_bytes(gpu_pass, 1, passes)


def gradients(f: Flows, part: Partition, m: Num, plan: Plan, gpu: GPUSpec, b_host: Num, b_write: Num, O: FormulaModule,
              NS: FormulaModule, bc: tuple[Num, Num] = (INF, INF)) -> None:
    """Gradients off the GPU (every micro-batch) and to the drives; top-k compression for a CSD.

    ZeRO-3 hands each gradient partition to an offloaded optimizer with a round trip (DeepSpeed
    ``partition_grads``): down to the host buffer, back to the GPU, down again as fp32 (CPU step) or as
    the exchange dtype, top-k compressed for a CSD with compression (``O.gradient_round_trip_bytes``).
    """
    e = part.grad_bytes
    opt = plan.offload_optimizer
    shard_opt, P_opt, x = part.shard_opt, part.node_opt, part.exchange_bytes
    cr = plan.gradient_compression
    compressed = cr < 1
    if opt != "gpu":
        share = _dualpipe.microbatch_share(plan)              # DualPipe: one of the rank's two stages per micro-batch
        grads = e * shard_opt * m * share                     # fp16 gradient partitions, every micro-batch
        f.d2h = f.d2h + grads
        f.t_grad = O.transfer_time(grads, b_host)
        final, c = (x, cr) if opt == "csd" else (part.master_grad_bytes, 1.0)
        back, again = O.gradient_round_trip_bytes(shard_opt, e, final, m, c)
        back = back * share                                   # (brought back every micro-batch: one stage's)
        z3 = where(plan.zero == 3, 1.0, 0.0)                  # ZeRO-3's partition_grads (arrays in a sweep)
        f.h2d, f.d2h = f.h2d + z3 * back, f.d2h + z3 * again
        f.t_grad = f.t_grad + z3 * O.transfer_time(back + again, b_host)
    if opt == "cxl":
        _cxl.gradients(f, part, plan, again, b_host, bc, O)
    elif opt == "nvme":
        g_tier = O.gradient_offload_bytes(P_opt, part.master_grad_bytes)
        f.up_write = f.up_write + g_tier
        f.w_grads = g_tier
        f.t_tier = O.transfer_time(g_tier, b_write)
    elif opt == "csd":
        g_tier = O.gradient_offload_bytes(P_opt, x, cr)
        f.up_write = f.up_write + g_tier
        f.w_grads = g_tier                                    # stored on each CSD's drive, read back by its FPGA
        f.t_tier = O.transfer_time(g_tier, b_write)
        # Released code: the values are sorted on the GPU (the round trip above brings them there).
        if not (is_scalar(cr) and not compressed):
            f.t_comp = where(compressed, NS.topk_time(shard_opt, gpu.hbm_bandwidth, gpu.efficiency.memory), 0.0)


def update(f: Flows, part: Partition, t_opt_base: Num, plan: Plan, system: SystemSpec, b_read: Num, b_write: Num,
           b_up: Num, O: FormulaModule, NS: FormulaModule, bc: tuple[Num, Num] = (INF, INF), t_cast: Num = 0.0) -> None:
    """The optimizer step where the states live: GPU, CPU (DRAM or CXL memory), CPU with NVMe swaps, or each CSD.

    ``t_cast``: FP8 training's cast of the linear weights to their FP8 copies (:func:`dse.estimate.fp8.
    weight_cast_time`), on the GPU after the step; with the step off the GPU it follows the updated weights' return
    and adds to the step (with the step on the GPU it is already in ``t_opt_base``)."""
    opt = plan.offload_optimizer
    P_opt, state, N, x = part.node_opt, part.state_bytes, part.drives, part.exchange_bytes
    host = system.node.host
    if opt == "gpu":
        f.t_update = f.optimizer = t_opt_base
    elif opt == "cpu":
        f.optimizer = O.cpu_optimizer_time(P_opt, state, host.optimizer_throughput)
        f.t_update = f.optimizer
    elif opt == "cxl":
        _cxl.update(f, part, system, bc, O)
    elif opt == "nvme":
        r_bytes = O.swap_in_bytes(P_opt, state, part.master_grad_bytes)
        w_bytes = O.swap_out_bytes(P_opt, state)
        f.up_read = f.up_read + r_bytes
        f.up_write = f.up_write + w_bytes
        f.w_states = w_bytes
        t_r, t_w = O.transfer_time(r_bytes, b_read), O.transfer_time(w_bytes, b_write)
        t_cpu = O.cpu_optimizer_time(P_opt, state, host.optimizer_throughput)
        f.t_update = O.swap_update_time(t_r, t_cpu, t_w, plan.swap_pipeline)
        f.optimizer = maximum(t_cpu - (t_r + t_w), 0.0) if plan.swap_pipeline else t_cpu
    else:  # csd: SmartUpdate on every drive's accelerator
        ns = near_storage(system)
        cr = plan.gradient_compression
        g_drive = cr * x
        k_thr = where(cr < 1, ns.decompress_throughput, ns.update_throughput)
        r_int = minimum(ns.internal_read_bandwidth, ns.device_link)
        w_int = minimum(ns.internal_write_bandwidth, ns.device_link)
        b_upload = NS.upload_bandwidth(N, ns.device_link, b_up, concurrent=plan.transfer_overlap)
        f.t_update = NS.update_time(P_opt, N, state_bytes=state, grad_bytes_on_drive=g_drive, param_bytes=x,
                                    read_bandwidth=r_int, write_bandwidth=w_int, kernel_throughput=k_thr,
                                    upload_bandwidth=b_upload,
                                    overlap=ns.write_overlap if plan.transfer_overlap else 0.0)
        inside = NS.internal_bytes(P_opt, N, state, g_drive)
        f.csd_read, f.csd_write = inside["read"] * N, inside["write"] * N
        f.w_states = f.csd_write                              # FPGA -> NAND inside each CSD: wears the drive too
        f.t_kernel = NS.kernel_time(inside["read"], k_thr)
        f.optimizer = f.t_kernel
        f.up_read = f.up_read + x * P_opt
    if opt != "gpu":
        f.t_update, f.optimizer = f.t_update + t_cast, f.optimizer + t_cast


def params_back(f: Flows, part: Partition, plan: Plan, b_host: Num, b_write: Num, O: FormulaModule,
                bc: tuple[Num, Num] = (INF, INF)) -> None:
    """The updated fp16 parameters back where they live (GPU, host DRAM, CXL memory or the drives).

    CPU step, parameters on the GPU: each GPU receives the partition its own optimizer shard updated (``shard_opt``:
    every parameter of the GPU without ZeRO, 1/dp of them under ZeRO 1-2), and the data-parallel ranks all-gather
    the rest on the GPUs (priced with ZeRO's data-parallel communication, :mod:`dse.estimate.data_parallel`). Source:
    ZeRO-Offload (Ren et al., USENIX ATC'21, section 4.2: "each data parallel process ... updates its partition of
    the parameters on CPU, the updated fp16 partition is copied to GPU, followed by an all-gather"); DeepSpeed
    ``stage_1_and_2.py`` (the fp32 partition copied into the GPU's fp16 partition, then ``all_gather_dp_groups``);
    Megatron's distributed optimizer with ``--optimizer-cpu-offload`` likewise updates its shard and all-gathers.
    """
    e = part.gather_bytes
    opt, par = plan.offload_optimizer, plan.offload_params
    t_post: Num = 0.0
    if opt != "gpu" and par == "gpu":
        f.h2d = f.h2d + e * part.shard_opt
        t_post = O.transfer_time(e * part.shard_opt, b_host)
    elif opt == "gpu":                                        # GPU step, params offloaded: copy them back out
        f.d2h = f.d2h + e * part.shard_w
        t_post = O.transfer_time(e * part.shard_w, b_host)
    if par == "nvme":
        f.up_write = f.up_write + e * part.node_w
        f.w_params = e * part.node_w
        t_post = t_post + O.transfer_time(e * part.node_w, b_write)
    if "cxl" in (opt, par):
        t_post = _cxl.params_back(f, part, plan, t_post, b_host, bc, O)
    f.t_update = f.t_update + t_post


def phases(c: Result, f: Flows, compute_fw: Num, compute_bw: Num, gpu_part: Num, O: FormulaModule,
           dualpipe: bool = False) -> None:
    """The three serial segments replace the iteration; throughput rescaled; I/O added to ``io_exposed``.
    DualPipe interleaves forward and backward chunks: the fetches hide behind both phases' compute together
    (:func:`dse.estimate.dualpipe.offload_phases`), then the gradient hand-off as under 1F1B."""
    t = c["time"]
    if dualpipe:
        t_fw, c_bw = _dualpipe.offload_phases(compute_fw, compute_bw, f.t_fetch_fw, f.t_fetch_bw)
        t_bw = O.backward_phase_time(c_bw, 0.0, f.t_grad, f.t_tier, f.t_comp)
    else:
        t_fw = O.forward_phase_time(compute_fw, f.t_fetch_fw)
        t_bw = O.backward_phase_time(compute_bw, f.t_fetch_bw, f.t_grad, f.t_tier, f.t_comp)
    iteration = t_fw + t_bw + f.t_update
    old_iteration = t["iteration"]
    t["phase_forward"] = t_fw
    t["phase_backward"] = t_bw
    t["phase_update"] = f.t_update
    t["optimizer"] = f.optimizer
    t["io_exposed"] = t.get("io_exposed", 0.0) + (iteration - gpu_part - f.optimizer)   # keeps other techniques' I/O
    t["iteration"] = iteration
    scale = old_iteration / iteration
    for k in ("tokens_per_s", "samples_per_s", "mfu", "hfu"):
        c["throughput"][k] = c["throughput"][k] * scale


def traffic_and_links(c: Result, f: Flows, part: Partition, plan: Plan, system: SystemSpec, bws: Bandwidths,
                      bc: tuple[Num, Num] = (INF, INF)) -> tuple[dict[str, dict[str, Any]], dict[str, Num]]:
    """Add the bytes per link to ``traffic``; return (links section, busy seconds per link)."""
    b_host, b_up, b_read, b_write = bws
    storage = system.node.storage
    opt, par, N = plan.offload_optimizer, plan.offload_params, part.drives
    tr = c["traffic"]
    shared = f.up_read + f.up_write
    has_uplink = storage is not None and storage.uplink is not None
    tr["gpu_host"] = tr.get("gpu_host", 0.0) + f.h2d + f.d2h          # added to what other techniques move
    tr["host_switch"] = tr.get("host_switch", 0.0) + (shared if has_uplink else 0.0 * shared)
    tr["switch_drives"] = tr.get("switch_drives", 0.0) + shared
    tr["csd_internal"] = tr.get("csd_internal", 0.0) + f.csd_read + f.csd_write

    busy = {"gpu_host": maximum(f.h2d, f.d2h) / b_host}
    if storage is not None and (opt in ("nvme", "csd") or par == "nvme"):
        dev = storage.device
        if has_uplink:
            busy["host_switch"] = maximum(f.up_read, f.up_write) / b_up
        # csd: what comes up is the updated parameters from the accelerators' DRAM, at the device link
        up_rate = near_storage(system).device_link if opt == "csd" else dev.read_bandwidth
        busy["drives"] = f.up_read / (N * up_rate) + f.up_write / (N * dev.write_bandwidth)
    if opt == "csd":
        ns = near_storage(system)
        busy["csd_internal"] = (f.csd_read / minimum(ns.internal_read_bandwidth, ns.device_link)
                                + f.csd_write / minimum(ns.internal_write_bandwidth, ns.device_link)) / N
    links = {
        "gpu_host": {"bytes_to_gpu": f.h2d, "bytes_from_gpu": f.d2h, "bandwidth": b_host, "busy_s": busy["gpu_host"]},
    }
    if "drives" in busy:
        if has_uplink:
            links["host_switch"] = {"bytes_down": f.up_write, "bytes_up": f.up_read, "bandwidth": b_up,
                                    "busy_s": busy["host_switch"]}
        links["switch_drives"] = {"bytes_down": f.up_write, "bytes_up": f.up_read, "per_drive": shared / N,
                                  "bandwidth_read": b_read, "bandwidth_write": b_write, "busy_s": busy["drives"]}
    if opt == "csd":
        links["csd_internal"] = {"bytes_read": f.csd_read, "bytes_written": f.csd_write,
                                 "per_csd": (f.csd_read + f.csd_write) / N, "busy_s": busy["csd_internal"]}
    if "cxl" in (opt, par):   # the expanders' ports (full duplex); a key only where the plan uses them
        tr["host_cxl"] = tr.get("host_cxl", 0.0) + f.cxl_read + f.cxl_write
        links["host_cxl"], busy["host_cxl"] = _cxl.link(f, bc)
    return links, busy


def compose(c: Result, part: Partition, model: ModelSpec, system: SystemSpec, plan: Plan, O: FormulaModule,
            NS: FormulaModule) -> tuple[Flows, dict[str, dict[str, Any]], dict[str, Num], Bandwidths]:
    """The whole time half: returns (flows, links, busy seconds per link, bandwidths)."""
    i, ti = c["terms"], c["terms"].timed()
    m = i.micro_batches
    p_gpu = i.params_per_gpu
    bws = bandwidths(system, part.drives, _offload, plan)      # not traced: link arithmetic, not a model term
    bc = _cxl.cxl_bandwidths(system)                           # CXL memory expanders (read, write), likewise
    b_host, b_up, b_read, b_write = bws

    # GPU segments of the base estimate
    t_opt_base = ti.optimizer_time
    gpu_part = c["time"]["iteration"] - t_opt_base
    whole = i.layers_per_stage * ti.layer_total + ti.embedding_time + ti.head_time
    f_fwd = (i.layers_per_stage * ti.layer_forward + (ti.embedding_time + ti.head_time) / 3) / whole
    compute_fw = f_fwd * ti.pipeline_time
    compute_bw = gpu_part - compute_fw

    zero = 0.0 * p_gpu
    f = Flows(h2d=zero, d2h=zero, up_read=zero, up_write=zero, w_grads=zero, w_states=zero, w_params=zero,
              csd_read=zero, csd_write=zero)
    param_fetch(f, part, m, plan, b_host, b_read, O, bc)
    gradients(f, part, m, plan, system.node.gpu, b_host, b_write, O, NS, bc)
    t_cast = c["fp8"]["weight_cast_time"] if "fp8" in c else 0.0   # FP8: the weights' cast after the step
    update(f, part, t_opt_base, plan, system, b_read, b_write, b_up, O, NS, bc, t_cast)
    params_back(f, part, plan, b_host, b_write, O, bc)
    phases(c, f, compute_fw, compute_bw, gpu_part, O, plan.schedule == "dualpipe")
    if "fp8" in c:   # the cast's share of the offloaded (longer) iteration
        c["fp8"]["weight_cast_share"] = t_cast / c["time"]["iteration"]
    links, busy = traffic_and_links(c, f, part, plan, system, bws, bc)
    return f, links, busy, bws
