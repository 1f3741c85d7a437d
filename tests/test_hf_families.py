"""The dense causal-LM families a one-GPU user tries first, read from config.json (dse.specs.hf.decoders, phi,
classic.gpt_bigcode): what each reader sets, what it refuses, the exact parameter count against Transformers itself
(where it is installed), and the pytorch stack's kernels per layer against the traced aten ops.

Exact counts without Transformers: test_hf_config.py (REFERENCE); bytes and saved tensors of a layer against the
traces: test_stacks.py (pytorch_stack_trace_<family>.json, scripts/trace_stack.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse.catalog import load_model
from dse.cli import main
from dse.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
FAMILIES = ("gemma-2b", "gemma-7b", "phi-2", "phi-1_5", "starcoder2-3b", "starcoderbase-1b", "stablelm-2-1_6b",
            "granite-3.0-2b-base", "SmolLM3-3B", "OLMo-2-1124-7B", "gpt-j-6b", "bloom-560m",
            "OLMo-1B-hf")


def spec(name: str):
    return load_model(str(FIXTURES / name / "config.json"))


def config(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text())


def test_readers_set_the_architecture():
    g = spec("gemma-2b")
    assert (g.ffn_type, g.activation, g.norm_kind, g.embedding_scale, g.kv_heads, g.head_dim, g.tied_embeddings) == (
        "geglu", "gelu_tanh", "gemma_rmsnorm", True, 1, 256, True)
    p = spec("phi-2")
    assert (p.parallel_residual, p.layer_norms, p.rotary_fraction, p.head_bias, p.bias, p.qkv_bias, p.activation,
            p.tied_embeddings, p.qkv_projection) == (True, 1, 0.4, True, True, True, "gelu_new", False, "separate")
    s = spec("starcoder2-3b")
    assert (s.norm, s.ffn_type, s.activation, s.bias, s.kv_heads, s.sliding_window) == (
        "layernorm", "gelu", "gelu_tanh", True, 2, 4096)
    b = spec("starcoderbase-1b")
    assert (b.kv_heads, b.qkv_projection, b.position, b.softmax_dtype, b.ffn_hidden) == (1, "fused", "learned",
                                                                                         "fp32", 8192)
    st = spec("stablelm-2-1_6b")
    assert (st.norm, st.rotary_fraction, st.bias, st.qkv_bias, st.ffn_type, st.parallel_residual) == (
        "layernorm", 0.25, False, True, "swiglu", False)
    gr = spec("granite-3.0-2b-base")
    assert (gr.embedding_scale, gr.residual_scale, gr.logit_scale, gr.tied_embeddings) == (True, True, True, True)
    j = spec("gpt-j-6b")
    assert (j.bias, j.qkv_bias, j.mlp_bias, j.head_bias, j.rotary_fraction, j.rotary_before_transpose,
            j.parallel_residual, j.layer_norms) == (False, False, True, True, 0.25, True, True, 1)
    assert "eager attention multiplies in fp32" in j.unmodelled[0]
    bl = spec("bloom-560m")
    assert (bl.alibi, bl.position, bl.position_embeddings, bl.embedding_norm, bl.activation, bl.bias, bl.qkv_projection,
            bl.tied_embeddings, bl.ffn_hidden, bl.seq_len) == (True, "none", 0, True, "bloom_gelu", True, "fused", True,
                                                               4096, 2048)
    o1 = spec("OLMo-1B-hf")
    assert (o1.norm, o1.norm_weight, o1.norm_kind, o1.norm_params, o1.rotary_fp32, o1.tied_embeddings, o1.bias,
            o1.layer_param_tensors) == ("layernorm", False, "olmo_layernorm", "none", True, True, False, 7)
    o = spec("OLMo-2-1124-7B")
    assert (o.qk_norm, o.qk_norm_full, o.norm_kind, o.rotary_fp32, o.tied_embeddings) == (
        True, True, "fp32_rmsnorm", True, False)


def test_stablelm_parallel_residual_has_one_norm():
    cfg = {**config("stablelm-2-1_6b"), "use_parallel_residual": True}
    from dse.specs.hf import from_hf_config

    f = from_hf_config(cfg, "x.json")
    assert (f["parallel_residual"], f["layer_norms"]) == (True, 1)


@pytest.mark.parametrize("name, key, value, message", [
    ("phi-2", "qk_layernorm", True, "qk_layernorm true is not modelled for phi"),
    ("stablelm-2-1_6b", "qk_layernorm", True, "qk_layernorm true is not modelled for stablelm"),
    ("gemma-2b", "attention_bias", True, "attention_bias true is not modelled for gemma"),
    ("gemma-2b", "hidden_act", "silu", "hidden_act 'silu' is not supported for gemma"),
    ("granite-3.0-2b-base", "mlp_bias", True, "mlp_bias true is not modelled for granite"),
    ("OLMo-2-1124-7B", "attention_bias", True, "attention_bias true is not modelled for olmo2"),
    ("starcoder2-3b", "hidden_act", "gelu", "hidden_act 'gelu' is not supported for starcoder2"),
    ("starcoderbase-1b", "scale_attn_weights", False, "scale_attn_weights false is not modelled for gpt_bigcode"),
    ("SmolLM3-3B", "use_sliding_window", True, "use_sliding_window true is not modelled for smollm3"),
    ("SmolLM3-3B", "sliding_window", 4096, None),     # a window without use_sliding_window: not applied
    ("OLMo-1B-hf", "clip_qkv", 8.0, "clip_qkv 8.0 is not modelled for olmo"),
    ("OLMo-1B-hf", "attention_bias", True, "attention_bias true is not modelled for olmo"),
    ("bloom-560m", "apply_residual_connection_post_layernorm", True,
     "apply_residual_connection_post_layernorm true is not modelled for bloom"),
    ("bloom-560m", "slow_but_exact", True, None),        # without pretraining_tp > 1 it slices nothing
])
def test_unmodelled_keys_are_refused_in_one_line(tmp_path, name, key, value, message):
    cfg = {**config(name), key: value}
    if key == "use_sliding_window":
        cfg["sliding_window"] = 4096
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    if message is None:
        assert load_model(str(path)).sliding_window is None
        return
    with pytest.raises(InputError, match=message) as err:
        load_model(str(path))
    assert "\n" not in str(err.value)


def test_bloom_sliced_tp_layers_are_refused_and_flash_attention_is_an_error_naming_the_flag(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config("bloom-560m"), "slow_but_exact": True, "pretraining_tp": 4}))
    with pytest.raises(InputError, match="slow_but_exact true with pretraining_tp 4 is not modelled for bloom"):
        load_model(str(path))
    fixture = str(FIXTURES / "bloom-560m" / "config.json")
    assert main(["estimate", "--model", fixture, "--stack", "pytorch", "--hw", "dgx-h100", "--attention", "flash"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--attention flash is not modelled with ALiBi" in err and "--attention math" in err and "\n" not in err
    from dse.estimate import resolve

    assert resolve(fixture, "dgx-h100")[2].attention == "math"     # unset: its only attention, eager


def counted_as_transformers_does(model_type: str, cls: str, extra: dict, expected: int, tmp_path) -> None:
    """A config of ``model_type`` with ``extra`` keys: dse's count, Transformers' on the meta device and ``expected``
    agree."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(FIXTURES))
    from count_with_transformers import dse_count, hf_count

    cfg = {"model_type": model_type, "architectures": [cls], **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert dse_count(str(path)) == hf_count(cfg, cls) == expected


def refused_in_one_line(name: str, key: str, value, message: str, tmp_path) -> None:
    """The fixture ``name`` with ``key`` set to ``value``: one line naming it, exit 2."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config(name), key: value}))
    with pytest.raises(InputError, match=message) as err:
        load_model(str(path))
    assert "\n" not in str(err.value)
    assert main(["estimate", "--model", str(path), "--hw", "dgx-h100"]) == 2


def test_smollm3_prices_rotary_on_its_rope_layers_only(tmp_path):
    """SmolLM3's NoPE layers (no_rope_layers 0: every fourth, 9 of 36) run no rotary (modeling_smollm3.py:192, 215):
    the mean layer's rotary rows at 27 / 36 of a RoPE layer's kernels and bytes, nothing else moves. Against the
    H200 profiles (scripts/launch_counts.py -v) the kernels without GEMMs were 1.07-1.12 of the measured counts,
    now 1.005-1.039, as the other Llama-layer families' (1.00-1.04)."""
    from dse.estimate import kernel_table as KT, resolve
    from dse.formulas.precision import recipe_of

    s = spec("SmolLM3-3B")
    assert (s.nope_layers, s.layers, s.unmodelled) == (9, 36, ())

    def layer(*sets):
        m, _, p = resolve(str(FIXTURES / "SmolLM3-3B" / "config.json"), "dgx-h100", None, sets, stack="pytorch",
                          dp=1, micro_batch=1, seq_len=1024)
        return KT.kernel_tables(m, p, recipe_of(p))["layer"]

    nope, rope = layer(), layer("model.nope_layers=0")
    for k in ("rotary", "rotary_grads"):
        assert nope[k]["kernels_backward"] == rope[k]["kernels_backward"] * 27 / 36
        assert nope[k]["bytes_backward"] == rope[k]["bytes_backward"] * 27 / 36
    assert {k: v for k, v in nope.items() if k not in KT.ROTARY_ROWS} == {
        k: v for k, v in rope.items() if k not in KT.ROTARY_ROWS}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config("SmolLM3-3B"), "no_rope_layers": [1, 0]}))
    with pytest.raises(InputError, match="no_rope_layers has 2 entries; it needs one per layer"):
        load_model(str(path))
    with pytest.raises(InputError, match="nope_layers 40 needs position rotary and at most layers"):
        load_model(str(FIXTURES / "SmolLM3-3B" / "config.json"), [(["nope_layers"], 40)])


@pytest.mark.parametrize("name", FAMILIES)
def test_estimate_runs_with_the_pytorch_stack_on_an_h100_node(name, capsys):
    code = main(["estimate", "--model", str(FIXTURES / name / "config.json"), "--stack", "pytorch", "--hw",
                 "dgx-h100"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "peak reserved" in out


@pytest.mark.parametrize("name", FAMILIES)
def test_parameter_count_is_transformers_own(name):
    """Transformers 5.24 builds the model class on the meta device (tests/fixtures/hf/count_with_transformers.py)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(FIXTURES))
    from count_with_transformers import dse_count, hf_count

    cfg = config(name)
    path = str(FIXTURES / name / "config.json")
    assert dse_count(path) == hf_count(cfg, cfg["architectures"][0])


def test_granite_multipliers_and_olmo2_rotary_add_their_rows():
    from dse.estimate import kernel_table as KT, resolve
    from dse.formulas.precision import recipe_of

    def tables(name):
        m, _, p = resolve(str(FIXTURES / name / "config.json"), "dgx-h100", None, (), stack="pytorch", dp=1,
                          micro_batch=1, seq_len=1024)
        return KT.kernel_tables(m, p, recipe_of(p))

    g = tables("granite-3.0-2b-base")
    h, logits = 2 * 1024 * 2048, 2 * 1024 * 49155
    assert g["layer"]["residual_scale"]["bytes"] == 4 * h and g["layer"]["residual_scale"]["kernels"] == 2
    assert g["head"]["logit_scale"]["bytes"] == 2 * logits and "embedding_scale" in g["embedding"]
    o = tables("OLMo-2-1124-7B")["layer"]
    assert o["rotary_fp32"]["kernels"] == 2 and o["qk_norm"]["kernels"] == 16    # fp32_rmsnorm, q_norm and k_norm


@pytest.mark.parametrize("arch", ["gemma", "phi", "starcoder2", "granite", "olmo2", "gpt_bigcode", "gptj", "llama",
                                  "gpt2", "bloom", "olmo", "olmoe", "phimoe", "glm4_moe", "opt", "gpt_neox", "gemma3",
                                  "nemotron", "cohere", "gpt_neo"])
def test_forward_launches_of_a_layer_are_the_traced_ops(arch):
    """The pytorch stack's forward kernels of one layer against the aten ops the trace records for it (2-layer run
    minus 1-layer run) and SDPA's output-layout copy, which only CUDA makes (the CPU kernel returns the layout; not
    with a partial rotary, whose cat makes both copy): exactly, Transformers' separate q_proj, k_proj, v_proj and a
    gated MLP's gate_proj and up_proj each their own GEMM (dse.formulas.kernels.separate_linears; the host's time per
    launch, stacks/pytorch.yaml ``dispatch``, fitted with these counts). Backward is not compared: CUDA's flash
    preprocessing, dQ accumulator and LayerNorm's second kernel are not in a CPU trace."""
    from test_stacks import _TRACES, _traced_model

    from dse.estimate import kernel_table as KT, resolve
    from dse.formulas.kernels.launches import table_launches
    from dse.formulas.precision import recipe_of

    trace = _TRACES[arch]
    d = trace["dims"]
    name, sets = _traced_model(arch, d)
    for key, run in trace["runs"].items():
        attn, rc = key.split("-")
        if arch == "gptj" and attn == "eager":    # its fp32 eager attention: not priced as such (test_stacks._RUNS)
            continue
        m, _, p = resolve(name, "dgx-h100", None, sets, micro_batch=d["b"], seq_len=d["s"], stack="pytorch",
                          attention={"sdpa": "flash", "eager": "math"}[attn], recompute=rc, precision="bf16-pure",
                          dp=1)
        table = KT.kernel_tables(m, p, recipe_of(p))["layer"]
        forward, _ = table_launches(table, None, ranks=1)
        traced = len(run["2"]["ops"]["forward"]) - len(run["1"]["ops"]["forward"])
        traced += 1 if attn == "sdpa" and (m.rotary_fraction == 1 or m.rotary_before_transpose) else 0
        traced += 1 if m.alibi else 0   # CUDA's baddbmm copies the ALiBi bias into its result first (pytorch.yaml)
        assert forward == traced, key


def _eager_backward(arch: str):
    """(plan, model, layer table, its backward launches, the traced eager-none run, the traced layer's backward ops)
    of a traced family at its traced size, recompute none."""
    from test_stacks import _TRACES, _traced_model

    from dse.estimate import kernel_table as KT, resolve
    from dse.formulas.kernels.launches import table_launches
    from dse.formulas.precision import recipe_of

    trace = _TRACES[arch]
    d, run = trace["dims"], trace["runs"]["eager-none"]
    name, sets = _traced_model(arch, d)
    m, _, p = resolve(name, "dgx-h100", None, sets, micro_batch=d["b"], seq_len=d["s"], stack="pytorch",
                      recompute="none", precision="bf16-pure", dp=1)
    table = KT.kernel_tables(m, p, recipe_of(p))["layer"]
    _, backward = table_launches(table, None, ranks=1)
    return p, m, table, backward, run, len(run["2"]["ops"]["backward"]) - len(run["1"]["ops"]["backward"])


def test_bloom_backward_launches_are_the_traced_ops_and_what_only_cuda_launches():
    """BLOOM's layer backward (recompute none): the traced aten ops (51), what CUDA alone launches -- LayerNorm's
    second kernel (2), the softmax backward's grad * output (1), a zero fill per select_backward where the CPU trace
    shows two zeros for three (1) -- and one gradient-accumulation add per parameter tensor (12, a second step's)."""
    p, m, _, backward, _, traced = _eager_backward("bloom")
    assert (p.attention, traced) == ("math", 51)
    assert backward == traced + 2 + 1 + 1 + m.layer_param_tensors == 67


def test_gpt_neo_backward_launches_are_the_traced_ops_and_what_only_cuda_launches():
    """GPT-Neo's layer backward (recompute none, eager: its only attention without flash-attn): the traced aten ops
    (48) less the two zero-element zeros of the KV cache's cat backward (no kernel on CUDA), plus what CUDA alone
    launches -- LayerNorm's second kernel (2), the softmax backward's grad * output (1) -- and one
    gradient-accumulation add per parameter tensor (13: no q/k/v biases, three column sums: out_bias_grads)."""
    p, m, table, backward, run, traced = _eager_backward("gpt_neo")
    empty = [o for o in run["2"]["ops"]["backward"] if o[0] == "zeros" and o[2] == 0]
    assert (p.attention, traced, len(empty)) == ("math", 48, 4)     # two a layer
    assert backward == traced - 2 + 2 + 1 + m.layer_param_tensors == 62
    assert table["out_bias_grads"]["kernels_backward"] == 3 and "bias_grads" not in table


_ALLOC = Path(__file__).parent / "fixtures" / "allocator_trace_families.json"


@pytest.mark.parametrize("arch", ["gemma", "phi", "starcoder2", "granite", "olmo2", "gpt_bigcode", "gptj", "bloom",
                                  "olmo"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_peak_memory_is_the_replayed_allocator_trace(arch, recompute):
    """Two training steps of each family (4 layers, b 2, s 512, SDPA -- BLOOM: eager, its only attention;
    scripts/trace_allocator.py families) replayed
    through the caching-allocator simulation: dse's allocated peak within 2 % (as GPT-2's, test_caching_allocator.py).
    Reserved is looser (the holes each family's allocation order leaves: Phi's and Granite's bf16 logits copies --
    the head's bias add, the division -- leave 8-13 % more than dse's hole model, the others within +6 %)."""
    from test_caching_allocator import _events
    from test_stacks import _traced_model

    from dse.estimate import resolve, run
    from dse.measure.caching_allocator import replay

    trace = json.loads(_ALLOC.read_text())
    dims, case = trace["dims"], trace["families"][arch][recompute]
    name, sets = _traced_model(arch, {"config": _stack_config(arch)})
    extra = {"granite": ["model.tied_embeddings=false"],      # GraniteConfig's default: untied
             "olmo": ["model.tied_embeddings=false"],         # OlmoConfig's default (OLMo-1B-hf ties)
             "gpt_bigcode": ["model.max_seq_len=1024"]}.get(arch, [])   # the traced position table
    m, s, p = resolve(name, "dgx-h100", None, (*sets, *extra, f"model.layers={dims['layers']}"), dp=1,
                      micro_batch=dims["b"], seq_len=dims["s"], precision="bf16-pure", stack="pytorch",
                      recompute=recompute)          # SDPA, BLOOM's eager attention (its only one: traced so)
    r = run(m, s, p)
    opt = r["memory"]["gpu"]["optimizer"]          # the traced steps run no optimizer
    sim = replay(_events(case))
    assert r["allocator"]["allocated"] - opt == pytest.approx(sim.peak_requested, rel=0.02)
    assert r["allocator"]["reserved"] - opt == pytest.approx(sim.peak_reserved, rel=0.14)


def _stack_config(arch: str) -> dict:
    from test_stacks import _TRACES

    return _TRACES[arch]["dims"]["config"]


@pytest.mark.parametrize("name", ["phi-2", "stablelm-2-1_6b", "gpt-j-6b", "pythia-1.4b"])
def test_a_partial_rotary_runs_on_the_compiled_stack(name, capsys):
    """The compiled stack keeps the fused rotary row (no backward bytes of its own): a partial rotary's unfused ops
    are not applied to it (a KeyError before, for every partial-rotary family)."""
    code = main(["estimate", "--model", str(FIXTURES / name / "config.json"), "--stack", "compiled", "--hw",
                 "dgx-h100"])
    assert code == 0, capsys.readouterr().err


@pytest.mark.parametrize("name", FAMILIES)
def test_layer_parameter_tensors_are_what_transformers_builds(name):
    """ModelSpec.layer_param_tensors (one gradient-accumulation add each: stacks/pytorch.yaml grad_accumulate) against
    the parameter tensors of the first decoder layer Transformers builds from the same config (on the meta device).
    Phi-2 and StarCoder2 (separate q_proj, k_proj, v_proj under a plain MLP) were counted as a fused QKV: 10 and 12,
    where the H200 profiles show 14 and 16 accumulation adds a layer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.from_pretrained(str(FIXTURES / name))
    cfg.num_hidden_layers = 1
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    base = getattr(model, "model", None) or model.transformer
    layer = (base.layers if hasattr(base, "layers") else base.h)[0]
    assert spec(name).layer_param_tensors == len(list(layer.parameters()))


def test_separate_biased_projections_sum_six_bias_gradients():
    """Phi-2's and StarCoder2's q, k, v, output and two MLP biases: six column sums a layer backward (the traces'
    ``sum`` ops, the H200 profiles' reduce_kernel<sum_functor>: 193 = 6 x 32 + the lm_head's, 180 = 6 x 30); GPT-2's
    fused c_attn: four."""
    from dse.estimate import kernel_table as KT, resolve
    from dse.formulas.precision import recipe_of

    def bias_kernels(name):
        m, _, p = resolve(name, "dgx-h100", None, ("model.dropout=0",), stack="pytorch", dp=1, micro_batch=1,
                          seq_len=1024)
        return KT.kernel_tables(m, p, recipe_of(p))["layer"]["bias_grads"]["kernels_backward"]

    assert [bias_kernels(str(FIXTURES / n / "config.json")) for n in ("phi-2", "starcoder2-3b")] == [6, 6]
    assert bias_kernels("gpt2-small") == 4
