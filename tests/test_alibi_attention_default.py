"""BLOOM's attention default (ALiBi: Transformers runs it only in its eager attention) is a plan default filled where
the plan's other model-dependent defaults are (dse.specs.plan.default_attention, through ``_derived``), so every face
agrees: ``dse estimate``, ``dse search`` (scalar and vectorised paths), the emitters and the library. Flash asked for
is refused by the rule "ALiBi runs only eager attention" (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dse
from dse.catalog import load_hardware, load_model
from dse.cli import main
from dse.errors import InputError
from dse.estimate import make_plan, resolve, run
from dse.specs.plan import Plan, default_attention

BLOOM = str(Path(__file__).parent / "fixtures" / "hf" / "bloom-560m" / "config.json")


def test_the_default_is_filled_with_the_plans_other_derived_fields():
    bloom, llama = load_model(BLOOM), load_model("llama2-7b")
    assert Plan().attention is None           # unset until resolved against a model
    assert Plan().resolved(bloom).attention == "math" and Plan().resolved(llama).attention == "flash"
    assert Plan(attention="flash").resolved(bloom).attention == "flash"     # given: kept (the rule refuses it)
    assert default_attention(None, bloom) == "math" and default_attention("math", llama) == "math"


def test_cli_estimate_runs_math_and_refuses_flash_in_one_line(capsys):
    assert main(["estimate", "--model", BLOOM, "--hw", "dgx-h100", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["plan"]["attention"] == "math" and "ALiBi" in r["defaults"]["attention"]["rule"]
    assert main(["estimate", "--model", BLOOM, "--hw", "dgx-h100", "--attention", "flash"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--attention flash is not modelled with ALiBi" in err and "\n" not in err


def test_cli_estimate_emitter_writes_the_eager_backend(capsys):
    assert main(["estimate", "--model", BLOOM, "--hw", "dgx-h100", "--emit", "megatron"]) == 0
    assert "--attention-backend unfused" in capsys.readouterr().out


@pytest.mark.parametrize("engine", ["exhaustive", "optuna"])
def test_cli_search_with_attention_open_runs_math(tmp_path, capsys, engine):
    """Before: every point failed the ALiBi rule at the plan's default (flash), "no feasible configuration"."""
    out = tmp_path / "r.json"
    args = ["search", "--model", BLOOM, "--hw", "dgx-h100", "--gpus", "8", "-B", "64", "-s", "2048", "--engine",
            engine, "--top", "1", "-q", "--json", str(out)]
    if engine == "optuna":
        args += ["--trials", "8", "--seed", "1"]
    assert main(args) == 0
    best = json.loads(out.read_text())["best"]
    assert best is not None and "--attention" not in best["command"]
    # the re-run command (no --attention) is the math estimate, and agrees with the search's number
    fields = {k.removeprefix("plan."): v for k, v in best["params"].items() if k.startswith("plan.")}
    m, s, p = resolve(BLOOM, "dgx-h100", dp=8 // (fields["tp"] * fields["pp"]), global_batch=64, seq_len=2048, **fields)
    assert p.attention == "math"
    assert run(m, s, p)["time"]["iteration"] == pytest.approx(best["metrics"]["time.iteration"], rel=1e-9)
    capsys.readouterr()


def test_cli_search_with_flash_asked_for_excludes_it(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["search", "--model", BLOOM, "--hw", "dgx-h100", "--gpus", "8", "-B", "64", "-s", "2048", "--engine",
                 "exhaustive", "-q", "--json", str(out), "--set", "plan.attention=flash"]) == 0
    assert "ALiBi runs only eager attention" in capsys.readouterr().out
    assert json.loads(out.read_text())["feasible"] == 0


def test_library_faces_agree():
    r = dse.estimate(BLOOM, "dgx-h100")
    assert r["plan"]["attention"] == "math" and r["defaults"]["attention"]["value"] == "math"
    m, s = load_model(BLOOM), load_hardware("dgx-h100")
    by_hand = run(m, s, Plan().resolved(m, s))
    assert by_hand["plan"]["attention"] == "math"
    assert by_hand["time"]["iteration"] == pytest.approx(r["time"]["iteration"], rel=1e-12)
    assert make_plan(m, s, {}).attention == "math"
    with pytest.raises(InputError, match="--attention flash is not modelled with ALiBi"):
        dse.estimate(BLOOM, "dgx-h100", attention="flash")
