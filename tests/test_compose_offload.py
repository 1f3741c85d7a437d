"""Compositions that were one-line refusals (issue 15: "everything composes with what exists"):

- DualPipe with ZeRO-3 and with parameter / optimizer offload to host memory (torchtitan runs FSDP2 and its CPU
  offload on every pipeline schedule, DualPipeV included): a micro-batch runs one of the rank's two stages, so
  ZeRO-3's per micro-batch collectives and the offload's per micro-batch copies are one stage's (checked against
  a brute-force walk over the micro-batches and a simulated ring), two chunks' weights are gathered at once, and
  the fetches hide behind the interleaved forward and backward compute together;
- context parallelism with storage offload, activation offload and LoRA/QLoRA: cp ranks replicate the model like
  dp ranks (states sharded over dp x cp) and hold s/cp tokens, so (cp 2, seq 2S, dp d) has the model states,
  host bytes and offloaded activations of (cp 1, seq S, dp 2d).
"""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.estimate import dualpipe
from dse.formulas import memory as M
from dse.formulas.offload import backward_phase_time, forward_phase_time
from dse.formulas.precision import recipe_of

H100 = "dgx-h100"
DP = dict(pp=2, dp=4, global_batch=32, seq_len=4096)


def _dual(**kw):
    return dse.estimate("llama3-8b", H100, schedule="dualpipe", **{**DP, **kw})


def _ring_bytes(nbytes: float, n: int) -> float:
    """Bytes one rank sends in a simulated ring all-gather (or reduce-scatter) of an nbytes tensor over n ranks."""
    shards = [np.full(1, k) for k in range(n)]         # rank k starts with shard k
    have = [{k} for k in range(n)]
    sent = 0.0
    for _ in range(n - 1):                               # each step every rank forwards the shard it got last
        sent += nbytes / n
        shards = shards[-1:] + shards[:-1]
        for k in range(n):
            have[k].add(int(shards[k][0]))
    assert all(len(h) == n for h in have)                # every rank ends with every shard
    return sent


def _rank0_stages(m: int, pp: int) -> list[int]:
    """The stage rank 0 runs each micro-batch through: forward-direction ones stage 0, reverse ones stage p-1."""
    return [0 if k % 2 == 0 else pp - 1 for k in range(m)]


def test_dualpipe_zero3_collectives_match_a_brute_force_walk():
    r = _dual(zero=3)
    plan, i = r["plan"], r["parallelism"]
    rec = recipe_of(dse.estimate.resolve("llama3-8b", H100, schedule="dualpipe", zero=3, **DP)[2])
    m, n = int(i["micro_batches"]), 2 * plan["dp"]       # each stage on 2 dp ranks (ranks i and p-1-i, dp replicas)
    p_all = i["params_per_gpu"]                          # both stages: the whole model at pp 2
    h, emb, layer = r["model"]["hidden"], r["model"]["vocab"] * r["model"]["hidden"], r["layer_params"]
    stage = {0: emb + 16 * layer, 1: 16 * layer + h + emb}   # the embedding, 16 layers | 16 layers, norm, head
    assert stage[0] + stage[1] == p_all                      # the rank holds both: the whole model at pp 2
    sent = 0.0
    for s in _rank0_stages(m, plan["pp"]):
        w, g = stage[s] * rec.weight_gathers, stage[s] * rec.dp_gradients
        sent += 2 * _ring_bytes(w, n) + _ring_bytes(g, n)   # gather in forward, again in backward; reduce-scatter
    assert r["traffic"]["dp"] == pytest.approx(sent, rel=1e-12)
    # the same plan under 1F1B moves its fuller stage per micro-batch over dp ranks: DualPipe is not 2x that
    one = dse.estimate("llama3-8b", H100, schedule="1f1b", zero=3, **DP)
    assert r["traffic"]["dp"] < 1.2 * one["traffic"]["dp"]


def test_dualpipe_zero3_memory_shards_both_stages_and_gathers_two_chunks():
    z1, z3 = _dual(zero=1)["memory"]["gpu"], _dual(zero=3)["memory"]["gpu"]
    p_all = _dual(zero=3)["parallelism"]["params_per_gpu"]
    assert z3["weights"] == pytest.approx(p_all / (2 * DP["dp"]) * 2, rel=1e-12)   # bf16 over 2 dp ranks
    assert z3["total"] < z1["total"]
    assert z3["activations"] == z1["activations"]                                   # p + 1 micro-batches either way
    layer = _dual(zero=3)["layer_params"]                                             # one layer's parameters
    assert z3["buffers"] - z1["buffers"] == pytest.approx(2 * M.zero3_gather_bytes(layer, 2), rel=1e-9)


def test_dualpipe_param_offload_fetches_one_stage_per_micro_batch():
    r = _dual(zero=3, offload_params="cpu", offload_optimizer="cpu")
    m, p_all = int(r["parallelism"]["micro_batches"]), r["parallelism"]["params_per_gpu"]
    shard = p_all / (2 * DP["dp"])                           # the rank's partition of its two stages
    stage_share = {0: 0.5, 1: 0.5}                           # even split of the 32 layers (embedding vs head ~equal)
    fetch = sum(2 * 2 * shard * stage_share[s] for s in (0, 1) for _ in range(m // 2))   # fwd + bwd, bf16
    grads_back = sum(2 * shard * stage_share[s] for s in (0, 1) for _ in range(m // 2))  # partition_grads round trip
    assert r["offload"]["links"]["gpu_host"]["bytes_to_gpu"] == pytest.approx(fetch + grads_back, rel=1e-12)
    g = r["memory"]["gpu"]
    assert g["weights"] == 0 and g["optimizer"] == 0
    assert g["total"] < _dual(zero=3)["memory"]["gpu"]["total"]
    t = r["time"]
    assert sum(t[k] for k in ("compute", "recompute", "communication", "bubble", "optimizer", "overhead",
                              "io_exposed")) == pytest.approx(t["iteration"], rel=1e-9)


@pytest.mark.parametrize("cf,cb,ff,fb", [(1.0, 2.0, 0.5, 0.5), (1.0, 2.0, 3.0, 0.1), (1.0, 2.0, 0.1, 4.0),
                                         (0.3, 0.2, 1.0, 1.0), (0.0, 0.0, 1.0, 1.0)])
def test_interleaved_fetch_overlap_never_exceeds_the_serial_phases(cf, cb, ff, fb):
    t_fw, t_bw = dualpipe.offload_phases(cf, cb, ff, fb)
    serial = forward_phase_time(cf, ff) + backward_phase_time(cb, fb, 0.0, 0.0)
    assert t_fw + t_bw <= serial + 1e-15
    assert t_fw + t_bw >= max(cf + cb, ff + fb) - 1e-15
    if ff <= cf and fb <= cb:      # each phase hides its fetches: the two forms agree
        assert (t_fw, t_bw) == pytest.approx((cf, cb))


def test_schedule_helpers_are_one_under_1f1b():
    plan = dse.estimate.resolve("llama3-8b", H100, pp=2, dp=4)[2]
    assert dualpipe.microbatch_share(plan) == 1.0 and dualpipe.gathered_layers(plan) == 1.0


# ----------------------------------------------------------------------------- context parallelism


CP_OPTIONS = [dict(offload_optimizer="cpu", zero=1), dict(offload_optimizer="cpu", offload_params="cpu", zero=3),
              dict(offload_optimizer="nvme", zero=3), dict(finetune="lora"), dict(finetune="qlora"),
              dict(finetune="lora", offload_optimizer="cpu", zero=1),
              dict(offload_activations="host", offload_layers=8)]


@pytest.mark.parametrize("opts", CP_OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_cp_ranks_hold_the_states_of_dp_ranks_and_the_tokens_of_a_shorter_sequence(opts):
    two = dse.estimate("llama3-8b", H100, cp=2, dp=4, seq_len=8192, global_batch=8, **opts)
    one = dse.estimate("llama3-8b", H100, cp=1, dp=8, seq_len=4096, global_batch=16, **opts)
    assert two["parallelism"]["micro_batches"] == one["parallelism"]["micro_batches"]
    for tier in ("gpu", "host", "storage"):
        for k in ("weights", "gradients", "optimizer"):
            assert two["memory"][tier][k] == pytest.approx(one["memory"][tier][k], rel=1e-12), (tier, k)
    assert two["traffic"].get("gpu_host", 0) == pytest.approx(one["traffic"].get("gpu_host", 0), rel=1e-12)
    if "activation_offload" in two:
        a2, a1 = two["activation_offload"], one["activation_offload"]
        assert a2["offloaded_bytes_per_layer"] == pytest.approx(a1["offloaded_bytes_per_layer"], rel=1e-12)
        assert a2["bytes_offloaded_per_iteration"] == pytest.approx(a1["bytes_offloaded_per_iteration"], rel=1e-12)
        assert a2["gpu_activations"] == pytest.approx(a1["gpu_activations"], rel=1e-12)
    assert two["traffic"]["cp"] > 0 == one["traffic"]["cp"]


@pytest.mark.parametrize("opts", [dict(offload_activations="host", offload_layers=16),
                                  dict(offload_activations="ssd", offload_layers=16),
                                  dict(offload_activations="host", activation_offload_mechanism="hooks")])
def test_more_cp_never_raises_gpu_activations_with_activation_offload(opts):
    act = [dse.estimate("llama3-8b", H100, cp=cp, dp=1, seq_len=16384, **opts)["memory"]["gpu"]["activations"]
           for cp in (1, 2, 4, 8)]
    assert all(b < a for a, b in zip(act, act[1:])), act


def test_cp_with_offload_is_a_result_on_the_cli(capsys):
    from dse.cli import main

    assert main(["estimate", "-m", "llama3-8b", "--hw", H100, "--cp", "2", "--seq-len", "16384", "--zero", "3",
                 "--offload-optimizer", "cpu", "--offload-params", "cpu", "--finetune", "lora"]) == 0
    assert main(["estimate", "-m", "llama3-8b", "--hw", H100, "--pp", "2", "--dp", "4", "--zero", "3",
                 "--offload-params", "cpu", "--offload-optimizer", "cpu", "--set", "plan.schedule=dualpipe"]) == 0
    capsys.readouterr()


# ----------------------------------------------------------------------------- FP8 with optimizer offload


@pytest.mark.parametrize("offload,hw", [("cpu", H100), ("cxl", "hgx-h100-cxl")])
def test_fp8_with_optimizer_offload_is_the_offload_plus_the_fp8_gpu_side(offload, hw):
    """Megatron's --optimizer-cpu-offload beside FP8: the host holds what it holds in bf16 (fp32 master and states),
    the GPU keeps the FP8 copies, the step is the CPU's plus the weights' cast back on the GPU."""
    kw = dict(zero=1, offload_optimizer=offload)
    f8, b16 = (dse.estimate("llama3-8b", hw, precision=p, **kw) for p in ("fp8", "bf16"))
    f8_gpu = dse.estimate("llama3-8b", hw, precision="fp8", zero=1)
    for k in ("weights", "gradients", "optimizer"):
        assert f8["memory"]["host"][k] == pytest.approx(b16["memory"]["host"][k], rel=1e-12), k
    assert f8["memory"]["gpu"]["weights"] == f8_gpu["memory"]["gpu"]["weights"]      # FP8 copies stay on the GPU
    assert f8["memory"]["gpu"]["optimizer"] == 0 and f8["memory"]["gpu"]["total"] < f8_gpu["memory"]["gpu"]["total"]
    cast = f8_gpu["fp8"]["weight_cast_time"]
    assert f8["fp8"]["weight_cast_time"] == cast > 0
    assert f8["time"]["optimizer"] == pytest.approx(b16["time"]["optimizer"] + cast, rel=1e-12)
    assert f8["traffic"]["gpu_host"] == b16["traffic"]["gpu_host"]
    t = f8["time"]
    assert sum(t[k] for k in ("compute", "recompute", "communication", "bubble", "optimizer", "overhead",
                              "io_exposed")) == pytest.approx(t["iteration"], rel=1e-12)
    assert f8["fp8"]["weight_cast_share"] == pytest.approx(cast / t["iteration"], rel=1e-12)
    assert t["iteration"] < b16["time"]["iteration"]                                  # FP8 GEMMs still count


@pytest.mark.parametrize("kw,needle", [(dict(zero=3), "--zero 3"),
                                       (dict(zero=1, offload_optimizer="cpu", fp8_param_gather=True),
                                        "fp8_param_gather=true")])
def test_fp8_refusals_left_say_what_is_not_priced(kw, needle):
    from dse.errors import InputError

    with pytest.raises(InputError, match="not priced") as e:
        dse.estimate("llama3-8b", H100, precision="fp8", **kw)
    assert needle in str(e.value) and len(str(e.value).splitlines()) == 1


# ----------------------------------------------------------------------------- MLA with activation offload

MLA = dict(tp=1, pp=4, dp=2, ep=2, global_batch=32, seq_len=4096, zero=1,
           overrides=["model.layers=8", "model.mtp_layers=0", "model.first_dense_layers=1"])


def _terms(name, hw, **kw):
    from dse.estimate import base, resolve

    model, system, plan = resolve(name, hw, **kw)[:3]
    return base.compose_memory(model, system, plan), model, plan


def test_table_count_agrees_with_ssdtrains_gpt_tensors_on_llama():
    from dse.estimate.activation_hooks import table_offloaded_bytes
    from dse.formulas import activation_offload as A

    for kw in (dict(), dict(tp=2, sequence_parallel=True), dict(tp=4, micro_batch=2, recompute="selective")):
        c, model, plan = _terms("llama3-8b", H100, offload_activations="host", **kw)
        i = c["terms"]
        gpt = A.offloaded_bytes_per_layer(i.seq_len, i.micro_batch, model.hidden, model.heads, model.kv_heads,
                                          model.head_dim, model.ffn_hidden, **i.activation_options)
        assert table_offloaded_bytes(c, model, plan, A) == pytest.approx(gpt, rel=0.02), kw


def test_mla_offloads_the_rows_over_the_threshold():
    """Megatron-Core's fine-grained activation offloading runs on MLA models; dse counts SSDTrain's rule on MLA's
    rows: a brute-force pass over the MoE and the dense layer's rows, weighted by their layer counts."""
    from dse.formulas.activation_offload import SMALL_TENSOR_ELEMENTS

    r = dse.estimate("deepseek-v3", "h800-cluster", offload_activations="host", **MLA)
    c, model, plan = _terms("deepseek-v3", "h800-cluster", offload_activations="host", **MLA)
    k = c["terms"].kernels

    def big(rows):
        return sum(row["saved"] for row in rows.values() if row.get("saved", 0) / 2 >= SMALL_TENSOR_ELEMENTS)

    want = (7 * big(k["layer"]) + 1 * big(k["dense_layer"])) / 8
    assert r["activation_offload"]["offloaded_bytes_per_layer"] == pytest.approx(want, rel=1e-12)
    small = [n for n, row in k["layer"].items() if 0 < row.get("saved", 0) / 2 < SMALL_TENSOR_ELEMENTS]
    assert {"q_norm", "kv_norm"} <= set(small)               # the latents stay on the GPU at 4,096 tokens


def test_mla_activation_offload_frees_memory_layer_by_layer():
    act = [dse.estimate("deepseek-v3", "h800-cluster", offload_activations="host", offload_layers=k,
                        **MLA)["memory"]["gpu"]["activations"] for k in (0, 1, 2)]
    none = dse.estimate("deepseek-v3", "h800-cluster", **MLA)["memory"]["gpu"]["activations"]
    assert act[0] == pytest.approx(none, rel=1e-12) and act[2] < act[1] < act[0]


# ----------------------------------------------------------------------------- the search


def test_search_block_path_equals_point_path_for_the_compositions():
    from _block_vs_point import block_vs_point

    from dse.search.space import from_dict

    data = {"model": "llama3-8b", "hardware": "h100-cluster",
            "fixed": {"plan.seq_len": 8192, "plan.global_batch": 32, "plan.recompute": "full"},
            "parameters": {"gpus": [8, 16], "plan.pp": [1, 2], "plan.cp": [1, 2], "plan.zero": [1, 3],
                           "plan.schedule": ["1f1b", "dualpipe"], "plan.offload_optimizer": ["gpu", "cpu"],
                           "plan.offload_params": ["gpu", "cpu"], "plan.finetune": ["full", "lora"]},
            "objectives": ["time", {"metric": "memory.gpu.total", "direction": "minimize"}]}
    seen = [s for s in block_vs_point(from_dict(data, "t.yaml"), chunk=23) if s["valid"] and s["feasible"]]
    plans = [s["result"]["plan"] for s in seen]
    assert any(p["schedule"] == "dualpipe" and p["zero"] == 3 and p["offload_params"] == "cpu" for p in plans)
    assert any(p["cp"] == 2 and p["offload_optimizer"] == "cpu" and p["finetune"] == "lora" for p in plans)


@pytest.mark.parametrize("zero", [1, 2])
def test_a_cpu_step_sends_each_gpu_only_its_own_updated_partition(zero):
    """ZeRO-Offload (Ren et al. 2021, section 4.2; DeepSpeed stage_1_and_2): each data-parallel rank copies the fp16
    partition its CPU step updated to its GPU, then the ranks all-gather on the GPUs: host -> GPU bytes are the
    fp16 parameters / dp (they were the whole model per GPU whatever dp)."""
    import dse

    params = dse.estimate("llama3-8b", "dgx-h100", dp=1, micro_batch=1, global_batch=8)["model"]["params"]
    for dp in (1, 4, 8):
        r = dse.estimate("llama3-8b", "dgx-h100", dp=dp, zero=zero, offload_optimizer="cpu", micro_batch=1,
                         global_batch=8 * dp)
        assert r["offload"]["links"]["gpu_host"]["bytes_to_gpu"] == pytest.approx(2 * params / dp, rel=1e-9)
