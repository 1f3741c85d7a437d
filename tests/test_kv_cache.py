"""``plan.kv_cache``: Transformers' use_cache in training (the K/V-cache copies the eager stacks price)."""

from __future__ import annotations

import json

import pytest

from dse.catalog import load_model, load_system
from dse.estimate import make_plan, run
from dse.estimate.kernel_table import kernel_tables
from dse.formulas.precision import recipe_of


def _layer(**plan):
    m = load_model("gpt2-medium", [(["dropout"], 0.0)])
    p = make_plan(m, load_system("dgx-h100"), {"dp": 1, "micro_batch": 4, "global_batch": 4, "seq_len": 1024,
                                                "stack": "pytorch", **plan})
    return kernel_tables(m, p, recipe_of(p))["layer"], p


@pytest.mark.parametrize("recompute,default", [("none", True), ("selective", True), ("full", False)])
def test_default_is_transformers_use_cache(recompute, default):
    """Transformers keeps the cache on in training and turns it off under gradient checkpointing."""
    layer, _ = _layer(recompute=recompute)
    assert ("kv_copy" in layer) is default
    assert ("kv_copy" in _layer(recompute=recompute, kv_cache=not default)[0]) is (not default)


def test_cache_off_drops_the_copies_and_what_they_keep():
    on, p_on = _layer(recompute="none")
    off, p_off = _layer(recompute="none", kv_cache=False)
    m = load_model("gpt2-medium", [(["dropout"], 0.0)])
    system = load_system("dgx-h100")
    r_on, r_off = run(m, system, p_on), run(m, system, p_off)
    tok, h, e = 4 * 1024, 1024, 2
    assert on["kv_copy"]["saved"] == 2 * tok * h * e          # K and V, bf16
    saved_delta = r_on["memory"]["gpu"]["activations"] - r_off["memory"]["gpu"]["activations"]
    assert saved_delta == pytest.approx(24 * on["kv_copy"]["saved"], rel=1e-9)
    assert r_off["time"]["iteration"] < r_on["time"]["iteration"]
    assert "kv_cache" not in run(m, system, _layer(recompute="none")[1])["plan"]     # shown only where set
    assert r_off["plan"]["kv_cache"] is False
    # eager attention copies K and V for its batched matmuls whatever the cache: the row stays
    assert "kv_copy" in _layer(recompute="none", attention="math", kv_cache=False)[0]


def test_measured_rows_carry_use_cache(tmp_path):
    from dse.calibrate.measurements import read

    row = {"kind": "base", "model": "gpt2-medium", "attn": "sdpa", "b": 4, "s": 1024, "recompute": "none",
           "step_s": 0.05, "peak_bytes": 9e9}
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps(row) + "\n" + json.dumps({**row, "use_cache": False}) + "\n")
    a, b = read(f)
    assert "kv_cache" not in a.plan_data and b.plan_data["kv_cache"] is False
