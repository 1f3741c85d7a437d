"""Storage-offloaded training (ZeRO-Infinity): placement, bytes per tier and link, phase times.

Sources: Rajbhandari et al., "ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme
Scale Deep Learning", SC'21 (arXiv 2104.07857), Sec. 3-4; Jang et al., "Smart-Infinity:
Fast Large Language Model Training using Near-Storage Processing on a Real System",
HPCA'24 (arXiv 2403.06664), Sec. II-III and Table I; DeepSpeed's swap code
(``deepspeed/runtime/swap_tensor/*``, ``runtime/zero/offload_config.py``) for the
defaults. The research note ``docs/reference/storage_offload.md`` collects the numbers.

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

Symbols:
    params: P, parameters [count]
    zero: ZeRO stage, 0 to 3 [count]
    optimizer: adam, sgd-momentum or adagrad [choice]
    state_bytes: optimizer-state bytes per parameter incl. the fp32 master copy (Adam 12) [bytes]
    grad_bytes: g, bytes per gradient sent to the optimizer's tier (fp32: 4) [bytes]
    weight_bytes: w, bytes per fp16 parameter [bytes]
    param_bytes: p, bytes per updated parameter returned by the drives (fp32 exchange: 4) [bytes]
    compression: c, bytes sent / dense bytes of the gradients (1 = dense) [fraction]
    bandwidth: B, bandwidth of the link or tier [bytes/s]
    peak_flops: peak_tp, achievable compute rate of one GPU [FLOP/s]
    seq: s, sequence length [count]
    batch: bsz, sequences per GPU (per micro-batch, or per iteration for the optimizer) [count]
    ait: arithmetic intensity, FLOP per byte moved [FLOP/byte]
    efficiency: eff, share of time the GPU computes [fraction]
"""

from __future__ import annotations

from dse.formulas import optimizer as _optimizer
from dse.formulas._array import Num, maximum, minimum
from dse.formulas.precision import RECIPES as _RECIPES

__all__ = ["TIERS", "TENSOR_CLASSES", "CLASS_BYTES", "OPTIMIZER_CLASSES", "TIER_SECTION", "CLASS_SECTION",
           "OPTIMIZER_BUFFER_COUNT", "PARAM_BUFFER_COUNT", "PARAM_BUFFER_SIZE", "SUB_GROUP_SIZE", "REDUCE_BUCKET_SIZE",
           "optimizer_state_bytes", "placement", "bytes_by_tier", "optimizer_swap_buffer_bytes",
           "param_swap_buffer_bytes", "reduce_bucket_bytes", "largest_sub_group", "fetch_passes", "param_fetch_bytes",
           "gradient_offload_bytes", "swap_in_bytes", "swap_out_bytes", "shared_link_traffic", "link_bandwidth",
           "array_bandwidth", "transfer_time", "cpu_optimizer_time", "swap_update_time", "forward_phase_time",
           "backward_phase_time", "arithmetic_intensity", "offload_efficiency", "required_bandwidth"]

#: Memory tiers a tensor class can live on ("csd": drives whose accelerators run the update).
TIERS = ("gpu", "cpu", "nvme", "csd")
#: Tensor classes of mixed-precision training with an adaptive optimizer; their bytes per parameter.
TENSOR_CLASSES = ("params_fp16", "grads_fp16", "grads_fp32", "master_fp32", "momentum", "variance")
# Both are views of the mixed-precision recipe (dse.formulas.precision) and of the one optimizer table
# (dse.formulas.optimizer.OPTIMIZERS); the estimate reads the plan's recipe itself.
_MIXED = _RECIPES["bf16"]
CLASS_BYTES = {"params_fp16": _MIXED.weights, "grads_fp16": _MIXED.offload_gradients,
               "grads_fp32": _MIXED.offload_master_gradients, "master_fp32": _MIXED.master_weights,
               "momentum": _MIXED.optimizer_states, "variance": _MIXED.optimizer_states}
# Optimizer-state classes per optimizer (the fp32 master copy is part of the optimizer state; AdaGrad's sum of
# squared gradients is the "variance" class).
OPTIMIZER_CLASSES = {name: ("master_fp32",) + o.states for name, o in _optimizer.OPTIMIZERS.items()}
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


def optimizer_state_bytes(optimizer: str = "adam") -> float:
    """Bytes per parameter of optimizer state including the fp32 master copy.

    Formula: 4 (master) + 4 per moment: Adam 12 (m, v), SGD-momentum 8, AdaGrad 8
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 3: "FP32 momentum, variance, parameters"; Smart-Infinity
    (arXiv 2403.06664) Sec. VII-F.

    Mixed precision, from :func:`dse.formulas.optimizer.state_bytes_per_param` (the one optimizer table).

    Returns:
        bytes per parameter [bytes]

    >>> optimizer_state_bytes("adam"), optimizer_state_bytes("sgd-momentum")
    (12, 8)
    """
    return _optimizer.state_bytes_per_param(optimizer, _MIXED)


def placement(zero: int, offload_optimizer: str = "gpu", offload_params: str = "gpu", optimizer: str = "adam") -> dict[str, str]:
    """Tier of each tensor class: {class: "gpu" | "cpu" | "nvme" | "csd"}.

    Formula: fp16 params on ``offload_params`` (stage 3 only; else gpu); fp16 gradients on the GPU; fp32 gradients
    and the optimizer states on ``offload_optimizer``
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 5; Smart-Infinity (arXiv 2403.06664) Sec. II-A, IV-D.

    The fp16 gradients live in transient reduce buckets. ZeRO-Offload puts the optimizer on
    cpu, ZeRO-Infinity on nvme, Smart-Infinity on csd (the drives whose accelerators run the
    update). Classes the optimizer does not have are absent.

    Args:
        offload_optimizer: gpu, cpu, nvme or csd [choice]
        offload_params: gpu, cpu or nvme [choice]
    Returns:
        dict tensor class -> tier [choice]

    >>> tiers = placement(3, "nvme", "cpu")   # ZeRO-Infinity with fp16 parameters in host memory
    >>> tiers["params_fp16"], tiers["grads_fp16"], sorted(k for k, t in tiers.items() if t == "nvme")
    ('cpu', 'gpu', ['grads_fp32', 'master_fp32', 'momentum', 'variance'])
    """
    out = {"params_fp16": offload_params if zero >= 3 else "gpu", "grads_fp16": "gpu", "grads_fp32": offload_optimizer}
    for k in OPTIMIZER_CLASSES[optimizer]:
        out[k] = offload_optimizer
    return out


def bytes_by_tier(params: Num, placed: dict[str, str], class_bytes: dict[str, Num] | None = None
                  ) -> dict[str, dict[str, Num]]:
    """Bytes each tier holds for ``params`` parameters: {tier: {class: bytes}}.

    Formula: bytes(tier, class) = P x bytes_per_param(class) for the classes placed on the tier
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 3 (bytes per tensor class); :func:`placement`.

    Args:
        placed: tensor class -> tier, as returned by :func:`placement` [dict]
        class_bytes: overrides of bytes per parameter, e.g. fp16 gradients exchanged with a CSD [dict]
    Returns:
        dict tier -> {tensor class: bytes} [bytes]

    >>> t = bytes_by_tier(1e9, placement(3, "nvme", "cpu"))
    >>> sum(t["nvme"].values()) / 1e9, t["cpu"]   # 16 B/param on the drives, fp16 params in host DRAM: GB
    (16.0, {'params_fp16': 2000000000.0})
    """
    sizes = {**CLASS_BYTES, **(class_bytes or {})}
    out: dict[str, dict[str, Num]] = {t: {} for t in TIERS}
    for cls, tier in placed.items():
        out[tier][cls] = params * sizes[cls]
    return out


def optimizer_swap_buffer_bytes(sub_group_size: Num = SUB_GROUP_SIZE, buffer_count: Num = OPTIMIZER_BUFFER_COUNT,
                                element_bytes: Num = 4) -> Num:
    """Pinned host buffers DeepSpeed allocates to swap optimizer state to NVMe.

    Formula: buffer_count x sub_group_size x 4 B
    Source: DeepSpeed ``SwapBufferManager(num_elems=largest sub-group, count=offload_optimizer.buffer_count,
    dtype=fp32)`` (deepspeed/runtime/swap_tensor); research note storage_offload.md §3.4.

    Args:
        sub_group_size: elements per optimizer sub-group [count]
        buffer_count: swap buffers [count]
        element_bytes: bytes per element (fp32) [bytes]
    Returns:
        pinned host bytes [bytes]

    >>> optimizer_swap_buffer_bytes() / 1e9, optimizer_swap_buffer_bytes(4e7, 40) / 1e9   # DeepSpeed, Smart-Inf.: GB
    (16.0, 6.4)
    """
    return buffer_count * sub_group_size * element_bytes


def param_swap_buffer_bytes(buffer_count: Num = PARAM_BUFFER_COUNT, buffer_size: Num = PARAM_BUFFER_SIZE,
                            element_bytes: Num = 2) -> Num:
    """Pinned host buffers for NVMe-offloaded fp16 parameters.

    Formula: buffer_count x buffer_size x 2 B
    Source: DeepSpeed ``partitioned_param_swapper.py``, offload_param defaults 5 x 1e8; research note §3.4.

    Args:
        buffer_count: swap buffers [count]
        buffer_size: elements per buffer [count]
        element_bytes: bytes per element (fp16) [bytes]
    Returns:
        pinned host bytes [bytes]

    >>> param_swap_buffer_bytes() / 1e9   # GB
    1.0
    """
    return buffer_count * buffer_size * element_bytes


def reduce_bucket_bytes(params: Num, bucket_size: Num = REDUCE_BUCKET_SIZE, grad_bytes: Num = 2) -> Num:
    """GPU buffer that collects fp16 gradients before they go to the host.

    Formula: g x min(bucket, P)
    Source: DeepSpeed ``zero_optimization.reduce_bucket_size`` (default 5e8 elements).

    Args:
        bucket_size: elements per reduce bucket [count]
    Returns:
        GPU bytes [bytes]

    >>> reduce_bucket_bytes(4e9) / 1e9, reduce_bucket_bytes(1e8) / 1e9   # GB
    (1.0, 0.2)
    """
    return grad_bytes * minimum(bucket_size, params)


def largest_sub_group(params: Num, sub_group_size: Num = SUB_GROUP_SIZE) -> Num:
    """Elements in the largest optimizer sub-group.

    Formula: min(sub_group_size, P)
    Source: DeepSpeed ``zero_optimization.sub_group_size`` (default 1e9 elements).

    Args:
        sub_group_size: elements per optimizer sub-group [count]
    Returns:
        elements [count]

    >>> largest_sub_group(4e9), largest_sub_group(3e8)
    (1000000000.0, 300000000.0)
    """
    return minimum(sub_group_size, params)


# ----------------------------------------------------------------------------- bytes per iteration


def fetch_passes(recompute: str = "full") -> int:
    """How many times ZeRO-3 brings every fp16 parameter to the GPU per micro-batch.

    Formula: 3 with full activation recomputation (forward, recompute, backward), else 2
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1: "parameters are loaded three times".

    Args:
        recompute: none, selective or full [choice]
    Returns:
        passes [count]

    >>> fetch_passes("full"), fetch_passes("none")
    (3, 2)
    """
    return 3 if recompute == "full" else 2


def param_fetch_bytes(params: Num, weight_bytes: Num = 2, passes: Num = 1) -> Num:
    """Bytes of fp16 parameters moved to the GPU.

    Formula: passes x w x P
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1.

    Args:
        passes: fetches per micro-batch (:func:`fetch_passes`) [count]
    Returns:
        bytes [bytes]

    >>> param_fetch_bytes(4e9, passes=3) / 1e9   # GB
    24.0
    """
    return passes * weight_bytes * params


def gradient_offload_bytes(params: Num, grad_bytes: Num = 4, compression: Num = 1.0) -> Num:
    """Gradient bytes written toward the optimizer's tier in backward.

    Formula: c x g x P
    Source: Smart-Infinity (arXiv 2403.06664) Table I ("c% x 2M"); g = 4 is ZeRO-Infinity's fp32 swap dtype.

    Returns:
        bytes [bytes]

    >>> gradient_offload_bytes(4e9) / 1e9, gradient_offload_bytes(4e9, compression=0.02) / 1e9   # GB
    (16.0, 0.32)
    """
    return compression * grad_bytes * params


def swap_in_bytes(params: Num, state_bytes: Num = 12, grad_bytes: Num = 4) -> Num:
    """Bytes read from the drives by the CPU optimizer step.

    Formula: P (state + g)
    Source: Smart-Infinity (arXiv 2403.06664) Table I: 6M + 2M read (M = 2P).

    Returns:
        bytes [bytes]

    >>> swap_in_bytes(1e9) / 1e9   # GB
    16.0
    """
    return params * (state_bytes + grad_bytes)


def swap_out_bytes(params: Num, state_bytes: Num = 12) -> Num:
    """Bytes written back to the drives after the CPU step.

    Formula: P x state
    Source: Smart-Infinity (arXiv 2403.06664) Table I: 6M written (M = 2P).

    Returns:
        bytes [bytes]

    >>> swap_out_bytes(1e9) / 1e9   # GB
    12.0
    """
    return params * state_bytes


def shared_link_traffic(params: Num, mode: str = "baseline", state_bytes: Num = 12, grad_bytes: Num = 4,
                        param_bytes: Num = 4, compression: Num = 1.0) -> dict[str, Num]:
    """Bytes per iteration on the host <-> drives shared link, by tensor class and direction.

    Formula: baseline: 2 x state x P + 2 x g x P = 32P; SmartUpdate: c x g x P down + p x P up = 8P, 4P (1 + c)
    Source: Smart-Infinity (arXiv 2403.06664) Table I, in M = 2P: 6M + 6M + 2M + 2M vs 2M + 2M.

    Args:
        mode: baseline (ZeRO-Infinity, CPU update) or smartupdate (update on the drives) [choice]
    Returns:
        dict states_read, states_write, gradients_write, gradients_read, params_read, total [bytes]

    >>> shared_link_traffic(1.0, "baseline")["total"], shared_link_traffic(1.0, "smartupdate")["total"]
    (32.0, 8.0)
    >>> round(shared_link_traffic(1.0, "smartupdate", compression=0.02)["total"], 2)
    4.08
    >>> import numpy as np
    >>> shared_link_traffic(1.0, "smartupdate", compression=np.array([1.0, 0.1, 0.02]))["total"]
    array([8.  , 4.4 , 4.08])
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


def link_bandwidth(nominal: Num, efficiency: Num = 1.0) -> Num:
    """Achievable bandwidth of a link.

    Formula: B = B_nominal x efficiency
    Source: definition; link efficiencies are in the hardware spec files, each with its measurement.

    Args:
        nominal: B_nominal, datasheet bandwidth [bytes/s]
        efficiency: achieved share [fraction]
    Returns:
        bandwidth [bytes/s]

    >>> link_bandwidth(16e9, 0.8) / 1e9   # PCIe 3.0 x16 at 80 %: GB/s
    12.8
    """
    return nominal * efficiency


def array_bandwidth(drives: Num, per_drive: Num, shared_link: Num = float("inf")) -> Num:
    """Bandwidth of N drives striped (RAID0) behind one shared link (PCIe switch uplink).

    Formula: min(N x B_drive, B_link)
    Source: Smart-Infinity (arXiv 2403.06664) Sec. III, Fig. 3b: RAID0 stops scaling after ~4 drives.

    Args:
        drives: N, drives in the array [count]
        per_drive: B_drive, bandwidth of one drive [bytes/s]
        shared_link: B_link, the uplink all drives share [bytes/s]
    Returns:
        bandwidth [bytes/s]

    >>> import numpy as np
    >>> array_bandwidth(np.array([1, 2, 4, 8]), 3e9, 8e9) / 1e9   # GB/s
    array([3., 6., 8., 8.])
    """
    return minimum(drives * per_drive, shared_link)


def transfer_time(nbytes: Num, bandwidth: Num) -> Num:
    """Time to move bytes at a bandwidth.

    Formula: t = S / B
    Source: definition.

    Args:
        nbytes: S, bytes [bytes]
    Returns:
        time [s]

    >>> transfer_time(16e9, 8e9)
    2.0
    """
    return nbytes / bandwidth


# ----------------------------------------------------------------------------- phase times


def cpu_optimizer_time(params: Num, state_bytes: Num = 12, throughput: Num = 16e9) -> Num:
    """CPU optimizer step over P parameters.

    Formula: t = P x state / throughput
    Source: DeepSpeed CPU-Adam streams the fp32 state; the maintainers' estimate is ~16 GB/s of state
    (deepspeedai/DeepSpeed#6695).

    Args:
        throughput: optimizer-state bytes the CPU processes per second [bytes/s]
    Returns:
        time [s]

    >>> cpu_optimizer_time(4e9)
    3.0
    """
    return params * state_bytes / throughput


def swap_update_time(read_time: Num, compute_time: Num, write_time: Num, pipelined: bool = False) -> Num:
    """Update phase of ZeRO-Infinity with NVMe-offloaded optimizer state.

    Formula: serial: t_read + t_cpu + t_write; pipelined: max(t_read + t_write, t_cpu)
    Source: DeepSpeed ``offload_optimizer.pipeline_read/pipeline_write`` (default off: serial per sub-group);
    the drives' reads and writes share the same flash and link, the CPU step hides behind them.

    Args:
        read_time: t_read, reading states and gradients from the drives [s]
        compute_time: t_cpu, the CPU optimizer step [s]
        write_time: t_write, writing the states back [s]
        pipelined: DeepSpeed's pipelined swap [bool]
    Returns:
        time [s]

    >>> swap_update_time(8.0, 3.0, 6.0), swap_update_time(8.0, 3.0, 6.0, pipelined=True)
    (17.0, 14.0)
    """
    if pipelined:
        return maximum(read_time + write_time, compute_time)
    return read_time + compute_time + write_time


def forward_phase_time(compute: Num, fetch: Num) -> Num:
    """Forward segment of an offloaded iteration.

    Formula: t = max(t_compute, t_fetch)
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 6 (overlap-centric design: ZeRO-3 prefetches the next layer's
    parameters while the current one computes).

    Args:
        compute: t_compute, forward compute [s]
        fetch: t_fetch, moving the fp16 parameters to the GPU [s]
    Returns:
        time [s]

    >>> forward_phase_time(0.6, 0.9)
    0.9
    """
    return maximum(compute, fetch)


def backward_phase_time(compute: Num, fetch: Num, gradient_transfer: Num, gradient_offload: Num,
                        compression: Num = 0.0) -> Num:
    """Backward + gradient offload segment.

    Formula: t = max(t_compute, t_fetch) + t_grad(GPU->host) + t_grad(host->tier) + t_compress
    Source: DeepSpeed ``swap_out_gradients`` blocks on the aio handle in the backward hooks, so the gradient copies
    add to compute (Smart-Infinity, arXiv 2403.06664, Fig. 9 "BW + grad offload" segment).

    Args:
        compute: t_compute, backward (and recompute) compute [s]
        fetch: t_fetch, moving the fp16 parameters to the GPU [s]
        gradient_transfer: t_grad(GPU->host) [s]
        gradient_offload: t_grad(host->tier) [s]
        compression: t_compress, the GPU's top-k selection [s]
    Returns:
        time [s]

    >>> backward_phase_time(1.2, 0.9, 0.5, 2.0)
    3.7
    """
    return maximum(compute, fetch) + gradient_transfer + gradient_offload + compression


# ----------------------------------------------------------------------------- ZeRO-Infinity efficiency


def arithmetic_intensity(tensor_class: str, seq: Num, batch: Num, hidden: Num | None = None, ci: Num = 1) -> Num:
    """FLOPs per byte moved for a tensor class.

    Formula: params & grads: seq x bsz; optimizer states: seq x bsz / 4; activation checkpoints: 24 x hd x ci
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1 (2 x 4 x bsz x seq x P FLOPs against 2 x 4 x P bytes of
    parameter loads and gradient stores, 2 x 16 x P bytes of optimizer state, and 4 L/ci hd seq bsz bytes of
    checkpoints); research note storage_offload.md §3.2.

    Args:
        tensor_class: params, gradients, params_grads, optimizer, optimizer_states, activations or
            activation_checkpoints [choice]
        hidden: hd, hidden size (activation checkpoints only) [count]
        ci: transformer blocks between activation checkpoints [count]
    Returns:
        arithmetic intensity [FLOP/byte]

    >>> arithmetic_intensity("params", 1024, 1), arithmetic_intensity("optimizer", 2048, 1)
    (1024, 512.0)
    >>> arithmetic_intensity("activations", 1024, 1, hidden=2048)
    49152
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


def offload_efficiency(ait: Num, bandwidth: Num, peak_flops: Num) -> Num:
    """Compute efficiency when a tensor class streams over a link without overlap.

    Formula: efficiency = ait x bw / (ait x bw + peak_tp)
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1 and Fig. 3: params/grads at bsz x seq = 1024, 70 TFLOP/s,
    68 GB/s give 50 %.

    Returns:
        efficiency [fraction]

    >>> round(offload_efficiency(1024, 68.36e9, 70e12), 3)
    0.5
    >>> import numpy as np
    >>> np.round(offload_efficiency(1024, np.array([10e9, 70e9, 700e9]), 70e12), 3)
    array([0.128, 0.506, 0.911])
    """
    return ait * bandwidth / (ait * bandwidth + peak_flops)


def required_bandwidth(efficiency: Num, ait: Num, peak_flops: Num) -> Num:
    """Bandwidth a tensor class needs for a target efficiency (inverse of :func:`offload_efficiency`).

    Formula: bw = eff x peak_tp / (ait x (1 - eff))
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 4.1, Fig. 3: optimizer states at 90 %, 2048 tokens, 70 TFLOP/s
    need 1.23 TB/s ("nearly 1.5 TB/s").

    Returns:
        bandwidth [bytes/s]

    >>> round(required_bandwidth(0.9, arithmetic_intensity("optimizer", 2048, 1), 70e12) / 1e12, 2)
    1.23
    """
    return efficiency * peak_flops / (ait * (1 - efficiency))
