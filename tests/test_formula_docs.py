"""docs/formulas.md is generated from the docstrings and must be current."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_formula_docs", ROOT / "scripts" / "gen_formula_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reference_page_is_up_to_date():
    gen = _generator()
    fresh = gen.render(gen.measure_feeds())
    committed = (ROOT / "docs" / "formulas.md").read_text()
    assert committed == fresh, "docs/formulas.md is out of date: run python scripts/gen_formula_docs.py"


def test_page_lists_every_public_function_with_formula_source_and_feeds():
    import inspect

    import dse.formulas
    from dse.formulas._modules import defines

    page = (ROOT / "docs" / "formulas.md").read_text()
    for name in dse.formulas.__all__:
        mod = getattr(dse.formulas, name)
        if not inspect.ismodule(mod) or name == "energy":
            continue
        for fname in mod.__all__:
            fn = getattr(mod, fname)
            if not inspect.isfunction(fn) or not defines(mod, fn):
                continue
            head = f"### `{name}.{fname}`"
            assert head in page
            section = page.split(head, 1)[1].split("\n### ", 1)[0]
            assert "- **Formula:**" in section and "- **Source:**" in section and "**Feeds" in section


def test_feeds_are_measured():
    """The perturbation finds the obvious dependencies (and none where there are none)."""
    gen = _generator()
    feeds = gen.measure_feeds()
    assert "time.iteration" in feeds[("parallelism", "pipeline_time")]["keys"]
    assert "memory.gpu.activations" in feeds[("kernels", "saved_bytes")]["keys"]
    assert feeds[("activation_offload", "rated_endurance")]["keys"] == {"endurance.lifetime_years",
                                                                        "endurance.rated_endurance_per_drive"}
    assert feeds[("chiplet", "summa_2d_gemm_bytes")]["scenarios"] == ["chiplet-summa"]
    assert not feeds[("offload", "shared_link_traffic")]["scenarios"]   # not on the estimate's path


def test_check_mode_reports_a_stale_page(tmp_path, capsys):
    gen = _generator()
    stale = tmp_path / "formulas.md"
    stale.write_text("old\n")
    assert gen.main(["--check", "--out", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
