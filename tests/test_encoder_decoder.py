"""T5 (encoder-decoder) from config.json and the catalog: both stacks, exact counts, FLOPs, activations, refusals.

Counts: test_hf_config.py (fixtures) and test_catalog_models.py (t5-base, flan-t5-xl). Here: the reader's fields,
the kernel table of both stacks against closed forms, the two sequence lengths, and the one-line refusals.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import dse
from dse.catalog import load_model
from dse.cli import main
from dse.estimate.kernel_table import kernel_tables
from dse.formulas.precision import recipe_of
from dse.specs.plan import Plan

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def fixture(name: str):
    return load_model(str(FIXTURES / name / "config.json"))


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_reader_fields():
    base = fixture("t5-base")
    assert (base.architecture, base.layers, base.decoder_layers, base.position, base.relative_buckets) == (
        "encoder-decoder", 24, 12, "relative", 32)
    assert (base.ffn_type, base.norm, base.bias, base.tied_embeddings, base.seq_len, base.target_len) == (
        "relu", "rmsnorm", False, True, 512, 114)
    xl = fixture("flan-t5-xl")
    assert (xl.ffn_type, xl.activation, xl.tied_embeddings, xl.head_dim, xl.layers) == ("geglu", "gelu_new", False,
                                                                                        64, 48)


def test_catalog_entries_are_the_fixtures():
    for name in ("t5-base", "flan-t5-xl"):
        cat, hf = load_model(name), fixture(name)
        fields = ("layers", "decoder_layers", "hidden", "heads", "head_dim", "ffn_hidden", "ffn_type", "vocab",
                  "relative_buckets", "tied_embeddings", "seq_len", "target_len")
        assert [getattr(cat, f) for f in fields] == [getattr(hf, f) for f in fields], name


def closed_form_flops(m, s_in: int, s_t: int, sequences: int) -> float:
    """Model FLOPs of a training step, written out: 3 x forward; encoder unmasked, decoder causal plus
    cross-attention (q and o over the target, k and v over the input, scores s_t x s_in), LM head over the target."""
    h, inner, F, V = m.hidden, m.heads * m.head_dim, m.ffn_hidden, m.vocab
    n_mlp = 3 if m.ffn_type in ("geglu", "swiglu") else 2
    enc = 2 * s_in * (4 * h * inner + n_mlp * h * F) + 4 * s_in * s_in * inner
    dec = (2 * s_t * (4 * h * inner + n_mlp * h * F) + 4 * s_t * s_t * inner / 2
           + 2 * s_t * h * inner + 2 * s_in * h * 2 * inner + 2 * s_t * inner * h + 4 * s_t * s_in * inner)
    L_d = m.decoder_layers
    return 3 * sequences * ((m.layers - L_d) * enc + L_d * dec + 2 * s_t * h * V)


@pytest.mark.parametrize("name, tp, target", [("flan-t5-xl", 2, None), ("t5-base", 1, 256)])
def test_model_flops_are_both_stacks(name, tp, target):
    m = fixture(name)
    kw = {} if target is None else {"target_len": target}
    r = dse.estimate(m, "dgx-h100", tp=tp, micro_batch=8, **kw)
    s_t = target or 114
    assert r["plan"]["target_len"] == s_t
    assert r["flops"]["model_per_iteration"] == pytest.approx(
        closed_form_flops(m, 512, s_t, r["plan"]["global_batch"]), rel=1e-12)


def test_kernel_tables_hold_both_stacks():
    m = fixture("t5-base")
    plan = Plan(tp=1, micro_batch=4, seq_len=512, target_len=114).resolved(m)
    t = kernel_tables(m, plan, recipe_of(plan))
    dec, enc = t["layer"], t["dense_layer"]
    assert t["moe_share"] == 0.5
    assert "cross_attention" in dec and "cross_attention" not in enc and "rotary" not in enc
    assert enc["attention"]["flops"] == 4 * 512 * 512 * 4 * 12 * 64            # bidirectional: the whole matrix
    assert dec["attention"]["flops"] == 4 * 114 * 114 * 4 * 12 * 64 / 2        # causal
    assert dec["cross_attention"]["flops"] == 4 * 114 * 512 * 4 * 12 * 64      # target x input
    assert dec["cross_kv"]["m"] == 512 * 4 and dec["cross_q"]["m"] == 114 * 4
    assert enc["position_bias"]["bytes"] == 2 * 4 * 12 * 512 * 512
    assert t["embedding"]["embedding"]["bytes"] == 2 * (512 + 114) * 4 * 768     # input and target tokens
    assert t["head"]["lm_head"]["m"] == 114 * 4                                  # logits over the target only
    # the encoder output: kept once (the encoder's final norm), not by every decoder layer's K/V GEMM
    assert dec["cross_kv"]["saved"] == 0 and t["head"]["encoder_final_norm"]["saved"] == (2 * 2 * 2048 * 768
                                                                                          + 4 * 2048)


def test_longer_targets_cost_more_and_plans_run():
    m = load_model("t5-base")
    times = [dse.estimate(m, "dgx-h100", tp=1, micro_batch=8, target_len=n)["time"]["iteration"]
             for n in (64, 114, 512)]
    assert times == sorted(times)
    for kw in ({"recompute": "full"}, {"recompute": "selective"}, {"attention": "math"}, {"stack": "pytorch"},
               {"tp": 4, "sequence_parallel": True}):
        r = dse.estimate(m, "dgx-h100", **{"tp": 1, **kw})
        assert r["memory"]["gpu"]["total"] > 0 and r["time"]["iteration"] > 0, kw


@pytest.mark.parametrize("argv, words", [
    (["--pp", "2"], "--pp 2"),
    (["--cp", "2"], "--cp 2"),
])
def test_pipeline_and_context_parallelism_are_refused(capsys, argv, words):
    code, out, err = run(capsys, "estimate", "--model", "t5-base", "--hw", "dgx-h100", *argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and words in lines[0] and "encoder-decoder" in lines[0]


def test_target_len_on_a_decoder_is_refused(capsys):
    code, _, err = run(capsys, "estimate", "--model", "gpt2-small", "--hw", "dgx-h100", "--target-len", "64")
    assert code == 2 and "target_len" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("change, words", [
    ({"feed_forward_proj": "gated-relu"}, "feed_forward_proj"),
    ({"architectures": ["T5EncoderModel"]}, "architectures"),
    ({"is_decoder": True}, "is_decoder"),
])
def test_t5_keys_not_modelled_are_one_line(capsys, tmp_path, change, words):
    cfg = {**json.loads((FIXTURES / "t5-base" / "config.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, _, err = run(capsys, "show", "model", str(path))
    assert code == 2 and words in err and str(path) in err and len(err.strip().splitlines()) == 1


def test_encoder_decoder_fields_need_the_architecture():
    from dse.errors import InputError
    from dse.specs._schema import build
    from dse.specs.model import ModelSpec

    with pytest.raises(InputError, match="decoder_layers is an encoder-decoder field"):
        build(ModelSpec, dict(name="x", layers=4, hidden=64, heads=4, vocab=100, max_seq_len=64, decoder_layers=2),
              "m.yaml")
    base = dataclasses.asdict(load_model("t5-base"))
    with pytest.raises(InputError, match="decoder_layers"):
        build(ModelSpec, {**base, "position_embeddings": None, "decoder_layers": 24}, "m.yaml")


def test_megatron_launch_names_both_stacks(capsys):
    code, out, err = run(capsys, "estimate", "--model", "t5-base", "--hw", "dgx-h100", "--emit", "megatron")
    assert code == 0, err
    assert "pretrain_t5.py" in out and "--encoder-num-layers 12 --decoder-num-layers 12" in out
    assert "--encoder-seq-length 512 --decoder-seq-length 114" in out and "--position-embedding-type relative" in out
