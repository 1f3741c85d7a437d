"""Storage offload (ZeRO-Infinity) and near-storage update (Smart-Infinity) in an estimate.

Applied after the base composition when the plan offloads optimizer state or
parameters (``--offload-optimizer cpu|nvme|csd``, ``--offload-params cpu|nvme``). It

- moves the model-state bytes between the memory tiers (GPU, host DRAM, drives) and
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
- when the plan writes to the drives (optimizer on ``nvme``/``csd``, parameters on ``nvme``), an
  ``endurance`` section (:func:`drive_endurance`): bytes the drives absorb per iteration by source
  (fp32 gradients, optimizer states, fp16 parameters; for a CSD the states its accelerator writes back
  to its NAND), the write rate of one drive and the years to its rated TBW. Activation offload
  (:mod:`dse.estimate.activation_offload`, applied later) adds its writes to the same drives and
  recomputes the section with its final iteration time. A plan that writes nothing to drives has no
  ``endurance`` section: its drives do not wear (the search reads that as an unlimited lifetime).

Every numeric input may be a numpy array (e.g. ``plan.ssds``); only the offload tier
names and booleans branch in Python.
"""

from __future__ import annotations

from dse.estimate.terms import DriveWrites, drive_use
from dse.formulas import activation_offload as _ao, near_storage as _near, offload as _offload, optimizer as _optimizer
from dse.formulas._array import is_scalar, maximum, minimum, where
from dse.formulas.precision import recipe_of

EXCHANGE_BYTES = {"fp32": 4, "fp16": 2}
INF = float("inf")


def active(plan) -> bool:
    """Does the plan offload anything (and so need this module)?"""
    return plan.offload_optimizer != "gpu" or plan.offload_params != "gpu"


def drives_used(system, plan):
    """Drives the plan uses: ``plan.ssds`` if given, else every drive of a node (0 without drives)."""
    return drive_use(system, plan).count


def mode_label(plan) -> str:
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
    if opt == "cpu":
        return "ZeRO-Offload (optimizer in host DRAM, CPU update)"
    return "ZeRO-3 with parameters offloaded"


def _bandwidths(system, N):
    node = system.node
    hl = node.host_link
    b_host = _offload.link_bandwidth(hl.bandwidth, hl.efficiency) if hl else INF
    storage = node.storage
    if storage is None:
        return b_host, INF, INF, INF
    up = storage.uplink
    b_up = _offload.link_bandwidth(up.bandwidth, up.efficiency) if up else INF
    dev = storage.device
    return (b_host, b_up, _offload.array_bandwidth(N, dev.read_bandwidth, b_up),
            _offload.array_bandwidth(N, dev.write_bandwidth, b_up))


def _argmax_name(busy: dict):
    """Name of the busiest link (an array of names when the inputs are arrays)."""
    names = list(busy)
    values = list(busy.values())
    if all(is_scalar(v) for v in values):
        return max(zip(values, names))[1]
    import numpy as np

    stack = np.stack(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in values]))
    return np.asarray(names)[np.argmax(stack, axis=0)]


def apply(c, model, system, plan, F=None) -> None:
    if not active(plan):
        return
    O = F["offload"] if F and "offload" in F else _offload
    NS = F["near_storage"] if F and "near_storage" in F else _near
    i = c["terms"]
    ti = i.timed()
    node = system.node
    gpu, host, storage = node.gpu, node.host, node.storage
    dev = storage.device if storage is not None else None
    opt, par = plan.offload_optimizer, plan.offload_params
    offloaded_opt = opt != "gpu"

    d, m, zero = i.dp, i.micro_batches, plan.zero
    r = recipe_of(plan)
    w, g16, g32 = r.weight_gathers, r.offload_gradients, r.offload_master_gradients   # bytes per element moved
    p_gpu = i.params_per_gpu
    g_node = minimum(c["gpus"], node.gpus_per_node)          # GPUs sharing one host and its drives
    shard_opt = p_gpu / where(zero >= 1, d, 1)                # optimizer partition of one GPU
    shard_w = p_gpu / where(zero >= 3, d, 1)                  # fp16 parameter partition of one GPU
    P_opt = shard_opt * g_node                                # optimizer partitions a node holds
    P_w = shard_w * g_node
    OPT = F["optimizer"] if F and "optimizer" in F else _optimizer
    state = OPT.state_bytes_per_param(plan.optimizer, r)      # master copy + states (mixed-precision Adam: 12)
    N = drives_used(system, plan)
    b_host, b_up, b_read, b_write = _bandwidths(system, N)
    x = EXCHANGE_BYTES[plan.exchange_dtype]
    cr = plan.gradient_compression
    compressed = cr < 1

    # ------------------------------------------------------------ GPU segments of the base estimate
    t = c["time"]
    t_opt_base = ti.optimizer_time
    gpu_part = t["iteration"] - t_opt_base
    whole = i.layers_per_stage * ti.layer_total + ti.embedding_time + ti.head_time
    f_fwd = (i.layers_per_stage * ti.layer_forward + (ti.embedding_time + ti.head_time) / 3) / whole
    compute_fw = f_fwd * ti.pipeline_time
    compute_bw = gpu_part - compute_fw

    # ------------------------------------------------------------ parameters to the GPU (ZeRO-3 fetch)
    h2d = 0.0 * p_gpu
    d2h = 0.0 * p_gpu
    up_read = 0.0 * p_gpu       # drives -> host over the shared link
    up_write = 0.0 * p_gpu      # host -> drives
    w_grads = w_states = w_params = 0.0 * p_gpu   # bytes the drives' NAND absorbs per iteration (node), by source
    t_fetch_fw = t_fetch_bw = 0.0
    if par != "gpu":
        passes = O.fetch_passes(plan.recompute)
        t_pass = O.transfer_time(O.param_fetch_bytes(shard_w, w, 1), b_host)
        if par == "nvme":
            t_pass = maximum(t_pass, O.transfer_time(O.param_fetch_bytes(P_w, w, 1), b_read))
            up_read = up_read + m * O.param_fetch_bytes(P_w, w, passes)
        t_fetch_fw = m * t_pass
        t_fetch_bw = m * (passes - 1) * t_pass
        h2d = h2d + m * O.param_fetch_bytes(shard_w, w, passes)

    # ------------------------------------------------------------ gradients off the GPU
    t_grad = t_tier = t_comp = 0.0
    if offloaded_opt:
        grads = g16 * shard_opt * m                           # fp16 gradient partitions, every micro-batch
        d2h = d2h + grads
        t_grad = O.transfer_time(grads, b_host)
    if opt == "nvme":
        g_tier = O.gradient_offload_bytes(P_opt, g32)
        up_write = up_write + g_tier
        w_grads = g_tier
        t_tier = O.transfer_time(g_tier, b_write)
    elif opt == "csd":
        g_tier = O.gradient_offload_bytes(P_opt, x, cr)
        up_write = up_write + g_tier
        w_grads = g_tier                                      # stored on each CSD's drive, read back by its FPGA
        t_tier = O.transfer_time(g_tier, b_write)
        # Released code: dense gradients go back to the GPU, are sorted there, values + indices come back.
        if not (is_scalar(cr) and not compressed):
            t_comp = where(compressed, O.transfer_time(g16 * shard_opt, b_host)
                           + NS.topk_time(shard_opt, gpu.hbm_bandwidth, gpu.efficiency.memory)
                           + O.transfer_time(cr * x * shard_opt, b_host), 0.0)
            h2d = h2d + where(compressed, g16 * shard_opt, 0.0)
            d2h = d2h + where(compressed, cr * x * shard_opt, 0.0)

    # ------------------------------------------------------------ update
    csd_read = csd_write = 0.0 * p_gpu
    t_kernel = 0.0
    if opt == "gpu":
        t_update = t_opt_base
        optimizer = t_opt_base
    elif opt == "cpu":
        optimizer = O.cpu_optimizer_time(P_opt, state, host.optimizer_throughput)
        t_update = optimizer
    elif opt == "nvme":
        r_bytes = O.swap_in_bytes(P_opt, state, g32)
        w_bytes = O.swap_out_bytes(P_opt, state)
        up_read = up_read + r_bytes
        up_write = up_write + w_bytes
        w_states = w_bytes
        t_r, t_w = O.transfer_time(r_bytes, b_read), O.transfer_time(w_bytes, b_write)
        t_cpu = O.cpu_optimizer_time(P_opt, state, host.optimizer_throughput)
        t_update = O.swap_update_time(t_r, t_cpu, t_w, plan.swap_pipeline)
        optimizer = maximum(t_cpu - (t_r + t_w), 0.0) if plan.swap_pipeline else t_cpu
    else:  # csd: SmartUpdate on every drive's accelerator
        ns = dev.near_storage
        g_drive = cr * x
        k_thr = where(compressed, ns.decompress_throughput, ns.update_throughput)
        r_int = minimum(ns.internal_read_bandwidth, ns.device_link)
        w_int = minimum(ns.internal_write_bandwidth, ns.device_link)
        b_upload = NS.upload_bandwidth(N, ns.device_link, b_up, concurrent=plan.transfer_overlap)
        t_update = NS.update_time(P_opt, N, state_bytes=state, grad_bytes_on_drive=g_drive, param_bytes=x,
                                  read_bandwidth=r_int, write_bandwidth=w_int, kernel_throughput=k_thr,
                                  upload_bandwidth=b_upload, overlap=ns.write_overlap if plan.transfer_overlap else 0.0)
        inside = NS.internal_bytes(P_opt, N, state, g_drive)
        csd_read, csd_write = inside["read"] * N, inside["write"] * N
        w_states = csd_write                                  # FPGA -> NAND inside each CSD: wears the drive too
        t_kernel = NS.kernel_time(inside["read"], k_thr)
        optimizer = t_kernel
        up_read = up_read + x * P_opt
    # updated fp16 parameters back where they live
    t_post = 0.0
    if offloaded_opt and par == "gpu":
        h2d = h2d + w * shard_w
        t_post = O.transfer_time(w * shard_w, b_host)
    elif not offloaded_opt:                                   # GPU step, params offloaded: copy them back out
        d2h = d2h + w * shard_w
        t_post = O.transfer_time(w * shard_w, b_host)
    if par == "nvme":
        up_write = up_write + w * P_w
        w_params = w * P_w
        t_post = t_post + O.transfer_time(w * P_w, b_write)
    t_update = t_update + t_post

    # ------------------------------------------------------------ phases and the time components
    t_fw = O.forward_phase_time(compute_fw, t_fetch_fw)
    t_bw = O.backward_phase_time(compute_bw, t_fetch_bw, t_grad, t_tier, t_comp)
    iteration = t_fw + t_bw + t_update
    old_iteration = t["iteration"]
    t["phase_forward"] = t_fw
    t["phase_backward"] = t_bw
    t["phase_update"] = t_update
    t["optimizer"] = optimizer
    t["io_exposed"] = t.get("io_exposed", 0.0) + (iteration - gpu_part - optimizer)   # keeps I/O other techniques set
    t["iteration"] = iteration
    scale = old_iteration / iteration
    for k in ("tokens_per_s", "samples_per_s", "mfu", "hfu"):
        c["throughput"][k] = c["throughput"][k] * scale

    # ------------------------------------------------------------ traffic per iteration
    tr = c["traffic"]
    shared = up_read + up_write
    has_uplink = storage is not None and storage.uplink is not None
    tr["gpu_host"] = tr.get("gpu_host", 0.0) + h2d + d2h          # added to what other techniques move
    tr["host_switch"] = tr.get("host_switch", 0.0) + (shared if has_uplink else 0.0 * shared)
    tr["switch_drives"] = tr.get("switch_drives", 0.0) + shared
    tr["csd_internal"] = tr.get("csd_internal", 0.0) + csd_read + csd_write

    busy = {"gpu_host": maximum(h2d, d2h) / b_host}
    if storage is not None and (opt in ("nvme", "csd") or par == "nvme"):
        if has_uplink:
            busy["host_switch"] = maximum(up_read, up_write) / b_up
        # csd: what comes up is the updated parameters from the accelerators' DRAM, at the device link
        up_rate = dev.near_storage.device_link if opt == "csd" else dev.read_bandwidth
        busy["drives"] = up_read / (N * up_rate) + up_write / (N * dev.write_bandwidth)
    if opt == "csd":
        busy["csd_internal"] = (csd_read / minimum(ns.internal_read_bandwidth, ns.device_link)
                                + csd_write / minimum(ns.internal_write_bandwidth, ns.device_link)) / N
    links = {
        "gpu_host": {"bytes_to_gpu": h2d, "bytes_from_gpu": d2h, "bandwidth": b_host, "busy_s": busy["gpu_host"]},
    }
    if "drives" in busy:
        if has_uplink:
            links["host_switch"] = {"bytes_down": up_write, "bytes_up": up_read, "bandwidth": b_up, "busy_s": busy["host_switch"]}
        links["switch_drives"] = {"bytes_down": up_write, "bytes_up": up_read, "per_drive": shared / N,
                                  "bandwidth_read": b_read, "bandwidth_write": b_write, "busy_s": busy["drives"]}
    if opt == "csd":
        links["csd_internal"] = {"bytes_read": csd_read, "bytes_written": csd_write, "per_csd": (csd_read + csd_write) / N,
                                 "busy_s": busy["csd_internal"]}

    # ------------------------------------------------------------ memory tiers
    mem = c["memory"]
    mg, mh, ms = mem["gpu"], mem["host"], mem["storage"]
    if offloaded_opt:
        mg["optimizer"] = 0.0 * p_gpu
        mg["gradients"] = O.reduce_bucket_bytes(shard_opt, grad_bytes=g16)
        mh["gradients"] = mh["gradients"] + g16 * P_opt     # fp16 gradient partitions in pinned host memory
    if par != "gpu":
        mg["weights"] = 0.0 * p_gpu                          # only the gathered layers, counted in buffers
    if par == "cpu":
        mh["weights"] = mh["weights"] + r.weights * P_w
    if opt == "cpu":
        mh["gradients"] = mh["gradients"] + g32 * P_opt
        mh["optimizer"] = mh["optimizer"] + state * P_opt
    if opt in ("nvme", "csd"):
        mh["buffers"] = mh["buffers"] + g_node * O.optimizer_swap_buffer_bytes(plan.sub_group_size, plan.optimizer_buffer_count)
        ms["optimizer"] = ms["optimizer"] + state * P_opt
        ms["gradients"] = ms["gradients"] + (O.gradient_offload_bytes(P_opt, g32) if opt == "nvme"
                                             else O.gradient_offload_bytes(P_opt, x, cr))
    if par == "nvme":
        mh["buffers"] = mh["buffers"] + g_node * O.param_swap_buffer_bytes(plan.param_buffer_count, plan.param_buffer_size)
        ms["weights"] = ms["weights"] + r.weights * P_w
    for tier in (mg, mh, ms):
        tier["total"] = tier["weights"] + tier["gradients"] + tier["optimizer"] + tier["activations"] + tier["buffers"]
    if dev is not None:
        ms["capacity"] = N * dev.capacity

    section = {"mode": mode_label(plan), "optimizer_tier": opt, "params_tier": par, "drives": N,
               "drives_in_hardware": storage.count if storage is not None else 0,
               "placement": O.placement(3, opt, par, plan.optimizer),   # par != gpu implies ZeRO-3 (check_offload)
               "links": links, "bottleneck_link": _argmax_name(busy)}
    if opt == "csd":
        sg = minimum(plan.sub_group_size, P_opt / N)
        kept = where(compressed, NS.kept_fraction(cr, 2, 4, x) * sg, 0.0)
        need = NS.handler_buffer_bytes(sg, state, x, 2 if x == 2 else 0, kept, 6)
        section["accelerator"] = {"buffer_bytes": need, "dram_capacity": ns.dram_capacity,
                                  "kernel_s": t_kernel, "share_params": P_opt / N}
    section["required_bandwidth"] = required_bandwidths(c, model, system, plan, b_host, b_read, N)
    c["offload"] = section

    # ------------------------------------------------------------ drive wear (only when the plan writes to drives)
    if dev is not None and (opt in ("nvme", "csd") or par == "nvme"):
        by_source = {"gradients": w_grads, "optimizer_states": w_states, "parameters": w_params}
        # RAID0 (nvme) stripes every tensor over the N drives; SmartUpdate gives each CSD 1/N of the parameters
        per_drive = (w_grads + w_states + w_params) / N
        i.drive_writes = DriveWrites(by_source=by_source, per_drive=per_drive)
        drive_endurance(c, dev, by_source, per_drive, g_node, F)


def drive_endurance(c, device, by_source: dict, per_drive, gpus_node, F=None) -> None:
    """Set ``c["endurance"]``: drive wear at the current iteration time, from the bytes written per iteration.

    ``by_source``: bytes the node's drives absorb per iteration, by what writes them; ``per_drive``: bytes
    per iteration on the most written drive. Write amplification 1 (large sequential writes). Uses the
    endurance formulas of :mod:`dse.formulas.activation_offload` (TBW = capacity x DWPD x 365 x warranty
    years; years = TBW / (rate x seconds per year)). Called by storage offload and again by activation
    offload, which adds its writes and lengthens the iteration. Array-safe.
    """
    A = F["activation_offload"] if F and "activation_offload" in F else _ao
    node = sum(by_source.values())
    rate = per_drive / c["time"]["iteration"]
    tbw = A.rated_endurance(device.capacity, device.dwpd, device.warranty_years)
    c["endurance"] = {
        "drive": device.name,
        "bytes_written_per_iteration": node,
        "bytes_written_per_iteration_per_gpu": node / gpus_node,
        "bytes_written_per_iteration_per_drive": per_drive,
        "bytes_written_per_iteration_by_source": dict(by_source),
        "write_rate_per_drive": rate,
        "rated_endurance_per_drive": tbw,
        "lifetime_years": A.lifetime_years(tbw, rate),
    }


def violations(r, system, plan) -> list[str]:
    """Constraints of one scalar result this technique adds: the CSD accelerator's DRAM must hold the handler buffers."""
    acc = r.get("offload", {}).get("accelerator")
    if acc is None or not acc["buffer_bytes"] > acc["dram_capacity"]:
        return []
    from dse.units import fmt

    return [f"accelerator DRAM: the transfer handler needs {fmt(acc['buffer_bytes'], 'bytes')} per CSD, "
            f"{system.node.storage.device.name} has {fmt(acc['dram_capacity'], 'bytes')} (lower plan.sub_group_size)"]


def violation_masks(c, system, plan) -> dict:
    """:func:`violations` for arrays (the vectorised search): ``{constraint: True where violated}``."""
    acc = c.get("offload", {}).get("accelerator")
    if acc is None:
        return {}
    return {"accelerator DRAM: the transfer handler's buffers exceed the CSD's DRAM": acc["buffer_bytes"] > acc["dram_capacity"]}


def required_bandwidths(c, model, system, plan, b_host, b_read, N) -> dict:
    """ZeRO-Infinity's efficiency model for each tensor class: what bandwidth 50 % / 90 % efficiency needs.

    Peak is the GPU's achievable GEMM rate (dense peak x gemm efficiency), as
    ZeRO-Infinity uses 70 TFLOP/s achievable on V100. ``available`` is the bandwidth
    of the tier the class is offloaded to in this plan (None when it stays on the GPU).
    """
    O = _offload
    i = c["terms"]
    gpu, dev = system.node.gpu, system.node.storage.device if system.node.storage else None
    opt = plan.offload_optimizer
    peak = i.peak_flops * gpu.efficiency.gemm
    s, b, m = i.seq_len, i.micro_batch, i.micro_batches
    avail_opt = None
    if opt == "cpu":
        avail_opt = system.node.host.dram_bandwidth       # the CPU updates the states where they are
    elif opt == "nvme":
        avail_opt = b_read
    elif opt == "csd":
        ns = dev.near_storage
        avail_opt = N * minimum(ns.internal_read_bandwidth, ns.device_link)
    avail_par = {"gpu": None, "cpu": b_host, "nvme": minimum(b_host, b_read)}[plan.offload_params]
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
