"""Layers without rotary positions (NoPE) in Cohere 2 and Llama 4 config.json files: ``nope_layers`` from the config,
the rotary kernels priced on the other layers only (as SmolLM3's: tests/test_hf_families.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse.catalog import load_model
from dse.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def _layer(path: str, *sets: str) -> dict:
    from dse.estimate import kernel_table as KT, resolve
    from dse.formulas.precision import recipe_of

    m, _, p = resolve(path, "dgx-h100", None, list(sets), stack="pytorch", dp=1, micro_batch=1, seq_len=1024)
    return KT.kernel_tables(m, p, recipe_of(p))["layer"]


@pytest.mark.parametrize("name, nope, layers", [
    ("c4ai-command-r7b-12-2024", 8, 32),        # Cohere2Attention: rotary only with a sliding window (every 4th full)
    ("Llama-4-Scout-17B-16E-text", 12, 48),     # Llama4TextAttention: no_rope_layers, every 4th layer NoPE
])
def test_nope_layers_read_and_the_rotary_rows_priced_on_the_others(name, nope, layers):
    from dse.estimate import kernel_table as KT

    path = str(FIXTURES / name / "config.json")
    m = load_model(path)
    assert (m.nope_layers, m.layers) == (nope, layers)
    priced, every = _layer(path), _layer(path, "model.nope_layers=0")
    share = (layers - nope) / layers
    rotary = [k for k in KT.ROTARY_ROWS if k in every]
    assert rotary
    for k in rotary:
        assert priced[k]["kernels"] == pytest.approx(every[k]["kernels"] * share)
        assert priced[k]["bytes_backward"] == pytest.approx(every[k]["bytes_backward"] * share)
    assert {k: v for k, v in priced.items() if k not in KT.ROTARY_ROWS} == {
        k: v for k, v in every.items() if k not in KT.ROTARY_ROWS}


def test_llama4_says_what_its_nope_layers_leave_unpriced(tmp_path):
    """The QK L2-norm runs on the RoPE layers only and the NoPE layers scale their queries (attention temperature
    tuning): priced on every layer / not priced, a warning; a config without NoPE layers has none."""
    path = FIXTURES / "Llama-4-Scout-17B-16E-text" / "config.json"
    assert any("RoPE layers only" in n for n in load_model(str(path)).unmodelled)
    cfg = json.loads(path.read_text())
    layers = cfg["num_hidden_layers"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**cfg, "no_rope_layers": [1] * layers}))
    m = load_model(str(p))
    assert m.nope_layers == 0 and not any("RoPE layers only" in n for n in m.unmodelled)
    p.write_text(json.dumps({**cfg, "no_rope_layers": [1, 0]}))
    with pytest.raises(InputError, match="no_rope_layers has 2 entries; it needs one per layer"):
        load_model(str(p))
