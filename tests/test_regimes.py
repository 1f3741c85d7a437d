"""What an estimate says it was checked against (dse.validate.regimes): the stored numbers are dse validate's."""

from __future__ import annotations

import json

import pytest

from dse.validate import SUITES, regimes
from dse.validate.regimes import checked_against, optimism, stored


def test_the_stored_numbers_are_a_fresh_validate_run():
    fresh = regimes.measure()
    assert fresh == stored(), "dse/validate/checked.json is stale: run python scripts/gen_checked.py"


def test_every_suite_with_measurements_is_read_by_a_regime():
    read = {p.suite for p in regimes.parts()}
    # formulas: the papers' closed forms (exact); h100-hf-vm: the shared file again, on the host that measured it
    assert set(SUITES) - read == {"formulas", "h100-hf-vm"}


class _Case:
    def __init__(self, value, reference):
        self.value, self.reference = value, reference

    @property
    def error(self):
        return self.value / self.reference - 1


def test_optimism_is_positive_when_dse_says_faster_or_leaner():
    assert optimism(_Case(0.9, 1.0), "time") == pytest.approx(0.1)       # 10 % less time than measured
    assert optimism(_Case(1.1, 1.0), "time") == pytest.approx(-0.1)
    assert optimism(_Case(1.2, 1.0), "rate") == pytest.approx(0.2)       # 20 % more tokens/s than measured
    assert optimism(_Case(1.2, 1.0), "") == 0.0


def _checked(model, hw, **fields):
    from dse.estimate import load, make_plan

    m, s, data = load(model, hw, None, [], **fields)
    return checked_against(m, s, make_plan(m, s, data))


def _regimes(model, hw, **fields):
    return [r["regime"] for r in _checked(model, hw, **fields)]


@pytest.mark.parametrize("model,hw,plan,want", [
    ("llama2-7b", "dgx-a100-80gb", dict(tp=2), ["dense Megatron on A100"]),
    ("llama3-8b", "dgx-h100", dict(tp=2), ["dense Megatron beyond the A100"]),
    ("mixtral-8x7b", "dgx-h100", dict(tp=2, ep=4, dp=4), ["MoE on Megatron-Core"]),
    ("gpt2-medium", "dgx-h100", dict(stack="pytorch", dp=1), ["eager PyTorch (Hugging Face Transformers) on one GPU"]),
    ("gpt2-medium", "dgx-h100", dict(stack="compiled", dp=1), []),
    ("gpt2-medium", "dgx-a100-80gb", dict(dp=1, offload_activations="ssd"),
     ["dense Megatron on A100", "activation offload to SSDs (SSDTrain)"]),
])
def test_each_plan_names_the_regimes_that_resemble_it(model, hw, plan, want):
    assert _regimes(model, hw, **plan) == want


def test_a_regime_carries_the_stored_numbers_of_its_parts():
    r = _checked("llama2-7b", "dgx-a100-80gb", tp=2)
    parts = {p["suite"]: p for p in r[0]["parts"]}
    assert parts["megatron-a100"]["cases"] == 88
    assert parts["megatron-a100"]["mape"] == stored()["megatron-a100"]["mape"]
    a100 = parts["megatron-a100"]
    assert a100["lean"] in ("optimistic", "pessimistic")
    assert a100["bias"] <= a100["mape"] and max(a100["worst_optimistic"], a100["worst_pessimistic"]) >= a100["bias"]


def test_storage_offload_and_a_chiplet_package_name_their_papers():
    names = _regimes("gpt2-medium", "smart-infinity-a100", dp=1, zero=3, offload_optimizer="csd")
    assert names == ["dense Megatron on A100", "storage offload (ZeRO-Infinity, Smart-Infinity)"]
    names = _regimes("gpt2-medium", "plain-nvme-a100", dp=1, zero=3, offload_optimizer="nvme")
    assert names[-1] == "storage offload (ZeRO-Infinity, Smart-Infinity)"

    class Chiplet:
        kind = "chiplet-package"

    class Plan:
        stack = "megatron"

    from dse.catalog import load_model

    assert [r["regime"] for r in checked_against(load_model("llama2-7b"), Chiplet(), Plan())] == ["chiplet package"]


def test_the_cli_prints_and_writes_what_the_estimate_was_checked_against(dse):
    r = dse("estimate", "--model", "gpt2-medium", "--hw", "dgx-h100", "--stack", "pytorch", "--dp", "1")
    assert r.code == 0
    text = " ".join(r.out.split())
    assert "checked against:" in text and "h100-hf time (16 cases)" in text and "optimistic on average" in text
    r = dse("estimate", "--model", "gpt2-medium", "--hw", "dgx-h100", "--stack", "compiled", "--dp", "1", "--json")
    assert json.loads(r.out)["checked_against"] == []
    r = dse("estimate", "--model", "gpt2-medium", "--hw", "dgx-h100", "--stack", "compiled", "--dp", "1")
    assert "an unchecked estimate" in " ".join(r.out.split())


def test_the_html_page_says_it_too(dse, tmp_path):
    page = tmp_path / "e.html"
    r = dse("estimate", "--model", "gpt2-medium", "--hw", "dgx-h100", "--stack", "pytorch", "--dp", "1", "--html", page)
    assert r.code == 0
    assert "checked against</b>: eager PyTorch" in page.read_text()


@pytest.mark.parametrize("model,hw,plan,want", [
    ("gpt2-medium", "dgx-h100", dict(stack="pytorch", dp=1), []),
    ("gpt2-medium", "dgx-h100", dict(stack="pytorch", dp=8), ["measured on one GPU, this plan runs 8"]),
    ("gpt2-medium", "server-l40s-x8", dict(stack="pytorch", dp=1), ["measured on H100, H200 only, not l40s"]),
    ("llama3-8b", "dgx-b200", dict(tp=2), []),
    ("llama3-8b", "mi300x-platform", dict(tp=2), ["measured on H100, B200, GB200 only, not mi300x"]),
    ("llama2-7b", "dgx-a100-80gb", dict(tp=2), []),
])
def test_a_regime_says_where_the_plan_differs_from_every_measured_run(model, hw, plan, want):
    assert _checked(model, hw, **plan)[0]["caveats"] == want


def test_the_console_line_carries_the_caveats(dse):
    r = dse("estimate", "--model", "gpt2-medium", "--hw", "server-l40s-x8", "--stack", "pytorch", "--dp", "1")
    assert "on one GPU (measured on H100, H200 only, not l40s):" in " ".join(r.out.split())
