"""Mixture-of-Experts models: parameter counts, the MoE layer's kernels, and what the estimate makes of them.

The strongest check: an MoE layer with one expert, top-1 and no shared expert is the dense MLP, so every number of
the estimate (time, memory, FLOPs, traffic) equals the dense model's, for every parallelism and recompute mode.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dse import catalog
from dse.cli import main
from dse.errors import InputError
from dse.estimate import estimate
from dse.estimate.parameters import model_parameters
from dse.formulas import kernels as K, transformer as T
from dse.specs.hf import from_hf_config

MOE_MODELS = ("mixtral-8x7b", "qwen3-30b-a3b")
NEW_MODELS = (*MOE_MODELS, "mistral-7b", "qwen2-7b", "gemma2-9b")
FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def leaves(obj, path=""):
    """(path, number) of every numeric leaf of a result."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, f"{path}.{k}")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, obj


# ----------------------------------------------------------------------------------------- parameters


def test_moe_layer_count_follows_the_hf_conventions():
    assert T.moe_layer_count(32) == 32                                  # Mixtral: every layer
    assert T.moe_layer_count(24, step=2) == 12                          # decoder_sparse_step 2: layers 1, 3, ...
    assert T.moe_layer_count(6, step=2, dense_layers=[3]) == 2          # ... but not an mlp_only layer
    assert T.moe_layer_count(61, first_dense=3) == 58                   # DeepSeek-V3: first_k_dense_replace 3


def test_active_parameters_use_k_of_e_routed_experts():
    h, E, k, F = 4096, 8, 2, 14336
    total = T.moe_mlp_parameters(h, E, F)
    active = T.moe_mlp_parameters(h, E, F, routed=k)
    assert total - active == (E - k) * 3 * h * F
    assert T.moe_mlp_parameters(h, 1, F) == T.mlp_parameters(h, F, "swiglu", bias=False)   # one expert: no router


def test_mixed_dense_and_moe_layers_match_transformers():
    # Qwen2MoeForCausalLM of this config on the meta device (transformers 5.24.0): 4,060,928 parameters. Layers 1
    # and 5 are MoE (decoder_sparse_step 2; layer 3 is in mlp_only_layers), 0, 2, 3, 4 a dense MLP of 512.
    cfg = dict(model_type="qwen2_moe", hidden_size=256, intermediate_size=512, num_hidden_layers=6,
               num_attention_heads=4, num_key_value_heads=2, moe_intermediate_size=64,
               shared_expert_intermediate_size=128, num_experts=6, num_experts_per_tok=2, decoder_sparse_step=2,
               mlp_only_layers=[3], vocab_size=1000, tie_word_embeddings=False)
    spec = catalog.load_model(_write(cfg))
    assert spec.moe_layers == 2
    total, active = model_parameters(spec)
    assert total == 4_060_928
    assert total - active == 2 * (6 - 2) * 3 * 256 * 64


def _write(cfg: dict) -> str:
    import tempfile

    d = Path(tempfile.mkdtemp())
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d / "config.json")


def test_reader_maps_the_moe_fields():
    q = from_hf_config(json.loads((FIXTURES / "Qwen1.5-MoE-A2.7B" / "config.json").read_text()), "q")
    assert (q["experts"], q["experts_per_token"], q["expert_ffn"], q["shared_experts"], q["shared_expert_ffn"],
            q["shared_expert_gate"], q["qkv_bias"], q["ffn_hidden"]) == (60, 4, 1408, 1, 5632, True, True, 5632)
    m = from_hf_config(json.loads((FIXTURES / "Mixtral-8x7B-v0.1" / "config.json").read_text()), "m")
    assert (m["experts"], m["experts_per_token"], m["expert_ffn"]) == (8, 2, 14336)
    q3 = from_hf_config(json.loads((FIXTURES / "Qwen3-30B-A3B" / "config.json").read_text()), "q3")
    assert (q3["experts"], q3["qk_norm"], q3["head_dim"], "shared_experts" in q3) == (128, True, 128, False)
    g = from_hf_config(json.loads((FIXTURES / "gemma-2-9b" / "config.json").read_text()), "g")
    assert (g["ffn_type"], g["layer_norms"], g["tied_embeddings"], g["head_dim"]) == ("geglu", 4, True, 256)


def test_reader_refuses_what_it_does_not_model():
    base = dict(model_type="qwen3", hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                intermediate_size=128, vocab_size=100)
    with pytest.raises(InputError, match="attention_bias"):
        from_hf_config({**base, "attention_bias": True}, "c.json")
    with pytest.raises(InputError, match="hidden_activation"):
        from_hf_config({**base, "model_type": "gemma2", "hidden_activation": "relu"}, "c.json")


# ----------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("sets, message", [
    (["model.experts=8", "model.experts_per_token=9"], "experts_per_token (9) exceeds experts (8)"),
    (["model.experts=8"], "experts_per_token (top-k) is required"),
    (["model.experts_per_token=2"], "experts_per_token is an MoE field"),
    (["model.shared_experts=1"], "shared_experts is an MoE field"),
    (["model.experts=8", "model.experts_per_token=2", "model.dense_layers=[40]"], "dense_layers [40] are not layers"),
    (["model.expert_groups=2"], "expert_groups is an MoE field"),
    (["model.experts=8", "model.experts_per_token=2", "model.expert_groups=3"], "expert_groups (3) does not divide "
                                                                                 "experts (8)"),
    (["model.experts=8", "model.experts_per_token=2", "model.expert_groups=4", "model.expert_groups_per_token=5"],
     "expert_groups_per_token (5) exceeds expert_groups (4)"),
    (["model.experts=8", "model.experts_per_token=2", "model.expert_groups_per_token=1"],
     "expert_groups_per_token (1) needs expert_groups"),
    (["model.experts=8", "model.experts_per_token=4", "model.expert_groups=4", "model.expert_groups_per_token=1"],
     "experts_per_token (4) exceeds the experts of expert_groups_per_token (1) groups of 2"),
])
def test_bad_moe_fields_are_one_line_errors(capsys, sets, message):
    argv = ["estimate", "--model", "llama2-7b", "--hw", "dgx-h100"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_expert_groups_change_routing_not_parameters(capsys):
    """Group-limited routing (DeepSeek-V3 n_group / topk_group) leaves the parameter count as it is."""
    base = estimate("qwen3-30b-a3b", "dgx-h100", recompute="full")
    grouped = estimate("qwen3-30b-a3b", "dgx-h100", recompute="full",
                       overrides=["model.expert_groups=8", "model.expert_groups_per_token=4"])
    assert grouped["model"]["params"] == base["model"]["params"] == 30_532_122_624
    assert grouped["model"]["active_params"] == base["model"]["active_params"]
    argv = ["estimate", "--model", "qwen3-30b-a3b", "--hw", "dgx-h100", "--emit", "megatron"]
    assert main([*argv, "--set", "model.expert_groups=8"]) == 0
    assert "--moe-router-num-groups 8 --moe-router-group-topk 8" in capsys.readouterr().out   # default: no limit
    assert main([*argv, "--set", "model.expert_groups=8", "--set", "model.expert_groups_per_token=4"]) == 0
    assert "--moe-router-num-groups 8 --moe-router-group-topk 4" in capsys.readouterr().out
    assert main(argv) == 0
    assert "--moe-router-num-groups" not in capsys.readouterr().out


def test_chiplet_packages_refuse_moe_models(capsys):
    with pytest.raises(InputError, match="not modelled on chiplet packages"):
        estimate("mixtral-8x7b", "chiplet-train-8x8", micro_batch=1)


# ----------------------------------------------------------------------------------------- kernel table


def _dense_and_one_expert(**plan):
    dense = estimate("llama2-7b", "dgx-h100", overrides=["model.layers=4"], **plan)
    moe = estimate("llama2-7b", "dgx-h100", overrides=["model.layers=4", "model.experts=1",
                                                       "model.experts_per_token=1"], **plan)
    return dense, moe


@pytest.mark.parametrize("plan", [
    dict(tp=1, recompute="none"),
    dict(tp=2, sequence_parallel=True, recompute="selective"),
    dict(tp=4, recompute="full", attention="math"),
    dict(tp=2, pp=2, zero=1, micro_batch=2, stack="pytorch"),
])
def test_one_expert_top1_prices_as_the_dense_layer(plan):
    dense, moe = _dense_and_one_expert(**plan)
    d, m = dict(leaves(dense)), dict(leaves(moe))
    d.pop(".model.params"), m.pop(".model.params")
    assert m.pop(".time.ep_communication") == 0 and m.pop(".traffic.ep") == 0    # an MoE model names its EP share
    m = {k: v for k, v in m.items() if not k.startswith(".model.")}
    assert set(m) <= set(d)
    if plan.get("stack") == "pytorch":
        # Transformers' dense MLP runs gate_proj and up_proj as two GEMMs, its experts one gate_up_proj: one launch
        # fewer per pass (dse.formulas.kernels.separate_linears): less host load, the same time (GPU-bound here)
        assert m.pop(".time.host_load") < d[".time.host_load"]
    for k, v in m.items():
        if plan.get("stack") == "pytorch" and k.startswith((".time.", ".throughput.", ".cost.", ".energy.")):
            # and that GEMM call's memsets (stacks/pytorch.yaml gemm_memsets: 0.57 x kernel_overhead per call)
            assert v == pytest.approx(d[k], rel=1e-3, abs=1e-12), k
            continue
        assert v == pytest.approx(d[k], rel=1e-12, abs=1e-12), k
    assert moe["model"]["params"] == dense["model"]["params"] and moe["model"]["active_params"] == dense["model"][
        "params"]


def test_moe_layer_rows_and_reductions():
    s, b, h, E, k, F = 2048, 1, 4096, 8, 2, 14336
    moe = dict(experts=E, experts_per_token=k, expert_ffn=F)
    t = K.layer_kernels(s, b, h, 32, 8, 128, F, ffn_type="swiglu", norm="rmsnorm", position="rotary",
                        dropout=False, moe=moe)
    dense = K.layer_kernels(s, b, h, 32, 8, 128, F, ffn_type="swiglu", norm="rmsnorm", position="rotary",
                            dropout=False)
    tok = s * b
    # model FLOPs: the active parameters only (k experts and the router), 2 FLOP per parameter per token
    extra = K.forward_flops(t) - K.forward_flops(dense)
    assert extra == 2 * tok * ((k - 1) * 3 * h * F + E * h)
    # grouped GEMMs: E experts of T k / E tokens each
    assert (t["expert_fc1"]["m"], t["expert_fc1"]["batch"]) == (tok * k / E, E)
    # saved: k copies of the expert inputs and outputs, the k-fold activation, the routing's probabilities
    e = 2
    saved_mlp = sum(t[n]["saved"] for n in ("router", "routing", "expert_fc1", "expert_activation", "unpermute"))
    assert saved_mlp == e * tok * h + tok * (4 * E + 8 * k) + e * tok * k * h + 3 * e * tok * k * F + e * tok * k * h
    # permutation moves the token copies to and from expert order
    assert t["permute"]["bytes"] == t["unpermute"]["bytes"] == e * tok * h * (1 + k)


def test_imbalance_slows_the_experts_not_the_model_flops():
    # at the reference host's launch price the tp-8 layer is GPU-bound (dgx-h100's own host, 4.17x, binds it)
    ref = ["hardware.node.host.dispatch_scale=1"]
    base = estimate("mixtral-8x7b", "dgx-h100", tp=8, recompute="full", overrides=ref)
    skew = estimate("mixtral-8x7b", "dgx-h100", tp=8, recompute="full", overrides=[*ref, "model.expert_imbalance=1.5"])
    assert skew["time"]["iteration"] > base["time"]["iteration"]
    assert skew["flops"]["model_per_iteration"] == base["flops"]["model_per_iteration"]
    assert skew["throughput"]["mfu"] < base["throughput"]["mfu"]


def test_expert_states_are_on_every_gpu_and_split_over_tp():
    one = estimate("mixtral-8x7b", "dgx-h100", tp=1, zero=3, dp=8)
    eight = estimate("mixtral-8x7b", "dgx-h100", tp=8, zero=0, dp=1)
    assert one["parallelism"]["params_per_gpu"] == one["model"]["params"]            # every expert, no EP
    p8 = eight["parallelism"]["params_per_gpu"]
    router = 32 * 8 * 4096
    norms = 32 * 2 * 4096 + 4096
    assert p8 == pytest.approx((one["model"]["params"] - router - norms) / 8 + router + norms)


def test_mfu_counts_active_parameters():
    r = estimate("mixtral-8x7b", "dgx-h100", tp=8, recompute="full", seq_len=4096)
    m = catalog.load_model("mixtral-8x7b")
    tokens = r["plan"]["global_batch"] * 4096
    norms = (2 * m.layers + 1) * m.hidden            # weights without a GEMM
    non_embedding = r["model"]["active_params"] - 2 * m.vocab * m.hidden - norms
    causal_attention = 3 * m.layers * 2 * 4096 * m.heads * m.head_dim    # the unmasked half of 4 s a d per token
    per_token = 6 * non_embedding + 6 * m.vocab * m.hidden + causal_attention
    assert r["flops"]["model_per_iteration"] == pytest.approx(tokens * per_token, rel=1e-9)
    dense_equivalent = 6 * r["model"]["params"] * tokens
    assert r["flops"]["model_per_iteration"] < 0.5 * dense_equivalent


@pytest.mark.parametrize("name", NEW_MODELS)
def test_new_models_estimate_without_nan(name):
    r = estimate(name, "dgx-h100", tp=4, dp=2, recompute="full", seq_len=4096)
    for path, v in leaves(r):
        assert math.isfinite(v), path
    assert r["time"]["iteration"] > 0 and 0 < r["throughput"]["mfu"] < 1


def test_gemma2_and_qwen3_specifics_are_kernels():
    g = K.layer_kernels(4096, 1, 3584, 16, 8, 256, 14336, ffn_type="geglu", norm="rmsnorm", layer_norms=4)
    assert {"post_attn_norm", "post_mlp_norm"} <= set(g) and g["fc1"]["n"] == 2 * 14336
    q = K.layer_kernels(4096, 1, 4096, 32, 8, 128, 12288, ffn_type="swiglu", norm="rmsnorm", qk_norm=True)
    assert q["qk_norm"]["bytes"] == 2 * 2 * 4096 * (32 + 8) * 128


def test_mixed_model_prices_the_mean_layer():
    cfg = dict(model_type="qwen2_moe", hidden_size=1024, intermediate_size=2816, num_hidden_layers=6,
               num_attention_heads=16, num_key_value_heads=16, moe_intermediate_size=704,
               shared_expert_intermediate_size=2816, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=2,
               mlp_only_layers=[3], vocab_size=32000)
    runs = {}
    for label, change in (("mixed", {}), ("dense", {"num_experts": 0}),
                          ("moe", {"decoder_sparse_step": 1, "mlp_only_layers": []})):
        runs[label] = estimate(_write({**cfg, **change}), "dgx-h100", tp=2, seq_len=2048)
    share = 2 / 6     # layers 1 and 5 are MoE

    def mean(key):
        return share * runs["moe"][key[0]][key[1]] + (1 - share) * runs["dense"][key[0]][key[1]]

    assert runs["mixed"]["flops"]["model_per_iteration"] == pytest.approx(mean(("flops", "model_per_iteration")))
    assert runs["mixed"]["time"]["layer_forward"] == pytest.approx(mean(("time", "layer_forward")))
    assert runs["mixed"]["model"]["moe_layers"] == 2


def test_megatron_emit_carries_the_experts(capsys):
    code = main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--tp", "8", "--emit", "megatron"])
    out = capsys.readouterr().out
    assert code == 0
    assert "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 14336" in out
    code = main(["estimate", "--model", "gemma2-9b", "--hw", "dgx-h100", "--tp", "8", "--emit", "megatron"])
    assert code == 0 and "--swiglu" in capsys.readouterr().out      # GeGLU: the nearest, with a warning


def test_activation_offload_of_moe_runs(capsys):
    """Refused before issue 15's composition: now priced (tests/test_activation_offload_moe.py)."""
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--tp", "8",
                 "--offload-activations", "host"]) == 0
    assert "Activation offload to pinned host memory" in capsys.readouterr().out


def test_moe_keys_on_a_type_that_does_not_read_them_are_still_errors():
    cfg = json.loads((FIXTURES / "Qwen3-8B" / "config.json").read_text())
    with pytest.raises(InputError, match="num_experts: 64 is not modelled: mixture-of-experts"):
        from_hf_config({**cfg, "num_experts": 64}, "c.json")      # qwen3 (dense) with experts: refused
    mixtral = json.loads((FIXTURES / "Mixtral-8x7B-v0.1" / "config.json").read_text())
    with pytest.raises(InputError, match="kv_lora_rank"):
        from_hf_config({**mixtral, "kv_lora_rank": 512}, "c.json")


def test_gemma2_windows_and_soft_capping_are_read_and_priced_not_warnings():
    path = str(FIXTURES / "gemma-2-9b" / "config.json")
    assert estimate(path, "dgx-h100", tp=8, seq_len=8192)["warnings"] == []
    m = catalog.load_model(path)
    assert (m.attn_softcap, m.logit_softcap, m.embedding_scale) == (50.0, 30.0, True)
    assert m.attention_layers == {"full": 21, "sliding": 21, "chunked": 0} and m.layer_types[0] == "sliding_attention"
