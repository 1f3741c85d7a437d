"""Storage-offloaded training (ZeRO-Infinity): placement, bytes per tier and link, phase times.

Sources: Rajbhandari et al., "ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme
Scale Deep Learning", SC'21 (arXiv 2104.07857), Sec. 3-4; Jang et al., "Smart-Infinity:
Fast Large Language Model Training using Near-Storage Processing on a Real System",
HPCA'24 (arXiv 2403.06664), Sec. II-III and Table I; DeepSpeed's swap code
(``deepspeed/runtime/swap_tensor/*``, ``runtime/zero/offload_config.py``) for the
defaults. The research note ``reference/storage_offload.md`` collects the numbers.

Tensor classes of mixed-precision training with an adaptive optimizer, bytes per
parameter: fp16 parameters 2, fp16 gradients 2, fp32 gradients 4, fp32 master
parameters 4, momentum 4, variance 4 (Adam: 12 B of optimizer state; SGD with
momentum and AdaGrad: 8 B, hence "3/4 of Adam's offload volume", Smart-Infinity
Sec. VII-F). Smart-Infinity's unit M = 2P bytes (the fp16 model).

The per-iteration time splits into the three segments of Smart-Infinity's figures:
forward, backward + gradient offload, update + optimizer-state I/O. The update
cannot start before every gradient is in (loss-scale overflow check and gradient
clipping need the global norm; Smart-Infinity Sec. IV-C), so the segments add.
All functions broadcast over numpy arrays.
"""

from __future__ import annotations

from dse.formulas._array import maximum, minimum

TIERS = ("gpu", "cpu", "nvme", "csd")
TENSOR_CLASSES = ("params_fp16", "grads_fp16", "grads_fp32", "master_fp32", "momentum", "variance")
CLASS_BYTES = {"params_fp16": 2, "grads_fp16": 2, "grads_fp32": 4, "master_fp32": 4, "momentum": 4, "variance": 4}
# Optimizer-state classes per optimizer (the fp32 master copy is part of the optimizer state).
OPTIMIZER_CLASSES = {
    "adam": ("master_fp32", "momentum", "variance"),
    "sgd-momentum": ("master_fp32", "momentum"),
    "adagrad": ("master_fp32", "variance"),   # AdaGrad's sum of squared gradients
}
# Which memory section of an estimate holds a tier.
TIER_SECTION = {"gpu": "gpu", "cpu": "host", "nvme": "storage", "csd": "storage"}
# Memory-section class of each tensor class.
CLASS_SECTION = {"params_fp16": "weights", "grads_fp16": "gradients", "grads_fp32": "gradients",
                 "master_fp32": "optimizer", "momentum": "optimizer", "variance": "optimizer"}

# DeepSpeed defaults (deepspeed/runtime/zero/offload_config.py, microsoft/DeepSpeed 38327e0).
OPTIMIZER_BUFFER_COUNT = 4        # offload_optimizer.buffer_count
PARAM_BUFFER_COUNT = 5            # offload_param.buffer_count
PARAM_BUFFER_SIZE = 1e8           # offload_param.buffer_size (elements)
SUB_GROUP_SIZE = 1e9              # zero_optimization.sub_group_size (elements)
REDUCE_BUCKET_SIZE = 5e8          # zero_optimization.reduce_bucket_size (elements)


# ----------------------------------------------------------------------------- placement


def optimizer_state_bytes(optimizer: str = "adam"):
    """Bytes per parameter of optimizer state including the fp32 master copy.

    Formula: 4 (master) + 4 per moment: Adam 12 (m, v), SGD-momentum 8, AdaGrad 8
    (ZeRO-Infinity Sec. 3: "FP32 momentum, variance, parameters"; Smart-Infinity Sec. VII-F).
    """
    return sum(CLASS_BYTES[k] for k in OPTIMIZER_CLASSES[optimizer])


def placement(zero: int, offload_optimizer: str = "gpu", offload_params: str = "gpu", optimizer: str = "adam") -> dict:
    """Tier of each tensor class: {class: "gpu" | "cpu" | "nvme" | "csd"}.

    Formula: fp16 params on ``offload_params`` (stage 3 only; else gpu); fp16 gradients
    on the GPU (transient reduce buckets); fp32 gradients and the optimizer states on
    ``offload_optimizer`` (ZeRO-Offload: cpu; ZeRO-Infinity: nvme; Smart-Infinity: csd,
    i.e. the drives whose accelerators run the update). Classes the optimizer does not
    have are absent. (ZeRO-Infinity Sec. 5; Smart-Infinity Sec. II-A, IV-D.)
    """
    out = {"params_fp16": offload_params if zero >= 3 else "gpu", "grads_fp16": "gpu", "grads_fp32": offload_optimizer}
    for k in OPTIMIZER_CLASSES[optimizer]:
        out[k] = offload_optimizer
    return out


def bytes_by_tier(params, placed: dict, class_bytes: dict | None = None) -> dict:
    """Bytes each tier holds for ``params`` parameters: {tier: {class: bytes}}.

    Formula: bytes(tier, class) = P x bytes_per_param(class) for the classes placed on the tier.
    ``class_bytes`` overrides bytes per parameter (e.g. fp16 gradients exchanged with a CSD).
    """
    sizes = {**CLASS_BYTES, **(class_bytes or {})}
    out = {t: {} for t in TIERS}
    for cls, tier in placed.items():
        out[tier][cls] = params * sizes[cls]
    return out


def optimizer_swap_buffer_bytes(sub_group_size=SUB_GROUP_SIZE, buffer_count=OPTIMIZER_BUFFER_COUNT, element_bytes=4):
    """Pinned host buffers DeepSpeed allocates to swap optimizer state to NVMe.

    Formula: buffer_count x sub_group_size x 4 B (``SwapBufferManager(num_elems=largest
    sub-group, count=offload_optimizer.buffer_count, dtype=fp32)``; defaults 4 x 1e9 x 4 B
    = 16 GB; Smart-Infinity's config 40 x 4e7 x 4 B = 6.4 GB). Note section 3.4.
    """
    return buffer_count * sub_group_size * element_bytes


def param_swap_buffer_bytes(buffer_count=PARAM_BUFFER_COUNT, buffer_size=PARAM_BUFFER_SIZE, element_bytes=2):
    """Pinned host buffers for NVMe-offloaded fp16 parameters.

    Formula: buffer_count x buffer_size x 2 B (offload_param defaults 5 x 1e8 x 2 B = 1 GB;
    DeepSpeed ``partitioned_param_swapper.py``). Note section 3.4.
    """
    return buffer_count * buffer_size * element_bytes


def reduce_bucket_bytes(params, bucket_size=REDUCE_BUCKET_SIZE, grad_bytes=2):
    """GPU buffer that collects fp16 gradients before they go to the host.

    Formula: g x min(bucket, P) (DeepSpeed ``reduce_bucket_size``, default 5e8 elements).
    """
    return grad_bytes * minimum(bucket_size, params)


def largest_sub_group(params, sub_group_size=SUB_GROUP_SIZE):
    """Elements in the largest optimizer sub-group. Formula: min(sub_group_size, P)."""
    return minimum(sub_group_size, params)


# ----------------------------------------------------------------------------- bytes per iteration


def fetch_passes(recompute: str = "full") -> int:
    """How many times ZeRO-3 brings every fp16 parameter to the GPU per micro-batch.

    Formula: 3 with full activation recomputation (forward, recompute, backward), else 2
    (ZeRO-Infinity Sec. 4.1: "parameters are loaded three times").
    """
    return 3 if recompute == "full" else 2


def param_fetch_bytes(params, weight_bytes=2, passes=1):
    """Bytes of fp16 parameters moved to the GPU. Formula: passes x w x P."""
    return passes * weight_bytes * params


def gradient_offload_bytes(params, grad_bytes=4, compression=1.0):
    """Gradient bytes written toward the optimizer's tier in backward.

    Formula: c x g x P; g = 4 (fp32, ZeRO-Infinity's swap dtype), c = compression ratio
    (1 = dense; Smart-Infinity Table I "c% x 2M").
    """
    return compression * grad_bytes * params


def swap_in_bytes(params, state_bytes=12, grad_bytes=4):
    """Bytes read from the drives by the CPU optimizer step. Formula: P (state + g) (Table I: 6M + 2M)."""
    return params * (state_bytes + grad_bytes)


def swap_out_bytes(params, state_bytes=12):
    """Bytes written back to the drives after the CPU step. Formula: P x state (Table I: 6M)."""
    return params * state_bytes


def shared_link_traffic(params, mode: str = "baseline", state_bytes=12, grad_bytes=4, param_bytes=4, compression=1.0):
    """Bytes per iteration on the host <-> drives shared link, by tensor class and direction.

    Formula: baseline (ZeRO-Infinity): states read + written 2 x state x P, gradients
    written + read 2 x g x P = 32P; SmartUpdate: c x g x P down, p x P up = 8P, 4P (1 + c)
    with compression c (Smart-Infinity Table I, in M = 2P: 6M + 6M + 2M + 2M vs 2M + 2M).
    Keys: states_read, states_write, gradients_write, gradients_read, params_read, total.

    >>> shared_link_traffic(1.0, "baseline")["total"], shared_link_traffic(1.0, "smartupdate")["total"]
    (32.0, 8.0)
    >>> round(shared_link_traffic(1.0, "smartupdate", compression=0.02)["total"], 2)
    4.08
    """
    if mode == "baseline":
        out = {"states_read": state_bytes * params, "states_write": state_bytes * params,
               "gradients_write": grad_bytes * params, "gradients_read": grad_bytes * params,
               "params_read": 0 * params}
    elif mode == "smartupdate":
        out = {"states_read": 0 * params, "states_write": 0 * params,
               "gradients_write": compression * grad_bytes * params, "gradients_read": 0 * params,
               "params_read": param_bytes * params}
    else:
        raise ValueError(f"mode must be 'baseline' or 'smartupdate', got {mode!r}")
    out["total"] = sum(out.values())
    return out


# ----------------------------------------------------------------------------- bandwidth


def link_bandwidth(nominal, efficiency=1.0):
    """Achievable bandwidth of a link. Formula: B_nominal x efficiency."""
    return nominal * efficiency


def array_bandwidth(drives, per_drive, shared_link=float("inf")):
    """Bandwidth of N drives striped (RAID0) behind one shared link (PCIe switch uplink).

    Formula: min(N x B_drive, B_link) — per-drive bandwidth adds up until the shared
    uplink saturates (Smart-Infinity Sec. III, Fig. 3b: RAID0 stops scaling after ~4 drives).
    """
    return minimum(drives * per_drive, shared_link)


def transfer_time(nbytes, bandwidth):
    """Time to move bytes at a bandwidth. Formula: S / B."""
    return nbytes / bandwidth


# ----------------------------------------------------------------------------- phase times


def cpu_optimizer_time(params, state_bytes=12, throughput=16e9):
    """CPU optimizer step over P parameters.

    Formula: P x state / throughput (DeepSpeed CPU-Adam streams the fp32 state; the
    maintainers' estimate is ~16 GB/s of state, deepspeedai/DeepSpeed#6695).
    """
    return params * state_bytes / throughput


def swap_update_time(read_time, compute_time, write_time, pipelined: bool = False):
    """Update phase of ZeRO-Infinity with NVMe-offloaded optimizer state.

    Formula: serial (DeepSpeed default): t_read + t_cpu + t_write per sub-group, summed;
    pipelined (``pipeline_read/pipeline_write``): max(t_read + t_write, t_cpu) — the drives'
    reads and writes share the same flash and link, the CPU step hides behind them.
    """
    if pipelined:
        return maximum(read_time + write_time, compute_time)
    return read_time + compute_time + write_time


def forward_phase_time(compute, fetch):
    """Forward segment. Formula: max(t_compute, t_fetch) (ZeRO-3 prefetches the next layer's params)."""
    return maximum(compute, fetch)


def backward_phase_time(compute, fetch, gradient_transfer, gradient_offload, compression=0.0):
    """Backward + gradient offload segment.

    Formula: max(t_compute, t_fetch) + t_grad(GPU->host) + t_grad(host->tier) + t_compress.
    The gradient copies run in the backward hooks, which wait for each swap-out
    (DeepSpeed ``swap_out_gradients`` blocks on the aio handle), so they add to compute.
    """
    return maximum(compute, fetch) + gradient_transfer + gradient_offload + compression


# ----------------------------------------------------------------------------- ZeRO-Infinity efficiency


def arithmetic_intensity(tensor_class: str, seq, batch, hidden=None, ci=1):
    """FLOPs per byte moved for a tensor class (ZeRO-Infinity Sec. 4.1).

    Formula: params & grads: seq x bsz (fwd + recompute + bwd loads and the gradient
    store, 2 x 4 x P bytes against 2 x 4 x bsz x seq x P FLOPs); optimizer states:
    seq x bsz / 4 (read + write of 16 B/param: 2 x 16 x P bytes); activation
    checkpoints: 24 x hd x ci (``ci`` transformer blocks between checkpoints).
    """
    if tensor_class in ("params", "gradients", "params_grads"):
        return seq * batch
    if tensor_class in ("optimizer", "optimizer_states"):
        return seq * batch / 4
    if tensor_class in ("activations", "activation_checkpoints"):
        if hidden is None:
            raise ValueError("activation checkpoints need the hidden size")
        return 24 * hidden * ci
    raise ValueError(f"tensor_class must be params, gradients, optimizer or activations, got {tensor_class!r}")


def offload_efficiency(ait, bandwidth, peak_flops):
    """Compute efficiency when a tensor class streams over a link without overlap.

    Formula: efficiency = ait x bw / (ait x bw + peak_tp) (ZeRO-Infinity Sec. 4.1;
    e.g. params/grads at bsz x seq = 1024, 70 TFLOP/s, 68 GB/s -> 50 %).
    """
    return ait * bandwidth / (ait * bandwidth + peak_flops)


def required_bandwidth(efficiency, ait, peak_flops):
    """Bandwidth a tensor class needs for a target efficiency (inverse of :func:`offload_efficiency`).

    Formula: bw = eff x peak_tp / (ait x (1 - eff)) (ZeRO-Infinity Sec. 4.1, Fig. 3;
    optimizer states at 90 %, 2048 tokens, 70 TFLOP/s -> 1.23 TB/s, "nearly 1.5 TB/s").

    >>> round(required_bandwidth(0.9, arithmetic_intensity("optimizer", 2048, 1), 70e12) / 1e12, 2)
    1.23
    """
    return efficiency * peak_flops / (ait * (1 - efficiency))
