"""The plan: how the model is trained on the hardware.

Parallelism (``tp``, ``pp``, ``dp``), batch, recompute, attention kernel,
sequence parallelism, ZeRO stage and precision. Consistency checks that need
the model (tp divides heads, pp at most layers, ...) live in :func:`check_plan`
so that the same rules serve the CLI, the library and the search.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dse.errors import InputError
from dse.specs._schema import spec_field

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "math")
PRECISION = ("bf16", "fp16")
GRAD_DTYPE = ("fp32", "half")
OPTIMIZERS = ("adam",)
SCHEDULES = ("1f1b", "interleaved", "gpipe")
OFFLOAD_ACTIVATIONS = ("none", "ssd", "host")   # where saved activations go between forward and backward
ACTIVATION_IO_PATHS = ("gds", "bounce")         # GPUDirect Storage, or staged through host memory


@dataclass(frozen=True, kw_only=True)
class Plan:
    tp: int = spec_field(1, gt=0, help="tensor-parallel degree")
    pp: int = spec_field(1, gt=0, help="pipeline-parallel stages")
    dp: int | None = spec_field(None, gt=0, help="data-parallel replicas; default: fill one node of the system")
    micro_batch: int = spec_field(1, gt=0, help="sequences per micro-batch b")
    global_batch: int | None = spec_field(None, gt=0, help="sequences per iteration B; default b*dp (pp=1) or b*dp*4*pp")
    seq_len: int | None = spec_field(None, gt=0, help="tokens per sequence s; default the model's seq_len")
    recompute: str = spec_field("none", choices=RECOMPUTE, help="activation recomputation")
    attention: str = spec_field("flash", choices=ATTENTION, help="fused (flash) attention or materialised softmax")
    sequence_parallel: bool = spec_field(False, help="Megatron sequence parallelism (shards norm/dropout activations over tp)")
    zero: int = spec_field(1, ge=0, le=3, help="ZeRO stage: 1 shards optimizer states (Megatron's distributed "
                           "optimizer, the default), 2 also gradients, 3 also parameters; 0 replicates them")
    precision: str = spec_field("bf16", choices=PRECISION, help="activation/parameter dtype")
    grad_dtype: str = spec_field("fp32", choices=GRAD_DTYPE, help="dtype gradients are accumulated and reduced in")
    optimizer: str = spec_field("adam", choices=OPTIMIZERS)
    schedule: str = spec_field("1f1b", choices=SCHEDULES, help="pipeline schedule")
    virtual_stages: int = spec_field(1, gt=0, help="model chunks per pipeline stage (interleaved schedule)")
    overlap_grad_reduce: bool = spec_field(False, help="overlap the data-parallel gradient reduction with backward")
    async_tp_allreduce: bool = spec_field(True, help="overlap each column-parallel linear's backward input-gradient "
                                          "all-reduce with its weight-gradient GEMM (Megatron-LM default since 2.6)")
    offload_activations: str = spec_field("none", choices=OFFLOAD_ACTIVATIONS,
                                          help="write saved activations to the drives (ssd, SSDTrain) or to pinned "
                                               "host memory (host) during forward, read them back in backward")
    offload_layers: int | None = spec_field(None, ge=0, help="leading layers of each pipeline stage whose "
                                            "activations are offloaded; default (auto): SSDTrain's adaptive rule")
    ssds: int | None = spec_field(None, gt=0, help="drives used for offload; default: all drives of the hardware")
    activation_io_path: str = spec_field("gds", choices=ACTIVATION_IO_PATHS,
                                         help="GPU<->drive path: GPUDirect Storage (gds) or bounce through host memory")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * (self.dp or 1)

    def resolved(self, model, system=None) -> "Plan":
        """Fill the defaults that depend on the model (and, for dp, on the system)."""
        dp = self.dp
        if dp is None:
            per_node = system.node.gpus_per_node if system is not None and hasattr(system, "node") else 1
            dp = per_node // (self.tp * self.pp) if per_node % (self.tp * self.pp) == 0 else 1
            dp = max(dp, 1)
        gb = self.global_batch
        if gb is None:
            gb = self.micro_batch * dp * (1 if self.pp == 1 else 4 * self.pp)
        return dataclasses.replace(self, dp=dp, global_batch=gb,
                                   seq_len=self.seq_len or model.seq_len or model.max_seq_len)


def check_plan(plan: Plan, model, where: str = "plan") -> None:
    """Raise :class:`InputError` for a plan that cannot run this model at all.

    (A plan that runs but does not fit in memory is *infeasible*, not an error.)
    ``model`` must be resolved (kv_heads, ffn_hidden filled in).
    """
    if model.heads % plan.tp:
        raise InputError(f"{where}: --tp {plan.tp} does not divide the model's {model.heads} attention heads")
    if model.kv_heads % plan.tp and plan.tp % model.kv_heads:
        raise InputError(f"{where}: --tp {plan.tp} and the model's {model.kv_heads} KV heads must divide one another")
    if model.ffn_hidden % plan.tp:
        raise InputError(f"{where}: --tp {plan.tp} does not divide ffn_hidden {model.ffn_hidden}")
    if plan.pp > model.layers:
        raise InputError(f"{where}: --pp {plan.pp} is larger than the model's {model.layers} layers")
    if plan.schedule == "interleaved":
        if plan.virtual_stages < 2:
            raise InputError(f"{where}: the interleaved schedule needs virtual_stages >= 2")
        if plan.pp * plan.virtual_stages > model.layers:
            raise InputError(f"{where}: pp*virtual_stages = {plan.pp * plan.virtual_stages} exceeds {model.layers} layers")
    elif plan.virtual_stages != 1:
        raise InputError(f"{where}: virtual_stages > 1 needs --set plan.schedule=interleaved")
    gb = plan.global_batch
    if gb is not None:
        if gb % plan.dp:
            raise InputError(f"{where}: --global-batch {gb} is not divisible by --dp {plan.dp}")
        if (gb // plan.dp) % plan.micro_batch:
            raise InputError(f"{where}: --micro-batch {plan.micro_batch} does not divide global batch / dp = {gb // plan.dp}")
    if plan.sequence_parallel and plan.seq_len and plan.seq_len % plan.tp:
        raise InputError(f"{where}: --sequence-parallel needs seq_len {plan.seq_len} divisible by --tp {plan.tp}")
    if model.position == "learned" and plan.seq_len and plan.seq_len > model.position_embeddings:
        raise InputError(f"{where}: --seq-len {plan.seq_len} exceeds the model's {model.position_embeddings} learned positions")


def check_activation_offload(plan: Plan, model, system, where: str = "plan") -> None:
    """Activation-offload choices that cannot run at all (SSDTrain; dse/estimate/activation_offload.py)."""
    mode = plan.offload_activations
    if mode == "none":
        if plan.offload_layers is not None:
            raise InputError(f"{where}: --offload-layers {plan.offload_layers} needs --offload-activations ssd or host")
        return
    if mode == "ssd" and system.node.storage is None:
        raise InputError(f"{where}: --offload-activations ssd: hardware '{system.name}' has no storage drives "
                         "(node.storage); use --offload-activations host or a system with drives, "
                         "e.g. ssdtrain-a100-optane")
    k = plan.offload_layers
    if k is not None:
        per_stage = -(-model.layers // (plan.pp * plan.virtual_stages)) * plan.virtual_stages
        if k > model.layers:
            raise InputError(f"{where}: --offload-layers {k} is more than the model's {model.layers} layers")
        if k > per_stage:
            raise InputError(f"{where}: --offload-layers {k} is more than the {per_stage} layers on each pipeline "
                             f"stage (model {model.layers} layers, --pp {plan.pp}); allowed 0..{per_stage} or auto")
