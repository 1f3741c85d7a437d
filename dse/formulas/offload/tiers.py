"""Where each tensor class lives: the tiers, the classes and their bytes per parameter, the placement a plan picks.

Part of :mod:`dse.formulas.offload` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas import optimizer as _optimizer
from dse.formulas._array import Num
from dse.formulas.precision import RECIPES as _RECIPES

__all__ = ["TIERS", "TENSOR_CLASSES", "CLASS_BYTES", "OPTIMIZER_CLASSES", "TIER_SECTION", "CLASS_SECTION",
           "optimizer_state_bytes", "placement", "bytes_by_tier"]

#: Memory tiers a tensor class can live on ("csd": drives whose accelerators run the update; "cxl": CXL memory
#: expanders, host memory on a CPU-less NUMA node).
TIERS = ("gpu", "cpu", "cxl", "nvme", "csd")
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
TIER_SECTION = {"gpu": "gpu", "cpu": "host", "cxl": "cxl", "nvme": "storage", "csd": "storage"}
# Memory-section class of each tensor class.
CLASS_SECTION = {"params_fp16": "weights", "grads_fp16": "gradients", "grads_fp32": "gradients",
                 "master_fp32": "optimizer", "momentum": "optimizer", "variance": "optimizer"}


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


def placement(zero: int, offload_optimizer: str = "gpu", offload_params: str = "gpu",
              optimizer: str = "adam") -> dict[str, str]:
    """Tier of each tensor class: {class: "gpu" | "cpu" | "cxl" | "nvme" | "csd"}.

    Formula: fp16 params on ``offload_params`` (stage 3 only; else gpu); fp16 gradients on the GPU; fp32 gradients
    and the optimizer states on ``offload_optimizer``
    Source: ZeRO-Infinity (arXiv 2104.07857) Sec. 5; Smart-Infinity (arXiv 2403.06664) Sec. II-A, IV-D.

    The fp16 gradients live in transient reduce buckets. ZeRO-Offload puts the optimizer on
    cpu, ZeRO-Infinity on nvme, Smart-Infinity on csd (the drives whose accelerators run the
    update). Classes the optimizer does not have are absent.

    Args:
        offload_optimizer: gpu, cpu, cxl, nvme or csd [choice]
        offload_params: gpu, cpu, cxl or nvme [choice]
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
