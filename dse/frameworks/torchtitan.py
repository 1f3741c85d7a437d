"""torchtitan's job TOML <-> a dse plan.

Keys as torchtitan's ``JobConfig`` declares them (pytorch/torchtitan ``torchtitan/config/job_config.py`` at
238fa9953e, the last release with TOML train configs; ``torchtitan/models/llama3/train_configs/llama3_8b.toml``
is the shape of a file). What maps:

- ``[model] name``/``flavor`` -> the catalog model of the same architecture
  (:data:`~dse.frameworks.common.TORCHTITAN_MODELS`: llama3 8B/70B/405B, llama2 7B/13B/70B);
- ``[parallelism]``: ``tensor_parallel_degree`` -> tp (torchtitan's tensor parallelism always shards norms
  and dropout over the sequence: sequence parallelism), ``pipeline_parallel_degree`` -> pp (with
  ``pipeline_parallel_microbatch_size`` the micro-batch, ``pipeline_parallel_schedule`` 1F1B/GPipe/
  Interleaved1F1B), ``data_parallel_replicate_degree`` x ``data_parallel_shard_degree`` -> dp (-1: the
  GPUs left over; the TOML does not hold the world size, so: all of the hardware's), FSDP sharding ->
  ZeRO-3 (``fsdp_reshard_after_forward = "never"``, and ``"default"`` under pipeline parallelism, keep the
  gathered weights from forward to backward: ZeRO-2's memory and traffic), replication only (DDP) -> ZeRO-0;
  either overlaps its communication with compute (overlap_grad_reduce, always on); ``expert_parallel_degree``
  -> ep (torchtitan borrows the expert-parallel ranks from the data-parallel ones, as Megatron-Core and dse do);
- ``[training]``: ``local_batch_size`` (``batch_size`` before 2025) per data-parallel rank and step,
  ``global_batch_size`` (-1: local x dp; more: gradient accumulation), ``seq_len``,
  ``mixed_precision_param`` bfloat16 -> bf16 (float32: not modelled), ``enable_cpu_offload`` -> FSDP's
  CPU offload of parameters, gradients and optimizer states; ``compile`` (``[compile] enable`` since 2025)
  -> the compiled stack, else eager PyTorch;
- ``[activation_checkpoint] mode`` none|selective|full (selective by layer, ``selective_ac_option`` N > 1,
  is estimated as full: dse recomputes every layer or none);
- ``[optimizer] name`` -> the optimizer's state count.
"""

from __future__ import annotations

import tomllib

from dse.frameworks.common import TORCHTITAN_MODELS, Imported, Tree, as_bool, as_choice, as_int, bad, read_tree

SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved"}
OPTIMIZERS = {"adamw": "adam", "adam": "adam", "sgd": "sgd-momentum", "adagrad": "adagrad"}


def load(path: str) -> Tree:
    """The parsed job TOML (one-line errors for an unreadable file or bad TOML)."""
    return read_tree(path, "torchtitan config", "TOML", lambda raw: tomllib.loads(raw.decode("utf-8")))


def read(path: str) -> Imported:
    """A torchtitan job TOML as an :class:`Imported` config (see the module docstring)."""
    t = load(path)
    imp = Imported("torchtitan", path)
    _model(imp, t)
    _parallelism(imp, t)
    _training(imp, t)
    mode = t.get("activation_checkpoint.mode")
    if mode is not None:
        mode = as_choice(path, "activation_checkpoint.mode", mode, ("none", "selective", "full", "memory_budget"))
        option = str(t.get("activation_checkpoint.selective_ac_option", "2"))
        if mode == "memory_budget":
            imp.ignore("activation_checkpoint.mode", "memory_budget (compiler-chosen recompute): estimated as "
                                                     "selective")
            mode = "selective"
        elif mode == "selective" and option != "op":
            every = as_int(path, "activation_checkpoint.selective_ac_option", option)
            mode = "full"
            if every > 1:
                imp.ignore("activation_checkpoint.selective_ac_option",
                           f"every {every}th layer checkpointed: estimated as full (every layer)")
        imp.set("recompute", mode, "activation_checkpoint.mode")
    name = t.get("optimizer.name")
    if name is not None:
        if str(name).lower() in OPTIMIZERS:
            imp.set("optimizer", OPTIMIZERS[str(name).lower()], "optimizer.name")
        else:
            imp.ignore("optimizer.name", f"{name!r} is not modelled: estimated as Adam")
    imp.set("attention", "flash", "torchtitan (scaled_dot_product_attention)")
    for p in t.unread():
        imp.ignore(p)
    return imp


def _model(imp: Imported, t: Tree) -> None:
    name, flavor = t.get("model.name"), t.get("model.flavor")
    if name is None and flavor is None:
        return
    ref = TORCHTITAN_MODELS.get((str(name or "llama3"), str(flavor)))
    if ref is None:
        known = ", ".join(f"{n} {f}" for n, f in TORCHTITAN_MODELS)
        imp.notes.append(f"model {name} {flavor}: no catalog model of that architecture ({known}): the --model "
                         "is estimated")
        imp.ignore("model.flavor", "not in the catalog")
        return
    imp.model, imp.model_keys = ref, ["model.name", "model.flavor"]
    if t.get("model.converters"):
        imp.ignore("model.converters", f"{t.get('model.converters')}: float8/MX training is not modelled")


def _parallelism(imp: Imported, t: Tree) -> None:
    src, p = imp.source, "parallelism"
    tp = as_int(src, f"{p}.tensor_parallel_degree", t.get(f"{p}.tensor_parallel_degree", 1))
    pp = as_int(src, f"{p}.pipeline_parallel_degree", t.get(f"{p}.pipeline_parallel_degree", 1))
    imp.set("tp", tp, f"{p}.tensor_parallel_degree")
    imp.set("pp", pp, f"{p}.pipeline_parallel_degree")
    imp.set("sequence_parallel", tp > 1, f"{p}.tensor_parallel_degree")
    if t.get(f"{p}.expert_parallel_degree") is not None:   # torchtitan's dp2ep: EP borrowed from the FSDP ranks
        imp.set("ep", as_int(src, f"{p}.expert_parallel_degree", t.get(f"{p}.expert_parallel_degree")),
                f"{p}.expert_parallel_degree")
    replicate = as_int(src, f"{p}.data_parallel_replicate_degree", t.get(f"{p}.data_parallel_replicate_degree", 1))
    shard = t.get(f"{p}.data_parallel_shard_degree", -1)
    shard = -1 if shard == -1 else as_int(src, f"{p}.data_parallel_shard_degree", shard)
    cp = as_int(src, f"{p}.context_parallel_degree", t.get(f"{p}.context_parallel_degree", 1))
    if cp > 1:
        imp.context_parallel = cp
        imp.set("cp", cp, f"{p}.context_parallel_degree")
    reshard = t.get(f"{p}.fsdp_reshard_after_forward", "default")
    reshard = as_choice(src, f"{p}.fsdp_reshard_after_forward", reshard, ("default", "always", "never"))
    if shard == 1:
        imp.set("zero", 0, f"{p}.data_parallel_shard_degree")
    else:
        # "default" is torchtitan's smart default: no resharding after forward when pipeline parallelism is on (no
        # all-gather per micro-batch), resharding otherwise (torchtitan/distributed/fsdp.py,
        # get_fsdp_reshard_after_forward_policy: "default" -> not pp_enabled; pytorch/torchtitan b5bcd76c66)
        gathered = reshard == "never" or (reshard == "default" and pp > 1)
        imp.set("zero", 2 if gathered else 3,
                f"{p}.fsdp_reshard_after_forward" if gathered else f"{p}.data_parallel_shard_degree")
    # FSDP2's fully_shard prefetches the next module's all-gather and overlaps each reduce-scatter with backward;
    # DDP overlaps its bucketed all-reduce with backward (Li et al. 2020, "PyTorch Distributed", VLDB, sec. 3.2.3):
    # torchtitan has no switch that turns either off
    imp.set("overlap_grad_reduce", True, f"{p}.data_parallel_shard_degree")
    if shard != -1:
        imp.set("dp", replicate * shard, f"{p}.data_parallel_replicate_degree x data_parallel_shard_degree")
    if replicate > 1 and shard != 1:
        imp.ignore(f"{p}.data_parallel_replicate_degree", "HSDP: sharded within groups, replicated across them; "
                                                          "estimated as sharded over all of dp")
    if pp > 1:
        sched = str(t.get(f"{p}.pipeline_parallel_schedule", "1F1B"))
        if sched not in SCHEDULES:
            imp.ignore(f"{p}.pipeline_parallel_schedule", f"{sched}: estimated as 1F1B")
        imp.set("schedule", SCHEDULES.get(sched, "1f1b"), f"{p}.pipeline_parallel_schedule")
        per_stage = t.get(f"{p}.pipeline_parallel_layers_per_stage")
        if SCHEDULES.get(sched) == "interleaved":
            if per_stage is None:
                raise bad(src, f"{p}.pipeline_parallel_layers_per_stage", "needed with Interleaved1F1B (the "
                                                                          "stages per rank follow from it)")
            imp.layers_per_virtual_stage = as_int(src, f"{p}.pipeline_parallel_layers_per_stage", per_stage)
            imp.keys["virtual_stages"] = f"{p}.pipeline_parallel_layers_per_stage"


def _training(imp: Imported, t: Tree) -> None:
    src, tr = imp.source, "training"
    key = f"{tr}.local_batch_size" if t.get(f"{tr}.local_batch_size") is not None else f"{tr}.batch_size"
    local = as_int(src, key, t.get(key, 8))
    micro = local
    if imp.plan["pp"] > 1:
        mkey = "parallelism.pipeline_parallel_microbatch_size"
        micro = as_int(src, mkey, t.get(mkey, 1))
        if local % micro:
            raise bad(src, mkey, f"{micro} does not divide {key} ({local})")
        key = mkey
    imp.set("micro_batch", micro, key)
    total = t.get(f"{tr}.global_batch_size", -1)
    if total == -1:
        imp.accumulation = local // micro
    else:
        imp.set("global_batch", as_int(src, f"{tr}.global_batch_size", total), f"{tr}.global_batch_size")
    if t.get(f"{tr}.seq_len") is not None:
        imp.set("seq_len", as_int(src, f"{tr}.seq_len", t.get(f"{tr}.seq_len")), f"{tr}.seq_len")
    dtype = as_choice(src, f"{tr}.mixed_precision_param", t.get(f"{tr}.mixed_precision_param", "bfloat16"),
                      ("bfloat16", "float32"))
    imp.set("precision", "bf16", f"{tr}.mixed_precision_param")
    if dtype == "float32":
        imp.ignore(f"{tr}.mixed_precision_param", "float32 training is not modelled; estimated as bf16")
    if t.get(f"{tr}.mixed_precision_reduce") is not None:
        as_choice(src, f"{tr}.mixed_precision_reduce", t.get(f"{tr}.mixed_precision_reduce"), ("float32",))
        imp.set("grad_dtype", "fp32", f"{tr}.mixed_precision_reduce")
    if as_bool(src, f"{tr}.enable_cpu_offload", t.get(f"{tr}.enable_cpu_offload", False)):
        imp.set("offload_optimizer", "cpu", f"{tr}.enable_cpu_offload")
        imp.set("offload_params", "cpu", f"{tr}.enable_cpu_offload")
    key = "compile.enable" if t.get("compile.enable") is not None else f"{tr}.compile"
    imp.set("stack", "compiled" if as_bool(src, key, t.get(key, False)) else "pytorch", key)


# ----------------------------------------------------------------------------- out


def emit(model, system, plan) -> tuple[str, list[str]]:
    """The job TOML of a resolved plan, and what torchtitan cannot express for it."""
    from dse.frameworks.common import gpu_layout, plan_limits

    warnings = plan_limits(plan, "torchtitan")
    world = plan.gpus
    nodes, per_node = gpu_layout(world, system.node.host_gpus)   # one launcher per host (OS instance)
    flavor = {v: k for k, v in TORCHTITAN_MODELS.items()}.get(model.name)
    lines = [f"# dse: torchtitan job for {model.name} on {system.name}: {world} GPUs; launch with "
             f"torchrun --nnodes {nodes} --nproc_per_node {per_node} -m torchtitan.train --job.config_file FILE"]
    body = []
    if flavor is None:
        known = ", ".join(f"{n} {f}" for n, f in TORCHTITAN_MODELS)
        warnings.append(f"{model.name} is not a torchtitan model flavor ({known}): define one, and set [model]")
    else:
        body += ["[model]", f'name = "{flavor[0]}"', f'flavor = "{flavor[1]}"', ""]
    optimizer = {"adam": "AdamW", "sgd-momentum": "SGD", "adagrad": "Adagrad", "adam-8bit": "Adam8bit"}[plan.optimizer]
    if optimizer != "AdamW":
        warnings.append(f"optimizer {optimizer}: torchtitan builds Adam and AdamW")
    body += ["[optimizer]", f'name = "{optimizer}"', ""]
    body += _training_section(plan, warnings) + _parallelism_section(model, plan, warnings)
    ac = [f'mode = "{plan.recompute}"'] + (['selective_ac_option = "op"'] if plan.recompute == "selective" else [])
    body += ["[activation_checkpoint]"] + ac
    if plan.attention != "flash":
        warnings.append("math attention: torchtitan runs scaled_dot_product_attention (flash)")
    if not plan.overlap_grad_reduce and plan.dp > 1:
        warnings.append("no DP overlap: torchtitan's FSDP2/DDP always overlap their communication with compute "
                        "(estimate with --set plan.overlap_grad_reduce=true to compare)")
    if plan.stack == "megatron":
        warnings.append("the estimate used the megatron stack; torchtitan runs eager or compiled PyTorch "
                        "(estimate with --stack pytorch or compiled)")
    lines += [f"# dse: warning: {w}" for w in warnings]
    return "\n".join(lines + body) + "\n", warnings


def _training_section(plan, warnings: list[str]) -> list[str]:
    local = plan.micro_batch if plan.pp == 1 else plan.global_batch // plan.dp
    if plan.precision != "bf16":
        warnings.append(f"precision {plan.precision}: torchtitan's mixed precision is bfloat16 (or float32) "
                        "parameters with fp32 master weights")
    if plan.grad_dtype != "fp32":
        warnings.append(f"{plan.grad_dtype} gradient reduction: torchtitan reduces in float32")
    cpu = plan.offload_optimizer == "cpu" and plan.offload_params == "cpu"
    if (plan.offload_optimizer, plan.offload_params) not in (("gpu", "gpu"), ("cpu", "cpu")):
        warnings.append(f"offload_optimizer {plan.offload_optimizer}, offload_params {plan.offload_params}: "
                        "torchtitan offloads parameters, gradients and optimizer states to the CPU together "
                        "(enable_cpu_offload) or not at all")
    return ["[training]", f"local_batch_size = {local}", f"global_batch_size = {plan.global_batch}",
            f"seq_len = {plan.seq_len}", 'mixed_precision_param = "bfloat16"', 'mixed_precision_reduce = "float32"',
            f"enable_cpu_offload = {str(cpu).lower()}", "", "[compile]",
            f"enable = {str(plan.stack == 'compiled').lower()}", ""]


def _reshard(plan) -> str:
    """``fsdp_reshard_after_forward`` of the plan's ZeRO stage: never for ZeRO 1-2; for ZeRO-3 "always" with pipeline
    stages (torchtitan's "default" there keeps the weights gathered across micro-batches, dse prices ZeRO-3 gathered
    every micro-batch), "default" without (which is "always" there)."""
    return "never" if plan.zero in (1, 2) else "always" if plan.zero == 3 and plan.pp > 1 else "default"


def _parallelism_section(model, plan, warnings: list[str]) -> list[str]:
    replicate, shard = (plan.dp, 1) if plan.zero == 0 else (1, plan.dp)
    if plan.zero == 1 and plan.dp > 1:
        warnings.append("ZeRO-1 has no FSDP equivalent: written as FSDP keeping the gathered weights from forward "
                        "to backward (reshard never: ZeRO-2's memory and traffic)")
    if plan.tp > 1 and not plan.sequence_parallel:
        warnings.append("torchtitan's tensor parallelism always shards norms over the sequence (sequence "
                        "parallelism on)")
    out = ["[parallelism]", f"data_parallel_replicate_degree = {replicate}", f"data_parallel_shard_degree = {shard}",
           f'fsdp_reshard_after_forward = "{_reshard(plan)}"',
           f"tensor_parallel_degree = {plan.tp}", f"pipeline_parallel_degree = {plan.pp}"]
    if model.experts:
        out.append(f"expert_parallel_degree = {plan.ep}")
    if plan.pp > 1:
        sched = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B", "dualpipe": "DualPipeV"}[
            plan.schedule]
        if sched == "DualPipeV":
            warnings.append("DualPipeV (torch.distributed.pipelining) is DualPipe cut in half: 2 pp stages, two per "
                            "rank in a V, one copy of the parameters; dse estimated DualPipe's two copies")
        out += [f"pipeline_parallel_microbatch_size = {plan.micro_batch}", f'pipeline_parallel_schedule = "{sched}"']
        if sched == "Interleaved1F1B":
            out.append(f"pipeline_parallel_layers_per_stage = {model.layers // (plan.pp * plan.virtual_stages)}")
        if plan.global_batch % plan.dp:
            warnings.append(f"global batch {plan.global_batch} is not a multiple of dp {plan.dp}")
    return out + [f"context_parallel_degree = {plan.cp}", ""]
