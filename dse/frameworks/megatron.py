"""Megatron-LM's ``pretrain_gpt.py`` arguments <-> a dse plan (and the model they define).

The option names are Megatron-LM's (NVIDIA/Megatron-LM ``megatron/training/arguments.py`` at 67f3515c8a, the last
version that declares every option by hand; since #2896 the same names are generated from ``TransformerConfig``
and ``megatron/training/config/training_config.py``), and torchrun's launcher options (``--nnodes``,
``--nproc_per_node``/``--nproc-per-node``) for the world size. Megatron's own defaults are applied where dse's
differ: the global batch (micro-batch x data-parallel size) here, the model's (dropout, FFN size, vocabulary
padding) in :mod:`dse.frameworks.megatron_model`, which reads and writes the arguments that define the model.
Context parallelism's, the pipeline layout's and the experts' arguments: :mod:`dse.frameworks.megatron_cp`,
:mod:`dse.frameworks.megatron_layout`, :mod:`dse.frameworks.megatron_moe`.

:func:`read` takes the arguments as one string, or a launch script (:mod:`dse.frameworks.arguments`;
``--name=value`` and ``--name value`` both parse). :func:`emit` writes the torchrun command line of a plan.
"""

from __future__ import annotations

import difflib

from dse.errors import InputError
from dse.frameworks import (
    megatron_cp as _cp,
    megatron_layout as _layout,
    megatron_model as _model,
    megatron_moe as _moe,
)
from dse.frameworks.arguments import parse, tokens
from dse.frameworks.common import Imported, as_choice, as_float, as_int

# option -> kind: "flag" (store_true), "int", "float", "str", "list" (nargs='+'/'*'), or an int: that many values
OPTIONS = {
    "--tensor-model-parallel-size": "int", "--pipeline-model-parallel-size": "int", "--micro-batch-size": "int",
    "--global-batch-size": "int", "--seq-length": "int", "--num-layers-per-virtual-pipeline-stage": "int",
    "--num-virtual-stages-per-pipeline-rank": "int", "--context-parallel-size": "int", "--cp-comm-type": "list",
    "--hierarchical-context-parallel-sizes": "list",
    "--sequence-parallel": "flag", "--use-distributed-optimizer": "flag", "--use-torch-fsdp2": "flag",
    "--use-megatron-fsdp": "flag", "--data-parallel-sharding-strategy": "str", "--overlap-grad-reduce": "flag",
    "--no-gradient-accumulation-fusion": "flag",
    "--overlap-param-gather": "flag", "--recompute-granularity": "str", "--recompute-activations": "flag",
    "--recompute-method": "str", "--recompute-num-layers": "int", "--bf16": "flag", "--fp16": "flag",
    "--grad-reduce-in-bf16": "flag", "--fp8-format": "str", "--fp8-recipe": "str", "--fp8-param-gather": "flag",
    "--optimizer": "str", "--optimizer-cpu-offload": "flag", "--cross-entropy-loss-fusion": "flag",
    "--cross-entropy-fusion-impl": "str",
    "--optimizer-offload-fraction": "float", "--use-flash-attn": "flag", "--attention-backend": "str",
    "--transformer-impl": "str", "--num-layers": "int", "--hidden-size": "int", "--num-attention-heads": "int",
    "--ffn-hidden-size": "int", "--kv-channels": "int", "--group-query-attention": "flag",
    "--num-query-groups": "int", "--swiglu": "flag", "--squared-relu": "flag", "--normalization": "str",
    "--apply-layernorm-1p": "flag", "--rotary-percent": "float",
    "--position-embedding-type": "str", "--use-rotary-position-embeddings": "flag",
    "--no-position-embedding": "flag", "--untie-embeddings-and-output-weights": "flag",
    "--max-position-embeddings": "int", "--disable-bias-linear": "flag", "--add-qkv-bias": "flag",
    "--attention-dropout": "float", "--hidden-dropout": "float", "--vocab-size": "int",
    "--padded-vocab-size": "int", "--make-vocab-size-divisible-by": "int", "--tokenizer-type": "str",
    "--vocab-file": "str", "--merge-file": "str", "--rampup-batch-size": 3,
    "--expert-model-parallel-size": "int", "--expert-tensor-parallel-size": "int", "--mtp-num-layers": "int",
    "--mtp-loss-scaling-factor": "float", **_moe.OPTIONS, **_layout.OPTIONS,
    # torchrun (the launcher in front of pretrain_gpt.py) and a plain world size
    "--nnodes": "int", "--nproc_per_node": "int", "--nproc-per-node": "int", "--world-size": "int",
}
SOURCE = "megatron arguments"
ATTENTION_BACKENDS = ("flash", "fused", "unfused", "local", "auto")
SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def read(text: str) -> Imported:
    """Megatron-LM arguments (a string, or a launch script's path) as an :class:`Imported` config."""
    toks, source = tokens(text, SOURCE)
    if not any(t.startswith("--") for t in toks):
        raise InputError(f"{SOURCE}: no --options in {text[:60]!r} (and no launch script of that name)")
    values, unknown = parse(toks, source, OPTIONS)
    imp = Imported("megatron", source)
    get = _getter(values, source)
    _parallelism(imp, get)
    _precision_recompute(imp, get)
    _moe.read_plan(imp, get)
    _model.read_model(imp, get, values)
    _model.read_mtp(imp, get)
    _layout.read(imp, get)
    imp.plan["stack"] = "megatron"
    imp.keys["stack"] = "pretrain_gpt.py"
    for name in unknown:
        close = difflib.get_close_matches(name, OPTIONS, n=1, cutoff=0.9)
        imp.ignore(name, f"unknown: did you mean {close[0]}?" if close else "")
    return imp


def _getter(values: dict, source: str):
    def get(name: str, default=None):
        if name not in values:
            return default
        v, kind = values[name], OPTIONS[name]
        if kind == "int":
            return as_int(source, name, v)
        if kind == "float":
            return as_float(source, name, v, 0.0, 1.0)
        return v
    return get


def _parallelism(imp: Imported, get) -> None:
    for opt, name in (("--tensor-model-parallel-size", "tp"), ("--pipeline-model-parallel-size", "pp"),
                      ("--expert-model-parallel-size", "ep"), ("--expert-tensor-parallel-size", "etp"),
                      ("--micro-batch-size", "micro_batch"),
                      ("--global-batch-size", "global_batch"),
                      ("--seq-length", "seq_len")):
        if get(opt) is not None:
            imp.set(name, get(opt), opt)
    if get("--global-batch-size") is None:
        imp.accumulation = 1         # Megatron: global batch = micro-batch x data-parallel size
    if get("--rampup-batch-size") is not None:
        imp.ignore("--rampup-batch-size", "estimated at the final global batch")
    nodes, per_node = get("--nnodes"), get("--nproc_per_node") or get("--nproc-per-node")
    if get("--world-size") is not None:
        imp.world_size, imp.world_key = get("--world-size"), "--world-size"
    elif per_node is not None:
        imp.world_size, imp.world_key = (nodes or 1) * per_node, "--nnodes x --nproc_per_node"
    cp = get("--context-parallel-size", 1)
    if cp > 1:
        imp.context_parallel = cp
        imp.set("cp", cp, "--context-parallel-size")
    _cp.read(imp, get, cp)
    vpp, per_chunk = get("--num-virtual-stages-per-pipeline-rank"), get("--num-layers-per-virtual-pipeline-stage")
    if per_chunk is not None:
        imp.layers_per_virtual_stage = per_chunk
        imp.set("schedule", "interleaved", "--num-layers-per-virtual-pipeline-stage")
        imp.keys["virtual_stages"] = "--num-layers-per-virtual-pipeline-stage"
    elif vpp is not None and vpp > 1:
        imp.set("schedule", "interleaved", "--num-virtual-stages-per-pipeline-rank")
        imp.set("virtual_stages", vpp, "--num-virtual-stages-per-pipeline-rank")
    if get("--sequence-parallel"):
        imp.set("sequence_parallel", True, "--sequence-parallel")
    zero = 1 if get("--use-distributed-optimizer") else 0
    key = "--use-distributed-optimizer"
    if get("--use-torch-fsdp2"):
        zero, key = 3, "--use-torch-fsdp2"
    if get("--use-megatron-fsdp"):
        strategy = as_choice(imp.source, "--data-parallel-sharding-strategy",
                             get("--data-parallel-sharding-strategy", "no_shard"), SHARDING)
        zero, key = SHARDING[strategy], "--use-megatron-fsdp --data-parallel-sharding-strategy"
    imp.set("zero", zero, key)
    if get("--overlap-grad-reduce") or get("--overlap-param-gather"):
        imp.set("overlap_grad_reduce", True, "--overlap-grad-reduce")
    if get("--no-gradient-accumulation-fusion"):   # Megatron-LM's default fuses it (dse.formulas.kernels.accumulate)
        imp.set("grad_accumulation_fusion", False, "--no-gradient-accumulation-fusion")
    if get("--cross-entropy-loss-fusion"):   # Megatron-LM: --cross-entropy-fusion-impl native (default) or te
        impl = as_choice(imp.source, "--cross-entropy-fusion-impl", get("--cross-entropy-fusion-impl", "native"),
                         ("native", "te"))
        imp.set("cross_entropy_fusion", impl, "--cross-entropy-loss-fusion --cross-entropy-fusion-impl")
    if get("--optimizer-cpu-offload"):
        imp.set("offload_optimizer", "cpu", "--optimizer-cpu-offload")
        fraction = get("--optimizer-offload-fraction", 1.0)
        if fraction < 1:
            imp.ignore("--optimizer-offload-fraction", f"{fraction:g} of the optimizer on the CPU: estimated "
                                                       "with all of it there")
    optimizer = as_choice(imp.source, "--optimizer", get("--optimizer", "adam"), ("adam", "sgd", "muon", "dist_muon"))
    imp.set("optimizer", {"adam": "adam", "sgd": "sgd-momentum"}.get(optimizer, "sgd-momentum"), "--optimizer")
    if optimizer in ("muon", "dist_muon"):
        imp.ignore("--optimizer", f"{optimizer}: its Newton-Schulz step is not modelled; estimated as one "
                                  "momentum state per parameter (sgd-momentum)")


def _fp8(imp: Imported, get) -> None:
    """Transformer Engine FP8 (``--fp8-format``, ``--fp8-recipe``, ``--fp8-param-gather``; Megatron-LM
    ``megatron/training/arguments.py``): precision fp8 on the bf16/fp16 base, delayed or current scaling."""
    fmt = as_choice(imp.source, "--fp8-format", get("--fp8-format"), ("hybrid", "e4m3"))
    imp.set("precision", "fp8", "--fp8-format")
    if fmt == "e4m3":
        imp.ignore("--fp8-format e4m3", "E4M3 gradients as well: priced as hybrid, 1 B per element either way")
    recipe = as_choice(imp.source, "--fp8-recipe", get("--fp8-recipe", "delayed"),
                       ("delayed", "tensorwise", "mxfp8", "blockwise"))
    imp.set("fp8_scaling", "delayed" if recipe == "delayed" else "current", "--fp8-recipe")
    if recipe in ("mxfp8", "blockwise"):
        imp.ignore(f"--fp8-recipe {recipe}", "block scaling is not modelled: priced as per-tensor current scaling")
    if get("--fp8-param-gather"):
        imp.set("fp8_param_gather", True, "--fp8-param-gather")


def _precision_recompute(imp: Imported, get) -> None:
    if get("--bf16"):
        imp.set("precision", "bf16", "--bf16")
    elif get("--fp16"):
        imp.set("precision", "fp16", "--fp16")
    else:
        imp.ignore("precision fp32", "neither --bf16 nor --fp16: fp32 training is not modelled; estimated as bf16")
    if get("--grad-reduce-in-bf16"):
        imp.set("grad_dtype", "half", "--grad-reduce-in-bf16")
    if get("--fp8-format") is not None:
        _fp8(imp, get)
    for flag in [f for f in ("--fp8-recipe", "--fp8-param-gather") if get(f) and get("--fp8-format") is None]:
        imp.ignore(flag, "without --fp8-format training is not FP8")   # Megatron trains FP8 only with --fp8-format
    granularity = get("--recompute-granularity")
    if granularity is None and get("--recompute-activations"):
        granularity = "selective"
    if granularity is not None:
        imp.set("recompute", as_choice(imp.source, "--recompute-granularity", granularity, ("full", "selective")),
                "--recompute-granularity")
    method, count = get("--recompute-method"), get("--recompute-num-layers")
    if method is not None:
        as_choice(imp.source, "--recompute-method", method, ("uniform", "block"))
    if granularity == "full" and (method == "block" or (count or 1) > 1):
        imp.ignore("--recompute-method/--recompute-num-layers",
                   f"{method} {count}: dse recomputes every layer, each its own checkpoint")
    backend = as_choice(imp.source, "--attention-backend", get("--attention-backend", "auto"), ATTENTION_BACKENDS)
    impl = as_choice(imp.source, "--transformer-impl", get("--transformer-impl", "transformer_engine"),
                     ("local", "transformer_engine", "inference_optimized"))
    math = backend in ("unfused", "local") or (impl == "local" and not get("--use-flash-attn") and backend == "auto")
    imp.set("attention", "math" if math else "flash", "--attention-backend")


# ----------------------------------------------------------------------------- out


def emit(model, system, plan) -> tuple[str, list[str]]:
    """The torchrun + ``pretrain_gpt.py`` command line of a resolved plan, and what it cannot express."""
    from dse.frameworks.common import gpu_layout, plan_limits

    warnings = plan_limits(plan, "Megatron-LM")
    nodes, per_node = gpu_layout(plan.gpus, system.node.host_gpus)   # one launcher per host (OS instance)
    args = [f"--tensor-model-parallel-size {plan.tp} --pipeline-model-parallel-size {plan.pp}"
            + f" --context-parallel-size {plan.cp}" * (plan.cp > 1)
            + _cp.args(plan, system)]
    if plan.schedule == "interleaved" and plan.virtual_stages > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {plan.virtual_stages}")
    elif plan.schedule in ("gpipe", "dualpipe") and plan.pp > 1:
        warnings.append(f"the {plan.schedule} schedule is not a Megatron-LM option: it runs 1F1B")
    args.append(_layout.layout_args(plan))
    zero = {0: "", 1: "--use-distributed-optimizer",
            2: "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads",
            3: "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"}[plan.zero]
    args.append(" ".join(a for a in (zero, "--sequence-parallel" * (plan.sequence_parallel and plan.tp > 1),
                                     "--overlap-grad-reduce" * plan.overlap_grad_reduce,
                                     "--no-gradient-accumulation-fusion" * (not plan.grad_accumulation_fusion),
                                     (f"--cross-entropy-loss-fusion --cross-entropy-fusion-impl "
                                      f"{plan.cross_entropy_fusion}") * bool(plan.cross_entropy_fusion)) if a))
    seq = (f"--encoder-seq-length {plan.seq_len} --decoder-seq-length {plan.target_len}"   # pretrain_t5.py
           if model.architecture == "encoder-decoder" else f"--seq-length {plan.seq_len}")
    args.append(f"--micro-batch-size {plan.micro_batch} --global-batch-size {plan.global_batch} {seq}")
    args.append(_precision_args(plan, warnings))
    args += _model.model_args(model, warnings)
    if model.experts:   # expert (tensor) parallelism: ep x etp ranks folded over tp x cp x dp, as dse prices it
        args.append(_moe.plan_args(plan, system, warnings))
    if plan.stack != "megatron":
        warnings.append(f"the estimate used the {plan.stack} stack; Megatron-LM runs its own fused kernels "
                        "(estimate with --stack megatron to compare)")
    head = [f"# dse: Megatron-LM launch of {model.name} on {system.name}: {plan.gpus} GPUs "
            f"({nodes} node(s) x {per_node})"]
    head += [f"# dse: warning: {w}" for w in warnings]
    head.append("# add your data and tokenizer arguments (--data-path, --tokenizer-type, --tokenizer-model, ...); "
                "--padded-vocab-size keeps the vocabulary the estimate used")
    script = "pretrain_t5.py" if model.architecture == "encoder-decoder" else "pretrain_gpt.py"
    lines = [f"torchrun --nnodes {nodes} --nproc_per_node {per_node} {script}"] + [a for a in args if a]
    return "\n".join(head) + "\n" + " \\\n    ".join(lines) + "\n", warnings


def _precision_args(plan, warnings: list[str]) -> str:
    out = ["--fp16" if plan.precision == "fp16" else "--bf16"]
    if plan.precision == "bf16-pure":
        warnings.append("bf16-pure (no fp32 master weights) is not a Megatron-LM option: --bf16 keeps them")
    if plan.grad_dtype == "half" and plan.precision != "bf16-pure":
        out.append("--grad-reduce-in-bf16")
    if plan.precision == "fp8":
        out.append("--fp8-format hybrid --fp8-recipe " + ("delayed" if plan.fp8_scaling == "delayed" else "tensorwise")
                   + " --fp8-param-gather" * plan.fp8_param_gather)
    out.append({"none": "", "selective": "--recompute-granularity selective",
                "full": "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"}[
        plan.recompute])
    out.append("--attention-backend " + ("flash" if plan.attention == "flash" else "unfused"))
    out.append({"adam": "--optimizer adam", "sgd-momentum": "--optimizer sgd"}.get(plan.optimizer, ""))
    if plan.optimizer in ("adagrad", "adam-8bit"):
        warnings.append(f"{plan.optimizer} is not a Megatron-LM optimizer (adam, sgd)")
    if plan.offload_optimizer in ("cpu", "cxl"):   # cxl: host memory on a CPU-less NUMA node
        out.append("--optimizer-cpu-offload")
        if plan.offload_optimizer == "cxl":
            warnings.append("cxl: Megatron-LM has no CXL setting; run it under numactl --membind=<the CXL memory's "
                            "NUMA node> so the offloaded optimizer lands in the expanders")
        if plan.zero == 0:
            warnings.append("--optimizer-cpu-offload needs the distributed optimizer (ZeRO-1) in Megatron-LM")
    elif plan.offload_optimizer != "gpu":
        warnings.append(f"optimizer offload to {plan.offload_optimizer}: Megatron-LM offloads the optimizer to "
                        "host memory only (--optimizer-cpu-offload)")
    if plan.offload_params != "gpu":
        warnings.append(f"parameter offload to {plan.offload_params} is not a Megatron-LM option")
    return " ".join(a for a in out if a)
