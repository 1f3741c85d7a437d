"""LoRA and QLoRA of MoE models (issue 16; was a one-line error): adapters per expert, frozen experts, QLoRA's
quantized experts, expert parallelism, and the combinations still refused.

The trainable parameter count is checked exactly against Hugging Face PEFT 0.21 on Transformers 5.24 building each
model on the meta device (``LoraConfig(target_modules="all-linear")`` and the attention / MLP target lists), for
tiny Mixtral, Qwen3-MoE and Qwen2-MoE (shared expert and its gate) configurations written from the catalog's
config.json fixtures. On Qwen2-MoE PEFT's "all-linear" adapts only the ``nn.Linear`` modules (attention, the shared
expert and its gate), not the routed experts or the router (those need ``target_parameters`` there): that part is
checked without them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import dse
import dse.catalog
from dse.cli import main
from dse.formulas import finetune as FT
from dse.formulas.kernels import backward_flops

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 1000}
CASES = {   # fixture -> its tiny MoE sizes
    "Mixtral-8x7B-v0.1": {"intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2},
    "Qwen3-30B-A3B": {"intermediate_size": 128, "moe_intermediate_size": 48, "num_experts": 8,
                      "num_experts_per_tok": 2},
    "Qwen1.5-MoE-A2.7B": {"intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 6,
                          "num_experts_per_tok": 2, "shared_expert_intermediate_size": 80},
}
# dse --lora-targets -> PEFT target_modules (Transformers-4 names of the experts' projections, which PEFT maps)
PEFT_TARGETS = {"all": "all-linear", "attention": ["q_proj", "k_proj", "v_proj", "o_proj"], "qv": ["q_proj", "v_proj"]}
MLP = {"Mixtral-8x7B-v0.1": ["w1", "w2", "w3"]}


def _tiny_config(name: str, tmp_path: Path) -> Path:
    cfg = {**json.loads((FIXTURES / name / "config.json").read_text()), **TINY, **CASES[name]}
    cfg.pop("layer_types", None)
    cfg.pop("mlp_only_layers", None)
    path = tmp_path / name / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(cfg))
    return path


def _peft_trainable(config: Path, targets, rank: int) -> int:
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch = pytest.importorskip("torch")
    cfg = transformers.AutoConfig.from_pretrained(config.parent)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        peft_model = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=targets))
    return sum(p.numel() for p in peft_model.parameters() if p.requires_grad)


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("targets", ["all", "attention", "qv", "mlp"])
def test_trainable_parameters_are_what_peft_builds(name, targets, tmp_path):
    config = _tiny_config(name, tmp_path)
    peft_targets = PEFT_TARGETS.get(targets) or MLP.get(name, ["gate_proj", "up_proj", "down_proj"])
    want = _peft_trainable(config, peft_targets, 8)
    got = dse.estimate(str(config), "dgx-h100", tp=1, dp=1, seq_len=128, finetune="lora", lora_rank=8,
                       lora_targets=targets)["model"]["params_trainable"]
    if name.startswith("Qwen1.5") and targets in ("all", "mlp"):
        # PEFT 0.21 resolves "all-linear" (and gate_proj, up_proj, down_proj) on Qwen2-MoE to its nn.Linear modules
        # only, the shared expert's and its gate: the routed experts and the router need target_parameters there
        m = dse.catalog.load_model(str(config))
        routed = FT.moe_adapted_linears(m.hidden, m.experts, m.expert_ffn, m.ffn_type, targets=targets)
        got -= m.layers * FT.adapter_parameters({k: v for k, v in routed.items() if k in ("router", *FT.EXPERT_ROWS)},
                                                8, experts=m.experts)
    assert got == want


def test_mixtral_adapters_per_expert_closed_form():
    """r 16, all linear layers: attention r (h + a d + 2 (h + kv d) + a d + h), the router r (h + E), per expert the
    fused gate-up at rank 2 r, 2 r (h + 2 F), and the down projection r (F + h)."""
    r, h, F, E, L = 16, 4096, 14336, 8, 32
    attn = r * (2 * (h + 4096) + 2 * (h + 1024))
    moe = r * (h + E) + E * (2 * r * (h + 2 * F) + r * (F + h))
    est = dse.estimate("mixtral-8x7b", "dgx-h100", tp=8, dp=1, finetune="lora", lora_rank=r)
    assert est["model"]["params_trainable"] == L * (attn + moe) == 359_665_664


def test_one_expert_is_the_dense_model_under_lora_and_qlora():
    # PEFT's layout (the pytorch stack) splits dense and expert adapters alike; on the megatron stack the dense
    # adapters split as Megatron-Bridge's ParallelLinearAdapter and the experts' keep PEFT's (not modelled there)
    for ft, stack in (("lora", "pytorch"), ("qlora", "pytorch"), ("lora", "megatron")):
        tp = 1 if stack == "megatron" else 2
        kw = dict(tp=tp, dp=2, micro_batch=2, seq_len=2048, finetune=ft, lora_rank=8, stack=stack)
        dense = dse.estimate("llama3-8b", "dgx-h100", overrides=["model.layers=4"], **kw)
        one = dse.estimate("llama3-8b", "dgx-h100", overrides=["model.layers=4", "model.experts=1",
                                                               "model.experts_per_token=1"], **kw)
        assert one["model"]["params_trainable"] == dense["model"]["params_trainable"]
        for tier in ("weights", "gradients", "optimizer", "activations", "buffers", "total"):
            assert one["memory"]["gpu"][tier] == pytest.approx(dense["memory"]["gpu"][tier], rel=1e-12), tier
        assert one["flops"]["model_per_iteration"] == pytest.approx(dense["flops"]["model_per_iteration"], rel=1e-12)


def _moe_table(finetune: dict) -> dict:
    from dse.formulas.kernels import layer_kernels

    return layer_kernels(1024, 1, 1024, 8, 8, 128, 2048, ffn_type="swiglu", norm="rmsnorm", position="rotary",
                         dropout=False, finetune=finetune,
                         moe={"experts": 8, "experts_per_token": 2, "expert_ffn": 2048})


def test_frozen_experts_run_no_weight_gradient_and_adapters_run_on_the_routed_tokens():
    adapters = FT.moe_adapted_linears(1024, 8, 2048)
    t = _moe_table({"adapters": adapters, "rank": 8})
    for row in ("router", "expert_fc1", "expert_fc2"):
        assert t[row].get("frozen")
    a, b = t["lora_expert_fc1_0_a"], t["lora_expert_fc1_0_b"]
    assert (a["m"], a["batch"], a["k"], a["n"]) == (t["expert_fc1"]["m"], 8, 1024, 16)     # rank 2 r on gate-up
    assert (b["k"], b["n"]) == (16, 4096)
    routed = 1024 * 2                                                                       # T k copies
    assert a["flops"] == 2 * routed * 1024 * 16 and b["saved"] == 2 * routed * 16
    full = _moe_table(None)
    assert backward_flops({k: t[k] for k in ("expert_fc1", "expert_fc2")}) == pytest.approx(
        backward_flops({k: full[k] for k in ("expert_fc1", "expert_fc2")}) / 2)               # input gradient only


def test_unadapted_experts_keep_no_routed_copies():
    attn_only = _moe_table({"adapters": FT.adapted_linears(1024, 8, 8, 128, 2048, "swiglu", "separate", "attention"),
                            "rank": 8})
    full = _moe_table(None)
    assert attn_only["expert_fc1"]["saved"] == 0 and attn_only["router"]["saved"] == 0
    assert attn_only["expert_activation"]["saved"] == full["expert_activation"]["saved"] * 2 / 3   # no fc2 input
    assert attn_only["unpermute"]["saved"] == full["unpermute"]["saved"]     # the probabilities' gradient needs it


def test_qlora_stores_the_experts_in_nf4_and_dequantizes_them_every_pass():
    lora = dse.estimate("mixtral-8x7b", "dgx-h100", tp=8, dp=1, finetune="lora")
    qlora = dse.estimate("mixtral-8x7b", "dgx-h100", tp=8, dp=1, finetune="qlora")
    m = dse.catalog.load_model("mixtral-8x7b")
    linear = m.layers * (FT.linear_parameters(m.hidden, m.heads, m.kv_heads, m.head_dim, 0, "swiglu", 8)
                         + FT.moe_linear_parameters(m.hidden, 8, m.expert_ffn, "swiglu", tp=8))
    saved = linear * (2 - FT.quantized_bytes_per_param("nf4"))
    assert lora["memory"]["gpu"]["weights"] - qlora["memory"]["gpu"]["weights"] == pytest.approx(saved, rel=1e-9)
    assert qlora["time"]["iteration"] > lora["time"]["iteration"]


def test_expert_parallelism_shards_the_experts_adapters_over_the_dp_ep_ranks():
    """ep 8 of dp 8: a GPU holds 1/8 of the experts and of their adapters; the adapters' gradients are the GPU's
    (dense ones all, experts' 1/8), their optimizer states (ZeRO-1) the dense ones over 8 ranks and the experts' over
    the 8/8 = 1 rank holding them: the same bytes as at ep 1."""
    m = dse.catalog.load_model("mixtral-8x7b")
    kw = dict(tp=1, dp=8, micro_batch=1, seq_len=4096, recompute="full", finetune="lora", lora_rank=16)
    one = dse.estimate("mixtral-8x7b", "dgx-h100", ep=1, **kw)
    eight = dse.estimate("mixtral-8x7b", "dgx-h100", ep=8, **kw)
    assert eight["model"]["params_trainable"] == one["model"]["params_trainable"] == 359_665_664
    adapters = FT.moe_adapted_linears(m.hidden, 8, m.expert_ffn)
    experts = m.layers * FT.adapter_parameters({k: adapters[k] for k in FT.EXPERT_ROWS}, 16, experts=8)
    dense = 359_665_664 - experts
    g = 4                                                    # fp32 gradients (bf16 recipe)
    assert one["memory"]["gpu"]["gradients"] == pytest.approx((dense + experts) * g, rel=1e-12)
    assert eight["memory"]["gpu"]["gradients"] == pytest.approx((dense + experts / 8) * g, rel=1e-12)
    assert eight["memory"]["gpu"]["optimizer"] == pytest.approx(dense * 12 / 8 + experts / 8 * 12, rel=1e-12)
    assert eight["memory"]["gpu"]["optimizer"] == pytest.approx(one["memory"]["gpu"]["optimizer"], rel=1e-12)
    assert eight["memory"]["gpu"]["weights"] < one["memory"]["gpu"]["weights"] / 4   # 1/8 of the frozen experts


@pytest.mark.parametrize("args, needle", [
    (["--finetune", "qlora", "--ep", "2", "--dp", "2", "--zero", "3"], "no framework shards bitsandbytes' 4-bit"),
    (["--finetune", "qlora", "--tp", "2", "--etp", "1", "--dp", "4", "--ep", "2", "--sequence-parallel"],
     "no framework shards bitsandbytes' 4-bit"),
    (["--finetune", "lora", "--lora-dropout", "0.1"], "ParamWrapper"),
])
def test_still_refused_with_one_line(capsys, args, needle):
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def _expert_shards(tp, dp, etp, ep, E):
    """Brute force over the ranks (Megatron's expert order etp, ep, edp): rank -> (dense share, expert share) of the
    frozen weights it keeps under ZeRO-3, as fractions of the dense weights and of one layer's E experts. A dense
    weight is split over tp and its tp slice sharded over the dp ranks; expert x lives on the ranks whose ep
    coordinate holds it, its etp slice sharded over the edp ranks holding that slice (Megatron-FSDP's expert
    parameter groups over the expert data-parallel group; DeepSpeed AutoEP's ZeRO-3 placement)."""
    world = tp * dp
    edp = world // (etp * ep)
    out = {}
    for rank in range(world):
        ep_rank = (rank // etp) % ep
        mine = [x for x in range(E) if x // (E // ep) == ep_rank]
        out[rank] = (1 / (tp * dp), sum(1 / (etp * edp) for _ in mine) / E)
    return out


@pytest.mark.parametrize("tp, dp, etp, ep", [(1, 8, 1, 8), (1, 8, 1, 4), (1, 8, 1, 2), (2, 4, 2, 4), (2, 4, 1, 8),
                                             (2, 4, 1, 2)])
def test_zero3_shards_the_frozen_experts_over_the_expert_data_parallel_ranks(tp, dp, etp, ep):
    """ZeRO-3 LoRA with expert parallelism (was a one-line error): the frozen dense weights shard over dp, the frozen
    experts over the EDP = tp dp / (etp ep) ranks holding them, the adapters likewise (dense over dp, the experts'
    over EDP); the weights a GPU keeps equal the brute-force shares, and the trainable count stays PEFT's."""
    from dse.catalog import load_hardware
    from dse.estimate import make_plan
    from dse.estimate.parameters import parameters

    m, hw = dse.catalog.load_model("mixtral-8x7b"), "h100-cluster"
    kw = dict(tp=tp, dp=dp, ep=ep, zero=3, micro_batch=1, seq_len=4096, recompute="full", finetune="lora",
              lora_rank=16, sequence_parallel=tp > 1, **({} if etp == tp else {"etp": etp}))
    r = dse.estimate("mixtral-8x7b", hw, **kw)
    assert r["model"]["params_trainable"] == 359_665_664                       # PEFT's count (r 16, all-linear)
    prm = parameters(m, make_plan(m, load_hardware(hw), kw))
    experts_frozen = m.layers * 3 * m.hidden * m.expert_ffn * m.experts      # every layer's E experts
    pfe = prm["p_frozen_expert_gpu"]
    assert pfe == pytest.approx(experts_frozen / (etp * ep), rel=1e-12)       # before ZeRO: E/ep experts / etp
    dense_frozen_gpu = prm["p_gpu"] - prm["p_train_gpu"] - pfe                # dense frozen weights on the GPU
    shares = _expert_shards(tp, dp, etp, ep, m.experts)
    adapters_exp, adapters = prm["p_expert_gpu"], prm["p_train_gpu"]
    edp = tp * dp // (etp * ep)
    for dense_share, expert_share in shares.values():
        kept = 2 * (dense_frozen_gpu * tp * dense_share + experts_frozen * expert_share)   # bf16
        kept += 2 * ((adapters - adapters_exp) / dp + adapters_exp / edp)                # the adapters' shards
        assert r["memory"]["gpu"]["weights"] == pytest.approx(kept, rel=1e-12)


def test_zero3_gathers_the_frozen_experts_over_the_expert_data_parallel_group():
    """ep = dp = 8: every GPU holds its one expert whole (EDP 1), so ZeRO-3 gathers and reduce-scatters only the
    dense share over dp: traffic.dp = (7/8) m (G + 2 W) of the dense adapters' gradients G and gathered weights W
    (the adapters at the gather dtype, the frozen dense weights as stored)."""
    from dse.catalog import load_hardware
    from dse.estimate import make_plan
    from dse.estimate.parameters import parameters

    m, hw = dse.catalog.load_model("mixtral-8x7b"), "dgx-h100"
    kw = dict(tp=1, dp=8, ep=8, zero=3, micro_batch=1, seq_len=4096, recompute="full", finetune="lora", lora_rank=16)
    r = dse.estimate("mixtral-8x7b", hw, **kw)
    prm = parameters(m, make_plan(m, load_hardware(hw), kw))
    dense_adapters = prm["p_train_gpu"] - prm["p_expert_gpu"]
    frozen_dense = prm["p_gpu"] - prm["p_train_gpu"] - prm["p_frozen_expert_gpu"]
    grads, gathered = 4 * dense_adapters, 2 * dense_adapters + 2 * frozen_dense      # fp32 reduce, bf16 gather
    micro = r["parallelism"]["micro_batches"]
    assert r["traffic"]["dp"] == pytest.approx(7 / 8 * micro * (grads + 2 * gathered), rel=1e-12)
    one = dse.estimate("mixtral-8x7b", hw, **{**kw, "ep": 1})                   # the experts gathered over dp too
    assert one["traffic"]["dp"] > 10 * r["traffic"]["dp"]


def test_folded_experts_split_their_adapters_over_etp():
    """tp 2 folded to etp 1 (was a one-line error): a GPU holds E/ep whole experts and their whole adapters
    (Megatron-Bridge's expert adapters take the expert-TP group), the attention's adapters still over tp; the
    adapters' GEMMs are as wide as the experts'; the trainable count is PEFT's."""
    m = dse.catalog.load_model("mixtral-8x7b")
    kw = dict(tp=2, dp=8, ep=8, sequence_parallel=True, micro_batch=1, seq_len=4096, finetune="lora", lora_rank=16)
    at_tp = dse.estimate("mixtral-8x7b", "h100-cluster", **kw)
    folded = dse.estimate("mixtral-8x7b", "h100-cluster", **kw, etp=1)
    assert folded["plan"]["etp"] == 1
    assert folded["model"]["params_trainable"] == at_tp["model"]["params_trainable"] == 359_665_664
    rows = FT.moe_adapted_linears(m.hidden, 8, m.expert_ffn)
    per_expert = {t: FT.adapter_parameters({k: rows[k] for k in FT.EXPERT_ROWS}, 16, t) for t in (1, 2)}
    grads = {k: r["memory"]["gpu"]["gradients"] for k, r in (("tp", at_tp), ("folded", folded))}
    # ZeRO-1: fp32 gradients of every adapter on the GPU; one expert's adapters whole (etp 1) or split (etp 2)
    assert grads["folded"] - grads["tp"] == pytest.approx(4 * m.layers * (per_expert[1] - per_expert[2]), rel=1e-12)
    from dse.catalog import load_hardware
    from dse.estimate import make_plan
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.precision import recipe_of

    plan = make_plan(m, load_hardware("h100-cluster"), {**kw, "etp": 1})
    layer = kernel_tables(m, plan, recipe_of(plan))["layer"]
    assert layer["lora_expert_fc1_0_b"]["n"] == 2 * m.expert_ffn                   # not 2 F / tp
    assert layer["lora_expert_fc2_0_a"]["k"] == m.expert_ffn
    assert layer["lora_qkv_0_b"]["n"] == m.heads * m.head_dim / 2                  # q_proj's: over tp


def test_lora_dropout_on_the_attention_of_an_moe_model_runs():
    r = dse.estimate("mixtral-8x7b", "dgx-h100", tp=8, dp=1, finetune="lora", lora_targets="attention",
                     lora_dropout=0.1)
    assert r["model"]["params_trainable"] > 0


def test_an_array_of_ep_and_zero_is_the_loop_of_scalar_calls():
    import numpy as np

    kw = dict(tp=1, dp=8, micro_batch=1, seq_len=4096, recompute="full", finetune="lora", lora_rank=16,
              overrides=["model.layers=4"])
    ep, zero = np.array([1, 2, 4, 8, 8]), np.array([3, 3, 3, 3, 1])
    arr = dse.estimate("mixtral-8x7b", "dgx-h100", ep=ep, zero=zero, **kw)
    for i in range(len(ep)):
        one = dse.estimate("mixtral-8x7b", "dgx-h100", ep=int(ep[i]), zero=int(zero[i]), **kw)
        for path in (("time", "iteration"), ("memory", "gpu", "total"), ("memory", "gpu", "weights"),
                     ("traffic", "dp")):
            a, b = arr, one
            for key in path:
                a, b = a[key], b[key]
            assert a[i] == pytest.approx(b, rel=1e-12), (path, i)
