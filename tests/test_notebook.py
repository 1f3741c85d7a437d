"""Notebooks (issue 18, point 7): estimates and search results render as HTML tables in Jupyter (``_repr_html_``)
with the real numbers, and search results convert to a pandas DataFrame when pandas is installed."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import dse
from dse.errors import InputError
from dse.search import from_dict, search
from dse.units import fmt

SPACE = {"model": "llama2-7b", "hardware": "dgx-a100-80gb", "objectives": ["throughput"],
         "parameters": {"plan.tp": [1, 2, 4], "plan.micro_batch": [1, 2]}}
PARETO = {**SPACE, "objectives": ["time", "cost"], "parameters": {"plan.tp": [1, 2], "gpus": [8, 16]}}


def test_an_estimate_renders_its_numbers_as_tables():
    r = dse.estimate("llama2-7b", "dgx-h100", tp=2)
    assert isinstance(r, dict) and json.loads(json.dumps(r, default=float))["plan"]["tp"] == 2   # still a dict
    html = r._repr_html_()
    assert html.count("<table>") == 3 and "Time per iteration" in html and "Memory" in html
    assert fmt(r["time"]["iteration"], "s") in html and fmt(r["time"]["compute"], "s") in html
    assert fmt(r["memory"]["gpu"]["total"], "bytes") in html and fmt(r["memory"]["gpu"]["activations"], "bytes") in html
    assert f"{r['throughput']['tokens_per_s']:,.0f}" in html and fmt(r["throughput"]["mfu"], "fraction") in html
    assert "seq 4096" in html and "defaults: " in html and "global batch 4 = b·dp" in html


def test_an_estimate_shows_its_warnings_escaped(tmp_path):
    import json
    from pathlib import Path

    cfg = json.loads((Path(__file__).parent / "fixtures" / "hf" / "Mistral-7B-v0.1" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "<gptq>"}}))
    html = dse.estimate(str(path), "dgx-h100", tp=8, seq_len=8192)._repr_html_()
    assert "<b>warning:</b>" in html and "quantization_config (&lt;gptq&gt;) is not modelled" in html


def test_an_array_estimate_renders_one_row_per_scenario():
    r = dse.estimate("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=np.array([1, 2, 4]))
    html = r._repr_html_()
    assert html.count("<tr>") == 1 + 3 and "3 scenarios" in html
    for i in range(3):
        assert fmt(r["time"]["iteration"][i], "s") in html


def test_a_search_renders_its_ranked_points():
    out = search(from_dict(SPACE, "space"), engine="exhaustive", top=3)
    html = out._repr_html_()
    assert html.count("<tr>") == 1 + len(out["ranked"]) == 4
    assert "plan.tp" in html and "throughput" in html and f"{out['evaluated']:,} evaluated" in html
    best = out["ranked"][0]
    assert f"{best['value']:.4g}" in html and best["bottleneck"][:40] in html


def test_a_pareto_search_says_so():
    out = search(from_dict(PARETO, "space"), engine="exhaustive")
    assert out._repr_html_().startswith("<table><caption style='text-align:left'><b>Pareto front")


def test_a_search_converts_to_a_dataframe():
    pd = pytest.importorskip("pandas")
    out = search(from_dict(SPACE, "space"), engine="exhaustive", top=3)
    df = out.to_dataframe()
    assert isinstance(df, pd.DataFrame) and len(df) == 3
    assert list(df["rank"]) == [1, 2, 3]
    assert list(df["plan.tp"]) == [e["params"]["plan.tp"] for e in out["ranked"]]
    assert df["throughput"].tolist() == [e["value"] for e in out["ranked"]]
    assert df["throughput.mfu"].iloc[0] == out["ranked"][0]["metrics"]["throughput.mfu"]
    assert df["command"].iloc[0].startswith("dse estimate --model llama2-7b")


def test_without_pandas_the_conversion_is_one_clear_error(monkeypatch):
    out = search(from_dict(SPACE, "space"), engine="exhaustive", top=1)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(InputError, match=r"needs pandas: pip install 'dse\[notebook\]'"):
        out.to_dataframe()
