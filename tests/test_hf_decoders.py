"""Phi-3, GPT-NeoX and Falcon read from config.json: the architecture details that change their kernels.

Parameter counts are in test_hf_config.py (REFERENCE); here what the readers set and what it does to a layer's
kernel table: fused projections, partial rotary, the parallel residual (one TP all-reduce forward; the MLP norm's
input not saved again; Falcon-7B's one shared norm), multi-query attention, and the one-line refusals.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dse.catalog import load_model
from dse.cli import main
from dse.formulas.kernels import layer_kernels, saved_bytes

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def spec(name: str):
    return load_model(str(FIXTURES / name / "config.json"))


def table(m, **kw):
    opts = dict(ffn_type=m.ffn_type, norm=m.norm, position=m.position, dropout=False, layer_norms=m.layer_norms,
                parallel_residual=m.parallel_residual, rotary_fraction=m.rotary_fraction)
    opts.update(kw)
    return layer_kernels(2048, 1, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, **opts)


def test_readers_set_the_architecture():
    phi = spec("Phi-3-mini-4k-instruct")
    assert (phi.qkv_projection, phi.ffn_type, phi.norm, phi.tied_embeddings, phi.sliding_window) == (
        "fused", "swiglu", "rmsnorm", False, 2047)
    assert spec("Phi-3-medium-4k-instruct").kv_heads == 10
    neox = spec("gpt-neox-20b")
    assert (neox.rotary_fraction, neox.parallel_residual, neox.layer_norms, neox.activation, neox.bias) == (
        0.25, True, 2, "gelu_new", True)
    f7 = spec("falcon-7b")
    assert (f7.kv_heads, f7.parallel_residual, f7.layer_norms, f7.bias, f7.tied_embeddings) == (1, True, 1, False, True)
    f40 = spec("falcon-40b")
    assert (f40.kv_heads, f40.parallel_residual, f40.layer_norms) == (8, True, 2)


def test_parallel_residual_saves_one_layer_input_less_and_reduces_once():
    neox = spec("gpt-neox-20b")
    seq = dataclasses.replace(neox, parallel_residual=False)
    par_t, seq_t = table(neox, tp=8), table(seq, tp=8)
    e, x = 2, 2 * 2048 * neox.hidden          # one layer-wide bf16 tensor
    assert saved_bytes(seq_t) - saved_bytes(par_t) == x            # norm2's input is norm1's
    forward = [n for n, r in par_t.items() if r["kind"] == "collective" and r["pass"] == "forward"]
    backward = [n for n, r in par_t.items() if r["kind"] == "collective" and r["pass"] == "backward"]
    assert (len(forward), len(backward)) == (1, 2)
    assert len([n for n, r in seq_t.items() if r["kind"] == "collective"]) == 4
    assert e * 2048 * neox.hidden == x


def test_falcon7b_shared_norm():
    f7 = spec("falcon-7b")
    t = table(f7)
    assert "norm2" not in t and t["fc1"]["saved"] == 0            # fc1 reads qkv's saved input
    two = table(dataclasses.replace(f7, parallel_residual=False, layer_norms=2))
    assert saved_bytes(two) - saved_bytes(t) == 2 * (2 * 2048 * f7.hidden) + 8 * 2048   # norm2's and fc1's input,
    #                                                                                  norm2's fp32 statistics
    assert [n for n, r in table(f7, tp=1).items() if r["kind"] == "collective"] == ["mlp_allreduce",
                                                                                      "qkv_dgrad_allreduce"]
    # one norm fewer per layer: 2h (LayerNorm weight and bias) x 32 layers in the exact count (test_hf_config.py)


def test_partial_rotary_under_the_pytorch_stack():
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.precision import recipe_of
    from dse.specs.plan import Plan

    neox = spec("pythia-1.4b")
    plan = Plan(tp=1, micro_batch=1, seq_len=2048, stack="pytorch")
    r = recipe_of(plan)
    quarter = kernel_tables(neox, plan, r)["layer"]["rotary"]
    full = kernel_tables(dataclasses.replace(neox, rotary_fraction=1.0), plan, r)["layer"]["rotary"]
    cat = 2 * 2 * 2048 * 2 * neox.hidden       # torch.cat: q and k (a = kv) read and written once
    assert quarter["bytes"] == pytest.approx(0.25 * (full["bytes"]) + cat)
    assert quarter["kernels"] == full["kernels"] + 2
    megatron = Plan(tp=1, micro_batch=1, seq_len=2048)    # the fused rotary reads and writes all of Q and K
    assert (kernel_tables(neox, megatron, r)["layer"]["rotary"]["bytes"]
            == kernel_tables(dataclasses.replace(neox, rotary_fraction=1.0), megatron, r)["layer"]["rotary"]["bytes"])


@pytest.mark.parametrize("name, change, words", [
    ("falcon-7b", {"alibi": True}, "alibi"),
    ("falcon-40b", {"parallel_attn": False}, "parallel_attn"),
    ("falcon-40b", {"num_ln_in_parallel_attn": 3}, "num_ln_in_parallel_attn"),
    ("pythia-1.4b", {"attention_bias": False}, "attention_bias"),
    ("pythia-1.4b", {"rotary_pct": 1.5}, "rotary_pct"),
    ("Phi-3-mini-4k-instruct", {"hidden_act": "gelu"}, "hidden_act"),
])
def test_unmodelled_keys_are_one_line_exit_2(capsys, tmp_path, name, change, words):
    cfg = {**json.loads((FIXTURES / name / "config.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["show", "model", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and str(path) in err[0]


def test_parallel_residual_is_not_a_warning_any_more(capsys):
    assert main(["estimate", "--model", str(FIXTURES / "falcon-40b" / "config.json"), "--hw", "dgx-h100",
                 "--tp", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["params"] == 41_303_293_952
    assert not any("parallel_attn" in w for w in out.get("warnings", []))


def test_fused_rotary_keeps_the_rotated_q_and_k_under_the_pytorch_stack():
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.precision import recipe_of
    from dse.specs.plan import Plan

    phi = spec("Phi-3-mini-4k-instruct")
    separate = dataclasses.replace(phi, qkv_projection="separate", projection_slices=False)

    def kept(model, recompute):    # what the attention keeps, with the K/V-cache copies where it keeps those
        plan = Plan(tp=1, micro_batch=1, seq_len=2048, stack="pytorch", recompute=recompute)
        t = kernel_tables(model, plan, recipe_of(plan))["layer"]
        key = "rerun" if recompute == "full" else "saved"
        return t["attention"][key] + t.get("kv_copy", {}).get(key, 0)

    # without the cache (checkpointing turns it off) fused keeps the q, k, v buffer (v a view: 3), the rotated q and
    # k (2), the output (1); separate: q, k, v, output (4)
    assert kept(phi, "full") - kept(separate, "full") == 2 * (2 * 2048 * phi.hidden)
    # with it (use_cache, traced on GPT-NeoX) the rotated q, the output and the cache's k and v copies, as separate
    assert kept(phi, "none") == kept(separate, "none")
