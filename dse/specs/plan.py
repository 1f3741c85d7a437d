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
from dse.formulas._array import maximum, where
from dse.specs._schema import spec_field
from dse.specs.hardware import GPU_SYSTEM

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "math")
PRECISION = ("bf16", "fp16")
GRAD_DTYPE = ("fp32", "half")
OPTIMIZERS = ("adam", "sgd-momentum", "adagrad")
OFFLOAD_OPTIMIZER = ("gpu", "cpu", "nvme", "csd")   # where the optimizer states (and fp32 gradients) live
OFFLOAD_PARAMS = ("gpu", "cpu", "nvme")             # where the fp16 parameters live between uses
EXCHANGE_DTYPES = ("fp32", "fp16")
SCHEDULES = ("1f1b", "interleaved", "gpipe")
CHIPLET_SCHEMES = ("megatron-1d", "summa-2d", "hecaton-2d")
CHIPLET_SCHEDULES = ("auto", "minibatch", "microbatch")
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
    zero: int | None = spec_field(None, ge=0, le=3, help="ZeRO stage: 1 shards optimizer states (Megatron's distributed "
                           "optimizer, the default on GPU systems), 2 also gradients, 3 also parameters; 0 replicates "
                           "them")
    precision: str = spec_field("bf16", choices=PRECISION, help="activation/parameter dtype")
    grad_dtype: str = spec_field("fp32", choices=GRAD_DTYPE, help="dtype gradients are accumulated and reduced in")
    optimizer: str = spec_field("adam", choices=OPTIMIZERS)
    schedule: str = spec_field("1f1b", choices=SCHEDULES, help="pipeline schedule")
    virtual_stages: int = spec_field(1, gt=0, help="model chunks per pipeline stage (interleaved schedule)")
    overlap_grad_reduce: bool = spec_field(False, help="overlap data-parallel communication with compute: the "
                                           "gradient reduction with backward, ZeRO-1/2's weight gather with the next "
                                           "forward, ZeRO-3's prefetch (False: Megatron's default, all exposed)")
    async_tp_allreduce: bool = spec_field(True, help="overlap each column-parallel linear's backward input-gradient "
                                          "all-reduce with its weight-gradient GEMM (Megatron-LM default since 2.6)")
    # chiplet packages only (dse/estimate/chiplet.py); None = not set
    chiplet_scheme: str | None = spec_field(None, choices=CHIPLET_SCHEMES, help="how a layer is split over the dies "
                                            "of a chiplet package (default hecaton-2d)")
    chiplet_mesh: str | None = spec_field(None, help="RxC layout of the package's dies, e.g. 4x16 (default: the package's). "
                                          "A hardware choice made at plan time: the collectives run on this mesh and "
                                          "edge DRAM attaches along its perimeter, so a long thin layout has more DRAM "
                                          "stacks (more bandwidth and capacity, more cost); the estimate's "
                                          "hardware.rows/cols report it")
    chiplet_schedule: str | None = spec_field(None, choices=CHIPLET_SCHEDULES, help="minibatch: layer-major over the "
                                              "global batch (weights fetched once per pass); microbatch: micro-batch-major "
                                              "(Megatron gradient accumulation); auto: microbatch for megatron-1d and summa-2d, "
                                              "minibatch for hecaton-2d")
    chiplet_minibatch: int | None = spec_field(None, gt=0, help="micro-batches per mini-batch of the minibatch schedule "
                                               "(weights fetched once per mini-batch; default: the whole global batch)")
    chiplet_overlap: float = spec_field(1.0, unit="fraction", ge=0, le=1, help="how completely a chiplet package "
                                        "overlaps compute, NoP and DRAM (1: max of the three, 0: their sum)")
    # Storage offload (ZeRO-Infinity) and near-storage update (Smart-Infinity); see dse/formulas/offload.py.
    offload_optimizer: str = spec_field("gpu", choices=OFFLOAD_OPTIMIZER,
                                        help="optimizer states + fp32 gradients on gpu, host DRAM (cpu), NVMe drives, "
                                             "or computational storage that runs the update (csd)")
    offload_params: str = spec_field("gpu", choices=OFFLOAD_PARAMS, help="fp16 parameters between uses: gpu, host DRAM (cpu) or NVMe")
    ssds: int | None = spec_field(None, gt=0, help="drives used for offload; default: all drives of the hardware")
    gradient_compression: float = spec_field(1.0, unit="fraction", gt=0, le=1,
                                             help="gradient bytes sent / dense bytes (Smart-Infinity SmartComp ratio; "
                                                  "0.02 = top-1% values with their indices); 1 = no compression")
    exchange_dtype: str = spec_field("fp32", choices=EXCHANGE_DTYPES,
                                     help="dtype of the gradients sent to and params returned by the drives' "
                                          "accelerators (the paper's times use fp32; the released code fp16)")
    transfer_overlap: bool = spec_field(True, help="Smart-Infinity transfer handler (preallocated buffers, writes "
                                        "overlapped with the next loads: SU+O); false = naive SmartUpdate (SU)")
    swap_pipeline: bool = spec_field(False, help="DeepSpeed pipeline_read/pipeline_write: overlap the NVMe swap with "
                                     "the CPU optimizer step (off by default in DeepSpeed)")
    sub_group_size: float | None = spec_field(None, unit="count", gt=0,
                                              help="optimizer sub-group (elements); default DeepSpeed's 1e9, or "
                                                   "Smart-Infinity's 4e7 when the update runs on the drives (csd)")
    optimizer_buffer_count: int = spec_field(4, gt=0, help="pinned host swap buffers for optimizer state (DeepSpeed default 4)")
    param_buffer_count: int = spec_field(5, gt=0, help="pinned host swap buffers for NVMe-offloaded params (DeepSpeed default 5)")
    param_buffer_size: float = spec_field(1e8, unit="count", gt=0, help="elements per param swap buffer (DeepSpeed default 1e8)")
    # Activation offload (SSDTrain); see dse/formulas/activation_offload.py. Uses ssds above.
    offload_activations: str = spec_field("none", choices=OFFLOAD_ACTIVATIONS,
                                          help="write saved activations to the drives (ssd, SSDTrain) or to pinned "
                                               "host memory (host) during forward, read them back in backward")
    offload_layers: int | None = spec_field(None, ge=0, help="leading layers of each pipeline stage whose "
                                            "activations are offloaded; default (auto): the layers whose I/O "
                                            "hides, at most SSDTrain's rule; on a full GPU at least the fewest "
                                            "that fit")
    activation_io_path: str = spec_field("gds", choices=ACTIVATION_IO_PATHS,
                                         help="GPU<->drive path: GPUDirect Storage (gds) or bounce through host memory")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * (self.dp or 1)

    def resolved(self, model, system=None) -> "Plan":
        """Fill the defaults that depend on the model (and, for dp, on the system)."""
        dp = self.dp
        if dp is None:   # array-safe throughout: the vectorised search resolves plans whose fields are arrays
            per_node = system.node.gpus_per_node if system is not None and system.kind == GPU_SYSTEM else 1
            tp_pp = self.tp * self.pp
            dp = maximum(where(per_node % tp_pp == 0, per_node // tp_pp, 1), 1)
        gb = self.global_batch
        if gb is None:
            gb = self.micro_batch * dp * where(self.pp == 1, 1, 4 * self.pp)
        zero = self.zero
        if zero is None:
            zero = 1 if system is None or system.kind == GPU_SYSTEM else 0
        sg = self.sub_group_size
        if sg is None:
            sg = 4e7 if self.offload_optimizer == "csd" else 1e9
        seq = self.seq_len if self.seq_len is not None else (model.seq_len or model.max_seq_len)
        return dataclasses.replace(self, dp=dp, global_batch=gb, zero=zero, seq_len=seq, sub_group_size=sg)


def check_plan(plan: Plan, model, where: str = "plan", system=None) -> None:
    """Raise :class:`InputError` for a plan that cannot run this model at all.

    (A plan that runs but does not fit in memory is *infeasible*, not an error.)
    ``model`` must be resolved (kv_heads, ffn_hidden filled in). With ``system``,
    also check that the hardware has the tiers the plan offloads to.
    """
    check_offload(plan, system, where)
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


def check_offload(plan: Plan, system=None, where: str = "plan") -> None:
    """Offload choices that cannot run at all: the tier is missing, or the combination is undefined."""
    opt, par = plan.offload_optimizer, plan.offload_params
    if opt in ("nvme", "csd") and plan.zero != 3:
        raise InputError(f"{where}: --offload-optimizer {opt} needs --zero 3 (ZeRO-Infinity swaps optimizer state to "
                         f"drives only in stage 3), got --zero {plan.zero}")
    if opt == "cpu" and plan.zero < 1:
        raise InputError(f"{where}: --offload-optimizer cpu needs --zero 1, 2 or 3 (ZeRO-Offload), got --zero {plan.zero}")
    if par != "gpu" and plan.zero != 3:
        raise InputError(f"{where}: --offload-params {par} needs --zero 3 (only stage 3 partitions parameters), "
                         f"got --zero {plan.zero}")
    if plan.gradient_compression < 1 and opt != "csd":
        raise InputError(f"{where}: --gradient-compression {plan.gradient_compression:g} needs --offload-optimizer csd "
                         "(the compressed gradients are decompressed by the drives' accelerators)")
    if system is None:
        return
    storage = system.node.storage
    if (opt in ("nvme", "csd") or par == "nvme") and storage is None:
        flag = f"--offload-optimizer {opt}" if opt in ("nvme", "csd") else f"--offload-params {par}"
        raise InputError(f"{where}: {flag}: hardware '{system.name}' has no storage drives; use gpu or cpu, "
                         "or a system with drives")
    if opt == "csd" and storage.device.near_storage is None:
        raise InputError(f"{where}: --offload-optimizer csd: the drives of '{system.name}' ({storage.device.name}) "
                         "have no near-storage compute; use --offload-optimizer nvme, or a system with computational "
                         "storage (e.g. smart-infinity-a5000)")
def check_activation_offload(plan: Plan, model, system, where: str = "plan") -> None:
    """Activation-offload choices that cannot run at all (SSDTrain; dse/estimate/activation_offload.py)."""
    mode = plan.offload_activations
    if mode == "none":
        if plan.offload_layers is not None:
            raise InputError(f"{where}: --offload-layers {plan.offload_layers} needs --offload-activations ssd or host")
    if mode != "ssd" and plan.activation_io_path != "gds":
        raise InputError(f"{where}: --activation-io-path {plan.activation_io_path} is the path of activations to "
                         f"drives; it needs --offload-activations ssd (got {mode})")
    if mode == "none":
        return
    if system.kind != GPU_SYSTEM:
        raise InputError(f"{where}: --offload-activations {mode} applies to GPU systems; {system.name} is a chiplet "
                         "package (see `dse list hardware`)")
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


# ----------------------------------------------------------------------------- the rules, vectorised

CHIPLET_ONLY_FIELDS = ("chiplet_scheme", "chiplet_mesh", "chiplet_schedule", "chiplet_minibatch")


def check_no_chiplet_fields(plan: Plan, system, where: str = "plan") -> None:
    """The chiplet-only plan fields are an error on a GPU system (they would be silently ignored)."""
    for name, flag in (("chiplet_scheme", "--chiplet-scheme"), ("chiplet_mesh", "--mesh"),
                       ("chiplet_schedule", "plan.chiplet_schedule"), ("chiplet_minibatch", "plan.chiplet_minibatch")):
        if getattr(plan, name) is not None:
            raise InputError(f"{where}: {flag} applies to chiplet packages only; {system.name} is a GPU system "
                             f"(see `dse list hardware`)")


def plan_rules(plan: Plan, model, system=None) -> dict:
    """The rules that make a plan invalid, as ``{rule: ok}``, array-safe (the vectorised search).

    Mirrors what :func:`dse.estimate.make_plan` checks after resolving a plan (the hardware
    backend's ``check_plan``, :mod:`dse.estimate.backends`): on a GPU system
    :func:`check_offload` and :func:`check_plan`, the chiplet-only fields and
    :func:`check_activation_offload`; on a chiplet package
    :func:`dse.specs.chiplet.check_chiplet_plan` and the activation-offload rules. ``ok`` is a
    bool, or a numpy bool array when numeric plan fields are arrays (broadcast shapes
    allowed); a combination is valid where every rule holds. String, boolean and
    optional-or-None fields must be scalars. tests/test_search_rules.py draws plans from
    every field's metadata on several systems and keeps these rules and the checks in step.
    """
    if system is None:
        return gpu_plan_rules(plan, model, None)
    from dse.estimate.backends import backend

    return backend(system).plan_rules(plan, model, system)


def gpu_plan_rules(plan: Plan, model, system=None) -> dict:
    """:func:`plan_rules` on a GPU system (``system`` None: the rules that do not need one)."""
    rules = _offload_rules(plan, system)
    t, p, v = plan.tp, plan.pp, plan.virtual_stages
    rules.update({
        "tp does not divide the attention heads": model.heads % t == 0,
        "tp and the KV heads do not divide one another": (model.kv_heads % t == 0) | (t % model.kv_heads == 0),
        "tp does not divide ffn_hidden": model.ffn_hidden % t == 0,
        "pp exceeds the layers": p <= model.layers,
    })
    if plan.schedule == "interleaved":
        rules["interleaving needs virtual_stages >= 2"] = v >= 2
        rules["pp x virtual_stages exceeds the layers"] = p * v <= model.layers
    else:
        rules["virtual_stages > 1 without the interleaved schedule"] = v == 1
    gb = plan.global_batch
    if gb is not None:
        rules["dp does not divide the global batch"] = gb % plan.dp == 0
        rules["micro-batch does not divide global batch / dp"] = (gb // plan.dp) % plan.micro_batch == 0
    if plan.sequence_parallel and plan.seq_len is not None:
        rules["tp does not divide seq_len (sequence parallelism)"] = plan.seq_len % t == 0
    if model.position == "learned" and plan.seq_len is not None:
        rules["seq_len exceeds the learned positions"] = plan.seq_len <= model.position_embeddings
    if system is not None:
        rules["chiplet-only plan fields on a GPU system"] = all(getattr(plan, f) is None for f in CHIPLET_ONLY_FIELDS)
    rules.update(activation_offload_rules(plan, model, system))
    return rules


def _offload_rules(plan: Plan, system) -> dict:
    """:func:`check_offload` as rules."""
    opt, par, zero = plan.offload_optimizer, plan.offload_params, plan.zero
    rules = {}
    if opt in ("nvme", "csd"):
        rules["optimizer offload to drives needs ZeRO-3"] = zero == 3
    if opt == "cpu":
        rules["optimizer offload to the CPU needs ZeRO 1-3"] = zero >= 1
    if par != "gpu":
        rules["parameter offload needs ZeRO-3"] = zero == 3
    if opt != "csd":
        rules["gradient compression needs --offload-optimizer csd"] = plan.gradient_compression >= 1
    if system is not None:
        storage = system.node.storage
        if opt in ("nvme", "csd") or par == "nvme":
            rules["offload to drives on hardware without drives"] = storage is not None
        if opt == "csd":
            rules["drives without near-storage compute"] = storage is not None and storage.device.near_storage is not None
    return rules


def activation_offload_rules(plan: Plan, model, system) -> dict:
    """:func:`check_activation_offload` as rules."""
    mode, k = plan.offload_activations, plan.offload_layers
    io_path = {"activation_io_path without offload to drives": mode == "ssd" or plan.activation_io_path == "gds"}
    if mode == "none":
        return {"offload_layers without activation offload": k is None, **io_path}
    rules = {"activation offload on a chiplet package": system is not None and system.kind == GPU_SYSTEM, **io_path}
    if not rules["activation offload on a chiplet package"]:
        return rules
    if mode == "ssd":
        rules["activation offload to drives on hardware without drives"] = system.node.storage is not None
    if k is not None:
        per_stage = -(-model.layers // (plan.pp * plan.virtual_stages)) * plan.virtual_stages
        rules["offload_layers exceeds the layers"] = k <= model.layers
        rules["offload_layers exceeds the layers of a pipeline stage"] = k <= per_stage
    return rules
