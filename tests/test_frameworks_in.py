"""``dse estimate --from megatron|deepspeed|torchtitan``: framework configs read onto a plan (issue 18, point 3).

Fixtures (tests/fixtures/frameworks/): Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh (16 nodes),
a ZeRO-Infinity ds_config as DeepSpeed's config-json documents it, torchtitan's llama3_8b.toml.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIX = Path(__file__).parent / "fixtures" / "frameworks"
MEGATRON_SCRIPT = FIX / "train_gpt3_175b_distributed.sh"
DS_INFINITY = FIX / "ds_zero_infinity.json"
TITAN_8B = FIX / "llama3_8b.toml"

LLAMA2_7B_ARGS = ("torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
                  "--num-attention-heads 32 --ffn-hidden-size 11008 --swiglu --normalization RMSNorm "
                  "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
                  "--tokenizer-type Llama2Tokenizer --max-position-embeddings 4096 --seq-length 4096 "
                  "--attention-dropout 0 --hidden-dropout 0 --bf16 --use-distributed-optimizer "
                  "--recompute-granularity selective --sequence-parallel --tensor-model-parallel-size 2 "
                  "--micro-batch-size 2 --global-batch-size 64 --lr 3e-4")


def _plan(r):
    assert r.code == 0, r.err
    return r.json()["plan"], r.json()


def test_megatron_gpt3_example_script(dse):
    plan, out = _plan(dse("estimate", "--from", "megatron", MEGATRON_SCRIPT, "--hw", "a100-cluster-800g", "--json"))
    assert (plan["tp"], plan["pp"], plan["dp"]) == (8, 16, 1)       # 16 nodes x 8 GPUs = tp x pp
    assert (plan["micro_batch"], plan["global_batch"], plan["seq_len"]) == (1, 1536, 2048)
    assert (plan["precision"], plan["zero"], plan["recompute"], plan["attention"]) == ("fp16", 0, "none", "flash")
    m = out["model"]
    assert (m["layers"], m["hidden"], m["heads"], m["ffn_hidden"]) == (96, 12288, 96, 4 * 12288)
    assert m["vocab"] == 51200                      # GPT-2's 50,257 padded to a multiple of 128 x tp 8
    assert 174e9 < m["params"] < 176e9
    imported = out["imported"]
    assert imported["framework"] == "megatron" and imported["model"] == "megatron-96x12288"
    assert "--lr" in imported["ignored"] and "--save" in imported["ignored"]
    assert any(i.startswith("--rampup-batch-size") for i in imported["ignored"])
    assert imported["plan"]["tp"] == "--tensor-model-parallel-size"


def test_megatron_script_as_shipped_fails_on_its_world_size(dse, tmp_path):
    """The example as shipped runs 1 node (8 GPUs) but asks for tp 8 x pp 16: Megatron would stop too."""
    script = tmp_path / "train.sh"
    script.write_text(MEGATRON_SCRIPT.read_text().replace("NUM_NODES=16", "NUM_NODES=1"))
    r = dse("estimate", "--from", "megatron", script, "--hw", "a100-cluster-800g")
    assert r.code == 2 and r.err.count("\n") == 1
    assert str(script) in r.err and "--nnodes x --nproc_per_node" in r.err and "128" in r.err


def test_megatron_llama_arguments_define_llama2_7b(dse):
    plan, out = _plan(dse("estimate", "--from", "megatron", LLAMA2_7B_ARGS, "--json"))
    assert out["model"]["params"] == 6_738_415_616                 # the catalog's llama2-7b, from the arguments
    assert (plan["tp"], plan["dp"], plan["micro_batch"], plan["global_batch"]) == (2, 4, 2, 64)
    assert (plan["recompute"], plan["sequence_parallel"], plan["zero"], plan["precision"]) == \
        ("selective", True, 1, "bf16")
    assert plan["stack"] == "megatron"
    assert out["imported"]["ignored"] == ["--lr"]
    same = dse("estimate", "--model", "llama2-7b", "--tp", "2", "--dp", "4", "--micro-batch", "2",
               "--global-batch", "64", "--recompute", "selective", "--sequence-parallel", "--zero", "1", "--json")
    assert same.json()["time"]["iteration"] == out["time"]["iteration"]
    assert same.json()["memory"]["gpu"]["total"] == out["memory"]["gpu"]["total"]


def test_megatron_defaults_global_batch_and_world_from_hardware(dse):
    plan, out = _plan(dse("estimate", "--from", "megatron", "--tensor-model-parallel-size 2 --micro-batch-size 4 "
                          "--bf16", "--hw", "a100-cluster-800g", "--json"))
    assert plan["dp"] == 512 // 2 and plan["global_batch"] == 4 * 256          # Megatron: micro x dp
    assert out["model"]["name"] == "llama2-7b"                                 # no architecture: the --model
    assert any("512 GPUs of a100-cluster-800g" in n for n in out["imported"]["notes"])


def test_explicit_flags_win_and_are_named(dse):
    plan, out = _plan(dse("estimate", "--from", "megatron", LLAMA2_7B_ARGS, "--tp", "4", "--model", "llama2-13b",
                          "--set", "plan.micro_batch=1", "--json"))
    assert (plan["tp"], plan["dp"], plan["micro_batch"]) == (4, 2, 1)         # world 8 / tp 4
    assert out["model"]["name"] == "llama2-13b"
    over = " ".join(out["imported"]["overridden"])
    assert "--tp 4" in over and "--tensor-model-parallel-size: 2" in over
    assert "--model llama2-13b" in over and "--set plan.micro_batch=1" in over
    r = dse("estimate", "--from", "megatron", LLAMA2_7B_ARGS, "--tp", "4")
    assert r.code == 0 and "explicit flags win: --tp 4" in r.out and "ignored (1): --lr" in r.out


def test_megatron_bad_input_is_one_line(dse):
    for args, words in (("--tensor-model-parallel-size x", ("megatron arguments", "--tensor-model-parallel-size",
                                                             "integer")),
                        ("--num-layers 4 --hidden-size 64", ("--num-attention-heads", "missing")),
                        ("--recompute-granularity some", ("--recompute-granularity", "full, selective")),
                        ("--micro-batch-size", ("--micro-batch-size", "expected 1 value")),
                        ("--attention-backend fast", ("--attention-backend", "flash")),
                        ("--nnodes 2 --nproc_per_node 3 --tensor-model-parallel-size 4", ("6 GPUs", "tp x pp = 4")),
                        ("--seq-length 4096 'unclosed", ("megatron arguments", "cannot split"))):
        r = dse("estimate", "--from", "megatron", args)
        assert r.code == 2 and r.err.count("\n") == 1, (args, r.err)
        assert all(w in r.err for w in words), (args, r.err)
    r = dse("estimate", "--from", "megatron", "--tensor-model-paralel-size 2 --bf16", "--json")
    assert r.code == 0
    assert r.json()["imported"]["ignored"] == ["--tensor-model-paralel-size (unknown: did you mean "
                                               "--tensor-model-parallel-size?)"]


def test_megatron_vocab_fsdp_and_interleaving(dse):
    args = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --max-position-embeddings 2048 "
            "--tokenizer-type HuggingFaceTokenizer --pipeline-model-parallel-size 2 "
            "--num-layers-per-virtual-pipeline-stage 3 --use-megatron-fsdp --data-parallel-sharding-strategy "
            "optim_grads --overlap-grad-reduce --recompute-activations --fp16 --optimizer sgd --world-size 8")
    plan, out = _plan(dse("estimate", "--from", "megatron", args, "--json"))
    assert (plan["pp"], plan["dp"], plan["schedule"], plan["virtual_stages"]) == (2, 4, "interleaved", 4)
    assert (plan["zero"], plan["overlap_grad_reduce"], plan["recompute"]) == (2, True, "selective")
    assert plan["optimizer"] == "sgd-momentum" and plan["precision"] == "fp16"
    assert out["model"]["vocab"] == 32000                    # not known offline: the --model's (llama2-7b)
    assert any("HuggingFaceTokenizer" in n for n in out["imported"]["notes"])
    plan, out = _plan(dse("estimate", "--from", "megatron", args + " --vocab-size 50000 --tokenizer-type "
                          "NullTokenizer", "--json"))
    assert out["model"]["vocab"] == 50048                    # 50,000 + EOD, padded to a multiple of 128


def test_deepspeed_zero_infinity(dse):
    plan, out = _plan(dse("estimate", "--from", "deepspeed", DS_INFINITY, "--hw", "a100-server-nvme", "--json"))
    assert (plan["micro_batch"], plan["global_batch"], plan["dp"]) == (8, 64, 8)   # 64 / (8 x 1)
    assert (plan["zero"], plan["offload_optimizer"], plan["offload_params"]) == (3, "nvme", "nvme")
    assert (plan["optimizer_buffer_count"], plan["param_buffer_count"], plan["param_buffer_size"]) == (4, 5, 1e8)
    assert (plan["sub_group_size"], plan["overlap_grad_reduce"], plan["recompute"]) == (1e9, True, "full")
    assert (plan["precision"], plan["optimizer"]) == ("bf16", "adam")
    ignored = out["imported"]["ignored"]
    assert (plan["aio_block_size"], plan["aio_queue_depth"], plan["aio_overlap_events"]) == (1048576, 8, True)
    for name in ("optimizer.params.lr", "zero_optimization.offload_optimizer.nvme_path",
                 "zero_optimization.stage3_max_live_parameters", "gradient_clipping"):
        assert name in ignored
    assert out["memory"]["storage"]["total"] > 0        # the states went to the drives


def test_deepspeed_auto_values_and_fp32(dse, tmp_path):
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                               "gradient_accumulation_steps": 4, "fp16": {"enabled": "auto"},
                               "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    plan, out = _plan(dse("estimate", "--from", "deepspeed", cfg, "--micro-batch", "2", "--json"))
    assert (plan["zero"], plan["offload_optimizer"], plan["micro_batch"], plan["dp"]) == (2, "cpu", 2, 8)
    assert plan["global_batch"] == 2 * 4 * 8
    assert sum("\"auto\"" in n for n in out["imported"]["notes"]) == 3
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    _, out = _plan(dse("estimate", "--from", "deepspeed", cfg, "--json"))
    assert any(i.startswith("precision fp32") for i in out["imported"]["ignored"])


def test_deepspeed_bad_input(dse, tmp_path):
    cfg = tmp_path / "ds.json"
    cases = (("{\"train_batch_size\": 8,", "not valid JSON"),
             ("[1, 2]", "expected a JSON object of"),
             ("{\"zero_optimization\": {\"stage\": 4}}", "zero_optimization.stage: expected 0, 1, 2 or 3"),
             ("{\"zero_optimization\": {\"stage\": \"three\"}}", "zero_optimization.stage: expected an integer"),
             ("{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 1}",
              "train_batch_size: 10 is not"),
             ("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"disk\"}}}",
              "zero_optimization.offload_param.device: expected one of none, cpu, nvme"),
             ("{\"zero_optimization\": {\"stage\": 1, \"offload_param\": {\"device\": \"cpu\"}}}",
              "--offload-params cpu needs --zero 3"),
             ("{\"bf16\": {\"enabled\": \"yes\"}}", "bf16.enabled: expected true or false"))
    for text, words in cases:
        cfg.write_text(text)
        r = dse("estimate", "--from", "deepspeed", cfg)
        assert r.code == 2 and r.err.count("\n") == 1 and str(cfg) in r.err and words in r.err, (text, r.err)
    r = dse("estimate", "--from", "deepspeed", tmp_path / "missing.json")
    assert r.code == 2 and "missing.json: cannot read" in r.err
    r = dse("estimate", "--from", "colossal", cfg)
    assert r.code == 2 and "megatron, deepspeed, torchtitan" in r.err


def test_torchtitan_llama3_8b(dse):
    plan, out = _plan(dse("estimate", "--from", "torchtitan", TITAN_8B, "--hw", "dgx-h100", "--json"))
    assert out["model"]["name"] == "llama3-8b" and out["imported"]["model"] == "llama3-8b"
    assert (plan["tp"], plan["pp"], plan["dp"], plan["zero"]) == (1, 1, 8, 3)     # FSDP over the node's 8 GPUs
    assert plan["overlap_grad_reduce"]            # FSDP2 prefetches and overlaps its collectives, always
    assert (plan["micro_batch"], plan["global_batch"], plan["seq_len"]) == (1, 8, 8192)
    assert (plan["recompute"], plan["stack"], plan["attention"], plan["precision"]) == \
        ("selective", "pytorch", "flash", "bf16")
    assert "checkpoint.interval" in out["imported"]["ignored"] and "optimizer.lr" in out["imported"]["ignored"]


def test_torchtitan_parallelism_and_bad_input(dse, tmp_path):
    toml = tmp_path / "job.toml"
    toml.write_text('[model]\nname = "llama3"\nflavor = "70B"\n[training]\nlocal_batch_size = 8\n'
                    'global_batch_size = 64\nseq_len = 4096\ncompile = true\n[parallelism]\n'
                    'data_parallel_shard_degree = 2\ntensor_parallel_degree = 8\npipeline_parallel_degree = 4\n'
                    'pipeline_parallel_microbatch_size = 2\nfsdp_reshard_after_forward = "never"\n'
                    '[activation_checkpoint]\nmode = "full"\n')
    plan, out = _plan(dse("estimate", "--from", "torchtitan", toml, "--hw", "a100-cluster-800g", "--json"))
    assert (plan["tp"], plan["pp"], plan["dp"], plan["zero"], plan["sequence_parallel"]) == (8, 4, 2, 2, True)
    assert (plan["micro_batch"], plan["global_batch"], plan["stack"], plan["recompute"]) == (2, 64, "compiled", "full")
    for text, words in (('[training\nseq_len = 1', "not valid TOML"),
                        ('[activation_checkpoint]\nmode = "partial"', "activation_checkpoint.mode: expected one of"),
                        ('[parallelism]\ntensor_parallel_degree = 0', "parallelism.tensor_parallel_degree: expected"),
                        ('[training]\nlocal_batch_size = 3\n[parallelism]\npipeline_parallel_degree = 2\n'
                         'pipeline_parallel_microbatch_size = 2', "does not divide training.local_batch_size")):
        toml.write_text(text)
        r = dse("estimate", "--from", "torchtitan", toml)
        assert r.code == 2 and r.err.count("\n") == 1 and str(toml) in r.err and words in r.err, (text, r.err)


def test_torchtitan_default_resharding_follows_pipeline(dse, tmp_path):
    """torchtitan's fsdp_reshard_after_forward "default" keeps the gathered weights under pipeline parallelism
    (ZeRO-2's memory and traffic) and reshards without it (ZeRO-3): get_fsdp_reshard_after_forward_policy."""
    toml = tmp_path / "job.toml"
    for pp, policy, zero in ((4, None, 2), (1, None, 3), (4, "always", 3), (1, "never", 2)):
        line = "" if policy is None else f'fsdp_reshard_after_forward = "{policy}"\n'
        toml.write_text('[model]\nname = "llama3"\nflavor = "70B"\n[training]\nlocal_batch_size = 8\n'
                        f'seq_len = 4096\n[parallelism]\ndata_parallel_shard_degree = 2\n{line}'
                        f'tensor_parallel_degree = 8\npipeline_parallel_degree = {pp}\n'
                        'pipeline_parallel_microbatch_size = 2\n')
        plan, _ = _plan(dse("estimate", "--from", "torchtitan", toml, "--hw", "a100-cluster-800g", "--json"))
        assert (plan["pp"], plan["zero"]) == (pp, zero), (pp, policy, plan["zero"])


def test_estimate_without_from_does_not_import_frameworks():
    code = ("import sys; from dse.cli import main; main(['estimate', '--json']); "
            "sys.stderr.write(str([m for m in sys.modules if m.startswith('dse.frameworks')]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip() == "[]"


def test_missing_script_and_dp_over_the_world_size(dse):
    r = dse("estimate", "--from", "megatron", "train_gpt.sh")
    assert r.code == 2 and "no --options in 'train_gpt.sh' (and no launch script of that name)" in r.err
    _, out = _plan(dse("estimate", "--from", "megatron", LLAMA2_7B_ARGS, "--dp", "2", "--json"))
    assert out["plan"]["dp"] == 2
    assert "--dp 2 (the config's --nnodes x --nproc_per_node: 8 GPUs)" in out["imported"]["overridden"]
