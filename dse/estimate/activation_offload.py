"""Activation offloading (SSDTrain) applied to a composed estimate: ``--offload-activations ssd|host``.

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

The formulas are in :mod:`dse.formulas.activation_offload`. Array-safe: numeric plan fields
may be numpy arrays; only the offload target and I/O path branch in Python.
"""

from __future__ import annotations

from dse.estimate.offload import drive_endurance
from dse.estimate.terms import drive_use
from dse.formulas import activation_offload as _ao
from dse.formulas._array import ceil, maximum, minimum, where


def active(plan) -> bool:
    """Does the plan offload activations (and so need this module)? Depends on a string field only."""
    return plan.offload_activations != "none"


def drives_used(system, plan):
    """Drives of one node used for offload: ``plan.ssds`` when given, else every drive of the node."""
    return drive_use(system, plan).count


def apply(c, model, system, plan, F=None) -> None:
    mode = plan.offload_activations
    if mode == "none":
        return
    A = F["activation_offload"] if F and "activation_offload" in F else _ao
    i = c["terms"]
    ti = i.timed()
    node = system.node
    m, p, v = i.micro_batches, i.pp, i.virtual_stages
    gpus_node = minimum(c["gpus"], node.gpus_per_node)   # GPUs of one node sharing its drives and DRAM

    # ------------------------------------------------------------ bytes per layer
    layers = i.layers_per_stage
    a = i.layer_activation_bytes
    a_off = A.offloaded_bytes_per_layer(i.seq_len, i.micro_batch, model.hidden, model.heads, model.kv_heads,
                                        model.head_dim, model.ffn_hidden, **i.activation_options)
    a_div = maximum(a_off, 1e-300)

    # ------------------------------------------------------------ times of one micro-batch on the stage
    t_f = ti.layer_forward
    t_b = ti.layer_backward + ti.layer_recompute
    t_mb = ti.stage_max
    non_layer = maximum(t_mb - layers * ti.layer_total, 0.0)   # head, embedding, p2p, fixed: 1/3 fwd, 2/3 bwd
    t_fwd = layers * t_f + non_layer / 3

    # ------------------------------------------------------------ bandwidth per GPU
    link = node.host_link
    link_bw = link.bandwidth * link.efficiency if link is not None else float("inf")
    link_left = A.link_bandwidth_left(link_bw, c["traffic"].get("gpu_host", 0.0), c["time"]["iteration"])
    dram = node.host.dram_bandwidth
    if mode == "ssd":
        storage = node.storage
        device = storage.device
        n_drives = drives_used(system, plan)
        per_gpu = A.drives_per_gpu(n_drives, gpus_node)
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
    bw_w = A.activation_io_bandwidth(array_w, link_left, path, dram, gpus_node)
    bw_r = A.activation_io_bandwidth(array_r, link_left, path, dram, gpus_node)

    # ------------------------------------------------------------ which layers
    backward_start = t_fwd + 2 * non_layer / 3               # backward reaches the stage's last layer
    k_rule = A.adaptive_offload_layers(bw_w, a_off, t_f, t_fwd, layers)              # SSDTrain's (write) rule
    k_hide = A.hidden_offload_layers(bw_w, bw_r, a_off, t_b, backward_start, t_mb, layers)
    in_flight = i.microbatches_in_flight
    gpu = c["memory"]["gpu"]
    # fewest layers whose offload brings the GPU under its capacity (each frees its offloaded bytes on every
    # micro-batch in flight of the fullest stage; the write backlog is left out, so this is a lower bound)
    per_layer = where(i.first_stage_is_max, in_flight, 1) * a_off
    excess = maximum(gpu["total"] - gpu["capacity"], 0.0)
    k_fit = where(excess > 0, ceil(minimum(excess / maximum(per_layer, 1.0), layers + 1)), 0.0 * excess)   # > l: none fits
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

    # ------------------------------------------------------------ one micro-batch: writes, forwarding, reads
    offloaded = k * a_off
    first_reload = backward_start + (layers - k) * t_b

    # full-rate writes, or writes paced to the drives' write:read ratio when the read side is capped,
    # decided once for the stage (as if every layer were offloaded), not per k: more offloaded layers then
    # never hold more GPU memory
    ratio = device.write_bandwidth / device.read_bandwidth if mode == "ssd" else 1.0
    paced_w = A.paced_write_bandwidth(bw_w, bw_r, ratio)
    all_off = layers * a_off

    def exposed_all(w):   # writes at w: what is unwritten when backward needs it is forwarded, the rest read back
        wr = all_off - A.forwarded_bytes(all_off, w, backward_start)
        return A.exposed_io_time(wr, wr, wr / a_div, a_off, w, bw_r, t_b, t_mb)

    bw_used = where(exposed_all(paced_w) < exposed_all(bw_w) * (1 - 1e-12), paced_w, bw_w)
    backlog = A.write_backlog(offloaded, bw_used, t_fwd)
    forwarded = A.forwarded_bytes(offloaded, bw_used, first_reload)
    written = offloaded - forwarded
    read = written
    exposed_mb = A.exposed_io_time(written, read, read / a_div, a_off, bw_used, bw_r, t_b, t_mb)

    # ------------------------------------------------------------ GPU memory
    other_first = i.activations_first_stage - in_flight * layers * a   # embedding, head, recompute working set
    other_last = i.activations_last_stage - layers * a
    act_first = A.gpu_activation_bytes_offload(layers, k, a, a_off, in_flight, backlog, other_first)
    act_last = A.gpu_activation_bytes_offload(layers, k, a, a_off, 1, backlog, other_last)
    before = gpu["activations"]
    after = where(i.first_stage_is_max, act_first, act_last)
    saved = before - after
    fixed = gpu["total"] - before                            # states and buffers (whatever other techniques left)
    gpu["activations"] = after
    gpu["total"] = fixed + after

    # ------------------------------------------------------------ where the offloaded bytes live (per node)
    per_gpu_bytes = A.ssd_capacity_needed(in_flight, written)
    node_bytes = gpus_node * per_gpu_bytes
    tier = c["memory"]["storage" if mode == "ssd" else "host"]
    tier["activations"] = tier["activations"] + node_bytes
    tier["total"] = tier["total"] + node_bytes
    if mode == "ssd" and plan.ssds is not None:
        tier["capacity"] = n_drives * device.capacity

    # ------------------------------------------------------------ time
    t = c["time"]
    io = (m + (p - 1) / v) * exposed_mb                      # every pipeline slot waits, the bubble's too
    t_before = t["iteration"]
    t["io_exposed"] = t["io_exposed"] + io
    t["iteration"] = t_before + io
    th = c["throughput"]
    for key in ("tokens_per_s", "samples_per_s", "mfu", "hfu"):
        th[key] = th[key] * t_before / t["iteration"]

    # ------------------------------------------------------------ traffic (bytes per GPU per iteration; added)
    tr = c["traffic"]
    moved = m * (written + read)
    tr["gpu_host"] = tr.get("gpu_host", 0.0) + moved
    if mode == "ssd":
        tr["storage_write"] = tr.get("storage_write", 0.0) + m * written
        tr["storage_read"] = tr.get("storage_read", 0.0) + m * read
        tr["switch_drives"] = tr.get("switch_drives", 0.0) + gpus_node * moved      # per node, all drives
        if storage.uplink is not None:
            tr["host_switch"] = tr.get("host_switch", 0.0) + gpus_node * moved
    if path in ("bounce", "host"):
        tr["host_dram"] = tr.get("host_dram", 0.0) + (2 if path == "bounce" else 1) * moved

    # ------------------------------------------------------------ sections
    budget = gpu["capacity"]
    section = {
        "target": mode,
        "path": path,
        "rule": rule,
        "layers_per_stage": layers,
        "layers_offloaded": k,
        "layers_kept": layers - k,
        "saved_bytes_per_layer": a,
        "offloaded_bytes_per_layer": a_off,
        "bytes_offloaded_per_microbatch": written,
        "bytes_forwarded_per_microbatch": forwarded,
        "bytes_offloaded_per_iteration": m * written,
        "bytes_read_per_iteration": m * read,
        "layer_forward_s": t_f,
        "layer_backward_s": t_b,
        "forward_s_per_microbatch": t_fwd,
        "write_bandwidth_required_per_layer": A.write_bandwidth_required(a_off, t_f),
        "read_bandwidth_required_per_layer": A.read_bandwidth_required(a_off, t_b),
        "write_bandwidth_to_offload_all_layers": A.adaptive_bandwidth_required(layers - 1, a_off, t_f, t_fwd),
        "write_bandwidth_available": bw_w,
        "write_bandwidth_used": bw_used,
        "layers_by_ssdtrain_rule": k_rule,
        "layers_io_hides": k_hide,
        "layers_to_fit": k_fit,
        "read_bandwidth_available": bw_r,
        "write_backlog_bytes": backlog,
        "exposed_io_per_microbatch_s": exposed_mb,
        "exposed_io_s": io,
        "gpu_activations_without_offload": before,
        "gpu_activations": after,
        "gpu_memory_saved": saved,
        "activation_peak_reduction": saved / before,
        "capacity_needed_per_gpu": per_gpu_bytes,
        "capacity_needed_per_node": node_bytes,
        "max_micro_batch_without_offload": A.largest_micro_batch(budget, fixed, before / i.micro_batch),
        "max_micro_batch": A.largest_micro_batch(budget, fixed, after / i.micro_batch),
    }
    # drive wear: storage offload's writes (dse.estimate.offload) go to the same drives; this technique
    # lengthened the iteration, so the section is recomputed whenever either writes
    prior = i.drive_writes
    by_source = dict(prior.by_source) if prior else {}
    per_drive = prior.per_drive if prior else 0.0
    if mode == "ssd":
        section["drives_per_gpu"] = per_gpu
        section["capacity_available_per_node"] = tier["capacity"]
        w_gpu = A.bytes_written_per_iteration(m, written)
        by_source["activations"] = gpus_node * w_gpu
        per_drive = per_drive + w_gpu / per_gpu                # the most loaded drive (smallest per-GPU array)
    if mode == "ssd" or prior:
        drive_endurance(c, node.storage.device, by_source, per_drive, gpus_node, F)
    c["activation_offload"] = section
