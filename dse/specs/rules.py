"""Plan validity as one table of rules: the one-line errors and the search's exclusion masks read it.

Each :class:`Rule` is a name (the reason the search counts an excluded point under), the plan,
model and hardware fields it concerns, an optional ``when`` (a plain Python condition on the
plan's string, boolean and optional fields and on the hardware: the rule applies), a
vectorisable predicate ``ok`` (True where the plan satisfies the rule; numeric plan fields may
be numpy arrays, and ``ok`` is then a bool array of their broadcast shape) and the one-line
``message`` of a scalar plan that breaks it, with the allowed values. Every function takes
``(plan, model, system)``: a resolved :class:`~dse.specs.plan.Plan`, a resolved model and the
hardware spec (or None where a caller checks a plan without hardware).

:func:`check` raises the first broken rule of a table as :class:`~dse.errors.InputError`
(``dse estimate``, the library, the search's scalar path); :func:`holds` evaluates every rule
that applies as ``{name: ok}`` (the vectorised search). The tables, in the order a plan is
checked: :data:`GPU_SYSTEM_RULES` (:data:`OFFLOAD_RULES`, :data:`MODEL_RULES`, :data:`CONTEXT_RULES`, the
chiplet-only fields, :data:`ACTIVATION_OFFLOAD_RULES`) and :data:`CHIPLET_PACKAGE_RULES`
(:data:`CHIPLET_RULES`, then the activation-offload rules); the hardware backend of each
kind (:mod:`dse.estimate.backends`) holds its table.

>>> from dse.catalog import load_model
>>> from dse.specs.plan import Plan
>>> m = load_model("gpt2-xl")
>>> plan = Plan(tp=2, dp=1, micro_batch=1, zero=1).resolved(m)
>>> holds(MODEL_RULES, plan, m, None)["tp does not divide the attention heads"]
False
>>> check(MODEL_RULES, plan, m, None)
Traceback (most recent call last):
dse.errors.InputError: plan: --tp 2 does not divide the model's 25 attention heads
"""

from __future__ import annotations

import operator

from dse.specs.chiplet_rules import CHIPLET_RULES
from dse.specs.fp8_rules import FP8_NOT_ON_CHIPLETS, FP8_RULES
from dse.specs.hardware import GPU_SYSTEM
from dse.specs.pipeline_rules import DUALPIPE_NOT_ON_CHIPLETS, DUALPIPE_RULES, LAYOUT_RULES
from dse.specs.rule import Rule, check, holds
from dse.specs.rules_cp import CP_COMM_RULES
from dse.specs.rules_encoder_decoder import ENCODER_DECODER_RULES
from dse.specs.rules_expert import EXPERT_RULES
from dse.specs.rules_mtp import MTP_RULES

__all__ = ["Rule", "check", "holds"]


def _gpu(s) -> bool:
    return s is not None and s.kind == GPU_SYSTEM


def _storage(s):
    return s.node.storage


# ----------------------------------------------------------------------------- storage offload (ZeRO-Infinity)

_DRIVES = ("nvme", "csd")


def _no_cxl(p, m, s) -> str:
    """A rejected ``cxl``: the flag and the tiers it allows on this hardware."""
    opt, st = p.offload_optimizer == "cxl", _storage(s)
    ok = ["gpu", "cpu"] + ["nvme"] * (st is not None) + ["csd"] * (opt and st is not None and st.device.near_storage
                                                                   is not None)
    return (f"--offload-{'optimizer' if opt else 'params'} cxl: hardware '{s.name}' has no CXL memory (node.cxl); "
            f"allowed: {', '.join(ok)}")

OFFLOAD_RULES = (
    Rule("optimizer offload to drives needs ZeRO-3", ("offload_optimizer", "zero"),
         when=lambda p, m, s: p.offload_optimizer in _DRIVES, ok=lambda p, m, s: p.zero == 3,
         message=lambda p, m, s: f"--offload-optimizer {p.offload_optimizer} needs --zero 3 (ZeRO-Infinity swaps "
                                 f"optimizer state to drives only in stage 3), got --zero {p.zero}"),
    Rule("optimizer offload to the CPU needs ZeRO 1-3", ("offload_optimizer", "zero"),
         when=lambda p, m, s: p.offload_optimizer in ("cpu", "cxl"), ok=lambda p, m, s: p.zero >= 1,
         message=lambda p, m, s: f"--offload-optimizer {p.offload_optimizer} needs --zero 1, 2 or 3 (ZeRO-Offload), "
                                 f"got --zero {p.zero}"),
    Rule("offload to CXL memory on hardware without it", ("offload_optimizer", "offload_params", "hardware.node.cxl"),
         when=lambda p, m, s: _gpu(s) and "cxl" in (p.offload_optimizer, p.offload_params),
         ok=lambda p, m, s: s.node.cxl is not None,
         message=_no_cxl),
    Rule("parameter offload needs ZeRO-3", ("offload_params", "zero"),
         when=lambda p, m, s: p.offload_params != "gpu", ok=lambda p, m, s: p.zero == 3,
         message=lambda p, m, s: f"--offload-params {p.offload_params} needs --zero 3 (only stage 3 partitions "
                                 f"parameters), got --zero {p.zero}"),
    Rule("gradient compression needs --offload-optimizer csd", ("gradient_compression", "offload_optimizer"),
         when=lambda p, m, s: p.offload_optimizer != "csd", ok=lambda p, m, s: p.gradient_compression >= 1,
         message=lambda p, m, s: f"--gradient-compression {p.gradient_compression:g} needs --offload-optimizer csd "
                                 "(the compressed gradients are decompressed by the drives' accelerators)"),
    Rule("offload to drives on hardware without drives",
         ("offload_optimizer", "offload_params", "hardware.node.storage"),
         when=lambda p, m, s: s is not None and (p.offload_optimizer in _DRIVES or p.offload_params == "nvme"),
         ok=lambda p, m, s: _storage(s) is not None,
         message=lambda p, m, s: (f"--offload-optimizer {p.offload_optimizer}" if p.offload_optimizer in _DRIVES
                                  else f"--offload-params {p.offload_params}")
                                 + f": hardware '{s.name}' has no storage drives; use gpu or cpu, or a system "
                                   "with drives"),
    Rule("drives without near-storage compute", ("offload_optimizer", "hardware.node.storage.device.near_storage"),
         when=lambda p, m, s: s is not None and p.offload_optimizer == "csd",
         ok=lambda p, m, s: _storage(s) is not None and _storage(s).device.near_storage is not None,
         message=lambda p, m, s: f"--offload-optimizer csd: the drives of '{s.name}' ({_storage(s).device.name}) "
                                 "have no near-storage compute; use --offload-optimizer nvme, or a system with "
                                 "computational storage (e.g. smart-infinity-a5000)"),
)


# ----------------------------------------------------------------------------- parallelism and batch vs the model

MLA_RULE = Rule("multi-head latent attention beyond what is modelled", ("attention", "stack", "lora_targets",
     "hardware.kind"), when=lambda p, m, s: m.mla, ok=lambda p, m, s: not _mla_off(p, s),
     message=lambda p, m, s: f"{_mla_off(p, s)} is not modelled with multi-head latent attention (model {m.name},"
                             " kv_lora_rank); allowed: --attention flash --stack megatron, --lora-targets all, "
                             "attention or mlp, a GPU system (docs/mla.md)")

MODEL_RULES = (
    Rule("tp does not divide the attention heads", ("tp", "model.heads"),
         ok=lambda p, m, s: m.heads % p.tp == 0,
         message=lambda p, m, s: f"--tp {p.tp} does not divide the model's {m.heads} attention heads"),
    Rule("tp and the KV heads do not divide one another", ("tp", "model.kv_heads"),
         ok=lambda p, m, s: (m.kv_heads % p.tp == 0) | (p.tp % m.kv_heads == 0),
         message=lambda p, m, s: f"--tp {p.tp} and the model's {m.kv_heads} KV heads must divide one another"),
    Rule("tp does not divide ffn_hidden", ("tp", "model.ffn_hidden"),
         ok=lambda p, m, s: m.ffn_hidden % p.tp == 0,
         message=lambda p, m, s: f"--tp {p.tp} does not divide ffn_hidden {m.ffn_hidden}"),
    *EXPERT_RULES,
    Rule("expert capacity needs an MoE model", ("expert_capacity", "model.experts"),
         when=lambda p, m, s: p.expert_capacity is not None, ok=lambda p, m, s: bool(m.experts),
         message=lambda p, m, s: f"plan.expert_capacity {p.expert_capacity:g}: a capacity factor needs an MoE model; "
                                 f"{m.name} is dense (allowed: unset)"),
    Rule("pad_to_capacity needs expert_capacity", ("pad_to_capacity", "expert_capacity"),
         when=lambda p, m, s: p.pad_to_capacity, ok=lambda p, m, s: p.expert_capacity is not None,
         message=lambda p, m, s: "plan.pad_to_capacity pads the experts' tokens to their capacity; it needs "
                                 "plan.expert_capacity (a capacity factor, e.g. 1.25)"),
    MLA_RULE,
    Rule("ALiBi runs only eager attention", ("attention", "model.alibi"),   # BloomAttention: Transformers refuses SDPA
         when=lambda p, m, s: getattr(m, "alibi", False), ok=lambda p, m, s: p.attention == "math",
         message=lambda p, m, s: f"--attention {p.attention} is not modelled with ALiBi (model {m.name}: Transformers "
                                 "runs BLOOM only in its eager attention); allowed: --attention math (its default)"),
    Rule("pp exceeds the layers", ("pp", "model.layers"),   # a custom layout may leave a stage without layers
         when=lambda p, m, s: getattr(p, "pipeline_layout", None) is None, ok=lambda p, m, s: p.pp <= m.layers,
         message=lambda p, m, s: f"--pp {p.pp} is larger than the model's {m.layers} layers"),
    Rule("interleaving needs virtual_stages >= 2", ("schedule", "virtual_stages"),
         when=lambda p, m, s: p.schedule == "interleaved", ok=lambda p, m, s: p.virtual_stages >= 2,
         message=lambda p, m, s: "the interleaved schedule needs virtual_stages >= 2"),
    Rule("pp x virtual_stages exceeds the layers", ("schedule", "pp", "virtual_stages", "model.layers"),
         when=lambda p, m, s: p.schedule == "interleaved", ok=lambda p, m, s: p.pp * p.virtual_stages <= m.layers,
         message=lambda p, m, s: f"pp*virtual_stages = {p.pp * p.virtual_stages} exceeds {m.layers} layers"),
    Rule("virtual_stages > 1 without the interleaved schedule", ("schedule", "virtual_stages"),
         when=lambda p, m, s: p.schedule != "interleaved", ok=lambda p, m, s: p.virtual_stages == 1,
         message=lambda p, m, s: "virtual_stages > 1 needs --set plan.schedule=interleaved"),
    Rule("dp does not divide the global batch", ("global_batch", "dp"),
         when=lambda p, m, s: p.global_batch is not None, ok=lambda p, m, s: p.global_batch % p.dp == 0,
         message=lambda p, m, s: f"--global-batch {p.global_batch} is not divisible by --dp {p.dp}"),
    Rule("micro-batch does not divide global batch / dp", ("micro_batch", "global_batch", "dp"),
         when=lambda p, m, s: p.global_batch is not None,
         ok=lambda p, m, s: (p.global_batch // p.dp) % p.micro_batch == 0,
         message=lambda p, m, s: f"--micro-batch {p.micro_batch} does not divide global batch / dp = "
                                 f"{p.global_batch // p.dp}"),
    Rule("tp does not divide seq_len (sequence parallelism)", ("sequence_parallel", "seq_len", "tp"),
         when=lambda p, m, s: p.sequence_parallel and p.seq_len is not None, ok=lambda p, m, s: p.seq_len % p.tp == 0,
         message=lambda p, m, s: f"--sequence-parallel needs seq_len {p.seq_len} divisible by --tp {p.tp}"),
    Rule("seq_len exceeds the learned positions", ("seq_len", "model.position_embeddings"),
         when=lambda p, m, s: m.position == "learned" and p.seq_len is not None,
         ok=lambda p, m, s: p.seq_len <= m.position_embeddings,
         message=lambda p, m, s: f"--seq-len {p.seq_len} exceeds the model's {m.position_embeddings} learned "
                                 "positions"),
    *ENCODER_DECODER_RULES,
    *MTP_RULES,
    *LAYOUT_RULES,
)


# ----------------------------------------------------------------------------- context parallelism (ring attention)


def _mla_off(p, s) -> str:
    """The first plan choice multi-head latent attention's kernels are not modelled with ('' if none)."""
    bad = (("--attention", p.attention, "flash"), ("--stack", p.stack, "megatron"))
    off = [f"{flag} {v}" for flag, v, ok in bad if v != ok]
    # MLA has no q_proj and v_proj of its own (the values come out of kv_b_proj with the keys; PEFT 0.21 has no
    # default target modules for deepseek_v2/v3): --lora-targets qv names nothing there
    off += ["--lora-targets qv (MLA has no separate q and v projections)"] * (p.lora_targets == "qv")
    return (off + ["a chiplet package"] * (s is not None and not _gpu(s)) + [""])[0]


CONTEXT_RULES = (
    Rule("context parallelism needs flash attention", ("cp", "attention"),
         when=lambda p, m, s: p.attention != "flash", ok=lambda p, m, s: p.cp == 1,
         message=lambda p, m, s: f"--cp {p.cp} needs --attention flash (ring attention is a fused kernel per K/V "
                                 f"chunk; a materialised score matrix is not split), got --attention {p.attention}"),
    Rule("2 cp does not divide seq_len", ("cp", "seq_len"),
         when=lambda p, m, s: p.seq_len is not None, ok=lambda p, m, s: (p.cp == 1) | (p.seq_len % (2 * p.cp) == 0),
         message=lambda p, m, s: f"--cp {p.cp} needs seq_len {p.seq_len} divisible by 2 cp = {2 * p.cp} (each rank "
                                 "holds two chunks of s/(2 cp) tokens, Megatron's load-balanced causal split)"),
    *CP_COMM_RULES,
)


# ----------------------------------------------------------------------------- plan fields of the other kind

CHIPLET_ONLY_FLAGS = {"chiplet_scheme": "--chiplet-scheme", "chiplet_mesh": "--mesh",
                       "chiplet_schedule": "plan.chiplet_schedule", "chiplet_minibatch": "plan.chiplet_minibatch"}

_chiplet_only = operator.attrgetter(*CHIPLET_ONLY_FLAGS)   # a plan -> its chiplet-only fields' values
_UNSET = (None,) * len(CHIPLET_ONLY_FLAGS)

NO_CHIPLET_FIELDS = Rule(
    "chiplet-only plan fields on a GPU system", tuple(CHIPLET_ONLY_FLAGS),
    when=lambda p, m, s: s is not None, ok=lambda p, m, s: _chiplet_only(p) == _UNSET,
    message=lambda p, m, s: f"{next(flag for f, flag in CHIPLET_ONLY_FLAGS.items() if getattr(p, f) is not None)} "
                            f"applies to chiplet packages only; {s.name} is a GPU system (see `dse list hardware`)")


# ----------------------------------------------------------------------------- activation offload (SSDTrain)


def _per_stage(p, m):
    return -(-m.layers // (p.pp * p.virtual_stages)) * p.virtual_stages


def _offloads(p, s) -> bool:
    return p.offload_activations != "none" and _gpu(s)


ACTIVATION_OFFLOAD_RULES = (
    Rule("offload_layers without activation offload", ("offload_layers", "offload_activations"),
         when=lambda p, m, s: p.offload_activations == "none", ok=lambda p, m, s: p.offload_layers is None,
         message=lambda p, m, s: f"--offload-layers {p.offload_layers} needs --offload-activations ssd or host"),
    Rule("activation_io_path without offload to drives", ("activation_io_path", "offload_activations"),
         ok=lambda p, m, s: p.offload_activations == "ssd" or p.activation_io_path == "gds",
         message=lambda p, m, s: f"--activation-io-path {p.activation_io_path} is the path of activations to drives; "
                                 f"it needs --offload-activations ssd (got {p.offload_activations})"),
    Rule("hooks mechanism without activation offload to host", ("activation_offload_mechanism", "offload_activations"),
         ok=lambda p, m, s: p.offload_activations == "host" or p.activation_offload_mechanism == "forwarding",
         message=lambda p, m, s: f"--activation-offload-mechanism {p.activation_offload_mechanism} models PyTorch's "
                                 "save_on_cpu (pinned host memory); it needs --offload-activations host (got "
                                 f"{p.offload_activations}); allowed with ssd or none: forwarding"),
    Rule("activation offload on a chiplet package", ("offload_activations", "hardware.kind"),
         when=lambda p, m, s: p.offload_activations != "none", ok=lambda p, m, s: _gpu(s),
         message=lambda p, m, s: f"--offload-activations {p.offload_activations} applies to GPU systems; "
                                 f"{getattr(s, 'name', 'the hardware')} is a chiplet package "
                                 "(see `dse list hardware`)"),
    Rule("activation offload to drives on hardware without drives", ("offload_activations", "hardware.node.storage"),
         when=lambda p, m, s: p.offload_activations == "ssd" and _gpu(s), ok=lambda p, m, s: _storage(s) is not None,
         message=lambda p, m, s: f"--offload-activations ssd: hardware '{s.name}' has no storage drives "
                                 "(node.storage); use --offload-activations host or a system with drives, "
                                 "e.g. ssdtrain-a100-optane"),
    Rule("offload_layers exceeds the layers", ("offload_layers", "model.layers"),
         when=lambda p, m, s: _offloads(p, s) and p.offload_layers is not None,
         ok=lambda p, m, s: p.offload_layers <= m.layers,
         message=lambda p, m, s: f"--offload-layers {p.offload_layers} is more than the model's {m.layers} layers"),
    Rule("offload_layers exceeds the layers of a pipeline stage",
         ("offload_layers", "pp", "virtual_stages", "model.layers"),
         when=lambda p, m, s: _offloads(p, s) and p.offload_layers is not None,
         ok=lambda p, m, s: p.offload_layers <= _per_stage(p, m),
         message=lambda p, m, s: f"--offload-layers {p.offload_layers} is more than the {_per_stage(p, m)} layers on "
                                 f"each pipeline stage (model {m.layers} layers, --pp {p.pp}); allowed "
                                 f"0..{_per_stage(p, m)} or auto"),
)


# ----------------------------------------------------------------------------- the table of each hardware kind

# ----------------------------------------------------------------------------- fine-tuning (LoRA, QLoRA)

FINETUNE_RULES = (
    Rule("LoRA options need a LoRA fine-tune", ("lora_rank", "lora_targets", "finetune"),
         when=lambda p, m, s: p.finetune == "full", ok=lambda p, m, s: p.lora_rank is None and p.lora_targets is None,
         message=lambda p, m, s: "--lora-rank and --lora-targets need --finetune lora or qlora (full fine-tuning "
                                 "trains every weight)"),
    Rule("LoRA dropout needs a LoRA fine-tune", ("lora_dropout", "finetune"),
         when=lambda p, m, s: p.finetune == "full", ok=lambda p, m, s: p.lora_dropout == 0,
         message=lambda p, m, s: f"--lora-dropout {p.lora_dropout:g} needs --finetune lora or qlora"),
    Rule("quantization needs QLoRA", ("quantization", "finetune"),
         when=lambda p, m, s: p.finetune != "qlora", ok=lambda p, m, s: p.quantization is None,
         message=lambda p, m, s: f"--quantization {p.quantization} needs --finetune qlora (it quantizes the frozen "
                                 "weights; full and lora keep them in the working dtype)"),
    Rule("8-bit optimizer states with optimizer offload", ("optimizer", "offload_optimizer"),
         when=lambda p, m, s: p.optimizer == "adam-8bit", ok=lambda p, m, s: p.offload_optimizer == "gpu",
         message=lambda p, m, s: f"--optimizer adam-8bit with --offload-optimizer {p.offload_optimizer} is not "
                                 "modelled (bitsandbytes' 8-bit states update on the GPU; DeepSpeed's CPU Adam is "
                                 "32-bit); allowed: --offload-optimizer gpu"),
    Rule("paged optimizer with offload", ("paged_optimizer", "offload_optimizer", "offload_activations"),
         when=lambda p, m, s: p.paged_optimizer,
         ok=lambda p, m, s: p.offload_optimizer == "gpu" and p.offload_activations == "none",
         message=lambda p, m, s: f"--paged-optimizer with --offload-optimizer {p.offload_optimizer} "
                                 f"--offload-activations {p.offload_activations} is not modelled; allowed: gpu and "
                                 "none (a paged optimizer keeps its states on the GPU until memory runs short)"),
    Rule("QLoRA of an MoE model with sharded or folded 4-bit experts", ("finetune", "ep", "zero", "etp", "tp"),
         when=lambda p, m, s: p.finetune == "qlora" and bool(m.experts),
         ok=lambda p, m, s: ((p.ep == 1) | (p.zero < 3)) & ((p.tp if p.etp is None else p.etp) == p.tp),
         message=lambda p, m, s: f"--finetune qlora with --ep {p.ep} --zero {p.zero} --etp {p.etp or p.tp} (--tp "
                                 f"{p.tp}): no framework shards bitsandbytes' 4-bit experts over expert-data-parallel "
                                 "ranks or splits them over an expert-TP group (FSDP-QLoRA shards Linear4bit weights "
                                 "over data-parallel ranks only; Megatron-Core has no QLoRA; DeepSpeed AutoEP repacks "
                                 "the experts in bf16); allowed: --finetune lora, or --zero 0-2 with "
                                 "--etp equal to --tp"),
    Rule("LoRA rank not divisible by tp on the megatron stack", ("lora_rank", "tp", "stack", "finetune"),
         when=lambda p, m, s: p.finetune != "full" and p.stack == "megatron",
         ok=lambda p, m, s: (16 if p.lora_rank is None else p.lora_rank) % p.tp == 0,
         message=lambda p, m, s: f"--lora-rank {16 if p.lora_rank is None else p.lora_rank} with --tp {p.tp} on the "
                                 "megatron stack: Megatron-Bridge splits each adapter's rank over the tp ranks "
                                 "(ColumnParallelLinear divides it); allowed: a rank divisible by --tp, or --stack "
                                 "pytorch"),
    Rule("LoRA dropout on an MoE model's experts", ("lora_dropout", "lora_targets", "model.experts"),
         when=lambda p, m, s: p.lora_dropout > 0 and bool(m.experts) and m.experts > 1,
         ok=lambda p, m, s: p.lora_targets in ("attention", "qv"),
         message=lambda p, m, s: f"--lora-dropout {p.lora_dropout:g} with --lora-targets {p.lora_targets or 'all'} "
                                 f"on {m.name}'s experts: PEFT's LoRA of the 3-D expert weights (ParamWrapper) refuses "
                                 "lora_dropout != 0; allowed: --lora-targets attention or qv, or --lora-dropout 0"),
)

def _smallest_adapted(p, m) -> tuple[int, int]:
    """(d_in, d_out) of the smallest linear layer the plan's adapters target (the rank an update of it can have);
    an MoE model's router and shared gate (E and 1 outputs) are adapted at any rank, as PEFT does."""
    from dse.estimate.frozen import dense_adapters
    from dse.formulas.finetune import moe_adapted_linears

    targets = p.lora_targets or "all"
    shapes = dense_adapters(m, targets)
    if m.experts:   # the dense MLP's shapes where dense layers exist
        moe = moe_adapted_linears(m.hidden, m.experts, m.expert_ffn, m.ffn_type,
                                  m.shared_experts * (m.shared_expert_ffn or 0), m.shared_expert_gate, targets)
        shapes = {**{r: v for r, v in shapes.items() if m.moe_layers < m.layers or r not in ("fc1", "fc2")},
                  **{r: v for r, v in moe.items() if r not in ("router", "shared_gate")}}
    return min((shape[:2] for rows in shapes.values() for shape in rows), key=min)


LORA_RANK_RULE = Rule(
    "LoRA rank larger than the layer it adapts", ("lora_rank", "lora_targets", "finetune"),
    when=lambda p, m, s: p.finetune != "full" and p.lora_rank is not None,
    ok=lambda p, m, s: p.lora_rank <= min(_smallest_adapted(p, m)),
    message=lambda p, m, s: "--lora-rank {} is larger than the smallest layer it adapts ({}x{}, --lora-targets {}); "
                            "allowed: 1 to {}".format(p.lora_rank, *_smallest_adapted(p, m), p.lora_targets or "all",
                                                      min(_smallest_adapted(p, m))))

NOT_ON_CHIPLETS = Rule(
    "fine-tuning on chiplet packages is not modelled", ("finetune",), when=lambda p, m, s: p.finetune != "full",
    ok=lambda p, m, s: False,
    message=lambda p, m, s: f"--finetune {p.finetune} is not modelled on chiplet packages; allowed: full")

GPU_SYSTEM_RULES = (*OFFLOAD_RULES, *MODEL_RULES, *CONTEXT_RULES, NO_CHIPLET_FIELDS, *ACTIVATION_OFFLOAD_RULES,
                    *FINETUNE_RULES, LORA_RANK_RULE, *FP8_RULES, *DUALPIPE_RULES)
CHIPLET_PACKAGE_RULES = (*CHIPLET_RULES, *ACTIVATION_OFFLOAD_RULES, NOT_ON_CHIPLETS, FP8_NOT_ON_CHIPLETS, MLA_RULE,
                         DUALPIPE_NOT_ON_CHIPLETS, *MTP_RULES, *LAYOUT_RULES)
