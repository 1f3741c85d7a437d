"""DualPipe composed with LoRA/QLoRA and with optimizer offload (issue 15; both were one-line errors), and what stays
refused: ZeRO-Infinity's drives and activation offload (ZeRO-3 and parameter offload: tests/test_compose_offload.py).

A DeepSeek-V3-like small configuration (MLA, 8 layers, one dense, ep 2) on the H800 cluster: the schedule changes
how a micro-batch's work is laid out, the fine-tuning what the work is, and each part is checked against the other
schedule or the other fine-tune where it must agree.
"""

from __future__ import annotations

import pytest

import dse
from dse.estimate import base, kernel_table, resolve

PARTS = ("compute", "recompute", "communication", "bubble", "optimizer", "overhead", "io_exposed")
KW = dict(tp=1, pp=4, dp=2, ep=2, global_batch=32, seq_len=2048, zero=1, recompute="full",
          overrides=["model.layers=8", "model.mtp_layers=0", "model.first_dense_layers=1"])


def _est(schedule, finetune="lora", **kw):
    return dse.estimate("deepseek-v3", "h800-cluster", schedule=schedule, finetune=finetune, **{**KW, **kw})


@pytest.mark.parametrize("finetune", ["lora", "qlora"])
@pytest.mark.parametrize("offload", ["gpu", "cpu"])
def test_parts_add_up_to_the_iteration(finetune, offload):
    t = _est("dualpipe", finetune, offload_optimizer=offload)["time"]
    assert sum(t[k] for k in PARTS) == pytest.approx(t["iteration"], rel=1e-12)


def test_table2_doubling_is_the_frozen_weights_and_the_adapters():
    """A rank holds two stages: the frozen weights and the adapters of both (weights x 2), the adapters' fp32
    gradients of both (x 2); ZeRO-1 shards each stage's adapter states over its 2 dp replicas, so the optimizer
    bytes are 1F1B's. QLoRA's packed weights double alike, so its saving against LoRA doubles."""
    one, dual = _est("1f1b"), _est("dualpipe")
    g1, g2 = one["memory"]["gpu"], dual["memory"]["gpu"]
    assert dual["model"]["params_trainable"] == one["model"]["params_trainable"]
    # 1F1B's fuller stage is the first (the embedding, V h); DualPipe's rank 0 holds the embedding and the head
    # (V h and the final norm's h) once each: twice 1F1B's plus the final norm, in bf16
    assert g2["weights"] == pytest.approx(2 * g1["weights"] + 2 * 7168, rel=1e-12)
    assert g2["gradients"] == pytest.approx(2 * g1["gradients"], rel=1e-12)
    assert g2["optimizer"] == pytest.approx(g1["optimizer"], rel=1e-12)
    q1, q2 = _est("1f1b", "qlora")["memory"]["gpu"], _est("dualpipe", "qlora")["memory"]["gpu"]
    assert g2["weights"] - q2["weights"] == pytest.approx(2 * (g1["weights"] - q1["weights"]), rel=1e-12)
    full = _est("dualpipe", "full")["memory"]["gpu"]
    assert g2["gradients"] < full["gradients"] / 50       # only the adapters have gradients


def test_the_work_per_micro_batch_is_the_same_and_the_schedule_hides_the_all_to_all():
    one, dual = _est("1f1b")["time"], _est("dualpipe")["time"]
    for k in ("layer_forward", "layer_backward", "recompute"):
        assert dual[k] == pytest.approx(one[k], rel=1e-12), k
    assert dual["ep_communication"] < one["ep_communication"]
    assert dual["bubble"] < one["bubble"]


def _kernel_times(finetune, keep=None):
    model, system, plan = resolve("deepseek-v3", "h800-cluster", schedule="dualpipe", finetune=finetune, **KW)[:3]
    c = base.compose_memory(model, system, plan)
    tables = c["terms"].kernels
    if keep:
        tables = {k: ({n: r for n, r in v.items() if keep(r)} if k in ("layer", "dense_layer") else v)
                  for k, v in tables.items()}
    return kernel_table.kernel_times(tables, system, plan, c["peak_flops"], base.links(system, plan))


def test_dualpipe_w_is_the_adapters_weight_gradients_under_lora():
    """Table 2's W (the weight-gradient GEMMs deferred into the bubble): under LoRA the frozen projections and experts
    have none, so W is the adapters' A and B weight gradients alone, each as long as its forward GEMM."""
    lora = _kernel_times("lora")
    adapters = _kernel_times("lora", keep=lambda r: "adapter" in r)
    assert 0 < lora["layer_wgrad"] == pytest.approx(adapters["gpu_fwd"], rel=1e-12)   # GPU time (no host floor)
    full = _kernel_times("full")
    gemms = _kernel_times("full", keep=lambda r: r["kind"] == "gemm" and bool(r.get("split")))
    assert full["layer_wgrad"] == pytest.approx(gemms["gpu_fwd"], rel=1e-12)   # every weight GEMM, summed
    assert lora["layer_wgrad"] < full["layer_wgrad"] / 5


def test_cpu_optimizer_offload_runs_after_the_flush_as_under_1f1b():
    """ZeRO-Offload with ZeRO-1: the host holds each GPU's shard of the adapters' states, 2 stages over 2 dp replicas
    = one stage's worth, so the CPU Adam step and the host bytes are 1F1B's."""
    for ft in ("lora", "full"):
        one = _est("1f1b", ft, offload_optimizer="cpu")
        dual = _est("dualpipe", ft, offload_optimizer="cpu")
        # full training: rank 0's embedding and head against 1F1B's first stage: the final norm (7,168) apart
        assert dual["time"]["optimizer"] == pytest.approx(one["time"]["optimizer"], rel=1e-6), ft
        for k in ("optimizer", "gradients"):
            assert dual["memory"]["host"][k] == pytest.approx(one["memory"]["host"][k], rel=1e-6), (ft, k)
        assert dual["memory"]["gpu"]["optimizer"] == 0


@pytest.mark.parametrize("args, needle", [
    (["--zero", "3", "--offload-params", "nvme"], "--offload-params nvme"),
    (["--zero", "3", "--offload-optimizer", "nvme"], "--offload-optimizer nvme"),
    (["--offload-activations", "host"], "--offload-activations host"),
])
def test_what_no_pipeline_engine_runs_stays_one_line(capsys, args, needle):
    from dse.cli import main

    argv = ["estimate", "--model", "llama3-8b", "--hw", "h100-cluster", "--pp", "4", "--dp", "2",
            "--global-batch", "32", "--finetune", "lora", "--set", "plan.schedule=dualpipe", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "dualpipe" in err[0], err
