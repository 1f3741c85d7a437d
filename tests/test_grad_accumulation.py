"""Megatron's gradient accumulation without the fused weight-gradient GEMM (plan.grad_accumulation_fusion false):
the formula's bytes, the rows it adds and nothing else, the CLI flag, the Megatron round trip, the other stacks'
warning, the search's block path, and the Narayanan et al. 2021 runs it was checked on (dse validate
megatron-selene, part tflops)."""

from __future__ import annotations

import dataclasses

import pytest

from dse.formulas import kernels as K


def test_formula_bytes_are_the_hand_count():
    # fp32 main grads (Megatron's hook, every micro-batch): read 2 B of .grad, read 4 B and write 4 B of main_grad
    row = K.unfused_grad_accumulation(3_000_000, 12, bytes_per_element=2, grad_bytes=4)["grad_accum"]
    assert row["bytes_backward"] == 3_000_000 * (2 + 4 + 4) and row["kernels_backward"] == 12
    assert row["bytes"] == 0 and row["kernels"] == 0 and row["saved"] == 0
    # the 2021 code, fp16 .grad: 3 x 2 B, on 3 of 4 micro-batches (the first one's gradient is stored as is)
    row = K.unfused_grad_accumulation(1000, 12, passes=3 / 4, bytes_per_element=2, grad_bytes=2)["grad_accum"]
    assert row["bytes_backward"] == pytest.approx(1000 * 6 * 0.75) and row["kernels_backward"] == 9


def _tables(fusion: bool, **plan):
    from dse.catalog import load_model
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.precision import recipe_of
    from dse.specs.plan import Plan

    model = load_model("gpt3-175b").resolved()
    p = Plan(**{"tp": 8, "pp": 8, "dp": 1, "micro_batch": 1, "global_batch": 64, "seq_len": 2048, **plan,
                "grad_accumulation_fusion": fusion}).resolved(model)
    return model, p, kernel_tables(model, p, recipe_of(p))


def test_false_adds_exactly_the_accumulation_rows():
    from dse.estimate.kernel_table import megatron_param_tensors
    from dse.estimate.parameters import parameters

    model, plan, fused = _tables(True)
    _, _, unfused = _tables(False)
    assert "grad_accum" not in fused["layer"] and "head_grad_accum" not in fused["head"]
    assert {k: v for k, v in unfused["layer"].items() if k != "grad_accum"} == fused["layer"]
    assert {k: v for k, v in unfused["head"].items() if k != "head_grad_accum"} == fused["head"]
    assert unfused["embedding"] == fused["embedding"]      # the word table's gradient is accumulated unfused anyway
    row = unfused["layer"]["grad_accum"]                   # bf16, fp32 main grads: 10 B a parameter, every micro-batch
    assert row["bytes_backward"] == pytest.approx(parameters(model, plan)["p_layer_gpu"] * 10)
    assert row["kernels_backward"] == megatron_param_tensors(model, plan) == 12   # 4 weights, 4 biases, 2 LayerNorms
    head = unfused["head"]["head_grad_accum"]
    assert head["bytes_backward"] == pytest.approx(model.vocab / 8 * model.hidden * 10)


def test_default_is_fused_and_changes_no_number():
    import dse

    a = dse.estimate("gpt3-175b", "selene", tp=8, pp=8, dp=1, global_batch=64)
    b = dse.estimate("gpt3-175b", "selene", tp=8, pp=8, dp=1, global_batch=64, grad_accumulation_fusion=True)
    c = dse.estimate("gpt3-175b", "selene", tp=8, pp=8, dp=1, global_batch=64, grad_accumulation_fusion=False)
    assert a["time"] == b["time"] and c["time"]["iteration"] > a["time"]["iteration"]


def test_half_gradients_accumulate_on_all_but_the_first_micro_batch():
    _, plan, t = _tables(False, precision="fp16", grad_dtype="half")
    _, _, fp32 = _tables(False, precision="fp16")
    m = plan.global_batch / (plan.dp * plan.micro_batch)
    assert t["layer"]["grad_accum"]["bytes_backward"] == pytest.approx(
        fp32["layer"]["grad_accum"]["bytes_backward"] * 6 / 10 * (m - 1) / m)


def test_other_stacks_ignore_it_with_a_warning():
    import dse

    a = dse.estimate("gpt2-xl", "dgx-a100-80gb", stack="pytorch")
    b = dse.estimate("gpt2-xl", "dgx-a100-80gb", stack="pytorch", grad_accumulation_fusion=False)
    assert a["time"] == b["time"]
    assert any("grad_accumulation_fusion" in w for w in b["warnings"])
    assert not any("grad_accumulation_fusion" in w for w in a["warnings"])


def test_cli_flag_and_bad_value(cli):
    import json

    args = ("estimate", "-m", "gpt3-175b", "--hw", "selene", "--tp", 8, "--pp", 8, "--global-batch", 64, "--json")
    rc, out, _ = cli(*args)
    rc2, out2, _ = cli(*args, "--no-grad-accumulation-fusion")
    assert rc == rc2 == 0
    assert json.loads(out2)["time"]["iteration"] > json.loads(out)["time"]["iteration"]
    rc, out, err = cli(*args, "--set", "plan.grad_accumulation_fusion=maybe")
    assert rc == 2 and "grad_accumulation_fusion" in err and len(err.strip().splitlines()) == 1


def test_megatron_arguments_round_trip():
    from dse.catalog import load_model, load_system
    from dse.frameworks import megatron as fw
    from dse.specs.plan import Plan

    model, system = load_model("llama3-8b"), load_system("dgx-h100")
    plan = Plan(tp=2, micro_batch=1, seq_len=8192, grad_accumulation_fusion=False).resolved(model, system)
    text, _ = fw.emit(model, system, plan)
    assert "--no-gradient-accumulation-fusion" in text
    assert fw.read(text).plan["grad_accumulation_fusion"] is False
    assert "grad_accumulation_fusion" not in fw.read(text.replace(" --no-gradient-accumulation-fusion", "")).plan
    text, _ = fw.emit(model, system, dataclasses.replace(plan, grad_accumulation_fusion=True))
    assert "gradient-accumulation-fusion" not in text


def test_search_block_path_equals_point_path_with_the_field():
    from _block_vs_point import block_vs_point

    from dse.search.space import from_dict

    space = {"model": "llama3-8b", "hardware": "h100-cluster", "objectives": ["time"],
             "fixed": {"plan.seq_len": 2048, "model.layers": 4, "plan.global_batch": 64},
             "parameters": {"gpus": [16], "plan.tp": [1, 2], "plan.pp": [1, 2], "plan.micro_batch": [1, 2, 4],
                            "plan.grad_dtype": ["fp32", "half"],
                            "plan.grad_accumulation_fusion": [True, False]}}
    seen = [s for s in block_vs_point(from_dict(space, "t.yaml"), chunk=7) if s["valid"] and s["feasible"]]
    assert {s["result"]["plan"]["grad_accumulation_fusion"] for s in seen} == {True, False}


def test_narayanan_runs_had_no_fusion_and_come_closer():
    """The 2021 code (examples/sc21 at de7dc40f88) predates the fusion (83b1e42f30): the Table 1 rates' errors."""
    from dse.validate import megatron_selene as ms

    assert ms.narayanan_plan("529.6b").grad_accumulation_fusion is False
    pub = ms.load(ms.FILE).values("table1_throughput")
    errors = {row: ms.narayanan_tflops(row) / pub[row]["tflops_per_gpu"] - 1 for row in ("76.1b", "529.6b", "1008b")}
    assert errors["529.6b"] == pytest.approx(0.030, abs=0.002)   # +8.1 % fused
    assert errors["76.1b"] == pytest.approx(0.049, abs=0.002)    # +6.9 % fused
    assert errors["1008b"] == pytest.approx(-0.013, abs=0.002)   # +3.9 % fused
