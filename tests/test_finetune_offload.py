"""Fine-tuning composed with ZeRO-Offload / ZeRO-Infinity: frozen weights streamed from host DRAM or NVMe.

Closed-form special cases of the storage-offload model with frozen weights (LoRA, QLoRA), and the one published
comparison found: Hugging Face PEFT's FSDP+QLoRA run of Llama-2-70B on two GPUs with and without CPU offload.
"""

from __future__ import annotations

import pytest

import dse
from dse.estimate import resolve, run
from dse.formulas import finetune as FT

GiB = 2**30
# Llama-2-70B: 80 layers of h 8192, 64 heads, 8 KV heads of 128, SwiGLU F 28672; vocab 32000, untied
LINEAR = 80 * FT.linear_parameters(8192, 64, 8, 128, 28672, "swiglu")
OTHER = 2 * 32000 * 8192 + 80 * 2 * 8192 + 8192           # embedding, LM head, RMSNorm weights (bf16)
NF4_CONSTANTS = FT.quantized_bytes_per_param("nf4") - 0.5  # 0.0159 B per weight: absmax and the fp32 constants


def _estimate(hw="server-l40s-x8", **plan):
    base = dict(dp=2, micro_batch=1, seq_len=2048, global_batch=16, recompute="full", finetune="qlora", lora_rank=8,
                zero=3)
    m, s, p = resolve("llama2-70b", hw, None, (), **{**base, **plan})
    return run(m, s, p)


def test_frozen_weights_leave_the_gpu_packed_and_the_quantization_constants_stay():
    """ZeRO-3 + parameter offload to the CPU: the host holds every frozen weight once, as stored (NF4 values
    packed, bf16 embeddings/head/norms) and the adapters in bf16; each GPU keeps the NF4 constants of every layer
    (bitsandbytes' quant_state is not a parameter: ZeRO-3/FSDP neither shard nor offload it)."""
    e = _estimate(offload_params="cpu")
    adapters = e["model"]["params_trainable"]
    assert adapters == 80 * FT.adapter_parameters(
        FT.adapted_linears(8192, 64, 8, 128, 28672, "swiglu", "separate", "all"), 8)
    host, gpu = e["memory"]["host"], e["memory"]["gpu"]
    assert host["weights"] == pytest.approx(LINEAR * 0.5 + OTHER * 2 + adapters * 2, rel=1e-12)
    assert gpu["weights"] == pytest.approx(LINEAR * NF4_CONSTANTS, rel=1e-12)   # 1.01 GiB
    assert gpu["weights"] / GiB == pytest.approx(1.01, abs=0.005)
    kept = _estimate()   # the same plan without offload: each GPU holds half of the packed weights too
    assert kept["memory"]["gpu"]["weights"] - gpu["weights"] == pytest.approx(host["weights"] / 2, rel=1e-12)


def test_frozen_weights_are_fetched_every_pass_and_only_adapters_come_back():
    """GPU<->host bytes per GPU: m micro-batches x 3 passes (forward, recompute, backward) x the GPU's partition
    as stored; after the GPU's optimizer step only the adapters' bf16 partition goes back to the host."""
    e = _estimate(offload_params="cpu")
    m, passes = 8, 3
    shard = (LINEAR * 0.5 + OTHER * 2) / 2 + e["model"]["params_trainable"] * 2 / 2
    link = e["offload"]["links"]["gpu_host"]
    assert link["bytes_to_gpu"] == pytest.approx(m * passes * shard, rel=1e-12)
    assert link["bytes_from_gpu"] == pytest.approx(e["model"]["params_trainable"] * 2 / 2, rel=1e-12)


def test_a_fetch_bound_forward_takes_the_fetches_time():
    """Closed form: when the frozen weights' fetch is slower than the forward compute, the forward segment is
    m x (the GPU's partition / the host link's rate) (ZeRO-Infinity's overlap: max(compute, fetch))."""
    e = _estimate(offload_params="cpu", seq_len=256, global_batch=2)        # one micro-batch of 256 tokens
    shard = (LINEAR * 0.5 + OTHER * 2) / 2 + e["model"]["params_trainable"]
    b_host = e["offload"]["links"]["gpu_host"]["bandwidth"]
    assert b_host == pytest.approx(31.5e9 * 0.8, rel=1e-3)                   # PCIe 4.0 x16 at 80 %
    assert e["time"]["phase_forward"] == pytest.approx(shard / b_host, rel=1e-12)
    assert e["time"]["phase_forward"] == pytest.approx(0.704, abs=0.001)


def test_frozen_weights_on_nvme_are_read_never_written():
    """ZeRO-Infinity with the frozen weights on the drives: the node's drives are read m x 3 times the packed
    weights per iteration and written only the adapters' updated bf16 weights (what wears them)."""
    e = _estimate(offload_params="nvme", offload_optimizer="cpu")
    adapters = e["model"]["params_trainable"]
    drives = e["offload"]["links"]["switch_drives"]
    assert drives["bytes_up"] == pytest.approx(8 * 3 * (LINEAR * 0.5 + OTHER * 2 + adapters * 2), rel=1e-12)
    assert drives["bytes_down"] == pytest.approx(adapters * 2, rel=1e-12)
    assert e["endurance"]["bytes_written_per_iteration"] == pytest.approx(adapters * 2, rel=1e-12)
    assert e["memory"]["storage"]["weights"] == pytest.approx(LINEAR * 0.5 + OTHER * 2 + adapters * 2, rel=1e-12)
    # the adapters' optimizer on the CPU: fp32 master + two moments per adapter weight, all of them on one node
    assert e["memory"]["host"]["optimizer"] == pytest.approx(12 * adapters, rel=1e-12)
    assert e["memory"]["gpu"]["optimizer"] == 0


def test_16bit_lora_of_70b_on_two_48gb_gpus_needs_the_frozen_weights_offloaded():
    """The issue's question: Llama-2-70B with 16-bit LoRA on two 48 GB GPUs does not fit under ZeRO-3 (64 GiB of
    bf16 weights per GPU); offloading them to host DRAM or NVMe fits, at the cost of streaming them in."""
    plan = dict(finetune="lora")
    kept = _estimate(**plan)
    assert not kept["feasible"] and kept["memory"]["gpu"]["weights"] / GiB == pytest.approx(64.3, abs=0.1)
    cpu = _estimate(offload_params="cpu", **plan)
    nvme = _estimate(offload_params="nvme", **plan)
    assert cpu["feasible"] and nvme["feasible"]
    assert cpu["memory"]["host"]["weights"] == pytest.approx(2 * (cpu["model"]["params"]), rel=1e-12)
    assert kept["time"]["iteration"] < cpu["time"]["iteration"] < nvme["time"]["iteration"]


def test_qlora_zero3_gathers_the_packed_weights():
    """ZeRO-3 all-gathers the frozen weights as stored: QLoRA's per-iteration dp traffic is ~1/4 of LoRA's."""
    q, lora = _estimate(), _estimate(finetune="lora")
    ratio = q["traffic"]["dp"] / lora["traffic"]["dp"]
    assert ratio == pytest.approx((LINEAR * 0.5 + OTHER * 2) / ((LINEAR + OTHER) * 2), rel=0.01)


def test_offload_frees_about_what_peft_measured_with_fsdp_qlora():
    """Hugging Face PEFT docs (accelerate/fsdp.md, "Use PEFT QLoRA and FSDP"): Llama-2-70B, QLoRA r 8 on all
    linear layers, 2 GPUs, micro-batch 2 x 2048, gradient checkpointing: 35.6 GB per GPU without CPU offload,
    19.6 GB with it (16.0 GB freed). FSDP's offload moves the parameters, gradients and the optimizer step to the
    CPU: dse's ZeRO-3 with --offload-params cpu --offload-optimizer cpu frees 17.2 GiB, 7.5 % above 16.0 GiB
    (15.6 % above 16.0 GB: the page does not say which). The absolute per-GPU numbers are not matched (dse:
    28.4 / 11.2 GiB); see docs/finetune.md."""
    plan = dict(hw="dgx-a100-80gb", micro_batch=2, global_batch=8)
    kept = _estimate(**plan)
    off = _estimate(offload_params="cpu", offload_optimizer="cpu", **plan)
    freed = kept["memory"]["gpu"]["total"] - off["memory"]["gpu"]["total"]
    assert freed / GiB == pytest.approx(17.2, abs=0.05)
    assert 16.0 * GiB < freed < 1.16 * 16.0e9


def test_csd_update_with_lora_updates_the_adapters_on_the_drives():
    """Smart-Infinity's update on computational storage with LoRA/QLoRA: the drives hold the adapters' fp32
    gradients and 12 B of Adam state per adapter weight, nothing of the frozen weights; the update's traffic is the
    adapters' only, so the step is far below full training's and below the same plan with the states on plain
    NVMe (the CSDs update in place: no state crosses the host link)."""
    kw = dict(tp=1, dp=1, zero=3, micro_batch=1, global_batch=1, offload_optimizer="csd")
    full = dse.estimate("llama2-13b", "smart-infinity-a100", **kw)
    for ft in ("lora", "qlora"):
        r = dse.estimate("llama2-13b", "smart-infinity-a100", finetune=ft, **kw)
        nvme = dse.estimate("llama2-13b", "smart-infinity-a100", finetune=ft, **{**kw, "offload_optimizer": "nvme"})
        train = r["model"]["params_trainable"]
        assert r["memory"]["storage"]["optimizer"] == pytest.approx(12 * train, rel=1e-9)
        assert r["memory"]["storage"]["gradients"] == pytest.approx(4 * train, rel=1e-9)
        assert r["memory"]["storage"]["weights"] == 0
        assert r["time"]["io_exposed"] < 0.01 * full["time"]["io_exposed"]
        assert r["time"]["iteration"] < nvme["time"]["iteration"]


# --- the example spaces and the README's worked example -----------------------------------------------------------

def test_readme_fine_tuning_example_prints_what_the_readme_says():
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    m, s, p = resolve("llama3-70b", "workstation-l40s-x2-gen5", None, (), finetune="lora", zero=3, micro_batch=4,
                      seq_len=2048, global_batch=16, recompute="full")
    kept = run(m, s, p)
    off = run(*resolve("llama3-70b", "workstation-l40s-x2-gen5", None, (), finetune="lora", zero=3, micro_batch=4,
                       seq_len=2048, global_batch=16, recompute="full", offload_params="cpu"))
    assert not kept["feasible"] and off["feasible"]
    assert f"needs {kept['memory']['gpu']['total'] / GiB:.1f} GiB per L40S" in text                    # 88.3
    assert f"from host DRAM ({off['memory']['host']['weights'] / GiB:.0f} GiB)" in text                 # 132
    assert f"alone, {off['memory']['gpu']['total'] / GiB:.1f} GiB with its frozen weights" in text     # 22.4
    assert f"{off['throughput']['tokens_per_s']:.0f} tokens/s" in text                                  # 629
    assert off["offload"]["links"]["gpu_host"]["busy_s"] < off["time"]["iteration"] / 2                 # hidden


def _best(name):
    from dse.search import load_space, search

    out = search(load_space(f"examples/spaces/{name}.yaml"), engine="exhaustive")
    return out, out["ranked"][0]


def test_cheapest_qlora_box_for_30m_tokens_in_a_day_is_two_rtx_4090s():
    out, best = _best("finetune-qlora-cheapest")
    assert out["points"] == 324 and out["feasible"] == 172
    assert out["excluded"]["train 30.0 M tokens within 1.00 days"] == 74
    p = best["params"]
    assert (p["hardware.node.gpu"], p["gpus"], p["plan.offload_params"], p["plan.ssds"]) == ("rtx-4090", 2, "cpu", 1)
    assert best["value"] == 10_100                                  # 2 x $1,800 GPUs + $5,000 host + one $1,500 drive
    hours = 30e6 / best["metrics"]["throughput.tokens_per_s"] / 3600
    assert hours == pytest.approx(17.65, abs=0.05)
    # one RTX 4090 fits (NF4 weights in host DRAM) but needs more than a day: excluded by the time limit only
    m, s, p1 = resolve("llama3-70b", "workstation-l40s-x2-gen5", None, ["hardware.node.gpu=rtx-4090"], dp=1,
                       finetune="qlora", lora_rank=16, zero=3, micro_batch=4, seq_len=2048, global_batch=16,
                       recompute="full", offload_params="cpu")
    one = run(m, s, p1)
    assert one["feasible"] and 30e6 / one["throughput"]["tokens_per_s"] / 3600 == pytest.approx(32.8, abs=0.1)


def test_cheapest_lora_box_for_10m_tokens_in_a_day_streams_bf16_weights_from_host_dram():
    out, best = _best("finetune-lora-cheapest")
    p = best["params"]
    assert (p["hardware.node.gpu"], p["gpus"], p["plan.offload_params"]) == ("rtx-4090", 1, "cpu")
    assert best["value"] == 8_300
    assert 10e6 / best["metrics"]["throughput.tokens_per_s"] / 3600 == pytest.approx(10.7, abs=0.1)
    assert out["excluded"]["gpu memory capacity"] == 108            # every plan keeping 141 GB of bf16 weights
