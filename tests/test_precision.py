"""Precision recipes and the one optimizer definition: bytes per tensor class, model states per ZeRO stage,
the optimizer step's bytes and time following plan.optimizer."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import dse
from dse.formulas import compute, memory, offload, optimizer
from dse.formulas.precision import PRECISIONS, RECIPES, Recipe, peak_flops, recipe, recipe_of

ROOT = Path(__file__).resolve().parents[1]

# Bytes per element of every tensor class, per (precision, grad_dtype): the recipes' documented values.
EXPECTED = {
    ("bf16", "fp32"): dict(weights=2, weight_copies=0, gradients=4, master_weights=4, optimizer_states=4,
                           activations=2, logits=4, tp_messages=2, pp_messages=2, dp_gradients=4, weight_gathers=2,
                           offload_gradients=2, offload_master_gradients=4, gemm_dtype="bf16"),
    ("bf16", "half"): dict(weights=2, gradients=2, master_weights=4, optimizer_states=4, dp_gradients=2,
                           gemm_dtype="bf16"),
    ("fp16", "fp32"): dict(weights=2, gradients=4, master_weights=4, optimizer_states=4, activations=2,
                           gemm_dtype="fp16", attention_dtype="fp16", head_dtype="fp16"),
    ("fp16", "half"): dict(weights=2, gradients=2, master_weights=4, optimizer_states=4, dp_gradients=2,
                           gemm_dtype="fp16"),
    ("bf16-pure", "half"): dict(weights=2, weight_copies=0, gradients=2, master_weights=0, optimizer_states=2,
                                activations=2, tp_messages=2, pp_messages=2, dp_gradients=2, weight_gathers=2,
                                offload_master_gradients=2, gemm_dtype="bf16"),
}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_recipe_bytes_per_tensor_class(key):
    r = recipe(*key)
    assert isinstance(r, Recipe) and r.name == key[0]
    for field, value in EXPECTED[key].items():
        assert getattr(r, field) == value, (key, field)


def test_every_precision_has_a_recipe_and_a_default_grad_dtype():
    assert set(PRECISIONS) == {"bf16", "fp16", "bf16-pure", "fp8"} == set(RECIPES)
    assert recipe("bf16") == recipe("bf16", "fp32")            # Megatron: fp32 main grads
    assert recipe("bf16-pure") == recipe("bf16-pure", "half")  # pure bf16: gradients in the weights' dtype
    with pytest.raises(ValueError, match="precision must be one of"):
        recipe("fp4")


def test_plan_grad_dtype_follows_precision_unless_set():
    model, system, plan = dse.estimate.resolve("gpt2-medium", "dgx-h100", precision="bf16-pure")
    assert plan.grad_dtype == "half" and recipe_of(plan).gradients == 2
    _, _, plan = dse.estimate.resolve("gpt2-medium", "dgx-h100", precision="fp16")
    assert plan.grad_dtype == "fp32"
    _, _, plan = dse.estimate.resolve("gpt2-medium", "dgx-h100", precision="bf16-pure", grad_dtype="fp32")
    assert recipe_of(plan).gradients == 4 and recipe_of(plan).master_weights == 0


def test_gemm_peak_is_the_recipe_dtype_with_the_old_fallbacks():
    table = {"bf16": 989e12, "fp16": 990e12, "fp8": 1979e12}
    assert peak_flops(table, recipe("fp16").gemm_dtype) == 990e12
    assert peak_flops(table, recipe("bf16-pure").gemm_dtype) == 989e12
    assert peak_flops({"bf16": 312e12}, "fp16") == 312e12         # a spec without the dtype: its bf16 peak
    assert peak_flops({"tf32": 156e12, "fp32": 19.5e12}, "fp16") == 156e12


# ------------------------------------------------------------------------------- ZeRO paper, through the recipe

def test_model_states_per_zero_stage_equal_the_zero_paper():
    """Rajbhandari et al. 2020 (arXiv 1910.02054) §3.1 and Fig. 1: mixed-precision Adam keeps 2 + 2 + K = 12 bytes
    per parameter; Psi = 7.5B on N_d = 64 GPUs: 120 GB (baseline), 31.4 GB (P_os), 16.6 GB (P_os+g), 1.9 GB
    (P_os+g+p)."""
    per = optimizer.model_state_bytes_per_param("adam", recipe("fp16", "half"))
    assert per == {"weights": 2, "gradients": 2, "optimizer": 12}
    psi, nd = 7.5e9, 64
    stages = np.array([0, 1, 2, 3])
    st = memory.model_state_bytes(psi, nd, stages, per["weights"], per["gradients"], per["optimizer"])
    total = st["weights"] + st["gradients"] + st["optimizer"]
    paper = np.array([(2 + 2 + 12) * psi, 2 * psi + 2 * psi + 12 * psi / nd, 2 * psi + (2 + 12) * psi / nd,
                      (2 + 2 + 12) * psi / nd])
    np.testing.assert_allclose(total, paper)
    np.testing.assert_allclose(np.round(total / 1e9, 1), [120.0, 31.4, 16.6, 1.9])


def test_mixed_bf16_is_megatrons_18_and_pure_bf16_is_8_bytes_per_param():
    assert sum(optimizer.model_state_bytes_per_param("adam", recipe("bf16")).values()) == 18
    assert sum(optimizer.model_state_bytes_per_param("adam", recipe("bf16-pure")).values()) == 2 + 2 + 4
    assert sum(optimizer.model_state_bytes_per_param("sgd-momentum", recipe("bf16-pure")).values()) == 2 + 2 + 2


def _gpu_memory(**plan):
    r = dse.estimate("gpt2-medium", "dgx-h100", tp=1, pp=1, dp=1, micro_batch=1, zero=0, **plan)
    return r["memory"]["gpu"], r["parallelism"]["params_per_gpu"]


def test_pure_bf16_memory_in_the_estimate():
    pure, p = _gpu_memory(precision="bf16-pure")
    mixed, p2 = _gpu_memory(precision="bf16")
    assert p == p2
    assert pure["weights"] == pytest.approx(2 * p) and pure["gradients"] == pytest.approx(2 * p)
    assert pure["optimizer"] == pytest.approx(4 * p)                      # bf16 m and v, no master copy
    assert mixed["optimizer"] == pytest.approx(12 * p) and mixed["gradients"] == pytest.approx(4 * p)
    assert pure["activations"] == pytest.approx(mixed["activations"])
    assert mixed["total"] - pure["total"] == pytest.approx(10 * p)
    sgd, _ = _gpu_memory(precision="bf16-pure", optimizer="sgd-momentum")
    assert sgd["optimizer"] == pytest.approx(2 * p)


def test_pure_bf16_weights_and_gradients_against_the_measured_h100_static_memory():
    """data/h100_hf_training.jsonl (shared data README): gpt2-medium with bf16 weights and gradients and no master
    copy allocated 1,516,843,520 bytes with parameters and gradients in place, for 362,163,200 parameters:
    4.19 B/param, at least the recipe's 4 (bf16 weights + bf16 gradients; the rest is the allocator's other live
    blocks) and well under the 6 of bf16 weights with fp32 gradients."""
    measured_per_param = 1_516_843_520 / 362_163_200
    pure, p = _gpu_memory(precision="bf16-pure")
    mixed, _ = _gpu_memory(precision="bf16")
    pure_per_param = (pure["weights"] + pure["gradients"]) / p
    mixed_per_param = (mixed["weights"] + mixed["gradients"]) / p
    assert (pure_per_param, mixed_per_param) == (4, 6)
    assert pure_per_param <= measured_per_param < mixed_per_param


# ------------------------------------------------------------------------------- one optimizer definition

def test_step_bytes_follow_the_optimizer_and_keep_adam():
    r = recipe("bf16")
    assert optimizer.step_bytes_per_param("adam", r) == 24 + 4 + 2 == compute.adam_step_bytes(1.0)
    assert optimizer.step_bytes_per_param("sgd-momentum", r) == 16 + 4 + 2
    assert optimizer.step_bytes_per_param("adagrad", r) == 16 + 4 + 2
    assert optimizer.step_bytes_per_param("sgd", r) == 8 + 4 + 2
    assert compute.adam_step_bytes(1e9, 2, 2) == 28e9                     # the public function still works
    # pure bf16 Adam: gradient 2 read, weights 2 and m, v 2 each read and written
    assert optimizer.step_bytes_per_param("adam", recipe("bf16-pure")) == 2 + 2 * 2 + 2 * 4


def test_optimizer_time_follows_plan_optimizer():
    kw = dict(tp=2)
    adam = dse.estimate("llama2-13b", "dgx-a100-80gb", **kw)["time"]["optimizer"]
    sgd = dse.estimate("llama2-13b", "dgx-a100-80gb", optimizer="sgd-momentum", **kw)["time"]["optimizer"]
    ada = dse.estimate("llama2-13b", "dgx-a100-80gb", optimizer="adagrad", **kw)["time"]["optimizer"]
    assert sgd < adam
    assert sgd / adam == pytest.approx(22 / 30)                            # bytes moved per parameter
    assert ada == pytest.approx(sgd)


def test_cpu_optimizer_time_follows_plan_optimizer():
    kw = dict(micro_batch=4, global_batch=4, seq_len=1024, recompute="full", zero=3, precision="fp16",
              offload_optimizer="cpu", offload_params="cpu")
    adam = dse.estimate("smart-infinity-gpt2-4.0b", "plain-nvme-a5000", **kw)
    sgd = dse.estimate("smart-infinity-gpt2-4.0b", "plain-nvme-a5000", optimizer="sgd-momentum", **kw)
    assert sgd["time"]["optimizer"] / adam["time"]["optimizer"] == pytest.approx(8 / 12)
    assert sgd["memory"]["host"]["optimizer"] / adam["memory"]["host"]["optimizer"] == pytest.approx(8 / 12)


def test_the_old_optimizer_tables_are_views_of_the_one_definition():
    names = set(optimizer.OPTIMIZERS)
    assert set(memory.OPTIMIZER_STATE_BYTES) == names and set(offload.OPTIMIZER_CLASSES) == names
    for name, opt in optimizer.OPTIMIZERS.items():
        assert memory.OPTIMIZER_STATE_BYTES[name] == (opt.state_bytes or 4) * len(opt.states)   # 8-bit: 1.002
        assert offload.OPTIMIZER_CLASSES[name] == ("master_fp32",) + opt.states
        assert memory.optimizer_bytes_per_param(name) == offload.optimizer_state_bytes(name) \
            == optimizer.state_bytes_per_param(name, recipe("bf16"))
    assert optimizer.state_bytes_per_param("adam") == 12 and optimizer.state_bytes_per_param("sgd-momentum") == 8


def test_no_byte_table_outside_the_recipe():
    """No module sizes a tensor class from its own table: PRECISION_BYTES / GRAD_BYTES are not indexed, and no
    literal optimizer table is left."""
    pattern = re.compile(r"(PRECISION_BYTES|GRAD_BYTES)\[|\"adam\":\s*\d|\"adam\":\s*\(\"master")
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "dse").rglob("*.py")
            for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits
