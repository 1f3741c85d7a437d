"""LoRA and QLoRA of multi-head latent attention models (DeepSeek-V2/V3; issue 15, was a one-line error).

Trainable parameters are checked exactly against Hugging Face PEFT 0.21 building the adapters on Transformers 5.24's
DeepseekV3ForCausalLM / DeepseekV2ForCausalLM on the meta device, for small configurations with and without a query
latent, dense and MoE layers and shared experts. PEFT 0.21's ``"all-linear"`` on these models maps the
Transformers-4 names ``gate_proj``, ``up_proj``, ``down_proj`` to the routed experts' 3-D parameters
(``peft/utils/transformers_weight_conversion.py``) and drops them from ``target_modules``, so the dense layers' MLP
and the shared experts (``nn.Linear`` modules of the same names) get no adapter there; dse's ``all`` adapts every
linear layer (QLoRA §4), and the test adds what PEFT builds on those modules when they are targeted by name
(``inject_adapter_in_model`` on the layers, where no conversion applies).
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
from dse.formulas.kernels import backward_flops, layer_kernels

BASE = dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=64, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
            n_shared_experts=2, first_k_dense_replace=1, kv_lora_rank=32, qk_nope_head_dim=16,
            qk_rope_head_dim=8, v_head_dim=24, vocab_size=1000, n_group=1, topk_group=1)
MODELS = [("deepseek_v3", "DeepseekV3ForCausalLM", 48), ("deepseek_v3", "DeepseekV3ForCausalLM", None),
          ("deepseek_v2", "DeepseekV2ForCausalLM", None)]
ATTENTION = ["q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]


def _config(model_type: str, q_lora, tmp_path: Path) -> Path:
    path = tmp_path / f"{model_type}-{q_lora}" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**BASE, "q_lora_rank": q_lora, "model_type": model_type}))
    return path


def _peft(model_type: str, arch: str, q_lora, rank: int, targets, by_name=None) -> int:
    """Trainable parameters PEFT builds: ``targets`` on the model, then ``by_name`` injected into its layers."""
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch = pytest.importorskip("torch")
    config = transformers.AutoConfig.for_model(model_type, **{**BASE, "q_lora_rank": q_lora})
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, arch)(config)
        n = 0
        if targets:
            built = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=targets))
            n += sum(p.numel() for p in built.parameters() if p.requires_grad)
        if by_name:   # the layers' ModuleList has no config: PEFT's v4 -> v5 name conversion does not apply
            fresh = getattr(transformers, arch)(config)
            layers = peft.inject_adapter_in_model(peft.LoraConfig(r=rank, target_modules=by_name), fresh.model.layers)
            n += sum(p.numel() for name, p in layers.named_parameters() if "lora_" in name)
    return n


def _dse(config: Path, targets: str, rank: int = 8, **kw) -> int:
    return dse.estimate(str(config), "dgx-h100", tp=1, dp=1, seq_len=128, finetune="lora", lora_rank=rank,
                        lora_targets=targets, **kw)["model"]["params_trainable"]


@pytest.mark.torch
@pytest.mark.parametrize("model_type, arch, q_lora", MODELS)
def test_attention_adapters_are_what_peft_builds(model_type, arch, q_lora, tmp_path):
    attention = [m for m in ATTENTION if m != ("q_proj" if q_lora else "q_a_proj") and (q_lora or m != "q_b_proj")]
    want = _peft(model_type, arch, q_lora, 8, attention)
    assert _dse(_config(model_type, q_lora, tmp_path), "attention") == want


@pytest.mark.torch
@pytest.mark.parametrize("model_type, arch, q_lora", MODELS)
def test_all_linear_is_peft_all_linear_plus_the_dense_and_shared_mlps(model_type, arch, q_lora, tmp_path):
    want = _peft(model_type, arch, q_lora, 8, "all-linear", by_name=MLP)
    assert _dse(_config(model_type, q_lora, tmp_path), "all") == want


@pytest.mark.torch
def test_mlp_targets_and_rank_are_what_peft_builds(tmp_path):
    """mlp: the routed experts (PEFT maps gate_proj, up_proj, down_proj to them: gate-up at rank 2 r), the dense and
    shared MLPs (those names injected into the layers), no router and no attention."""
    want = _peft("deepseek_v3", "DeepseekV3ForCausalLM", 48, 4, MLP, by_name=MLP)
    assert _dse(_config("deepseek_v3", 48, tmp_path), "mlp", rank=4) == want


def test_deepseek_v3_adapters_closed_form():
    """r 16 on every linear layer: per layer the five MLA projections r (d_in + d_out); 3 dense MLPs r (3 h + 3 F)
    ... checked against the formulas' shapes, and the totals add up: 58 MoE layers with router, 256 experts (gate-up at
    rank 2 r) and one shared expert."""
    r, h, a = 16, 7168, 128
    attn = r * ((h + 1536) + (1536 + a * 192) + (h + 576) + (512 + a * 256) + (a * 128 + h))
    dense = r * 3 * (h + 18432)
    E, F = 256, 2048
    moe = r * (h + E) + E * (2 * r * (h + 2 * F) + r * (F + h)) + r * 3 * (h + F)
    est = dse.estimate("deepseek-v3", "h800-cluster", pp=16, dp=8, ep=8, finetune="lora", lora_rank=r,
                       overrides=["model.mtp_layers=0"])
    assert est["model"]["params_trainable"] == 61 * attn + 3 * dense + 58 * moe


# ------------------------------------------------------------------------------------------------ kernels


def _mla_table(finetune=None, tp=1, sp=False):
    return layer_kernels(1024, 1, 1024, 8, 8, 48, 2048, tp=tp, sequence_parallel=sp, ffn_type="swiglu",
                         norm="rmsnorm", position="rotary", dropout=False, finetune=finetune,
                         mla={"q_lora": 256, "kv_lora": 128, "nope": 32, "rope": 16, "v_dim": 48})


def _adapters():
    return {**FT.mla_adapted_linears(1024, 8, 256, 128, 32, 16, 48),
            **FT.adapted_linears(1024, 8, 8, 48, 2048, "swiglu", "separate", "mlp")}


MLA_GEMMS = ("q_down", "kv_down", "q_up", "kv_up", "out")


def test_frozen_mla_projections_run_no_weight_gradient():
    full, lora = _mla_table(), _mla_table({"adapters": _adapters(), "rank": 8})
    for row in MLA_GEMMS:
        assert lora[row]["frozen"] and lora[row]["saved"] == full[row]["saved"]   # adapted: A reads the input
    frozen = {k: lora[k] for k in MLA_GEMMS}
    assert backward_flops(frozen) == pytest.approx(backward_flops({k: full[k] for k in MLA_GEMMS}) / 2)
    for row, (d_in, d_out) in (("q_down", (1024, 256)), ("kv_down", (1024, 144)), ("q_up", (256, 384)),
                               ("kv_up", (128, 640)), ("out", (384, 1024))):
        a, b = lora[f"lora_{row}_0_a"], lora[f"lora_{row}_0_b"]
        assert (a["k"], a["n"], b["k"], b["n"]) == (d_in, 8, 8, d_out), row
        assert a["flops"] == 2 * 1024 * d_in * 8 and b["saved"] == 2 * 1024 * 8


def test_unadapted_mla_projections_keep_nothing():
    mlp_only = _mla_table({"adapters": FT.adapted_linears(1024, 8, 8, 48, 2048, "swiglu", "separate", "mlp"),
                           "rank": 8})
    for row in MLA_GEMMS:
        assert mlp_only[row]["frozen"] and mlp_only[row]["saved"] == 0
    assert not any(k.startswith("lora_q") or k.startswith("lora_kv") for k in mlp_only)


def test_duplicated_down_projections_adapters_under_tensor_parallelism():
    """tp 2: the down projections (and their adapters) whole on each rank, the up projections' B split; with
    sequence parallelism the down projections run on T/t rows, and so do their adapters."""
    t2 = _mla_table({"adapters": _adapters(), "rank": 8}, tp=2)
    assert (t2["lora_q_down_0_a"]["m"], t2["lora_q_down_0_b"]["n"]) == (1024, 256)
    assert t2["lora_q_down_0_a"]["flops"] == 2 * 1024 * 1024 * 8 / 2            # the model's FLOPs once over 2 ranks
    assert t2["lora_q_up_0_b"]["n"] == 384 / 2 and t2["lora_out_0_a"]["k"] == 384 / 2
    sp = _mla_table({"adapters": _adapters(), "rank": 8}, tp=2, sp=True)
    assert sp["lora_kv_down_0_a"]["m"] == 512 and sp["lora_kv_down_0_b"]["saved"] == 2 * 512 * 8
    assert sp["lora_kv_down_0_a"]["flops"] == t2["lora_kv_down_0_a"]["flops"]


def test_qlora_quantizes_and_dequantizes_the_mla_projections():
    lora = dse.estimate("deepseek-v3", "h800-cluster", pp=16, dp=8, ep=8, finetune="lora",
                        overrides=["model.mtp_layers=0"])
    qlora = dse.estimate("deepseek-v3", "h800-cluster", pp=16, dp=8, ep=8, finetune="qlora",
                         overrides=["model.mtp_layers=0"])
    m = dse.catalog.load_model("deepseek-v3")
    attn = FT.mla_linear_parameters(m.hidden, m.heads, 1536, 512, 128, 64, 128)
    assert attn == 187_107_328 - 1536 - 512
    moe = FT.moe_linear_parameters(m.hidden, 256, 2048, "swiglu", 2048, ep=8)
    dense = 3 * 7168 * 18432
    linear = 4 * (3 * (attn + dense) + 58 * (attn + moe)) / 61   # 4 layers a stage, the mean of 3 dense and 58 MoE
    saved = linear * (2 - FT.quantized_bytes_per_param("nf4"))
    assert lora["memory"]["gpu"]["weights"] - qlora["memory"]["gpu"]["weights"] == pytest.approx(saved, rel=1e-9)
    assert qlora["time"]["iteration"] > lora["time"]["iteration"]
    from dse.estimate.frozen import kernel_inputs
    from dse.specs.plan import Plan

    m0 = dse.catalog.load_model("deepseek-v3").resolved()
    ki = kernel_inputs(m0, Plan(pp=16, dp=8, ep=8, micro_batch=1, finetune="qlora").resolved(m0))
    assert ki["linears"] == 5 + 3 and ki["layer_linear_params"] == attn + 3 * 7168 * 18432   # a dense layer
    assert ki["moe_linears"] == 5 + 1 + 32 * 3 + 3 and ki["moe_linear_params"] == attn + moe   # router, 32 experts


@pytest.mark.parametrize("args, needle", [
    (["--lora-targets", "qv"], "--lora-targets qv"),
])
def test_mla_lora_refusals_are_one_line(capsys, args, needle):
    argv = ["estimate", "--model", "deepseek-v3", "--hw", "h800-cluster", "--pp", "16", "--dp", "8", "--ep", "8",
            "--finetune", "lora", "--set", "model.mtp_layers=0", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
