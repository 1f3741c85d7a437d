"""Attention variants priced as each implementation computes them (issue 15): sliding-window and chunked layers,
per-layer patterns, soft-capping, and the readers of the models that use them (Gemma 3, gpt-oss, Llama 4)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import dse
from dse import catalog
from dse.cli import main
from dse.errors import InputError
from dse.estimate.parameters import model_parameters
from dse.formulas import kernels as K, transformer as T
from dse.specs.hf import from_hf_config

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def mask(s: int, window: int | None = None, chunk: int | None = None) -> np.ndarray:
    """The causal mask as Transformers' masking_utils builds it: causal, sliding_window_overlay, chunked_overlay."""
    i, j = np.ogrid[:s, :s]
    m = j <= i
    if window is not None:
        m &= j > i - window
    if chunk is not None:
        m &= (j // chunk) == (i // chunk)
    return m


@pytest.mark.parametrize("s", [1, 2, 7, 16, 33, 100])
@pytest.mark.parametrize("w", [1, 2, 3, 8, 15, 16, 64])
def test_windowed_and_chunked_pairs_are_the_brute_force_count_of_the_mask(s, w):
    if w < s:
        assert T.attention_pairs(s, window=w) == mask(s, window=w).sum()
        assert T.attention_pairs(s, chunk=w) == mask(s, chunk=w).sum()
    else:   # a window or chunk as long as the sequence: the full causal count (FlashAttention-2's s^2/2)
        assert T.attention_pairs(s, window=w) == T.attention_pairs(s, chunk=w) == s * s / 2


def test_pairs_broadcast_over_sequence_lengths():
    s = np.array([8, 100, 4096, 8192])
    got = T.attention_pairs(s, window=4096)
    assert list(got) == [32.0, 5000.0, 4096 * 4096 / 2, 4096 * 4097 // 2 + 4096 * 4096]


def test_a_layer_pattern_share_is_the_mean_of_its_layers_brute_force_counts():
    s, w, c = 96, 20, 32
    types = ["sliding", "sliding", "full", "chunked", "sliding", "full", "chunked"]
    per_layer = {"full": s * s / 2, "sliding": mask(s, window=w).sum(), "chunked": mask(s, chunk=c).sum()}
    mean = sum(per_layer[t] for t in types) / len(types) / s**2
    share = T.attention_share(s, types.count("full"), types.count("sliding"), types.count("chunked"), w, c)
    assert share == pytest.approx(mean, rel=1e-15)
    # a kernel that only masks computes the whole matrix of each windowed layer and half of each full one
    masked = T.attention_share(s, 2, 3, 2, w, c, skips=False)
    assert masked == pytest.approx((2 * 0.5 + 5 * 1) / 7, rel=1e-15)


def test_a_window_as_long_as_the_sequence_is_todays_estimate_exactly():
    base = dse.estimate("mistral-7b", "dgx-h100", seq_len=4096)       # sliding_window 4096 = s
    none = dse.estimate("mistral-7b", "dgx-h100", seq_len=4096, overrides=["model.sliding_window=null"])
    for stack in ("pytorch", "compiled"):
        a = dse.estimate("mistral-7b", "dgx-h100", seq_len=4096, stack=stack, micro_batch=1)
        b = dse.estimate("mistral-7b", "dgx-h100", seq_len=4096, stack=stack, micro_batch=1,
                         overrides=["model.sliding_window=null"])
        assert a["time"] == b["time"] and a["memory"] == b["memory"] and a["flops"] == b["flops"]
    assert base["time"] == none["time"] and base["flops"] == none["flops"] and base["memory"] == none["memory"]


def test_windowed_layers_table_rows_per_kernel():
    s, b, a, d = 8192, 1, 32, 128
    share = T.attention_share(s, 0, 32, window=4096)
    assert share == T.attention_pairs(s, window=4096) / s**2
    args = (s, b, 4096, a, 8, d, 14336)
    opts = dict(ffn_type="swiglu", norm="rmsnorm", position="rotary", dropout=False)
    full = K.layer_kernels(*args, **opts)["attention"]
    win = K.layer_kernels(*args, **opts, attention_share=share)["attention"]          # FlashAttention window_size
    sdpa = K.layer_kernels(*args, **opts, attention_share=share, executed_share=1.0)["attention"]   # explicit mask
    assert win["flops"] == win["executed"] == 4 * b * a * d * T.attention_pairs(s, window=4096)
    assert win["executed_backward"] == 2.5 * win["executed"]
    assert sdpa["flops"] == win["flops"] and sdpa["executed"] == 2 * full["executed"]    # whole matrix, not half
    math = K.layer_kernels(*args, **opts, attention="math", attention_share=share)
    ref = K.layer_kernels(*args, **opts, attention="math")
    assert math["score"]["flops"] == 2 * d * b * a * T.attention_pairs(s, window=4096)
    assert {k: math["score"][k] for k in "mkn"} == {k: ref["score"][k] for k in "mkn"}   # eager: the s x s GEMMs


def test_each_stack_does_its_kernels_work_and_mfu_counts_the_windowed_work():
    kw = dict(seq_len=8192, micro_batch=1)
    full = {st: dse.estimate("mistral-7b", "dgx-h100", stack=st, overrides=["model.sliding_window=null"], **kw)
            for st in ("megatron", "pytorch")}
    win = {st: dse.estimate("mistral-7b", "dgx-h100", stack=st, **kw) for st in ("megatron", "pytorch")}
    for st in full:   # the model's FLOPs (MFU's numerator) count the windowed work in every stack
        assert win[st]["flops"]["model_per_iteration"] < full[st]["flops"]["model_per_iteration"]
    assert win["megatron"]["time"]["iteration"] < full["megatron"]["time"]["iteration"]   # TE window_size
    assert win["pytorch"]["time"]["iteration"] > full["pytorch"]["time"]["iteration"]     # SDPA masks the whole s^2
    eager = [dse.estimate("mistral-7b", "dgx-h100", stack="pytorch", attention="math", recompute="full", **kw,
                          overrides=o) for o in ([], ["model.sliding_window=null"])]
    assert eager[0]["time"] == eager[1]["time"] and eager[0]["memory"] == eager[1]["memory"]   # full s x s scores


@pytest.mark.parametrize("comm", ["allgather", "a2a"])   # TE runs a window under cp with these two only
def test_context_parallelism_keeps_the_windowed_model_flops(comm):
    kw = dict(seq_len=32768, recompute="full", tp=1, global_batch=8)
    one = dse.estimate("mistral-7b", "dgx-h100", dp=8, **kw)
    two = dse.estimate("mistral-7b", "dgx-h100", dp=4, cp=2, cp_comm=comm, **kw)
    full = dse.estimate("mistral-7b", "dgx-h100", dp=4, cp=2, cp_comm=comm, overrides=["model.sliding_window=null"],
                        **kw)
    assert two["flops"]["model_per_iteration"] == pytest.approx(one["flops"]["model_per_iteration"], rel=1e-12)
    assert two["flops"]["model_per_iteration"] < full["flops"]["model_per_iteration"]
    assert two["time"]["compute"] < full["time"]["compute"]


def test_eager_soft_capping_and_embedding_scale_are_priced_in_the_pytorch_stack():
    kw = dict(stack="pytorch", micro_batch=1, seq_len=4096)
    off = ["model.attn_softcap=null", "model.logit_softcap=null", "model.embedding_scale=false"]
    m = catalog.load_model("gemma2-9b")
    scores, logits = 2 * m.heads * 4096**2, 2 * 4096 * m.vocab          # bf16 bytes of one micro-batch's tensors
    eager = dse.estimate("gemma2-9b", "dgx-h100", attention="math", **kw)
    plain = dse.estimate("gemma2-9b", "dgx-h100", attention="math", overrides=off, **kw)
    extra = eager["memory"]["gpu"]["activations"] - plain["memory"]["gpu"]["activations"]
    assert extra == m.layers * scores + logits               # tanh keeps its output: scores per layer, the logits
    flash = dse.estimate("gemma2-9b", "dgx-h100", **kw)
    plain = dse.estimate("gemma2-9b", "dgx-h100", overrides=off, **kw)
    assert flash["memory"]["gpu"]["activations"] - plain["memory"]["gpu"]["activations"] == logits   # cap fused
    assert flash["time"]["iteration"] > plain["time"]["iteration"]
    mega = [dse.estimate("gemma2-9b", "dgx-h100", overrides=o) for o in ([], off)]
    assert mega[0]["time"] == mega[1]["time"]                # Megatron's table: fused, not a row of its own


@pytest.mark.parametrize("setting, words", [
    ("model.sliding_window=0", "sliding_window: must be greater than 0"),
    ("model.attention_chunk=-1", "attention_chunk: must be greater than 0"),
    ("model.layer_types=[full_attention]", "layer_types has 1 entries; it needs one per layer (32)"),
    ("model.layer_types=[local]", "'local' is not one of full_attention, sliding_attention, chunked_attention"),
    ("model.attention_chunk=64", "attention_chunk needs chunked_attention layers in layer_types"),
])
def test_bad_attention_fields_are_one_line_errors(capsys, setting, words):
    code = main(["estimate", "--model", "mistral-7b", "--hw", "dgx-h100", "--set", setting])
    err = capsys.readouterr().err
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_config_layer_types_that_do_not_match_are_errors():
    cfg = json.loads((FIXTURES / "gemma-2-9b" / "config.json").read_text())
    with pytest.raises(InputError, match=r"c.json: layer_types has 3 entries; it needs one per layer \(42\)"):
        from_hf_config({**cfg, "layer_types": ["full_attention"] * 3}, "c.json")
    with pytest.raises(InputError, match="c.json: layer_types 'linear_attention' is not modelled"):
        from_hf_config({**cfg, "layer_types": ["linear_attention"] * 42}, "c.json")


GPT_OSS_120B = dict(model_type="gpt_oss", num_hidden_layers=36, num_local_experts=128, num_experts_per_tok=4,
                    vocab_size=201088, hidden_size=2880, intermediate_size=2880, head_dim=64, num_attention_heads=64,
                    num_key_value_heads=8, sliding_window=128, tie_word_embeddings=False)
SCOUT = dict(model_type="llama4_text", hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
             num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128, vocab_size=202048,
             num_local_experts=16, num_experts_per_tok=1, interleave_moe_layer_step=1, attention_chunk_size=8192,
             no_rope_layers=[int((i + 1) % 4 != 0) for i in range(48)], use_qk_norm=True)
GEMMA3_27B = dict(model_type="gemma3_text", hidden_size=5376, intermediate_size=21504, num_hidden_layers=62,
                  num_attention_heads=32, num_key_value_heads=16, head_dim=128, vocab_size=262208,
                  sliding_window=1024, query_pre_attn_scalar=168)


def spec(cfg: dict):
    from dse.specs._schema import build
    from dse.specs.model import ModelSpec

    return build(ModelSpec, from_hf_config(cfg, "c.json"), "c.json").resolved()


@pytest.mark.parametrize("cfg, name", [(GPT_OSS_120B, "gpt-oss-120b"), (SCOUT, "llama4-scout"),
                                       (GEMMA3_27B, "gemma3-27b"),
                                       ({"model_type": "llama4", "text_config": SCOUT}, "llama4-scout"),
                                       ({"model_type": "gemma3", "text_config": GEMMA3_27B}, "gemma3-27b")])
def test_readers_give_the_catalog_entries_counts(cfg, name):
    ours, entry = spec(cfg), catalog.load_model(name)
    assert model_parameters(ours) == model_parameters(entry)
    assert ours.attention_layers == entry.attention_layers and ours.layer_types == entry.layer_types


def test_reader_fields_of_the_new_families():
    oss = spec(GPT_OSS_120B)
    assert (oss.attention_sinks, oss.bias, oss.sliding_window, oss.attention_layers["sliding"]) == (True, True, 128, 18)
    scout = spec(SCOUT)
    assert scout.layer_types[:4] == ("chunked_attention",) * 3 + ("full_attention",)
    assert (scout.qk_norm, scout.qk_norm_weight, scout.shared_experts, scout.moe_layers) == (True, False, 1, 48)
    maverick = spec({**SCOUT, "interleave_moe_layer_step": 2})
    assert maverick.moe_layers == 24
    assert spec({**SCOUT, "moe_layers": [1, 3]}).moe_layers == 2
    g3 = spec(GEMMA3_27B)
    assert g3.attention_layers == {"full": 10, "sliding": 52, "chunked": 0} and g3.attn_softcap is None
    with pytest.raises(InputError, match="c.json: missing field 'text_config'"):
        from_hf_config({"model_type": "llama4"}, "c.json")
    with pytest.raises(InputError, match="attention_bias false is not modelled for gpt_oss"):
        from_hf_config({**GPT_OSS_120B, "attention_bias": False}, "c.json")


@pytest.mark.parametrize("name", ["gpt-oss-120b", "llama4-scout", "gemma3-27b"])
def test_catalog_counts_against_transformers_on_the_meta_device(name):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import importlib.util

    spec_ = importlib.util.spec_from_file_location("count_hf", FIXTURES / "count_with_transformers.py")
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    cfg, arch = mod.CATALOG[name]
    assert mod.hf_count(cfg, arch) == mod.dse_count(name)


def test_the_soft_capping_rows_are_the_traced_passes():
    """stacks/pytorch.yaml's softcap and logit_softcap rows against the aten trace of Gemma2ForCausalLM
    (scripts/trace_softcap.py: the two-layer minus the one-layer model, soft-capping on minus off)."""
    from dse.specs.stack import load

    trace = json.loads((Path(__file__).parent / "fixtures" / "pytorch_softcap_trace.json").read_text())["rows"]
    ops = load("pytorch").ops("rmsnorm", "gelu_glu")
    for row, size in (("softcap", "scores"), ("logit_softcap", "logits")):
        op = ops[row]
        for phase in ("forward", "backward"):
            assert op[phase]["moves"] == {size: trace[row][phase]["passes"]}
            assert op[phase]["kernels"] == trace[row][phase]["kernels"]
        assert op["saved"] == {size: trace[row]["saved"]["passes"]}


def test_a_chiplet_package_prices_full_attention_and_says_so():
    w = dse.estimate("mistral-7b", "chiplet-train-8x8", seq_len=8192)["warnings"]
    assert len(w) == 1 and "sliding_window 4096 shorter than the sequence (8192)" in w[0] and "full causal" in w[0]
    assert dse.estimate("mistral-7b", "chiplet-train-8x8", seq_len=4096)["warnings"] == []
    assert dse.estimate("mistral-7b", "dgx-h100", seq_len=8192)["warnings"] == []
