"""DeepSpeed's ``ds_config.json`` <-> a dse plan.

Keys as DeepSpeed documents them (deepspeedai/DeepSpeed ``docs/_pages/config-json.md``; the ZeRO section's
fields and defaults in ``deepspeed/runtime/zero/config.py`` and ``offload_config.py``, the ``aio`` section in
``deepspeed/runtime/swap_tensor/constants.py``). What maps:

- ``train_batch_size`` = ``train_micro_batch_size_per_gpu`` x ``gradient_accumulation_steps`` x data-parallel
  GPUs (DeepSpeed infers the third from two): global batch, micro-batch and dp; with all three given dp is
  their quotient, else it comes from the hardware (all its GPUs, over the explicit ``--tp``/``--pp``);
- ``bf16.enabled`` / ``fp16.enabled``: the precision (neither: fp32, not modelled, estimated as bf16);
  ``data_types.grad_accum_dtype``: the gradient dtype;
- ``zero_optimization``: ``stage`` -> zero; ``offload_optimizer.device`` cpu|nvme -> offload_optimizer,
  ``offload_param.device`` -> offload_params, their ``buffer_count``/``buffer_size``, ``pipeline_read``/
  ``pipeline_write`` -> swap_pipeline, ``sub_group_size``, ``overlap_comm`` -> overlap_grad_reduce;
- ``aio``: ``block_size``, ``queue_depth``, ``thread_count`` (``intra_op_parallelism``), ``overlap_events``
  -> the plan's ``aio_*`` (requests the swapper keeps in flight on the drives);
- ``activation_checkpointing`` present -> full recompute (DeepSpeed's checkpointing wraps whole layers,
  as Megatron-DeepSpeed and Hugging Face's gradient checkpointing call it);
- ``optimizer.type`` -> the optimizer's state count (Adam, AdamW, Lamb, 1-bit Adam: two states; SGD: one;
  Adagrad: one).

Tensor and pipeline parallelism are not ds_config settings (Megatron-DeepSpeed's arguments, DeepSpeed's
``PipelineModule``): give ``--tp``/``--pp``. A value of ``"auto"`` (filled in by the Hugging Face Trainer)
is left to dse's default and said so. :func:`emit` writes the ds_config of a plan, with the ``aio``
section and the NVMe swap settings for storage-offload plans.
"""

from __future__ import annotations

import json

from dse.frameworks.common import Imported, Tree, as_bool, as_choice, as_float, as_int, bad, read_tree

OPTIMIZERS = {"adam": "adam", "adamw": "adam", "fusedadam": "adam", "cpuadam": "adam", "onebitadam": "adam",
              "zerooneadam": "adam", "lamb": "adam", "fusedlamb": "adam", "onebitlamb": "adam",
              "sgd": "sgd-momentum", "adagrad": "adagrad", "cpuadagrad": "adagrad", "muon": "sgd-momentum"}
DEVICES = ("none", "cpu", "nvme")


def load(path: str) -> Tree:
    """The parsed ds_config (one-line errors for an unreadable file or bad JSON)."""
    return read_tree(path, "DeepSpeed config", "JSON", json.loads)


def read(path: str) -> Imported:
    """A ds_config.json as an :class:`Imported` config (see the module docstring)."""
    t = load(path)
    imp = Imported("deepspeed", path)
    _batch(imp, t)
    _precision(imp, t)
    _zero(imp, t)
    _aio(imp, t)
    ckpt = t.section("activation_checkpointing")
    if "activation_checkpointing" in t.data:
        imp.set("recompute", "full", "activation_checkpointing")
        for k in ckpt:
            if k in ("partition_activations", "cpu_checkpointing") and t.get(f"activation_checkpointing.{k}"):
                imp.ignore(f"activation_checkpointing.{k}")
    kind = t.get("optimizer.type")
    if kind is not None:
        name = OPTIMIZERS.get(str(kind).lower())
        if name is None:
            imp.ignore("optimizer.type", f"{kind!r} is not modelled: estimated as Adam")
        else:
            imp.set("optimizer", name, "optimizer.type")
            if str(kind).lower() == "muon":
                imp.ignore("optimizer.type", "Muon's Newton-Schulz step is not modelled (one state per parameter)")
    imp.notes.append("ds_config sets no tensor or pipeline parallelism and no model: --tp/--pp and --model "
                     "give them")
    for p in t.unread():
        imp.ignore(p)
    return imp


def _value(imp: Imported, t: Tree, key: str):
    """The value at ``key``, None when absent or ``"auto"`` (said so)."""
    v = t.get(key)
    if v == "auto":
        imp.notes.append(f"{key} is \"auto\" (the Hugging Face Trainer fills it in): dse's default used")
        return None
    return v


def _batch(imp: Imported, t: Tree) -> None:
    src = imp.source
    total, micro, gas = (_value(imp, t, k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                                     "gradient_accumulation_steps"))
    total = None if total is None else as_int(src, "train_batch_size", total)
    micro = None if micro is None else as_int(src, "train_micro_batch_size_per_gpu", micro)
    gas = None if gas is None else as_int(src, "gradient_accumulation_steps", gas)
    if micro is not None:
        imp.set("micro_batch", micro, "train_micro_batch_size_per_gpu")
    if total is not None:
        imp.set("global_batch", total, "train_batch_size")
    if total is not None and micro is not None and gas is not None:
        if total % (micro * gas):
            raise bad(src, "train_batch_size", f"{total} is not train_micro_batch_size_per_gpu x "
                                               f"gradient_accumulation_steps ({micro} x {gas}) x GPUs")
        imp.set("dp", total // (micro * gas), "train_batch_size / (micro-batch x accumulation)")
    elif total is None:
        imp.accumulation = gas or 1
        if micro is None:
            imp.notes.append("no train_batch_size or train_micro_batch_size_per_gpu: dse's micro-batch used")
    elif micro is None and gas is not None:
        imp.notes.append("train_batch_size and gradient_accumulation_steps without a micro-batch: dse's "
                         "micro-batch (--micro-batch) used")


def _precision(imp: Imported, t: Tree) -> None:
    src = imp.source
    on, auto = {}, False
    for key in ("bf16", "bfloat16", "fp16"):
        if "enabled" in t.section(key):
            v = _value(imp, t, f"{key}.enabled")
            auto |= v is None
            on[key] = v is not None and as_bool(src, f"{key}.enabled", v)
    if on.get("bf16") or on.get("bfloat16"):
        imp.set("precision", "bf16", "bf16.enabled")
    elif on.get("fp16"):
        imp.set("precision", "fp16", "fp16.enabled")
    elif not auto:
        imp.ignore("precision fp32", "neither bf16 nor fp16 enabled: fp32 training is not modelled; estimated as "
                                     "bf16")
    dtype = t.get("data_types.grad_accum_dtype")
    if dtype is not None:
        dtype = as_choice(src, "data_types.grad_accum_dtype", dtype, ("fp32", "fp16", "bf16"))
        imp.set("grad_dtype", "fp32" if dtype == "fp32" else "half", "data_types.grad_accum_dtype")


def _aio(imp: Imported, t: Tree) -> None:
    """The swapper's ``aio`` section: request size, queue depth, threads, overlapped completions."""
    src = imp.source
    t.section("aio")
    for key, field in (("block_size", "aio_block_size"), ("queue_depth", "aio_queue_depth"),
                       ("thread_count", "aio_thread_count"), ("intra_op_parallelism", "aio_thread_count")):
        v = _value(imp, t, f"aio.{key}")
        if v is not None:
            n = as_int(src, f"aio.{key}", v)
            imp.set(field, float(n) if key == "block_size" else n, f"aio.{key}")
    v = _value(imp, t, "aio.overlap_events")
    if v is not None:
        imp.set("aio_overlap_events", as_bool(src, "aio.overlap_events", v), "aio.overlap_events")
    for k in ("single_submit", "use_gds"):
        if t.get(f"aio.{k}") is not None:
            imp.ignore(f"aio.{k}")


def _zero(imp: Imported, t: Tree) -> None:
    src, z = imp.source, "zero_optimization"
    section = t.section(z)
    stage = as_int(src, f"{z}.stage", t.get(f"{z}.stage", 0), 0)
    if stage > 3:
        raise bad(src, f"{z}.stage", f"expected 0, 1, 2 or 3, got {stage}")
    imp.set("zero", stage, f"{z}.stage")
    if t.get(f"{z}.overlap_comm") is not None and as_bool(src, f"{z}.overlap_comm", t.get(f"{z}.overlap_comm")):
        imp.set("overlap_grad_reduce", True, f"{z}.overlap_comm")
    if t.get(f"{z}.sub_group_size") is not None:
        imp.set("sub_group_size", as_float(src, f"{z}.sub_group_size", t.get(f"{z}.sub_group_size"), 1),
                f"{z}.sub_group_size")
    if t.get(f"{z}.cpu_offload") is True:            # the deprecated spelling of offload_optimizer.device cpu
        imp.set("offload_optimizer", "cpu", f"{z}.cpu_offload")
    if t.get(f"{z}.cpu_offload_param") is True:
        imp.set("offload_params", "cpu", f"{z}.cpu_offload_param")
    for part, field, counts in (("offload_optimizer", "offload_optimizer", ("buffer_count",)),
                                ("offload_param", "offload_params", ("buffer_count", "buffer_size"))):
        if part not in section:
            continue
        key = f"{z}.{part}"
        t.section(key)
        device = as_choice(src, f"{key}.device", t.get(f"{key}.device", "none"), DEVICES)
        imp.set(field, "gpu" if device == "none" else device, f"{key}.device")
        if device == "none":
            continue
        for c in counts:
            if t.get(f"{key}.{c}") is not None:
                name = {"offload_optimizer": "optimizer_", "offload_param": "param_"}[part] + c
                value = as_int(src, f"{key}.{c}", t.get(f"{key}.{c}"))
                imp.set(name, float(value) if c == "buffer_size" else value, f"{key}.{c}")
        if part == "offload_optimizer":
            if any(t.get(f"{key}.{k}") is True for k in ("pipeline_read", "pipeline_write")):
                imp.set("swap_pipeline", True, f"{key}.pipeline_read/pipeline_write")
            ratio = t.get(f"{key}.ratio")
            if ratio is not None and as_float(src, f"{key}.ratio", ratio, 0, 1) < 1:
                imp.ignore(f"{key}.ratio", f"{ratio:g} of the optimizer offloaded: estimated with all of it")
        for k in ("nvme_path", "pin_memory", "max_in_cpu", "fast_init"):
            if t.get(f"{key}.{k}") is not None:
                imp.ignore(f"{key}.{k}")


# ----------------------------------------------------------------------------- out

AIO_DEFAULTS = {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": False,
                "overlap_events": True}      # deepspeed/runtime/swap_tensor/constants.py, config-json.md
NVME_PATH = "/local_nvme"                   # config-json.md's example path: set it to the drives' mount


def emit(model, system, plan) -> tuple[str, list[str]]:
    """The ds_config.json of a resolved plan (NVMe swap and ``aio`` sections for storage offload), and what a
    ds_config cannot express."""
    from dse.frameworks.common import plan_limits

    warnings = plan_limits(plan, "DeepSpeed")
    if plan.ep > 1:
        warnings.append(f"expert parallelism ep {plan.ep} is not a ds_config.json setting: DeepSpeed-MoE takes it "
                        f"in the model code (deepspeed.moe.layer.MoE(ep_size={plan.ep}))")
    gas, rest = divmod(plan.global_batch, plan.micro_batch * plan.dp)
    if rest:
        warnings.append(f"global batch {plan.global_batch} is not micro-batch x dp ({plan.micro_batch} x {plan.dp}) "
                        f"x an integer: gradient_accumulation_steps rounded to {max(gas, 1)}")
    cfg: dict = {"train_batch_size": plan.micro_batch * max(gas, 1) * plan.dp,
                 "train_micro_batch_size_per_gpu": plan.micro_batch, "gradient_accumulation_steps": max(gas, 1)}
    cfg["fp16" if plan.precision == "fp16" else "bf16"] = {"enabled": True}
    if plan.precision == "bf16-pure":
        warnings.append("bf16-pure (no fp32 master weights): DeepSpeed's bf16 keeps fp32 master weights")
    if plan.grad_dtype == "half":
        cfg["data_types"] = {"grad_accum_dtype": "fp16" if plan.precision == "fp16" else "bf16"}
    if plan.optimizer == "adam-8bit":    # a client optimizer: the training script passes it to deepspeed.initialize
        warnings.append("adam-8bit is bitsandbytes' Adam8bit (Hugging Face Trainer: optim adamw_bnb_8bit), not a "
                        "DeepSpeed optimizer: create it in the training script; no optimizer section written")
    else:
        cfg["optimizer"] = {"adam": {"type": "AdamW"}, "sgd-momentum": {"type": "SGD", "params": {"momentum": 0.9}},
                            "adagrad": {"type": "Adagrad"}}[plan.optimizer]
    cfg["zero_optimization"] = _zero_section(plan)
    if "cxl" in (plan.offload_optimizer, plan.offload_params):
        warnings.append("cxl: DeepSpeed has no CXL device; CXL memory is a CPU-less NUMA node, so the config says "
                        "device cpu: start the launcher under numactl --membind=<that node> (numactl --hardware "
                        "lists it) so the offloaded buffers land in the expanders")
    if "nvme" in (cfg["zero_optimization"].get("offload_optimizer", {}).get("device"),
                  cfg["zero_optimization"].get("offload_param", {}).get("device")):
        cfg["aio"] = {**AIO_DEFAULTS, "block_size": int(plan.aio_block_size), "queue_depth": plan.aio_queue_depth,
                      "thread_count": plan.aio_thread_count, "overlap_events": plan.aio_overlap_events}
    if plan.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False,
                                           "synchronize_checkpoint_boundary": False}
        warnings.append("full recompute: the model must checkpoint each layer with deepspeed.checkpointing "
                        "(Megatron-DeepSpeed --checkpoint-activations, or Hugging Face gradient checkpointing)")
    elif plan.recompute == "selective":
        warnings.append("selective recompute is the model code's (Megatron-DeepSpeed --recompute-granularity "
                        "selective), not a ds_config setting")
    if plan.tp > 1 or plan.pp > 1:
        warnings.append(f"tp {plan.tp} and pp {plan.pp} are not ds_config settings: Megatron-DeepSpeed's "
                        "--tensor-model-parallel-size/--pipeline-model-parallel-size or DeepSpeed's "
                        "PipelineModule(num_stages) set them; dp = GPUs / (tp x pp)")
    for name, value, default in (("attention", plan.attention, "flash"), ("stack", plan.stack, "megatron"),
                                 ("sequence_parallel", plan.sequence_parallel, False)):
        if value != default:
            warnings.append(f"{name} {value} is the model code's choice, not a ds_config setting")
    return json.dumps(cfg, indent=2) + "\n", warnings


def _zero_section(plan) -> dict:
    z: dict = {"stage": plan.zero, "overlap_comm": plan.overlap_grad_reduce, "sub_group_size": int(plan.sub_group_size)}
    if plan.offload_optimizer != "gpu":
        device = "nvme" if plan.offload_optimizer in ("nvme", "csd") else "cpu"
        z["offload_optimizer"] = {"device": device, "pin_memory": True}
        if device == "nvme":
            z["offload_optimizer"].update(nvme_path=NVME_PATH, buffer_count=plan.optimizer_buffer_count,
                                          pipeline_read=plan.swap_pipeline, pipeline_write=plan.swap_pipeline)
    if plan.offload_params != "gpu":   # cxl: host memory on the expanders' NUMA node (see emit's warning)
        z["offload_param"] = {"device": "cpu" if plan.offload_params == "cxl" else plan.offload_params,
                              "pin_memory": True}
        if plan.offload_params == "nvme":
            z["offload_param"].update(nvme_path=NVME_PATH, buffer_count=plan.param_buffer_count,
                                      buffer_size=int(plan.param_buffer_size))
    return z
