"""Defaults that run (issue 18, point 1): the default sequence is a training length, and every default that
shapes the answer is printed with the estimate and carried in ``--json`` as ``defaults``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dse
from dse.cli import main

NEMO = str(Path(__file__).parent / "fixtures" / "hf" / "Mistral-Nemo-Base-2407" / "config.json")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_long_context_config_defaults_to_a_training_length_and_runs(capsys):
    code, out, err = run(capsys, "estimate", "--model", NEMO, "--hw", "dgx-h100", "--tp", "8", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["plan"]["seq_len"] == 4096 and r["feasible"]
    assert r["defaults"]["seq_len"] == {"value": 4096, "rule": "training length; model max 1024000"}


@pytest.mark.parametrize("model, seq, rule", [
    ("gpt2-xl", 1024, "the model's maximum"),                                   # max 1024 < 4096
    ("llama2-7b", 4096, "the model's maximum"),
    ("llama3-8b", 8192, "the model's training length; model max 8192"),        # the catalog states seq_len
    ("llama3.1-405b", 8192, "the model's training length; model max 131072"),
])
def test_catalog_models_keep_their_stated_length(model, seq, rule):
    r = dse.estimate(model, "dgx-h100")
    assert r["plan"]["seq_len"] == seq
    assert r["defaults"]["seq_len"]["rule"] == rule


def test_defaults_name_what_the_plan_filled_in_and_only_that():
    r = dse.estimate("llama2-7b", "dgx-h100", tp=2)
    d = r["defaults"]
    assert (d["dp"]["value"], d["global_batch"]["value"], d["zero"]["value"]) == (4, 4, 1)
    assert d["global_batch"]["rule"] == "b·dp" and d["dp"]["rule"] == "fills one 8-GPU node"
    assert (d["precision"]["value"], d["grad_dtype"]["value"], d["recompute"]["value"]) == ("bf16", "fp32", "none")
    assert "tp" not in d and "schedule" not in d            # set by the caller; pp = 1 has no schedule
    given = dse.estimate("llama2-7b", "dgx-h100", tp=2, pp=2, dp=2, seq_len=2048, global_batch=64, zero=0,
                         precision="fp16", recompute="full")
    assert not {"seq_len", "dp", "global_batch", "zero", "precision", "recompute"} & set(given["defaults"])
    assert given["defaults"]["schedule"] == {"value": "1f1b", "rule": "pipeline schedule"}


def test_offload_defaults_name_the_drives():
    d = dse.estimate("llama2-13b", "a100-server-nvme", zero=3, offload_optimizer="nvme")["defaults"]
    assert d["ssds"]["value"] >= 1 and d["sub_group_size"]["value"] == 1e9


def test_the_console_prints_the_defaults_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = run(capsys, "estimate", "--model", NEMO, "--hw", "dgx-h100", "--tp", "8")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("defaults: "))
    assert "seq 4096 (training length; model max 1024000)" in line
    assert "global batch 1 = b·dp" in line and "ZeRO-1" in line and "dp 1 (fills one 8-GPU node)" in line
    assert "seq 4096" in out.split("defaults:")[0]          # and the header shows the length
