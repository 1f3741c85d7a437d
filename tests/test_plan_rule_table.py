"""One table of plan rules (dse.specs.rules), two faces: every rule raises its message and masks the same point.

For each rule of each hardware kind's table, a witness plan breaks it (and no rule before it):
``dse.estimate.make_plan`` raises exactly that rule's one-line message, and the search's rules
(``plan_rules``, also with the numeric plan fields as numpy arrays) exclude the point under that
rule's name, first. A rule added to the table without a witness fails
:func:`test_every_rule_has_a_witness`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dse.catalog import load_hardware, load_model
from dse.errors import InputError
from dse.estimate import make_plan
from dse.estimate.backends import BACKENDS, backend
from dse.specs import _schema, rules
from dse.specs.plan import Plan, plan_rules

GPU, DRIVES, NO_DRIVES, PKG = "dgx-a100-80gb", "dgx-a100-80gb", "a100-cluster-800g", "chiplet-train-8x8"
CSD = "smart-infinity-a100"
CHIPLET = {"global_batch": 16}

# rule name -> (model, model overrides, hardware, plan fields)
WITNESSES = {
    "optimizer offload to drives needs ZeRO-3": ("llama2-70b", (), DRIVES, {"offload_optimizer": "nvme", "zero": 1}),
    "optimizer offload to the CPU needs ZeRO 1-3": ("llama2-70b", (), GPU, {"offload_optimizer": "cpu", "zero": 0}),
    "parameter offload needs ZeRO-3": ("llama2-70b", (), GPU, {"offload_params": "cpu", "zero": 1}),
    "gradient compression needs --offload-optimizer csd": ("llama2-70b", (), GPU, {"gradient_compression": 0.5}),
    "offload to drives on hardware without drives": ("llama2-70b", (), NO_DRIVES,
                                                     {"offload_optimizer": "nvme", "zero": 3}),
    "drives without near-storage compute": ("llama2-70b", (), DRIVES, {"offload_optimizer": "csd", "zero": 3}),
    "offload to CXL memory on hardware without it": ("llama2-70b", (), GPU, {"offload_optimizer": "cxl", "zero": 3}),
    "tp does not divide the attention heads": ("llama2-70b", (), GPU, {"tp": 3}),
    "tp and the KV heads do not divide one another": ("gpt3-175b", ((["kv_heads"], 32),), GPU, {"tp": 3}),
    "tp does not divide ffn_hidden": ("llama2-7b", ((["ffn_hidden"], 1000),), GPU, {"tp": 16}),
    "etp does not divide expert_ffn": ("mixtral-8x7b", ((["expert_ffn"], 1001),), GPU, {"tp": 8}),
    "tp does not divide shared_expert_ffn": ("qwen3-30b-a3b", ((["shared_experts"], 1), (["shared_expert_ffn"], 100)),
                                             GPU, {"tp": 8}),
    "ep > 1 needs an MoE model": ("llama2-7b", (), GPU, {"ep": 2}),
    "etp other than tp needs an MoE model": ("llama2-7b", (), GPU, {"tp": 2, "etp": 1, "sequence_parallel": True}),
    "ep does not divide the experts": ("mixtral-8x7b", (), GPU, {"ep": 3, "dp": 3}),
    "ep x etp does not divide tp x cp x dp": ("mixtral-8x7b", (), GPU, {"ep": 4, "dp": 2}),
    "etp other than tp needs sequence parallelism": ("mixtral-8x7b", (), GPU, {"tp": 2, "etp": 1, "dp": 4}),
    "moe_dispatcher needs expert parallelism": ("mixtral-8x7b", (), GPU, {"moe_dispatcher": "flex"}),
    "flex dispatcher cannot pad to capacity": ("mixtral-8x7b", (), GPU, {"moe_dispatcher": "flex", "ep": 4, "dp": 4,
                                                                        "expert_capacity": 1.25,
                                                                        "pad_to_capacity": True}),
    "fp8 dispatch needs the flex dispatcher": ("mixtral-8x7b", (), GPU, {"moe_dispatch_dtype": "fp8"}),
    "ep must be 1 on a chiplet package": ("llama2-70b", (), PKG, {**CHIPLET, "ep": 2}),
    "expert capacity needs an MoE model": ("llama2-7b", (), GPU, {"expert_capacity": 1.25}),
    "pad_to_capacity needs expert_capacity": ("mixtral-8x7b", (), GPU, {"pad_to_capacity": True}),
    "pp exceeds the layers": ("llama2-70b", (), GPU, {"pp": 81}),
    "encoder-decoder with pp or cp > 1 is not modelled": ("t5-base", (), GPU, {"pp": 2}),
    "target_len needs an encoder-decoder model": ("llama2-7b", (), GPU, {"target_len": 64}),
    "interleaving needs virtual_stages >= 2": ("llama2-70b", (), GPU, {"schedule": "interleaved", "pp": 2}),
    "pp x virtual_stages exceeds the layers": ("llama2-70b", (), GPU,
                                               {"schedule": "interleaved", "pp": 4, "virtual_stages": 40}),
    "virtual_stages > 1 without the interleaved schedule": ("llama2-70b", (), GPU, {"virtual_stages": 2}),
    "dp does not divide the global batch": ("llama2-70b", (), GPU, {"dp": 3, "global_batch": 8}),
    "micro-batch does not divide global batch / dp": ("llama2-70b", (), GPU,
                                                      {"dp": 2, "global_batch": 8, "micro_batch": 3}),
    "tp does not divide seq_len (sequence parallelism)": ("llama2-70b", (), GPU,
                                                          {"tp": 8, "sequence_parallel": True, "seq_len": 4100}),
    "seq_len exceeds the learned positions": ("gpt2-xl", (), GPU, {"seq_len": 2048}),
    "context parallelism needs flash attention": ("llama2-7b", (), GPU, {"cp": 2, "attention": "math"}),
    "2 cp does not divide seq_len": ("llama2-7b", (), GPU, {"cp": 4, "seq_len": 4100}),
    "chiplet-only plan fields on a GPU system": ("llama2-70b", (), GPU, {"chiplet_scheme": "summa-2d"}),
    "offload_layers without activation offload": ("llama2-70b", (), GPU, {"offload_layers": 2}),
    "activation_io_path without offload to drives": ("llama2-70b", (), GPU, {"activation_io_path": "bounce"}),
    "hooks mechanism without activation offload to host": ("llama2-70b", (), GPU,
                                                           {"activation_offload_mechanism": "hooks"}),
    "activation offload on a chiplet package": ("llama2-70b", (), PKG, {**CHIPLET, "offload_activations": "host"}),
    "activation offload to drives on hardware without drives": ("llama2-70b", (), NO_DRIVES,
                                                                {"offload_activations": "ssd"}),
    "offload_layers exceeds the layers": ("llama2-70b", (), GPU,
                                          {"offload_activations": "host", "offload_layers": 100}),
    "offload_layers exceeds the layers of a pipeline stage": ("llama2-70b", (), GPU, {"offload_activations": "host",
                                                                                      "pp": 4, "offload_layers": 30}),
    "mesh does not have the package's dies": ("llama2-70b", (), PKG, {**CHIPLET, "chiplet_mesh": "4x8"}),
    "summa-2d needs a square mesh": ("llama2-70b", (), PKG, {**CHIPLET, "chiplet_scheme": "summa-2d",
                                                            "chiplet_mesh": "4x16"}),
    "tp, pp, dp must be 1 on a chiplet package": ("llama2-70b", (), PKG, {**CHIPLET, "pp": 2}),
    "ZeRO does not apply to a chiplet package": ("llama2-70b", (), PKG, {**CHIPLET, "zero": 1}),
    "storage offload on a chiplet package": ("llama2-70b", (), PKG, {**CHIPLET, "gradient_compression": 0.5}),
    "the chiplet model needs flash attention": ("llama2-70b", (), PKG, {**CHIPLET, "attention": "math"}),
    "micro-batch does not divide the global batch": ("llama2-70b", (), PKG, {**CHIPLET, "micro_batch": 3}),
    "chiplet_minibatch does not divide the micro-batches": ("llama2-70b", (), PKG, {**CHIPLET, "chiplet_minibatch": 3}),
    "LoRA options need a LoRA fine-tune": ("llama2-70b", (), GPU, {"lora_rank": 8}),
    "quantization needs QLoRA": ("llama2-70b", (), GPU, {"finetune": "lora", "quantization": "int8"}),
    "LoRA dropout needs a LoRA fine-tune": ("llama2-70b", (), GPU, {"lora_dropout": 0.1}),
    "LoRA rank not divisible by tp on the megatron stack": ("llama2-70b", (), GPU, {"finetune": "lora", "tp": 8,
                                                                                "lora_rank": 4}),
    "8-bit optimizer states with optimizer offload": ("llama2-70b", (), GPU, {"optimizer": "adam-8bit", "zero": 3,
                                                                              "offload_optimizer": "cpu"}),
    "paged optimizer with offload": ("llama2-70b", (), GPU, {"paged_optimizer": True, "zero": 3,
                                                             "offload_optimizer": "cpu"}),
    "fine-tuning on chiplet packages is not modelled": ("llama2-70b", (), PKG, {**CHIPLET, "finetune": "lora"}),
    "fp8 needs FP8 tensor cores and their stated GEMM efficiency": ("llama2-70b", (), GPU, {"precision": "fp8"}),
    "fp8 is modelled for full training with Megatron's kernels": ("llama2-7b", (), "dgx-h100",
                                                                  {"precision": "fp8", "finetune": "lora"}),
    "fp8 with ZeRO-3 or offload is not modelled": ("llama2-7b", (), "dgx-h100", {"precision": "fp8", "zero": 3}),
    "fp8_param_gather needs fp8 and the distributed optimizer": ("llama2-7b", (), "dgx-h100",
                                                                {"fp8_param_gather": True}),
    "fp8 on chiplet packages is not modelled": ("llama2-70b", (), PKG, {**CHIPLET, "precision": "fp8"}),
    "QLoRA of an MoE model with sharded or folded 4-bit experts": (
        "mixtral-8x7b", (), GPU, {"finetune": "qlora", "ep": 2, "dp": 2, "zero": 3}),
    "LoRA dropout on an MoE model's experts": ("mixtral-8x7b", (), GPU, {"finetune": "lora", "lora_dropout": 0.1}),
    "multi-head latent attention beyond what is modelled": ("deepseek-v3", (), "dgx-h100", {"stack": "pytorch"}),
    "ALiBi runs only eager attention": ("llama2-7b", ((["alibi"], True),), GPU, {"attention": "flash"}),
    "Ulysses cp needs the heads divisible by tp x cp": ("llama2-7b", (), GPU, {"cp": 3, "cp_comm": "a2a",
                                                                              "seq_len": 6144, "dp": 1}),
    "cp_a2a is the a2a level of cp_comm a2a+p2p": ("llama2-7b", (), GPU, {"cp": 2, "cp_a2a": 2, "dp": 1}),
    "cp_a2a does not divide cp": ("llama2-7b", (), GPU, {"cp": 4, "cp_comm": "a2a+p2p", "cp_a2a": 3, "dp": 1}),
    "the K/V ring does not run sliding-window attention": ("mistral-7b", (), GPU, {"cp": 2, "seq_len": 32768,
                                                                                   "dp": 1}),
    "attention sinks need cp_comm a2a": ("gpt-oss-120b", (), GPU, {"cp": 2, "cp_comm": "allgather", "dp": 1}),
    "multi-token prediction beyond what is modelled": ("llama2-7b", ((["mtp_layers"], 1),), GPU,
                                                       {"finetune": "lora"}),
    "LoRA rank larger than the layer it adapts": ("llama2-7b", (), GPU, {"finetune": "lora", "lora_rank": 4097}),
    "dualpipe needs an even number of pipeline ranks": ("llama2-7b", (), GPU, {"schedule": "dualpipe", "pp": 1}),
    "dualpipe needs an even number of micro-batches": ("llama2-7b", (), GPU, {"schedule": "dualpipe", "pp": 2,
                                                                              "dp": 4, "global_batch": 12}),
    "dualpipe with offload that no pipeline engine runs": ("llama2-7b", (), GPU, {"schedule": "dualpipe", "pp": 2,
                                                                                   "offload_activations": "host"}),
    "dualpipe on a chiplet package": ("llama2-70b", (), PKG, {**CHIPLET, "schedule": "dualpipe"}),
    "pipeline layout Megatron refuses": ("llama2-7b", (), GPU, {"pp": 2, "pipeline_layout": "Et*8|t*8L"}),
    "pipeline layout beyond what is modelled": ("llama2-7b", (), GPU, {"pp": 2, "pipeline_layout": "Et*16|t*16L",
                                                                       "offload_optimizer": "cpu"}),
}


def test_every_rule_has_a_witness():
    for kind, b in BACKENDS.items():
        names = [r.name for r in b.rules]
        assert len(names) == len(set(names)), kind
        assert set(names) <= set(WITNESSES), (kind, sorted(set(names) - set(WITNESSES)))
    everywhere = {r.name for b in BACKENDS.values() for r in b.rules}
    assert set(WITNESSES) == everywhere


def test_every_rule_names_real_fields():
    plan_fields = set(_schema.field_names(Plan))
    for b in BACKENDS.values():
        for r in b.rules:
            assert r.fields, r.name
            for f in r.fields:
                assert f in plan_fields or f.split(".")[0] in ("model", "hardware"), (r.name, f)


def _arrays(plan):
    """The plan with every numeric field a one-element numpy array (the search's columns)."""
    numeric = {f.name: np.array([v]) for f in dataclasses.fields(plan)
               if type(v := getattr(plan, f.name)) in (int, float)}
    return dataclasses.replace(plan, **numeric)


@pytest.mark.parametrize("name", sorted(WITNESSES))
def test_a_rule_raises_its_message_and_masks_the_same_point(name):
    model_name, model_overrides, hw, fields = WITNESSES[name]
    model, system = load_model(model_name, list(model_overrides)), load_hardware(hw)
    table = backend(system).rules
    rule = next(r for r in table if r.name == name)
    plan = _schema.build(Plan, dict(fields), "plan").resolved(model, system)
    # scalar face: make_plan (what dse estimate runs) raises this rule's one-line message
    with pytest.raises(InputError) as exc:
        make_plan(model, system, dict(fields))
    assert str(exc.value) == f"plan: {rule.message(plan, model, system)}"
    assert "\n" not in str(exc.value)
    # vectorised face: the search's rules exclude the same point, under this rule first
    masks = plan_rules(plan, model, system)
    assert next(k for k, ok in masks.items() if not ok) == name
    arr = rules.holds(table, _arrays(plan), model, system)
    assert arr.keys() == masks.keys()
    for k, ok in arr.items():
        assert np.all(np.asarray(ok) == bool(masks[k])), k
    # and the witness is valid once the plan fields this rule concerns take their defaults
    make_plan(model, system, {k: v for k, v in fields.items() if k not in rule.fields or k in CHIPLET})
