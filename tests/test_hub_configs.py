"""The shipped Hugging Face configs (models/hf/<org>/<name>/config.json, sources in models/hf/SOURCE.md) and how
``--model`` resolves: a catalog name, a file or directory, a shipped config by ``org/name`` or bare name (any
case), the local Hugging Face cache, else a one-line error whose suggestions include the shipped names.

Checks: every shipped config gives dse the parameter count Transformers 5.24 builds on the meta device; a config
that dse also holds as a fixture (tests/fixtures/hf, data/h200/configs) agrees with it key by key and reads into
the same model spec; the counts the model publishers or KerasHub's presets publish.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import pytest

from dse import catalog
from dse.cli import main
from dse.errors import InputError
from dse.estimate.parameters import model_parameters
from dse.hf_cache import shipped

ROOT = Path(__file__).resolve().parents[1]
HUB = ROOT / "models" / "hf"
SHIPPED = sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in HUB.glob("*/*/config.json"))
FIXTURE_DIRS = (ROOT / "tests" / "fixtures" / "hf", ROOT / "data" / "h200" / "configs")


def count(ref: str) -> int:
    return int(model_parameters(catalog.load_model(ref))[0])


def config(hub: str) -> dict:
    return json.loads((HUB / hub / "config.json").read_text())


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_popular_models_are_shipped():
    assert len(SHIPPED) >= 100 and set(shipped()) == set(SHIPPED)
    for hub in ("openai-community/gpt2", "openai-community/gpt2-medium", "openai-community/gpt2-large",
                "openai-community/gpt2-xl", "EleutherAI/pythia-70m", "EleutherAI/pythia-12b",
                "meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-13b-hf", "meta-llama/Meta-Llama-3-8B",
                "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B",
                "mistralai/Mistral-7B-v0.1", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-3B",
                "Qwen/Qwen2.5-7B", "Qwen/Qwen2-0.5B", "Qwen/Qwen2-7B", "google/gemma-2b", "google/gemma-7b",
                "google/gemma-2-2b", "google/gemma-2-9b", "microsoft/phi-2", "microsoft/Phi-3-mini-4k-instruct",
                "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", "HuggingFaceTB/SmolLM2-135M",
                "HuggingFaceTB/SmolLM2-360M", "HuggingFaceTB/SmolLM2-1.7B", "allenai/OLMo-1B-hf",
                "allenai/OLMo-7B-hf", "tiiuae/falcon-7b", "stabilityai/stablelm-2-1_6b", "facebook/opt-125m",
                "facebook/opt-350m", "facebook/opt-1.3b", "facebook/opt-2.7b", "facebook/opt-6.7b",
                "EleutherAI/gpt-neo-125m", "EleutherAI/gpt-neo-1.3B", "EleutherAI/gpt-neo-2.7B",
                "distilbert/distilgpt2"):
        assert hub in SHIPPED, hub


def test_bare_names_name_one_config_each():
    bare = [hub.split("/")[1].lower() for hub in SHIPPED]
    assert len(bare) == len(set(bare))


@pytest.mark.parametrize("hub", SHIPPED)
def test_only_the_keys_dse_reads(hub):
    """model_type, architectures and keys dse's readers look up: no weights, no tokenizer ids, no dtype."""
    cfg = config(hub)
    assert cfg["model_type"] and cfg["architectures"]
    assert not {"torch_dtype", "bos_token_id", "eos_token_id", "initializer_range", "use_cache"} & set(cfg)


def _fixture(hub: str) -> Path | None:
    name = hub.split("/")[1]
    return next((d / name / "config.json" for d in FIXTURE_DIRS if (d / name / "config.json").is_file()), None)


AGREE = [hub for hub in SHIPPED if _fixture(hub)]


def _fields(spec) -> dict:
    data = dataclasses.asdict(spec)
    return {k: v for k, v in data.items() if k not in ("source", "unmodelled", "name")}


@pytest.mark.parametrize("hub", AGREE)
def test_a_config_dse_already_holds_agrees(hub):
    """Every shipped key has the fixture's value, and both read into the same model spec."""
    fixture = _fixture(hub)
    theirs = json.loads(fixture.read_text())
    assert {k: v for k, v in config(hub).items() if theirs.get(k) != v} == {}
    assert _fields(catalog.load_model(hub)) == _fields(catalog.load_model(str(fixture)))


def test_the_fixtures_compared_cover_every_family_shipped_from_both():
    assert len(AGREE) >= 25
    assert {"gpt2", "pythia-1.4b", "Llama-3.1-8B", "Mistral-7B-v0.1", "Qwen2-0.5B", "gemma-2-9b", "OLMo-1B-hf",
            "Qwen3-8B", "phi-2", "falcon-7b"} <= {h.split("/")[1] for h in AGREE}


def transformers_count(cfg: dict) -> int:
    """Transformers 5.24's own count: the causal-LM class built from the config on the meta device, tied
    parameters once (as tests/fixtures/hf/count_with_transformers.py)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    cfg.pop("architectures")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = AutoConfig.for_model(model_type, **cfg)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf)
    return sum({id(p): p.numel() for p in model.parameters()}.values())


@pytest.mark.torch
@pytest.mark.parametrize("hub", SHIPPED)
def test_parameter_count_is_transformers_own(hub):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    assert count(hub) == transformers_count(config(hub))


#: Published counts: (total parameters, relative tolerance, source). KerasHub: keras_hub 0.x
#: src/models/<family>/<family>_presets.py "params" (the backbone; for a tied head that is the total, for Llama 3.2
#: KerasHub keeps a separate head: its count minus vocab x hidden).
PUBLISHED = {
    "openai-community/gpt2": (124_439_808, 0, "KerasHub gpt2_base_en; nanoGPT: 124M"),
    "openai-community/gpt2-medium": (354_823_168, 0, "KerasHub gpt2_medium_en; GPT-2 paper Table 2: 345M"),
    "openai-community/gpt2-large": (774_030_080, 0, "KerasHub gpt2_large_en; nanoGPT: 774M"),
    "openai-community/gpt2-xl": (1_557_611_200, 0, "KerasHub gpt2_extra_large_en; nanoGPT: 1558M"),
    "meta-llama/Llama-2-7b-hf": (6_738_415_616, 0, "KerasHub llama2_7b_en"),
    "meta-llama/Meta-Llama-3-8B": (8_030_261_248, 0, "KerasHub llama3_8b_en"),
    "meta-llama/Llama-3.2-1B": (1_498_482_688 - 128_256 * 2048, 0, "KerasHub llama3.2_1b minus its separate head"),
    "meta-llama/Llama-3.2-3B": (3_606_752_256 - 128_256 * 3072, 0, "KerasHub llama3.2_3b minus its separate head"),
    "mistralai/Mistral-7B-v0.1": (7_241_732_096, 0, "KerasHub mistral_7b_en"),
    "mistralai/Mistral-7B-v0.3": (7_248_023_552, 0, "KerasHub mistral_0.3_7b_en"),
    "Qwen/Qwen2.5-0.5B": (494_032_768, 0, "KerasHub qwen2.5_0.5b_en; model card 0.49B"),
    "Qwen/Qwen2.5-3B": (3_085_938_688, 0, "KerasHub qwen2.5_3b_en; model card 3.09B"),
    "Qwen/Qwen2.5-1.5B": (1.54e9, 0.005, "model card: 1.54B"),
    "Qwen/Qwen2.5-7B": (7.61e9, 0.005, "model card: 7.61B"),
    "Qwen/Qwen3-0.6B": (596_049_920, 0, "KerasHub qwen3_0.6b_en"),
    "Qwen/Qwen3-1.7B": (1_720_574_976, 0, "KerasHub qwen3_1.7b_en"),
    "Qwen/Qwen3-4B": (4_022_468_096, 0, "KerasHub qwen3_4b_en"),
    "Qwen/Qwen3-14B": (14_768_307_200, 0, "KerasHub qwen3_14b_en"),
    "google/gemma-2-2b": (2_614_341_888, 0, "KerasHub gemma2_2b_en"),
    "google/gemma-2-9b": (9_241_705_984, 0, "KerasHub gemma2_9b_en"),
    "google/gemma-2b": (2_506_172_416, 0, "KerasHub gemma_2b_en"),
    "google/gemma-7b": (8_537_680_896, 0, "KerasHub gemma_7b_en"),
    "microsoft/Phi-3-mini-4k-instruct": (3_821_079_552, 0, "KerasHub phi3_mini_4k_instruct_en"),
    "HuggingFaceTB/SmolLM2-135M": (135e6, 0.005, "its name: 135M"),
    "HuggingFaceTB/SmolLM2-360M": (360e6, 0.006, "its name: 360M"),
    "HuggingFaceTB/SmolLM2-1.7B": (1.7e9, 0.01, "its name: 1.7B"),
    "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T": (1.1e9, 0.001, "its name: 1.1B"),
    # KerasHub's OPT position table has 2,048 rows, OPTLearnedPositionalEmbedding 2,050 (the offset of 2)
    "facebook/opt-125m": (125_237_760 + 2 * 768, 0, "KerasHub opt_125m_en + the 2 offset rows"),
    "facebook/opt-1.3b": (1_315_753_984 + 2 * 2048, 0, "KerasHub opt_1.3b_en + the 2 offset rows"),
    "facebook/opt-2.7b": (2.7e9, 0.02, "KerasHub opt_2.7b_en (rounded): 2.7B"),
    "facebook/opt-6.7b": (6.7e9, 0.007, "KerasHub opt_6.7b_en (rounded): 6.7B"),
    "distilbert/distilgpt2": (124_439_808 - 6 * 7_087_872, 0, "KerasHub gpt2_base_en less six GPT-2 layers; 82M"),
    "EleutherAI/gpt-neo-125m": (125e6, 0.002, "its name: 125M"),
    "EleutherAI/gpt-neo-1.3B": (1.3e9, 0.013, "its name: 1.3B"),
    "EleutherAI/gpt-neo-2.7B": (2.7e9, 0.02, "its name: 2.7B"),
}
#: Pythia's model card (huggingface.co/EleutherAI/pythia-*): non-embedding parameters, which leave out embed_in
#: and embed_out (vocab x hidden each); 12B's as the card's 11.3B.
PYTHIA_NON_EMBEDDING = {"70m": 18_915_328, "160m": 85_056_000, "410m": 302_311_424, "1b": 805_736_448,
                        "1.4b": 1_208_602_624, "2.8b": 2_517_652_480, "6.9b": 6_444_163_072}


@pytest.mark.parametrize("hub", sorted(PUBLISHED))
def test_published_counts(hub):
    n, tol, _source = PUBLISHED[hub]
    assert count(hub) == pytest.approx(n, rel=tol, abs=0 if tol else 0.5)


@pytest.mark.parametrize("size", [*PYTHIA_NON_EMBEDDING, "12b"])
def test_pythia_non_embedding_counts(size):
    hub = f"EleutherAI/pythia-{size}"
    cfg = config(hub)
    embeddings = 2 * cfg["vocab_size"] * cfg["hidden_size"]
    if size == "12b":
        assert (count(hub) - embeddings) / 1e9 == pytest.approx(11.3, abs=0.05)
    else:
        assert count(hub) - embeddings == PYTHIA_NON_EMBEDDING[size]
    assert count(f"{hub}-deduped") == count(hub)


# ------------------------------------------------------------------------------------------------- resolution


@pytest.mark.parametrize("ref, hub", [
    ("gpt2", "openai-community/gpt2"), ("gpt2-large", "openai-community/gpt2-large"),
    ("openai-community/GPT2-XL", "openai-community/gpt2-xl"), ("pythia-1.4b", "EleutherAI/pythia-1.4b"),
    ("eleutherai/pythia-1.4B", "EleutherAI/pythia-1.4b"), ("Llama-3.2-1B", "meta-llama/Llama-3.2-1B"),
    ("qwen/qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B"), ("opt-350m", "facebook/opt-350m"), ("opt-6.7b", "facebook/opt-6.7b"),
    ("gpt-neo-125M", "EleutherAI/gpt-neo-125m"), ("gpt-neo-2.7B", "EleutherAI/gpt-neo-2.7B"),
    ("distilgpt2", "distilbert/distilgpt2"),
])
def test_hub_ids_and_bare_names_resolve_offline(ref, hub, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    spec = catalog.load_model(ref)
    assert spec.name == hub.split("/")[1]
    assert spec.source == f"Hugging Face config models/hf/{hub}/config.json"


def test_a_catalog_name_keeps_priority():
    """gpt2-medium and gpt2-xl stay the YAMLs; the shipped configs of the same models count the same."""
    for name in ("gpt2-medium", "gpt2-xl"):
        assert catalog.load_model(name).source.startswith("Radford")
        assert count(name) == count(f"openai-community/{name}")
    assert count("gpt2-small") == count("gpt2")


def test_a_path_comes_before_a_shipped_config(tmp_path, monkeypatch):
    local = tmp_path / "EleutherAI" / "pythia-70m"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps({**config("EleutherAI/pythia-70m"), "num_hidden_layers": 3}))
    monkeypatch.chdir(tmp_path)
    assert catalog.load_model("EleutherAI/pythia-70m").layers == 3
    monkeypatch.chdir(ROOT)
    assert catalog.load_model("EleutherAI/pythia-70m").layers == 6


def test_an_unshipped_hub_id_still_comes_from_the_cache(tmp_path, monkeypatch):
    entry = tmp_path / "models--someone--tiny-gpt" / "snapshots" / "abc"
    entry.mkdir(parents=True)
    shutil.copy(HUB / "openai-community" / "gpt2" / "config.json", entry / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert catalog.load_model("someone/tiny-gpt").name == "tiny-gpt"
    with pytest.raises(InputError, match="not shipped .*dse list.* not in the Hugging Face cache"):
        catalog.load_model("someone/other")


def test_an_unknown_name_suggests_shipped_ones(capsys):
    code, out, err = run(capsys, "estimate", "--model", "pythia-1.4", "--hw", "dgx-h100")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown model 'pythia-1.4'" in err and "'pythia-1.4b'" in err
    with pytest.raises(InputError, match="did you mean 'gpt2-large'"):
        catalog.load_model("gpt2-larg")


def test_estimate_and_list(capsys):
    code, out, err = run(capsys, "estimate", "--model", "openai-community/gpt2-large", "--hw", "dgx-h100", "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["params"] == 774_030_080
    code, out, err = run(capsys, "list", "models", "--json")
    listed = {m["name"]: m for m in json.loads(out)}
    assert listed["EleutherAI/pythia-1.4b"]["hf_config"] == "models/hf/EleutherAI/pythia-1.4b/config.json"
    assert "llama3-8b" in listed
    code, out, err = run(capsys, "list")
    assert code == 0, err
    assert "Hugging Face configs shipped" in out and "pythia-1.4b" in out and "Llama-3.2-1B" in out


def test_a_measurement_row_names_a_shipped_model():
    """dse.calibrate.measurements: a row's model resolves as --model does; its params are still checked."""
    from dse.calibrate.measurements import hf_model

    row = {"model": "gpt2-large", "params": 774_030_080}
    model, note = hf_model(row, "rows.jsonl:1")
    assert (model.name, model.layers, note) == ("gpt2-large", 36, "")
    model, note = hf_model({**row, "params": 774_030_080 + 1024 * 1280}, "rows.jsonl:1")   # a longer position table
    assert model.position_embeddings == 2048 and "2048 rows" in note
    with pytest.raises(InputError, match="does not match the catalog's gpt2-large"):
        hf_model({**row, "params": 774_030_081}, "rows.jsonl:1")
    model, _ = hf_model({"model": "EleutherAI/pythia-410m"}, "rows.jsonl:2")
    assert model.layers == 24


def test_a_search_space_names_a_shipped_model(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("name: pythia-dp\nmodel: EleutherAI/pythia-160m\nhardware: dgx-h100\n"
                     "fixed: {plan.global_batch: 64, plan.seq_len: 2048}\n"
                     "parameters:\n  gpus: 8\n  plan.tp: [1, 2]\nobjectives: [time]\n")
    code, out, err = run(capsys, "search", "--space", str(space), "--engine", "exhaustive", "--json", "-", "-q")
    assert code == 0, err
    assert "pythia-160m" in out
