"""Software stacks (stacks/*.yaml): the files load and are checked, and a stack changes only what it says."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dse
from dse.errors import InputError
from dse.estimate import kernel_table as KT, resolve
from dse.formulas import kernels as K, stacks as S, transformer as T
from dse.formulas.precision import recipe_of
from dse.specs import stack as stack_spec


@pytest.mark.parametrize("name", stack_spec.STACKS)
def test_every_catalog_stack_loads(name):
    spec = stack_spec.load(name)
    assert spec.name == name and spec.source
    if name == "megatron":
        assert spec.rows == {} and spec.pads_vocab and spec.dispatch > 0   # the launch floor (test_host_floor)
    else:
        assert spec.rows and not spec.pads_vocab and spec.dispatch > 0


@pytest.mark.parametrize("data, message", [
    ({"name": "x", "bogus": 1}, "unknown field 'bogus'"),
    ({"name": "x", "rows": {"nrom": {}}}, "unknown entry 'nrom'"),
    ({"name": "x", "rows": {"residual": {"forward": {"kernels": 1, "moves": {"hh": 2}}}}}, "unknown size 'hh'"),
    ({"name": "x", "rows": {"residual": {"forward": {"kernels": 1, "moves": {"h:fp64": 2}}}}}, "unknown dtype 'fp64'"),
    ({"name": "x", "rows": {"residual": {"forward": {"kernels": -1}}}}, "kernels: expected a count"),
    ({"name": "x", "rows": {"residual": {"saved": {"h": -2}}}}, "expected a number >= 0"),
    ({"name": "x", "rows": {"kv_copy": {"when": [{"attention": "sparse"}]}}}, "unknown value 'sparse'"),
    ({"name": "x", "rows": {"activation": {"gelu": {}, "swish": {}}}}, "unknown variant 'swish'"),
])
def test_a_bad_stack_file_is_a_one_line_error_naming_the_field(data, message):
    with pytest.raises(InputError) as err:
        stack_spec.parse(data, "stacks/x.yaml")
    text = str(err.value)
    assert message in text and text.startswith("stacks/x.yaml") and "\n" not in text


def test_an_unknown_stack_on_the_command_line_exits_2_with_one_line():
    p = subprocess.run([sys.executable, "-m", "dse", "estimate", "-m", "gpt2-small", "--stack", "jax"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "jax" in p.stderr and "Traceback" not in p.stderr


def test_the_default_stack_is_megatron_and_names_it_explicitly_the_same():
    a = dse.estimate("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=2)
    b = dse.estimate("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=2, stack="megatron")
    assert a["plan"]["stack"] == "megatron"
    assert a["time"]["iteration"] == b["time"]["iteration"] and a["memory"]["gpu"] == b["memory"]["gpu"]


def _tables(model, stack, set_=(), **plan):
    m, _, p = resolve(model, "dgx-h100", None, list(set_), stack=stack, **plan)
    return KT.kernel_tables(m, p, recipe_of(p)), m, p


@pytest.mark.parametrize("attention", ["flash", "math"])
def test_a_stack_keeps_the_gemms_and_flops_and_changes_only_elementwise_rows(attention):
    meg, _, _ = _tables("gpt2-xl", "megatron", micro_batch=4, attention=attention, precision="bf16-pure")
    eager, _, _ = _tables("gpt2-xl", "pytorch", micro_batch=4, attention=attention, precision="bf16-pure")
    assert K.forward_flops(meg["layer"]) == K.forward_flops(eager["layer"])
    for name, row in meg["layer"].items():
        if row["kind"] == "gemm":
            assert {k: eager["layer"][name][k] for k in ("m", "k", "n", "batch")} == \
                   {k: row[k] for k in ("m", "k", "n", "batch")}
    added = set(eager["layer"]) - set(meg["layer"])
    assert added <= {"attention_copies", "dropout", "kv_copy", "kv_repeat", "qkv_grads", "rotary_grads",
                     "query_scale", "bias_grads", "grad_accumulate"}
    assert all(eager["layer"][n]["kind"] == "elementwise" for n in added)


def test_the_unpadded_vocabulary_makes_the_lm_head_unaligned_only_in_a_stack_that_does_not_pad():
    meg, _, _ = _tables("gpt2-xl", "megatron", micro_batch=2)
    eager, _, _ = _tables("gpt2-xl", "pytorch", micro_batch=2)
    assert "aligned" not in meg["head"]["lm_head"] and eager["head"]["lm_head"]["aligned"] == 0
    assert S.aligned(50304) == 1 and S.aligned(50257) == 0


def test_full_recompute_saves_only_the_layer_input_and_drops_the_kv_cache_copies():
    # Transformers turns use_cache off under gradient checkpointing: no K/V copies with flash attention
    t, m, p = _tables("gpt2-xl", "pytorch", micro_batch=4, recompute="full", precision="bf16-pure")
    assert "kv_copy" not in t["layer"]
    assert K.saved_bytes(t["layer"]) == 2 * 4 * 1024 * 1600
    none, _, _ = _tables("gpt2-xl", "pytorch", micro_batch=4, precision="bf16-pure")
    assert "kv_copy" in none["layer"] and K.rerun_bytes(t["layer"]) < K.saved_bytes(none["layer"])


def test_amounts_are_passes_times_elements_times_dtype_bytes():
    z = S.sizes(1024, 2, 1024, 16, 16, 64, 4096, 50257)
    assert S.amount({"h": 3}, z) == 3 * 2 * 2048 * 1024
    assert S.amount({"logits:fp32": 1, "tok:byte": 2}, z) == 4 * 2048 * 50257 + 2 * 2048
    assert S.amount({"params:grad": 3}, {**z, "params": 10}, grad_bytes=4) == 120


# --- the pytorch stack against a real PyTorch run -----------------------------------------------------------------
# tests/fixtures/pytorch_stack_trace.json (GPT-2: h 320, 5 heads), pytorch_stack_trace_llama.json (Llama: h 256,
# 4 query and 2 K/V heads, SwiGLU 704, RMSNorm, rotary, untied head) and pytorch_stack_trace_opt.json (OPT: h 320, 5
# heads, ReLU 1280, separate q/k/v with the query pre-scaled): every aten op and every saved tensor of one training
# step of Transformers' GPT2LMHeadModel / LlamaForCausalLM / OPTForCausalLM with 1 and 2 layers (b 3, s 96, bf16,
# CPU), recorded by scripts/trace_stack.py. A layer = 2-layer run - 1-layer run. What the CPU trace cannot show is
# subtracted explicitly, each with its reason:
#   - the output-layout copy of the attention output and of its gradient (cuDNN returns (b, a, s, d); the CPU
#     flash kernel already returns the (b, s, a, d) layout, so `.transpose(1, 2).contiguous()` copies nothing);
#   - the CUDA flash backward's preprocessing and fp32 dQ accumulator (FlashAttention-2, Algorithm 2), which the
#     CPU kernel does inside its one op;
#   - LayerNorm backward's second kernel on CUDA (weight and bias gradients re-read dy and x: 2 passes per norm);
#   - gradient accumulation into existing .grad (the traced step starts with .grad = None, the measured runs do not).
# The trace counts an op's inputs by their logical size; the stack counts bytes moved. Where they differ:
#   - slice_backward (rotary backward, 2 per tensor) writes zeros over the whole tensor before copying the half:
#     the trace counts the half it reads and the whole it writes, the stack also the zero fill (+1/2 pass each);
#   - RMSNorm's mean gradient is read broadcast from a per-token tensor (the trace counts it at full size);
#   - repeat_kv's copies (grouped-query eager attention) read K and V once (the trace counts the expanded view).
import json as _json  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

_FIXTURES = _Path(__file__).parent / "fixtures"
_TRACES = {"gpt2": _json.loads((_FIXTURES / "pytorch_stack_trace.json").read_text()),
           "llama": _json.loads((_FIXTURES / "pytorch_stack_trace_llama.json").read_text()),
           "opt": _json.loads((_FIXTURES / "pytorch_stack_trace_opt.json").read_text()),
           "gemma3": _json.loads((_FIXTURES / "pytorch_stack_trace_gemma3.json").read_text()),
           "gpt_neox": _json.loads((_FIXTURES / "pytorch_stack_trace_gpt_neox.json").read_text()),
           **{a: _json.loads((_FIXTURES / f"pytorch_stack_trace_{a}.json").read_text())
              for a in ("gemma", "phi", "starcoder2", "granite", "olmo2", "gpt_bigcode", "gptj", "bloom", "olmo",
                        "olmoe", "phimoe", "glm4_moe", "nemotron", "cohere", "phi3", "gpt_neo")}}
#: the families scripts/trace_stack.py builds from a config (AUTO): the fixture config.json each is priced from
_AUTO_FIXTURE = {"gemma": "gemma-2b", "phi": "phi-2", "starcoder2": "starcoder2-3b", "granite": "granite-3.0-2b-base",
                 "olmo2": "OLMo-2-1124-7B", "gpt_bigcode": "starcoderbase-1b", "gptj": "gpt-j-6b",
                 "bloom": "bloom-560m", "olmo": "OLMo-1B-hf", "olmoe": "OLMoE-1B-7B-0924", "glm4_moe": "GLM-4.5-Air",
                 "phimoe": "Phi-3.5-MoE-instruct", "nemotron": "Minitron-4B-Base",
                 "cohere": "c4ai-command-r-v01", "phi3": "Phi-3-mini-4k-instruct"}
#: the MoE families traced with a dense MLP in every layer (scripts/trace_stack.py): their attention, priced dense
_DENSE_MOE = ["model.experts=0", "model.experts_per_token=null", "model.expert_ffn=null", "model.shared_experts=0",
              "model.shared_expert_ffn=null", "model.first_dense_layers=0", "model.mtp_layers=0"]
_GEMM_OPS = {"addmm", "mm", "bmm", "baddbmm"}
#: every traced run but GPT-J's eager ones: its eager attention multiplies in fp32 (query.to(float32)), which the
#: stack prices as the fp32-softmax eager attention, a warning with every GPT-J estimate (measured: forward bytes
#: 9-12 % low, saved 7 % low)
_RUNS = [(a, k) for a in sorted(_TRACES) for k in sorted(_TRACES[a]["runs"]) if not (a == "gptj" and "eager" in k)]


def _traced_layer(run: dict) -> tuple[float, float, float]:
    def ew(phase, n):
        return sum(i + o for name, i, o in run[n]["ops"][phase] if name not in _GEMM_OPS and "attention" not in name)

    return (ew("forward", "2") - ew("forward", "1"), ew("backward", "2") - ew("backward", "1"),
            run["2"]["saved_bytes"] - run["1"]["saved_bytes"])


def _traced_model(arch: str, d: dict) -> tuple[str, list[str]]:
    if arch in _AUTO_FIXTURE:       # the traced config's own field names (scripts/trace_stack.py AUTO)
        c = d["config"]
        h, a = c.get("hidden_size", c.get("n_embd")), c.get("num_attention_heads", c.get("n_head"))
        kv = c.get("num_key_value_heads", 1 if c.get("multi_query") else a)
        sets = [f"model.hidden={h}", f"model.heads={a}", f"model.kv_heads={kv}",
                f"model.head_dim={c.get('head_dim', 64)}", f"model.vocab={c['vocab_size']}",
                f"model.ffn_hidden={c.get('intermediate_size', c.get('n_inner', 4 * h))}",
                "model.dropout=0"] + (["model.sliding_window=null"] if arch in ("starcoder2", "phimoe") else [])
        if "partial_rotary_factor" in c or "rotary_dim" in c:
            sets.append(f"model.rotary_fraction={c.get('partial_rotary_factor') or c['rotary_dim'] / 64}")
        if arch in ("olmoe", "phimoe", "glm4_moe"):
            sets += _DENSE_MOE + (["model.qk_norm=true"] if c.get("use_qk_norm") else [])   # GLM-4.5-Air: off
        return f"tests/fixtures/hf/{_AUTO_FIXTURE[arch]}/config.json", sets
    if arch == "gpt_neo":           # the shipped GPT-Neo config at the traced size (scripts/trace_stack.py AUTO)
        c = d["config"]
        return "models/hf/EleutherAI/gpt-neo-125m/config.json", [
            f"model.hidden={c['hidden_size']}", f"model.heads={c['num_heads']}", f"model.vocab={c['vocab_size']}",
            f"model.ffn_hidden={4 * c['hidden_size']}", "model.dropout=0"]
    if arch == "gpt2":
        return "gpt2-small", [f"model.hidden={d['h']}", f"model.heads={d['heads']}", "model.dropout=0"]
    if arch == "opt":
        return "opt-13b", [f"model.hidden={d['h']}", f"model.heads={d['heads']}", f"model.ffn_hidden={d['ffn']}",
                           f"model.vocab={d['vocab']}", "model.dropout=0"]
    if arch == "gpt_neox":
        return "tests/fixtures/hf/pythia-1.4b/config.json", [
            f"model.hidden={d['h']}", f"model.heads={d['heads']}", f"model.kv_heads={d['heads']}", "model.head_dim=64",
            f"model.ffn_hidden={d['ffn']}", f"model.vocab={d['vocab']}", f"model.rotary_fraction={d['rotary_pct']}"]
    if arch == "gemma3":
        return "gemma3-27b", [f"model.hidden={d['h']}", f"model.heads={d['heads']}", f"model.kv_heads={d['kv_heads']}",
                              f"model.head_dim={d['head_dim']}", f"model.ffn_hidden={d['ffn']}",
                              f"model.vocab={d['vocab']}"]
    return "llama2-7b", [f"model.hidden={d['h']}", f"model.heads={d['heads']}", f"model.kv_heads={d['kv_heads']}",
                         f"model.ffn_hidden={d['ffn']}", f"model.vocab={d['vocab']}"]


@pytest.mark.parametrize("arch, key", _RUNS)
def test_the_pytorch_stack_reproduces_the_traced_bytes_and_saved_tensors_of_a_layer(arch, key):
    trace = _TRACES[arch]
    attn, rc = key.split("-")
    d = trace["dims"]
    name, sets = _traced_model(arch, d)
    m, _, p = resolve(name, "dgx-h100", None, sets, micro_batch=d["b"], seq_len=d["s"], stack="pytorch",
                      attention={"sdpa": "flash", "eager": "math"}[attn],
                      recompute=rc, precision="bf16-pure", dp=1)
    assert m.qkv_projection == ("fused" if arch in ("gpt2", "gpt_neox", "gpt_bigcode", "bloom", "phi3") else "separate")
    t = KT.kernel_tables(m, p, recipe_of(p))["layer"]
    ew = [r for r in t.values() if r["kind"] == "elementwise"]
    fwd = sum(r["bytes"] for r in ew)
    bwd = sum(r["bytes_backward"] for r in ew)
    tok = d["b"] * d["s"]
    h, q = tok * d["h"] * 2, tok * d["heads"] * 64 * 2          # bf16 (s, b, h) and query tensors
    kv = tok * d.get("kv_heads", d["heads"]) * 64 * 2
    cuda_only_copy = 2 * q if attn == "sdpa" else 0             # the output-layout copy, each pass
    fa2 = (3 * q + 4 * tok * d["heads"] + 2 * 2 * q) if attn == "sdpa" else 0   # D = rowsum(dO*O); fp32 dQ
    ln_second_kernel = 2 * m.layer_norms * h if m.norm_kind in ("layernorm", "layernorm1p") else 0   # OLMo: none
    # CUDA's softmax backward multiplies grad by output in a kernel of its own (SoftMax.cu): 3 passes of the scores,
    # in the softmax's dtype (GPT-2's bf16; the Llama family's, OPT's and GPT-NeoX's fp32)
    scores = d["b"] * d["heads"] * d["s"] ** 2
    softmax_product = 3 * scores * (2 if arch == "gpt2" else 4) if attn == "eager" else 0
    bwd -= cuda_only_copy + fa2 + ln_second_kernel + softmax_product + t["grad_accumulate"]["bytes_backward"]
    if m.alibi:   # CUDA only (BLOOM): baddbmm copies the bias into its result, which the GEMM reads back (2 score
        fwd -= 2 * scores * 2           # passes); each of the 3 select_backwards fills the whole qkv gradient (3 q)
        bwd -= 3 * q                    # and copies its q-sized view (2 q): the trace counts q in, 3 q out
    if (m.rotary_fraction < 1 or m.projection_slices) and not m.rotary_before_transpose:   # a partial rotary's (Phi-3:
        cuda_only_copy = 0   # any) torch.cat writes q contiguous in (b, a, s, d) (GPT-NeoX, Phi): the CPU kernel
        # returns that layout, copied as on CUDA
    fwd -= cuda_only_copy
    if m.projection_slices:    # Phi-3's q, k, v slices: each slice_backward's copy writes its slice of the zero-filled
        bwd -= q + 2 * kv      # gradient; the trace counts the slice read and the whole written, not that write (qkv)
    if m.position == "rotary":                                   # zero fills the trace does not count (rotate_half's,
        bwd -= (q + kv) * m.rotary_fraction                      # and a partial rotary's two slices of q and of k)
        bwd -= (q + kv) if m.rotary_fraction < 1 else 0
        bwd -= (q + kv) if m.rotary_upcast else 0                # (Cohere's: fp32, twice the bytes)
        table = 4 * d["s"] * 64 * m.rotary_fraction * 2          # the 4 products' reads of the (s, d) cos/sin table,
        fwd, bwd = fwd + table, bwd + table                      # not in the stack (s d: nothing at scale)
    if m.norm == "rmsnorm":                                      # the broadcast mean gradient, counted at full size
        bwd += m.layer_norms * (2 * h - tok * 4)
        if m.qk_norm:                                            # per query and key head (64 wide)
            bwd += 2 * (q + kv) - (q + kv) / 64 / 2 * 4
    if m.norm_kind == "fp32_layernorm":                          # Cohere: its two means' gradients, as RMSNorm's one
        bwd += m.layer_norms * 2 * (2 * h - tok * 4)
    if attn == "eager" and kv < q:                               # repeat_kv's expanded reads, counted at full size
        fwd += 2 * (q - kv)
    saved = (K.rerun_bytes(t) if rc == "full" else K.saved_bytes(t)) - cuda_only_copy / 2
    if m.rotary_before_transpose and rc == "none":   # GPT-J repeat_interleaves sin and cos in every layer: its
        saved += 4 * d["s"] * 64 * m.rotary_fraction * 2   # four products save those (s, rotary_dim) tables
    f_tr, b_tr, s_tr = _traced_layer(trace["runs"][key])
    if arch == "gpt_neo":   # GPT-Neo's where saves a slice of the layer's P x P bool mask buffer (P = 1,024 traced):
        s_tr -= 1024 ** 2 if rc == "none" else 0   # module state on the GPU from load on, not an activation
        if rc == "full":   # no KV cache under checkpointing: the score bmm copies the fp32 K (the kv_copy row's
            fwd += 2 * kv  # copy is bf16: 2 bytes per element short each pass)
    if rc == "full":                                      # the checkpoint keeps the layer input; backward re-runs
        assert s_tr == pytest.approx(K.saved_bytes(t), rel=1e-6)
        # the traced backward includes the re-run forward, which stops once the last tensor the layer saves exists
        # (torch.utils.checkpoint's early stop, on by default): the layer's final residual add is not re-run; in
        # Gemma's layer the last saved tensor is the post-MLP norm's (1 + w), so its fp32 product and cast are not
        # either (8 and 6 bytes per element); in a parallel-residual layer (GPT-NeoX) both branch adds are not
        # Gemma 3's post-MLP norm (not Gemma 1's layer), OLMo 2's post_feedforward_layernorm: both end the layer
        post_mlp_norm = m.norm_fp32_weight and (m.layer_norms == 4 or arch == "olmo2")
        b_tr -= f_tr - 3 * h - (7 * h if post_mlp_norm else 0) - (3 * h if m.parallel_residual else 0) - (
            2 * h if m.residual_scale else 0)    # Granite: the MLP output's scale before that add is not either
        assert fwd == pytest.approx(f_tr, rel=0.01)
        assert bwd == pytest.approx(b_tr, rel=0.005)
    else:
        assert saved == pytest.approx(s_tr, rel=0.005)
        assert fwd == pytest.approx(f_tr, rel=0.01 if arch != "gpt2" and attn == "eager" else 0.005)
        assert bwd == pytest.approx(b_tr, rel=0.005)


@pytest.mark.parametrize("arch, key", _RUNS)
def test_what_saved_tensor_hooks_pack_is_what_pytorch_packs(arch, key):
    """save_on_cpu copies every tensor each autograd node saves, at its own size: the traced pack hooks' bytes per
    layer (parameters apart) against the kernel table's packed bytes, and the packed parameters against the layer's
    weights (what the hooks mechanism adds for them)."""
    trace = _TRACES[arch]
    attn, rc = key.split("-")
    d = trace["dims"]
    name, sets = _traced_model(arch, d)
    m, _, p = resolve(name, "dgx-h100", None, sets, micro_batch=d["b"], seq_len=d["s"], stack="pytorch",
                      attention={"sdpa": "flash", "eager": "math"}[attn], recompute=rc, precision="bf16-pure", dp=1)
    t = KT.kernel_tables(m, p, recipe_of(p))["layer"]
    run = trace["runs"][key]
    packed = run["2"]["packed_bytes"] - run["1"]["packed_bytes"]
    if arch == "gpt_neo" and rc == "none":   # where packs its (1, 1, s, s) bool mask slice: s^2 bytes
        packed -= d["s"] ** 2
    if arch == "gpt2" and key == "eager-full":
        # GPT-2's eager attention passes its (b, 1, s, s) causal mask into every checkpointed layer, and the
        # checkpoint packs it with the layer input: not modelled (no other traced family does it)
        packed -= d["b"] * d["s"] ** 2 * 2
    if m.norm_kind in ("layernorm", "layernorm1p") and rc == "none":   # the CPU's bf16 LayerNorm keeps mean, rstd
        # in bf16, CUDA's fp32
        packed += m.layer_norms * 2 * d["b"] * d["s"] * 2
    assert K.packed_bytes(t) == pytest.approx(packed, rel=0.001)
    if rc == "none":   # where the hooks see other bytes than the layer keeps alive, so does the stack
        s_tr = run["2"]["saved_bytes"] - run["1"]["saved_bytes"]
        assert (K.packed_bytes(t) == pytest.approx(K.saved_bytes(t), rel=0.01)) == (packed == pytest.approx(s_tr,
                                                                                                          rel=0.01))
    params = run["2"]["packed_param_bytes"] - run["1"]["packed_param_bytes"]
    weights = 0 if rc == "full" else 2 * T.layer_parameters(m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden,
                                                            m.ffn_type, m.norm, m.bias, m.qkv_bias)
    assert params == pytest.approx(weights, rel=0.005)   # GEMM biases are not saved: 0.2 % at h 320, less at scale


def test_the_hooks_mechanism_copies_what_the_stack_packs():
    """--activation-offload-mechanism hooks with an eager stack copies the stack's packed tensors and the weights:
    never less than the layer keeps (the Megatron terms it used before counted less than an eager layer saves)."""
    from dse.estimate import run as estimate_run

    m, s, p = resolve("llama2-7b", "dgx-h100", None, (), stack="pytorch", dp=1, micro_batch=1, seq_len=2048,
                      offload_activations="host", activation_offload_mechanism="hooks")
    ao = estimate_run(m, s, p)["activation_offload"]
    weights = 2 * T.layer_parameters(m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.ffn_type, m.norm,
                                     m.bias, m.qkv_bias)
    packed = K.packed_bytes(KT.kernel_tables(m, p, recipe_of(p))["layer"])
    assert ao["copied_bytes_per_layer"] == pytest.approx(packed + weights)
    assert ao["copied_bytes_per_layer"] > ao["saved_bytes_per_layer"] + weights


def test_dropout_adds_its_masks_to_what_a_pytorch_layer_saves():
    t0, _, _ = _tables("gpt2-xl", "pytorch", micro_batch=2, attention="math", set_=["model.dropout=0"])
    t1, _, _ = _tables("gpt2-xl", "pytorch", micro_batch=2, attention="math", set_=["model.dropout=0.1"])
    tok, h, scores = 2 * 1024, 1600, 2 * 25 * 1024 * 1024
    extra = K.saved_bytes(t1["layer"]) - K.saved_bytes(t0["layer"])
    # two branch-dropout masks (1 byte per element), the score dropout's output (bf16) and mask
    assert extra == 2 * tok * h + 3 * scores


# --- the compiled stack's saved tensors against torch.compile ---------------------------------------------------
# tests/fixtures/compiled_saved_trace.json: per layer, the bytes AOTAutograd's min-cut partitioner hands from the
# forward to the backward graph when torch.compile (Inductor) compiles the traced GPT-2 and Llama models (2- and
# 3-layer runs, CPU), recorded by scripts/trace_compiled.py. The partitioner works on the joint graph, before code
# generation, so the CPU run shows what a CUDA run saves -- except the attention output's layout copy (as above).
_COMPILED = _json.loads((_FIXTURES / "compiled_saved_trace.json").read_text())


@pytest.mark.parametrize("key", sorted(_COMPILED["saved_per_layer"]))
def test_the_compiled_stack_saves_what_torch_compile_saves(key):
    arch, attn = key.split("-")
    d = _COMPILED["dims"][arch]
    name, sets = _traced_model(arch, d)
    m, _, p = resolve(name, "dgx-h100", None, sets, micro_batch=d["b"], seq_len=d["s"], stack="compiled",
                      attention={"sdpa": "flash", "eager": "math"}[attn], recompute="none", precision="bf16-pure",
                      dp=1)
    t = KT.kernel_tables(m, p, recipe_of(p))["layer"]
    q = d["b"] * d["s"] * d["heads"] * 64 * 2
    layout_copy = q if attn == "sdpa" else 0          # the out-projection's input is a copy on CUDA, a view on the CPU
    assert K.saved_bytes(t) - layout_copy == pytest.approx(_COMPILED["saved_per_layer"][key], rel=0.005)


@pytest.mark.parametrize("family", ["gemma-3-1b-pt", "pythia-1.4b", "Qwen2-0.5B"])
def test_peak_memory_of_the_h200_families_without_recomputation(family):
    """dse validate h200-hf's memory cases at recompute none (data/h200/hf_families.jsonl, use_cache off): Gemma 3 1B
    was 10-12 % low before Gemma's fp32 RMSNorm tensors, GeGLU's fourth tensor and the QK-norm's fp32 tensors were
    counted (traced: pytorch_stack_trace_gemma3.json); Pythia's eager rows 3-4 % high while GPT-NeoX's eager matmuls
    were taken to copy K and V (they read the rotated K and the V view as they are)."""
    from dse.validate import h200_hf

    cases = [c for c in h200_hf.cases() if c.name.startswith(family) and c.name.endswith("rc-none memory")]
    assert len(cases) == 4
    for c in cases:
        assert abs(c.run() / c.reference - 1) < 0.02, c.name
