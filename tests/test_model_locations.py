"""Models as people have them (issue 18, point 5): ``--model DIR`` reads ``DIR/config.json``; ``--model org/name``
not shipped (models/hf/, tests/test_hub_configs.py) comes from the local Hugging Face cache, offline; anything else
is one line, exit 2, saying where dse looked."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

import dse
from dse.catalog import load_model
from dse.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def offline(monkeypatch):
    """huggingface_hub cannot be imported (and nothing may reach the network)."""
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)


def fake_cache(root: Path, repo: str, fixture: str, *, ref: bool = True) -> Path:
    """A hub cache holding ``repo`` as huggingface_hub lays it out: refs/main -> snapshots/<revision>/config.json."""
    org, name = repo.split("/")
    entry = root / f"models--{org}--{name}"
    snap = entry / "snapshots" / REVISION
    snap.mkdir(parents=True)
    shutil.copy(FIXTURES / fixture / "config.json", snap / "config.json")
    if ref:
        (entry / "refs").mkdir()
        (entry / "refs" / "main").write_text(REVISION + "\n")
    return root


def test_a_directory_is_its_config_json(tmp_path, offline, capsys):
    model_dir = tmp_path / "Mistral-7B-v0.1"
    model_dir.mkdir()
    shutil.copy(FIXTURES / "Mistral-7B-v0.1" / "config.json", model_dir / "config.json")
    spec = load_model(str(model_dir))
    assert (spec.name, spec.layers, spec.kv_heads) == ("Mistral-7B-v0.1", 32, 8)
    code, out, err = run(capsys, "estimate", "--model", str(model_dir), "--hw", "dgx-h100", "--tp", "8", "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["params"] == 7_241_732_096


@pytest.mark.parametrize("variable, sub", [("HF_HUB_CACHE", ""), ("HF_HOME", "hub")])
def test_org_name_comes_from_the_hub_cache(tmp_path, monkeypatch, offline, variable, sub):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    fake_cache(tmp_path / sub if sub else tmp_path, "cache-only/Qwen2-7B", "Qwen2-7B")
    monkeypatch.setenv(variable, str(tmp_path))
    r = dse.estimate("cache-only/Qwen2-7B", "dgx-h100", tp=4)
    assert r["model"]["name"] == "Qwen2-7B" and r["model"]["params"] == 7_615_616_512


def test_the_default_cache_is_under_home(tmp_path, monkeypatch, offline):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    fake_cache(tmp_path / ".cache" / "huggingface" / "hub", "cache-only/gpt2", "gpt2")
    assert load_model("cache-only/gpt2").hidden == 768


def test_an_entry_without_refs_main_uses_its_only_snapshot(tmp_path, monkeypatch, offline):
    monkeypatch.setenv("HF_HUB_CACHE", str(fake_cache(tmp_path, "cache-only/opt-13b", "opt-13b", ref=False)))
    assert load_model("cache-only/opt-13b").hidden == 5120


def test_a_model_not_in_the_cache_is_one_line_saying_where_it_looked(tmp_path, monkeypatch, offline, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    code, out, err = run(capsys, "estimate", "--model", "cache-only/Mistral-7B-v0.1", "--hw", "dgx-h100")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("dse: error: ")
    assert "cache-only/Mistral-7B-v0.1" in lines[0]
    assert str(tmp_path / "models--cache-only--Mistral-7B-v0.1") in lines[0]


def test_other_bad_references_are_one_line(tmp_path, capsys):
    code, _, err = run(capsys, "estimate", "--model", str(tmp_path))
    assert code == 2 and "directory without a config.json" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "estimate", "--model", str(tmp_path / "a" / "b" / "c"))
    assert code == 2 and "no such file" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "show", "model", "llama2-7bb")
    assert code == 2 and "unknown model" in err                                      # a catalog name as before


def test_a_yaml_file_without_extension_still_reads(tmp_path):
    path = tmp_path / "mymodel"
    path.write_text((Path(__file__).parents[1] / "models" / "gpt2-xl.yaml").read_text())
    assert load_model(str(path)).hidden == 1600
