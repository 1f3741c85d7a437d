"""Multi-token prediction (DeepSeek-V3 §2.2, Megatron-Core --mtp-num-layers): parameters against Transformers' layer
and the published checkpoint split, FLOPs against Megatron-LM's count, where the depths sit (the last pipeline
stage), the framework arguments both ways, and bad input."""

from __future__ import annotations

import pytest

from dse import catalog
from dse.cli import main
from dse.estimate import estimate
from dse.estimate.parameters import layer_counts, model_parameters
from dse.formulas import transformer as T

V3_MAIN = 671_026_404_352   # Transformers 5.24 DeepseekV3ForCausalLM (tests/test_catalog_models.py: unchanged)
V3_MTP = 11_610_067_968     # one depth: model.layers.61 (an MoE layer), enorm, hnorm, eh_proj, shared_head.norm


def _flat(r: dict) -> dict:
    return {f"{k}.{j}": w for k, v in r.items() if isinstance(v, dict) for j, w in v.items()}


def test_mtp_parameters_exact_against_transformers_decoder_layer():
    """The depth's layer is Transformers' DeepseekV3DecoderLayer(layer_idx=61) (the weights Transformers skips on
    load: ``_keys_to_ignore_on_load_unexpected = model.layers.61``), plus two RMSNorms, eh_proj (2h x h, no bias)
    and the head's norm: the checkpoint's model.layers.61 tensors less its copies of the embedding and head."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer

    m = catalog.load_model("deepseek-v3")
    cfg = transformers.DeepseekV3Config(hidden_size=m.hidden, intermediate_size=m.ffn_hidden,
                                        moe_intermediate_size=m.expert_ffn, num_hidden_layers=m.layers,
                                        num_attention_heads=m.heads, num_key_value_heads=m.heads,
                                        n_shared_experts=1, n_routed_experts=256, num_experts_per_tok=8,
                                        first_k_dense_replace=3, n_group=8, topk_group=4, vocab_size=m.vocab,
                                        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                                        qk_rope_head_dim=64, v_head_dim=128)
    with torch.device("meta"):
        layer = DeepseekV3DecoderLayer(cfg, layer_idx=61)
    n_layer = sum(p.numel() for p in layer.parameters())
    h = m.hidden
    assert n_layer == layer_counts(m)["moe"]
    assert n_layer + 2 * h * h + 3 * h == V3_MTP == T.mtp_parameters(layer_counts(m)["moe"], h)


def test_mtp_count_against_the_published_split():
    """README_WEIGHTS.md: "11.5B unique parameters, excluding the shared 0.9B Embedding and 0.9B output Head" (the
    added layer: 11.51 B; with eh_proj and the norms 11.61 B); the report (§1 and the model card): 685B released =
    671B main + 14B MTP, the checkpoint's layer 61 storing its own copies of the embedding and head."""
    m = catalog.load_model("deepseek-v3")
    assert model_parameters(m)[0] == V3_MAIN          # the main model's count is Transformers' (unchanged)
    r = estimate("deepseek-v3", "h800-cluster", pp=16, dp=128, ep=64, zero=1, micro_batch=1, global_batch=15360)
    assert r["model"]["params"] == V3_MAIN and r["model"]["mtp_params"] == V3_MTP and r["model"]["mtp_layers"] == 1
    assert round(layer_counts(m)["moe"] / 1e8) == 115
    checkpoint = V3_MTP + 2 * m.vocab * m.hidden       # + model.layers.61.embed_tokens, shared_head.head
    assert checkpoint == 13_463_426_048
    assert abs(checkpoint - 14e9) < 0.6e9 and abs(V3_MAIN + checkpoint - 685e9) < 0.6e9


def _pair(model="llama2-7b", hw="dgx-h100", depths=1, **plan):
    plan = {"micro_batch": 1, "global_batch": 64, "recompute": "none", **plan}
    off = estimate(model, hw, overrides=["model.mtp_layers=0"], **plan)
    on = estimate(model, hw, overrides=[f"model.mtp_layers={depths}"], **plan)
    return off, on


def test_model_flops_add_megatrons_mtp_terms():
    """Megatron-LM num_floating_point_operations: per depth one more layer, eh_proj (2h x h) and one more logit
    GEMM, 3x forward; the norms are element-wise (no model FLOPs in dse)."""
    m = catalog.load_model("llama2-7b")
    h, V, s, B = m.hidden, m.vocab, 4096, 64
    off, on = _pair(depths=2)
    layer = (off["flops"]["model_per_iteration"] - 3 * B * s * 2 * h * V) / m.layers     # one layer's, per iteration
    extra = 2 * (layer + 3 * B * s * (2 * 2 * h * h + 2 * h * V))
    assert on["flops"]["model_per_iteration"] - off["flops"]["model_per_iteration"] == pytest.approx(extra, rel=1e-9)
    assert on["throughput"]["mfu"] > 0


@pytest.mark.parametrize("pp", [1, 4])
def test_depths_sit_on_the_last_stage(pp):
    off, on = _pair(pp=pp, tp=2)
    t0, t1 = off["time"], on["time"]
    assert t1["iteration"] > t0["iteration"] and t1["mtp"] > 0
    parts = ("compute", "recompute", "communication", "bubble", "optimizer", "overhead", "io_exposed")
    assert sum(t1[k] for k in parts) == pytest.approx(t1["iteration"], rel=1e-9)     # "mtp" is an "of which"
    comm = ("tp_communication", "cp_communication", "pp_communication", "dp_communication", "embedding_sync")
    assert sum(t1[k] for k in comm) == pytest.approx(t1["communication"], rel=1e-9)
    assert t1["tp_communication"] > t0["tp_communication"]        # the depth's layer and eh_proj collectives (tp 2)
    c = layer_counts(catalog.load_model("llama2-7b"))
    h = catalog.load_model("llama2-7b").hidden
    on_gpu = (c["dense"] - c["dense_rep"]) / 2 + c["dense_rep"] + 2 * h * h / 2 + 3 * h   # tp 2: eh_proj split
    if pp == 1:
        grown = on["parallelism"]["params_per_gpu"] - off["parallelism"]["params_per_gpu"]
        assert grown == pytest.approx(on_gpu, rel=1e-12)
        assert t1["embedding_sync"] == t0["embedding_sync"] == 0
    else:   # Megatron all-reduces the embedding copy's gradient between the first and the last stage
        assert t1["embedding_sync"] > 0 == t0["embedding_sync"]
        assert on["traffic"]["pp"] > off["traffic"]["pp"]


def test_mtp_memory_is_the_last_stages():
    """pp 4, one micro-batch in flight on the last stage: its activations grow by a layer's, the depth's own
    tensors, one more head's logits and loss buffers and the embedding's; with 4 in flight the first stage is
    fuller, and its memory does not change."""
    off, on = _pair(pp=4, dp=1, global_batch=4)
    assert on["memory"]["gpu"]["total"] == off["memory"]["gpu"]["total"]
    single_off, single_on = _pair(dp=1, global_batch=4)
    grown = single_on["memory"]["gpu"]["activations"] - single_off["memory"]["gpu"]["activations"]
    m = catalog.load_model("llama2-7b")
    logits = 4 * 4096 * m.vocab                         # the head's fp32 softmax (head_kernels' loss row)
    assert grown > logits


def test_zero_depths_change_nothing():
    base = estimate("deepseek-v3", "h800-cluster", pp=16, dp=8, ep=8, micro_batch=1, global_batch=256,
                    overrides=["model.mtp_layers=0"])
    assert "mtp" not in base["time"] and "mtp_params" not in base["model"]
    plain = estimate("llama2-7b", "dgx-h100")
    assert _flat(plain) == _flat(estimate("llama2-7b", "dgx-h100", overrides=["model.mtp_layers=0"]))


def test_megatron_arguments_both_ways(capsys):
    argv = ["estimate", "--model", "deepseek-v3", "--hw", "h800-cluster", "--pp", "16", "--dp", "128", "--ep",
            "64", "--zero", "1", "--emit", "megatron"]
    assert main(argv) == 0
    assert "--mtp-num-layers 1" in capsys.readouterr().out
    args = ("--pipeline-model-parallel-size 16 --expert-model-parallel-size 64 --micro-batch-size 1 "
            "--global-batch-size 256 --seq-length 4096 --bf16 --use-distributed-optimizer --world-size 2048")
    import json

    runs = []
    for extra in (" --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1", ""):
        assert main(["estimate", "--model", "deepseek-v3", "--hw", "h800-cluster", "--from", "megatron",
                     args + extra, "--json"]) == 0
        runs.append(json.loads(capsys.readouterr().out))
    with_mtp, without = runs
    assert with_mtp["model"]["mtp_layers"] == 1 and "mtp_layers" not in without["model"]   # Megatron's default
    assert with_mtp["time"]["iteration"] > without["time"]["iteration"]


def test_encoder_decoder_refuses_mtp(capsys):
    assert main(["estimate", "--model", "t5-base", "--hw", "dgx-h100", "--set", "model.mtp_layers=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mtp_layers needs a decoder model" in err[0]


@pytest.mark.parametrize("stack", ["pytorch", "compiled"])
def test_eager_stacks_refuse_mtp_depths_transformers_never_builds(capsys, stack):
    """GLM-4.5's config asks for one MTP depth (num_nextn_predict_layers), which Megatron-Core builds and
    Transformers' Glm4Moe does not: on an eager stack the depth would be priced for a module the run never has."""
    cfg = "tests/fixtures/hf/GLM-4.5-Air/config.json"
    args = ["estimate", "--model", cfg, "--hw", "dgx-h100", "--stack", stack, "--dp", "1", "-b", "1", "-s", "1024"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--stack {stack} is not modelled with multi-token prediction" in err[0]
    assert "Transformers builds no MTP module" in err[0] and "model.mtp_layers=0" in err[0]
    assert main([*args, "--set", "model.mtp_layers=0"]) == 0
    capsys.readouterr()
    assert main(["estimate", "--model", cfg, "--hw", "h100-cluster", "--tp", "8", "--dp", "8", "--ep", "8", "-s",
                 "1024"]) == 0   # Megatron-Core builds the depth: priced
