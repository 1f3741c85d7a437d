"""``--emit megatron|deepspeed|torchtitan`` and back through ``--from``: the same plan (issue 18, point 4).

Property tests (Hypothesis) over valid plans: emit a plan, read the text back, and every plan field the
framework carries comes back equal (the fields a framework does not carry are given as flags, as a user
would: DeepSpeed has no tp, pp, sequence length or model). Then what each framework cannot express is
stated, and ``dse search --emit`` writes the best point.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from dse.errors import InputError
from dse.estimate import resolve
from dse.frameworks.apply import apply, read
from dse.frameworks.emit import emit

HW = "a100-server-nvme"          # 8 GPUs a node and NVMe drives (storage offload is valid)
CARRIED = {
    "megatron": ("tp", "pp", "dp", "micro_batch", "global_batch", "seq_len", "recompute", "attention",
                 "sequence_parallel", "zero", "precision", "grad_dtype", "optimizer", "schedule", "virtual_stages",
                 "overlap_grad_reduce", "offload_optimizer", "stack", "ep", "etp"),
    "deepspeed": ("dp", "micro_batch", "global_batch", "zero", "precision", "grad_dtype", "optimizer",
                  "overlap_grad_reduce", "sub_group_size", "offload_optimizer", "offload_params",
                  "optimizer_buffer_count", "param_buffer_count", "param_buffer_size", "swap_pipeline"),
    "torchtitan": ("tp", "pp", "dp", "micro_batch", "global_batch", "seq_len", "recompute", "sequence_parallel",
                   "zero", "precision", "optimizer", "schedule", "virtual_stages", "offload_optimizer",
                   "offload_params", "stack", "attention"),
}


def plans(framework: str):
    """Valid plan fields for ``framework`` (only what it can express, so that the round trip is exact)."""
    models = ("llama2-7b", "llama3-8b") if framework == "torchtitan" else ("llama2-7b", "llama3-8b", "gpt2-medium")
    dp = st.sampled_from([1, 2, 4, 8])
    common = dict(
        model=st.sampled_from(models), tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]), dp=dp,
        micro_batch=st.sampled_from([1, 2, 4]), accumulation=st.integers(1, 4),
        seq_len=st.sampled_from([512, 1024, 2048]), overlap_grad_reduce=st.booleans())
    if framework == "megatron":
        extra = dict(recompute=st.sampled_from(["none", "selective", "full"]),
                     attention=st.sampled_from(["flash", "math"]), sequence_parallel=st.booleans(),
                     zero=st.sampled_from([0, 1, 2, 3]),
                     precision=st.sampled_from(["bf16", "fp16"]), grad_dtype=st.sampled_from(["fp32", "half"]),
                     optimizer=st.sampled_from(["adam", "sgd-momentum"]), interleave=st.sampled_from([1, 2]),
                     offload_optimizer=st.sampled_from(["gpu", "cpu"]),
                     # MoE models: expert parallelism and expert tensor parallelism (MoE Parallel Folding)
                     model=st.sampled_from((*models, "mixtral-8x7b")),
                     ep=st.sampled_from([1, 2, 4, 8]), etp=st.sampled_from([None, 1, 2, 4]))
    elif framework == "deepspeed":
        extra = dict(zero=st.sampled_from([0, 1, 2, 3]), precision=st.sampled_from(["bf16", "fp16"]),
                     grad_dtype=st.sampled_from(["fp32", "half"]),
                     optimizer=st.sampled_from(["adam", "sgd-momentum", "adagrad"]),
                     offload_optimizer=st.sampled_from(["gpu", "cpu", "nvme"]),
                     offload_params=st.sampled_from(["gpu", "cpu", "nvme"]),
                     sub_group_size=st.sampled_from([1e8, 1e9]), optimizer_buffer_count=st.integers(4, 8),
                     param_buffer_count=st.integers(4, 8), param_buffer_size=st.sampled_from([1e8, 2e8]),
                     swap_pipeline=st.booleans(), recompute=st.sampled_from(["none", "full"]))
    else:
        extra = dict(recompute=st.sampled_from(["none", "selective", "full"]), zero=st.sampled_from([0, 2, 3]),
                     optimizer=st.sampled_from(["adam", "sgd-momentum", "adagrad"]),
                     offload=st.booleans(), stack=st.sampled_from(["pytorch", "compiled"]),
                     schedule=st.sampled_from(["1f1b", "gpipe", "interleaved"]))
    return st.fixed_dictionaries({**common, **extra})


def resolved(framework: str, d: dict):
    """The drawn fields as a resolved plan (an invalid combination is skipped with ``assume``)."""
    fields = {k: v for k, v in d.items() if k not in ("model", "accumulation", "interleave", "offload")
              and (k not in ("ep", "etp") or d["model"] == "mixtral-8x7b")}
    if fields.get("etp") is None:
        fields.pop("etp", None)
    fields["global_batch"] = d["micro_batch"] * d["accumulation"] * d["dp"]
    if "sequence_parallel" in fields:
        fields["sequence_parallel"] &= d["tp"] > 1        # a no-op at tp 1, which Megatron turns off
    if d.get("interleave", 1) > 1 and d["pp"] > 1:
        fields.update(schedule="interleaved", virtual_stages=d["interleave"])
    if framework == "torchtitan":
        fields["sequence_parallel"] = d["tp"] > 1
        if d["pp"] == 1:
            fields.pop("schedule")
        elif d["schedule"] == "interleaved":
            fields["virtual_stages"] = 2
        if d["offload"]:
            fields.update(offload_optimizer="cpu", offload_params="cpu")
        if d["dp"] == 1:
            fields["zero"] = 0            # one replica: nothing to shard, and FSDP over one GPU reads back as DDP
    if framework == "deepspeed":
        if fields["offload_optimizer"] != "nvme":
            fields.pop("optimizer_buffer_count")
            fields.pop("swap_pipeline")
        if fields["offload_params"] != "nvme":
            fields.pop("param_buffer_count")
            fields.pop("param_buffer_size")
    try:
        return resolve(d["model"], HW, None, (), **fields)
    except InputError:
        assume(False)


def round_trip(framework: str, d: dict, tmp_path):
    m, s, plan = resolved(framework, d)
    out = emit(framework, m, s, plan)
    if framework == "megatron":
        source = out["config"]
    else:
        source = tmp_path / ("ds_config.json" if framework == "deepspeed" else "job.toml")
        source.write_text(out["config"])
    explicit = {"tp": plan.tp, "pp": plan.pp, "seq_len": plan.seq_len} if framework == "deepspeed" else {}
    m2, _, plan2, report = apply(read(framework, str(source)), model=m.name, model_given=framework == "deepspeed",
                                 hw=HW, explicit=explicit)
    return (m, plan, out), (m2, plan2, report)


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "torchtitan"])
def test_emit_then_import_gives_the_same_plan(framework, tmp_path_factory):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
    @given(plans(framework))
    def check(d):
        (m, plan, out), (m2, plan2, report) = round_trip(framework, d, tmp_path_factory.mktemp(framework))
        assert m2.name == m.name                 # the arguments describe the catalog model: it comes back
        for f in CARRIED[framework]:
            assert getattr(plan2, f) == getattr(plan, f), (f, out["config"], report)
        assert not report["overridden"] and not report["ignored"] or framework == "deepspeed"

    check()


def test_emitted_configs_look_like_the_frameworks(dse):
    r = dse("estimate", "--model", "llama3-8b", "--hw", "dgx-h100", "--tp", "2", "--pp", "2", "--dp", "2",
            "--recompute", "full", "--sequence-parallel", "--emit", "megatron")
    assert r.code == 0 and r.out.splitlines()[2].startswith("torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py")
    for arg in ("--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 2", "--use-distributed-optimizer",
                "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
                "--group-query-attention --num-query-groups 8", "--padded-vocab-size 128256"):
        assert arg in r.out
    r = dse("estimate", "--model", "llama2-13b", "--hw", "a100-server-nvme", "--zero", "3", "--offload-optimizer",
            "nvme", "--offload-params", "nvme", "--recompute", "full", "--emit", "deepspeed")
    cfg = json.loads(r.out)                                    # stdout holds the JSON alone
    z = cfg["zero_optimization"]
    assert z["stage"] == 3 and z["offload_optimizer"]["device"] == "nvme" and z["offload_param"]["device"] == "nvme"
    assert z["offload_optimizer"]["nvme_path"] == "/local_nvme" and z["offload_param"]["buffer_count"] == 5
    assert cfg["aio"]["block_size"] == 1048576 and "activation_checkpointing" in cfg
    assert "dse: warning: full recompute" in r.err
    r = dse("estimate", "--model", "llama3-8b", "--hw", "dgx-h100", "--zero", "3", "--stack", "compiled",
            "--emit", "torchtitan")
    assert 'flavor = "8B"' in r.out and "data_parallel_shard_degree = 8" in r.out and "enable = true" in r.out


def test_what_a_framework_cannot_express_is_stated(dse):
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "smart-infinity-a100", "--zero", "3", "--offload-optimizer",
            "csd", "--gradient-compression", "0.02", "--emit", "deepspeed")
    assert r.code == 0 and json.loads(r.out)["zero_optimization"]["offload_optimizer"]["device"] == "nvme"
    assert "near-storage optimizer update" in r.err and "gradient compression 0.02" in r.err
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--offload-activations", "ssd",
            "--emit", "megatron")
    assert r.code == 0 and "# dse: warning: SSDTrain's activation offload to SSDs" in r.out
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "a100-server-nvme", "--zero", "3", "--offload-optimizer",
            "nvme", "--emit", "megatron")
    assert "# dse: warning: optimizer offload to nvme: Megatron-LM offloads the optimizer to host memory only" in r.out
    r = dse("estimate", "--model", "gpt2-xl", "--hw", "dgx-a100-80gb", "--zero", "1", "--emit", "torchtitan")
    assert "gpt2-xl is not a torchtitan model flavor" in r.out and "ZeRO-1 has no FSDP equivalent" in r.out
    assert "\n[model]" not in r.out
    r = dse("estimate", "--model", "gpt2-xl", "--emit", "colossal")
    assert r.code == 2 and "--emit 'colossal': expected one of megatron, deepspeed, torchtitan" in r.err


def test_emit_with_json_keeps_the_estimate(dse):
    r = dse("estimate", "--model", "gpt2-medium", "--emit", "torchtitan", "--json")
    out = r.json()
    assert "time" in out and out["emit"]["framework"] == "torchtitan" and "[parallelism]" in out["emit"]["config"]


def test_search_emits_its_best_point(cli, tmp_path):
    js = tmp_path / "s.json"
    rc, out, err = cli("search", "--model", "llama2-7b", "--hw", "dgx-a100-80gb", "-q", "--top", "2",
                       "--emit", "megatron", "--json", js)
    assert rc == 0, err
    best = json.loads(js.read_text())
    assert best["emit"]["framework"] == "megatron" and "as a megatron config" in out
    p = best["best"]["params"]
    text = best["emit"]["config"]
    assert f"--micro-batch-size {p['plan.micro_batch']} " in text and f"--tensor-model-parallel-size {p['plan.tp']} " \
        in text
    rc, out, err = cli("search", "--model", "llama2-7b", "--hw", "dgx-a100-80gb", "--emit", "horovod")
    assert rc == 2 and "--emit 'horovod'" in err


@pytest.mark.parametrize("framework, fixture, hw, flags", [
    ("megatron", "train_gpt3_175b_distributed.sh", "a100-cluster-800g", {}),
    ("deepspeed", "ds_zero_infinity.json", "a100-server-nvme", {"tp": 1, "pp": 1}),
    ("torchtitan", "llama3_8b.toml", "dgx-h100", {}),
])
def test_real_configs_are_a_fixed_point(framework, fixture, hw, flags, tmp_path):
    """A real config read in, written out and read again: the same plan and model."""
    from pathlib import Path

    src = Path(__file__).parent / "fixtures" / "frameworks" / fixture
    m, s, plan, _ = apply(read(framework, str(src)), model="llama2-13b", model_given=framework == "deepspeed",
                          hw=hw, explicit=flags)
    out = emit(framework, m, s, plan)
    again = tmp_path / fixture
    again.write_text(out["config"])
    m2, _, plan2, _ = apply(read(framework, str(again)), model="llama2-13b", model_given=framework == "deepspeed",
                            hw=hw, explicit={**flags, "seq_len": plan.seq_len} if framework == "deepspeed" else {})
    from dse.frameworks.apply import ARCHITECTURE

    assert all(getattr(m2, f) == getattr(m, f) for f in ARCHITECTURE)
    for f in CARRIED[framework]:
        assert getattr(plan2, f) == getattr(plan, f), f


def test_translate_megatron_to_deepspeed(dse):
    """--from one framework, --emit another: stdout holds the config alone, what was read goes to stderr."""
    r = dse("estimate", "--from", "megatron", LLAMA_ARGS, "--emit", "deepspeed")
    cfg = json.loads(r.out)
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["train_batch_size"] == 64
    assert cfg["zero_optimization"]["stage"] == 1 and "bf16" in cfg
    assert "from megatron" in r.err and "ignored (1): --lr" in r.err and "tp 2 and pp 1" in r.err


LLAMA_ARGS = ("--nnodes 1 --nproc_per_node 8 --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
              "--ffn-hidden-size 11008 --swiglu --normalization RMSNorm --position-embedding-type rope "
              "--untie-embeddings-and-output-weights --disable-bias-linear --tokenizer-type Llama2Tokenizer "
              "--max-position-embeddings 4096 --seq-length 4096 --attention-dropout 0 --hidden-dropout 0 --bf16 "
              "--use-distributed-optimizer --tensor-model-parallel-size 2 --micro-batch-size 2 "
              "--global-batch-size 64 --lr 3e-4")


def test_megatron_rotary_percent_round_trips(dse, tmp_path):
    """--emit megatron writes --rotary-percent for a partial-rotary model (Pythia: 0.25) and --from megatron reads it
    back into rotary_fraction (Megatron-LM arguments.py: "Percent of rotary dimension to use"); a bad value or one
    without rotary positions says so."""
    path = "models/hf/EleutherAI/pythia-410m/config.json"
    r = dse("estimate", "--model", path, "--hw", "dgx-h100", "--emit", "megatron")
    assert r.code == 0 and "--rotary-percent 0.25" in r.out
    script = tmp_path / "pythia.sh"
    script.write_text(r.out)
    back = dse("estimate", "--from", "megatron", str(script), "--hw", "dgx-h100", "--stack", "pytorch", "--json")
    same = dse("estimate", "--model", path, "--hw", "dgx-h100", "--stack", "pytorch", "--json")
    assert back.code == same.code == 0
    b, s = back.json(), same.json()
    assert b["model"]["params"] == s["model"]["params"]
    assert b["time"]["layer_forward"] == pytest.approx(s["time"]["layer_forward"], rel=1e-9)
    bad = script.read_text().replace("--rotary-percent 0.25", "--rotary-percent 1.5")
    script.write_text(bad)
    r = dse("estimate", "--from", "megatron", str(script), "--hw", "dgx-h100")
    assert r.code == 2 and "--rotary-percent" in r.err and "1.5" in r.err and len(r.err.strip().splitlines()) == 1
    script.write_text(bad.replace("--rotary-percent 1.5", "--rotary-percent 0"))
    r = dse("estimate", "--from", "megatron", str(script), "--hw", "dgx-h100")
    assert r.code == 2 and "--rotary-percent: 0: must be in (0, 1]" in r.err
