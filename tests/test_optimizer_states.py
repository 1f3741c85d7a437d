"""8-bit optimizer states (bitsandbytes Adam8bit) and paged optimizer states (QLoRA's paged optimizers)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dse.estimate import resolve, run
from dse.formulas import optimizer as OPT

GiB = 2**30
# QLoRA's claim (Dettmers et al. 2023): LLaMA-65B fine-tuned on one 48 GB GPU. With fp32 Adam states for the
# adapters (--precision bf16: fp32 master + m + v) it needs 48.7 GiB of the L40S's 44.7 GiB (docs/finetune.md).
PLAN = dict(dp=1, micro_batch=1, seq_len=512, recompute="full", finetune="qlora", lora_rank=64, precision="bf16")


def _estimate(**plan):
    return run(*resolve("llama-65b", "server-l40s-x8", None, (), **{**PLAN, **plan}))


def test_8bit_states_are_one_byte_plus_block_constants():
    """Dettmers et al. 2021 (arXiv 2110.02861) §2: block-wise quantization, one fp32 absmax per 2,048 values."""
    assert OPT.BLOCKWISE_8BIT == 1 + 4 / 2048
    assert OPT.state_bytes_per_param("adam-8bit") == 4 + 2 * (1 + 4 / 2048)
    assert OPT.paged_state_bytes("adam-8bit") / OPT.paged_state_bytes("adam") == pytest.approx(0.2505, abs=1e-4)
    # the GPU step moves the 8-bit states: 4 B (2 x 1.002 x 2) instead of 16 B of moment traffic per parameter
    assert OPT.step_bytes_per_param("adam") - OPT.step_bytes_per_param("adam-8bit") == pytest.approx(
        2 * 2 * (4 - OPT.BLOCKWISE_8BIT))


def test_8bit_adam_fits_qlora_65b_on_one_48gb_gpu():
    fp32 = _estimate()
    q8 = _estimate(optimizer="adam-8bit")
    adapters = fp32["model"]["params_trainable"]
    assert not fp32["feasible"] and q8["feasible"]
    assert fp32["memory"]["gpu"]["optimizer"] == pytest.approx(12 * adapters, rel=1e-12)
    assert q8["memory"]["gpu"]["optimizer"] == pytest.approx(OPT.state_bytes_per_param("adam-8bit") * adapters,
                                                              rel=1e-12)
    assert q8["memory"]["gpu"]["total"] / GiB == pytest.approx(44.2, abs=0.05)


def test_paged_states_move_to_the_host_only_as_far_as_the_gpu_is_short():
    """Paged AdamW (fp32 states): the GPU sheds exactly its shortfall, the host takes it, and each step pages it
    in and out over PCIe (2 E at the host link's rate, exposed)."""
    plain, paged = _estimate(), _estimate(paged_optimizer=True)
    gpu = plain["memory"]["gpu"]
    short = gpu["total"] - gpu["capacity"]
    assert 3.9 * GiB < short < 4.1 * GiB                                   # 48.7 - 44.7 GiB
    e = paged["paged_optimizer"]["evicted_bytes"]
    assert e == pytest.approx(short, rel=1e-12)
    assert paged["feasible"] and paged["memory"]["gpu"]["total"] == pytest.approx(gpu["capacity"], rel=1e-12)
    assert paged["memory"]["host"]["optimizer"] == pytest.approx(e, rel=1e-12)
    b_host = 31.5e9 * 0.8                                                  # PCIe 4.0 x16 (pcie4-x16.yaml), 80 %
    assert paged["time"]["iteration"] - plain["time"]["iteration"] == pytest.approx(2 * e / b_host, rel=1e-3)
    assert paged["traffic"]["gpu_host"] == pytest.approx(2 * e, rel=1e-12)
    # the evictable part is the states (8 of the 12 B per adapter weight): the master weights stay
    assert e < 8 / 12 * gpu["optimizer"]


def test_a_paged_optimizer_with_room_to_spare_moves_nothing():
    plain, paged = _estimate(optimizer="adam-8bit"), _estimate(optimizer="adam-8bit", paged_optimizer=True)
    assert paged["paged_optimizer"]["evicted_bytes"] == 0
    assert paged["time"]["iteration"] == plain["time"]["iteration"]
    assert paged["memory"]["gpu"] == plain["memory"]["gpu"]


@pytest.mark.parametrize("args, needle", [
    (["--optimizer", "adam-8bit", "--zero", "3", "--offload-optimizer", "cpu"],
     "--optimizer adam-8bit with --offload-optimizer cpu is not modelled"),
    (["--paged-optimizer", "--offload-activations", "host"], "--paged-optimizer with --offload-optimizer gpu"),
    (["--lora-dropout", "0.1"], "--lora-dropout 0.1 needs --finetune lora or qlora"),
    (["--finetune", "lora", "--lora-dropout", "1"], "lora_dropout: must be less than 1"),
])
def test_bad_optimizer_flags_are_one_line_errors(args, needle):
    r = subprocess.run([sys.executable, "-m", "dse", "estimate", "--model", "llama2-7b", *args],
                       capture_output=True, text=True)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
