"""The typed intermediate terms of the base estimate that techniques build on.

:func:`dse.estimate.base.compose_memory` returns them as ``c["terms"]`` (a
:class:`BaseTerms`); :func:`~dse.estimate.base.compose_time` adds the time side
(``c["terms"].time``, a :class:`TimeTerms`). Technique modules
(:mod:`dse.estimate.offload`, :mod:`dse.estimate.activation_offload`,
:mod:`dse.estimate.economics`) read these fields instead of string keys.

Every numeric field is a Python number or a numpy array (the vectorised search
composes millions of scenarios at once); :meth:`BaseTerms.map` applies a function
to every field, e.g. to keep only the points of a block that fit in memory. Units
are SI (bytes, seconds, FLOP/s, bytes/s); counts are plain numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from dse.formulas._array import minimum

if TYPE_CHECKING:
    from dse.specs.hardware import NearStorageSpec, StorageArraySpec, SystemSpec

Num = Any   # a float/int or a numpy array of them (broadcastable)


def _map_value(fn: Callable[[Any], Any], value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _map_value(fn, v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, "map"):
        return value.map(fn)
    return fn(value)


class _Mappable:
    """``map`` and ``as_dict`` for a dataclass of numbers/arrays (nested dicts and dataclasses included)."""

    __slots__ = ()   # a subclass declared with slots=True has no __dict__ (the base terms: built on every estimate)

    def map(self, fn: Callable[[Any], Any]) -> Any:
        """A copy with ``fn`` applied to every numeric leaf (dict values and nested terms included)."""
        changes = {f.name: _map_value(fn, getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def as_dict(self) -> dict[str, Any]:
        """The fields set (not None) as a (nested) dict, e.g. to print or compare them; nested terms as dicts."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = v.as_dict() if isinstance(v, _Mappable) else v
        return out


@dataclasses.dataclass(slots=True)
class TimeTerms(_Mappable):
    """Time-side terms of the base estimate (:func:`dse.estimate.base.compose_time`), seconds unless stated."""

    gpu_forward: Num            # GPU work of one layer's forward on one micro-batch (kernels + TP communication)
    gpu_backward: Num           # GPU work of one layer's backward on one micro-batch
    gpu_recompute: Num          # GPU work of one layer's recomputation on one micro-batch (0 without recompute)
    layer_forward: Num          # one layer's forward: max(GPU work, host launch time)
    layer_backward: Num         # one layer's backward: max(GPU work, host launch time)
    layer_recompute: Num        # one layer's recomputation: max(GPU work, host launch time)
    layer_total: Num            # layer_forward + layer_backward + layer_recompute
    embedding_time: Num         # embedding forward + backward of one micro-batch
    head_time: Num              # LM head (and loss) forward + backward of one micro-batch
    p2p_time: Num               # pipeline point-to-point sends of one micro-batch (0 without pipeline)
    stage_max: Num              # one micro-batch on the slowest stage (incl. p2p and fixed overhead)
    stage_mean: Num             # one micro-batch on the mean stage
    pipeline_time: Num          # the whole pipeline schedule of one iteration (compute, bubble, p2p)
    dp_time: Num                # data-parallel collectives of one iteration (before overlap)
    dp_exposed: Num             # the part of dp_time on the critical path
    embedding_sync: Num         # all-reduce of the tied embedding's gradient between first and last stage
    optimizer_time: Num         # the optimizer step on the GPU
    optimizer_params: Num       # parameters one GPU updates (its ZeRO partition), count
    dp_bandwidth: Num           # bytes/s of the data-parallel group
    tp_bandwidth: Num           # bytes/s of the tensor-parallel group
    pp_bandwidth: Num           # bytes/s between neighbouring pipeline stages


@dataclasses.dataclass(slots=True)
class BaseTerms(_Mappable):
    """Memory-side terms of the base estimate (:func:`dse.estimate.base.compose_memory`).

    Parameter counts are per layer/stage/GPU as named; bytes are per GPU on the most
    loaded stage unless stated. ``time`` is filled by :func:`~dse.estimate.base.compose_time`.
    """

    seq_len: Num                # tokens per sequence (plan.seq_len)
    micro_batch: Num            # sequences per micro-batch (plan.micro_batch)
    tp: Num                     # tensor-parallel degree
    pp: Num                     # pipeline-parallel degree
    dp: Num                     # data-parallel degree
    virtual_stages: Num         # interleaved pipeline chunks per GPU
    global_batch: Num           # sequences per iteration (plan.global_batch)
    micro_batches: Num          # micro-batches per replica per iteration: global_batch / (dp x micro_batch)
    bytes_per_element: Num      # bytes of one weight/activation element (plan.precision)
    grad_bytes: Num             # bytes of one gradient element (plan.grad_dtype)
    optimizer_bytes: Num        # optimizer bytes per parameter (plan.optimizer, incl. fp32 master copy)
    peak_flops: Num             # FLOP/s of one GPU at the plan's precision
    tokens: Num                 # tokens per iteration: global_batch x seq_len
    tokens_per_microbatch: Num  # seq_len x micro_batch
    layer_params: Num           # parameters of one transformer layer
    layer_params_per_gpu: Num   # parameters of one layer one GPU holds (TP-split part / tp + replicated part)
    embedding_params: Num       # parameters of the embedding
    head_params: Num            # parameters of the LM head (and final norm, pooler, ...)
    params_per_gpu: Num         # parameters on the GPU of the most loaded stage
    layers_per_stage: Num       # transformer layers on the most loaded stage
    layer_activation_bytes: Num       # activation bytes one layer saves for backward, one micro-batch
    recompute_working_bytes: Num      # transient bytes of recomputing one layer
    head_activation_bytes: Num        # activation bytes of the LM head and loss
    embedding_activation_bytes: Num   # activation bytes of the embedding
    microbatches_in_flight: Num       # micro-batches whose activations the first stage holds at once
    activation_options: dict[str, Any]          # keyword options of the activation formulas (tp, recompute, ...)
    first_stage_is_max: Num           # True where the first stage holds more GPU memory than the last
    activations_first_stage: Num      # activation bytes of the first stage's GPU
    activations_last_stage: Num       # activation bytes of the last stage's GPU
    states_first_stage: dict[str, Any]          # model-state bytes of the first stage's GPU (weights, gradients, ...)
    states_last_stage: dict[str, Any]           # model-state bytes of the last stage's GPU
    kernels: dict[str, Any]                     # kernel tables of one micro-batch: layer, embedding, head
    trainable_params_per_gpu: Num = 0           # parameters with gradients and optimizer states on that GPU (LoRA:
                                                # the adapters; full training: params_per_gpu)
    expert_params_per_gpu: Num = 0.0            # of those, the routed experts' under expert parallelism (ep > 1;
                                                # their replicas: dp/ep ranks), else 0
    frozen_weight_bytes: Num = 0.0              # bytes of the frozen weights on that GPU as stored, before ZeRO-3
                                                # shards them (LoRA, QLoRA; full training: 0)
    frozen_expert_bytes: Num = 0.0              # of the frozen bytes, the routed experts' under expert parallelism
                                                # (ZeRO-3 shards them over the expert-data-parallel ranks)
    quantization_constant_bytes: Num = 0.0      # QLoRA's quantization constants on that GPU: replicated, kept there
    time: TimeTerms | None = None     # the time side, once compose_time ran
    drive_writes: dict[str, Any] = dataclasses.field(default_factory=dict)   # technique name -> its DriveWrites

    def timed(self) -> TimeTerms:
        """The time-side terms; an error if :func:`~dse.estimate.base.compose_time` has not run."""
        if self.time is None:
            raise RuntimeError("the base time terms are not composed yet (call base.compose_time first)")
        return self.time


@dataclasses.dataclass
class DriveWrites(_Mappable):
    """Bytes a technique writes to the node's drives per iteration (what wears them)."""

    by_source: dict[str, Any]             # bytes per iteration the node's drives absorb, by what writes them
    per_drive: Num              # bytes per iteration on the most written drive


@dataclasses.dataclass(slots=True)
class DriveUse(_Mappable):
    """The drives a plan uses on each node and what the cost model charges for each (:func:`drive_use`)."""

    count: Num                  # drives per host the plan uses (plan.ssds, else every drive; 0 without drives)
    price: Num                  # USD per drive (a computational SSD is bought whole: drive + accelerator)
    power: Num                  # W per drive (a CSD's accelerator draws power only when it runs the update)


def drive_use(system: Any, plan: Any) -> DriveUse:
    """How many drives of a host the plan uses and their price and power (computed once, shared by techniques).

    ``plan.ssds`` when given, else every drive of the host (the array is stated per host); 0 without drives. A CSD's
    accelerator is charged in the price whether or not the plan uses it; its power counts only when
    the plan runs the optimizer update on it (``offload_optimizer: csd``; its idle draw is not modelled).
    """
    storage = system.node.storage
    if storage is None:
        return DriveUse(count=0, price=0.0, power=0.0)
    dev = storage.device
    ns = dev.near_storage
    return DriveUse(count=plan.ssds if plan.ssds is not None else storage.count,
                    price=dev.price + (ns.price if ns is not None else 0.0),
                    power=dev.power + (ns.power if ns is not None and plan.offload_optimizer == "csd" else 0.0))


def gpus_per_host(c: Any, system: Any) -> Num:
    """GPUs of the plan that share one host, its DRAM, host link and drives: min(gpus, gpus_per_host).

    A host is the node unless the node states ``gpus_per_host`` (a GB200 NVL72 rack: one Grace per two GPUs);
    host memory, host-side bandwidth and drive traffic are per host, collectives per node.
    """
    return minimum(c["gpus"], system.node.host_gpus)


def drives(system: SystemSpec) -> StorageArraySpec:
    """The node's drives, which ``offload_activations: ssd`` (and storage offload to drives) write to.

    The plan rules (:data:`dse.specs.rules.OFFLOAD_RULES`, :data:`~dse.specs.rules.ACTIVATION_OFFLOAD_RULES`)
    admit offload to drives only on hardware that has them.
    """
    storage = system.node.storage
    if storage is None:
        raise ValueError(f"{system.name}: offload to drives needs a node with storage drives")
    return storage


def near_storage(system: SystemSpec) -> NearStorageSpec:
    """The accelerator of the node's drives, which ``offload_optimizer: csd`` runs the update on.

    The plan rules (:data:`dse.specs.rules.OFFLOAD_RULES`) admit ``csd`` only on drives that have one.
    """
    storage = system.node.storage
    ns = storage.device.near_storage if storage is not None else None
    if ns is None:
        raise ValueError(f"{system.name}: offload_optimizer csd needs drives with a near-storage accelerator")
    return ns


class Layers(TypedDict):
    """Which layers of the stage offload activations: ``k`` and the rules it came from.

    (:func:`dse.estimate.activation_offload.offloaded_layers`)
    """

    k: Num          # layers offloaded
    rule: str       # "adaptive" (auto), "fixed" (offload_layers), "all" (the hooks' auto)
    k_rule: Num     # SSDTrain's rule: the layers whose writes the forward can absorb
    k_hide: Num     # the layers whose I/O hides behind compute
    k_fit: Num      # the fewest layers that make the GPU fit (0 when it fits)


class MicrobatchIO(TypedDict):
    """One micro-batch's activation-offload I/O on the most loaded stage, bytes and seconds.

    (:func:`dse.estimate.activation_offload.microbatch_io`)
    """

    bw_used: Num        # write bandwidth used (full rate or paced to the drives' write:read ratio)
    backlog: Num        # bytes still unwritten when forward ends (they stay on the GPU)
    forwarded: Num      # bytes backward uses before they are written (never read back)
    written: Num
    read: Num
    exposed: Num        # I/O time compute does not hide
    exposed_s: NotRequired[Num]   # over the iteration (activation_offload.add_time_and_traffic)
    a_hooks: NotRequired[Num]     # the hooks mechanism (dse/estimate/activation_hooks.py): bytes copied per layer
    out_s: NotRequired[Num]       # ... and the copy-out and copy-in time of one micro-batch
    in_s: NotRequired[Num]
