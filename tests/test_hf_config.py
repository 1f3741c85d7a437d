"""Hugging Face ``config.json`` import: offline, no transformers, exact parameter counts.

The fixtures in tests/fixtures/hf/<model>/config.json carry the fields of the public
configs of these Hugging Face repositories (values are facts, copied as published;
the ``transformers_version`` stamp is left out):

- gpt2: openai-community/gpt2
- Llama-2-70b-hf: meta-llama/Llama-2-70b-hf (GQA, 8 KV heads)
- Llama-3.1-8B: meta-llama/Llama-3.1-8B (rope_scaling "llama3", 131072 positions)
- Mistral-7B-v0.1: mistralai/Mistral-7B-v0.1
- Qwen2-7B: Qwen/Qwen2-7B (biases on Q/K/V only, untied)
- Qwen2-0.5B: Qwen/Qwen2-0.5B (tied embeddings)
- opt-13b: facebook/opt-13b
- bert-large-uncased: google-bert/bert-large-uncased (architectures: BertForMaskedLM)
- Mixtral-8x7B-v0.1: mistralai/Mixtral-8x7B-v0.1 (8 experts, top-2)
- Qwen1.5-MoE-A2.7B: Qwen/Qwen1.5-MoE-A2.7B (qwen2_moe: 60 experts, top-4, a gated shared expert)
- Qwen3-30B-A3B: Qwen/Qwen3-30B-A3B (qwen3_moe: 128 experts, top-8, QK-norm, head_dim 128 != hidden / heads)
- Qwen3-8B: Qwen/Qwen3-8B (qwen3: QK-norm)
- gemma-2-9b: google/gemma-2-9b (gemma2: GeGLU, head_dim 256, tied, four norms per layer)
- gpt-oss-120b: openai/gpt-oss-120b (gpt_oss: 128 biased experts, top-4, attention sinks, 128-token window on
  alternate layers, mxfp4 checkpoint); Llama-4-Scout-17B-16E: meta-llama/Llama-4-Scout-17B-16E (llama4: the
  text_config read; 16 experts, top-1, a shared expert, chunked attention on 3 of 4 layers), and its text_config as
  a standalone llama4_text config (Llama-4-Scout-17B-16E-text, the form text-only fine-tunes publish);
  gemma-3-1b-pt: google/gemma-3-1b-pt (gemma3_text: 5 local layers of 512 per global one, QK-norm);
  gemma-3-27b-pt: google/gemma-3-27b-pt (gemma3: its text_config). These five are the published configs'
  architecture fields as written out here from the model pages (Llama 4's as quoted in vLLM issue reports), not
  downloads; their counts are transformers' own.
- DeepSeek-V3: deepseek-ai/DeepSeek-V3 (deepseek_v3: MLA, 256 routed + 1 shared experts, first 3 layers dense)
- DeepSeek-V2-Lite: deepseek-ai/DeepSeek-V2-Lite (deepseek_v2: MLA without a query latent, 64 + 2 experts)
- Phi-3-mini-4k-instruct, Phi-3-medium-4k-instruct: microsoft/... (phi3: fused qkv_proj and gate_up_proj; medium
  with 10 KV heads)
- pythia-1.4b: EleutherAI/pythia-1.4b, gpt-neox-20b: EleutherAI/gpt-neox-20b (gpt_neox: fused QKV, rotary_pct 0.25,
  parallel residual with two LayerNorms; 20B: gelu_fast)
- falcon-7b: tiiuae/falcon-7b (falcon: multi-query, parallel_attn with one shared LayerNorm), falcon-40b:
  tiiuae/falcon-40b (new_decoder_architecture: 8 KV heads, ln_attn and ln_mlp)
- gemma-2b, gemma-7b: google/gemma-2b, google/gemma-7b (gemma: GeGLU, (1 + w) RMSNorm, sqrt(h) embedding scale,
  head_dim 256; 2b multi-query); phi-2, phi-1_5: microsoft/phi-2, microsoft/phi-1_5 (phi: parallel attention and MLP
  after one LayerNorm, partial rotary 0.4 / 0.5, biases, an lm_head bias); starcoder2-3b: bigcode/starcoder2-3b
  (LayerNorm, biased GELU MLP, 2 K/V heads, 4096 window); starcoderbase-1b: bigcode/starcoderbase-1b (gpt_bigcode:
  multi-query fused c_attn); stablelm-2-1_6b: stabilityai/stablelm-2-1_6b (LayerNorm, partial rotary 0.25, Q/K/V
  biases); granite-3.0-2b-base: ibm-granite/granite-3.0-2b-base (multipliers); SmolLM3-3B: HuggingFaceTB/SmolLM3-3B
  (NoPE every fourth layer); OLMo-2-1124-7B: allenai/OLMo-2-1124-7B (post-branch norms, full-width QK-norm);
  gpt-j-6b: EleutherAI/gpt-j-6b (gptj: parallel block, rotary_dim 64, MLP-only biases). These eleven are the
  published configs' architecture fields written out here, not downloads; their counts are transformers 5.24.0's
  own (meta device) and the model cards' sizes.
- gpt-neo-125m: EleutherAI/gpt-neo-125M (gpt_neo: global and 256-token local layers alternating, no q/k/v biases,
  learned positions, tied head), as a public repository's copy of its config.json shows it (models/hf/SOURCE.md,
  source 7); its count is transformers 5.24.0's own.
- t5-base: google-t5/t5-base (t5: encoder-decoder, ReLU, tied head), flan-t5-xl: google/flan-t5-xl (gated-gelu,
  untied head), t5-v1_1-base: google/t5-v1_1-base (gated-gelu, untied head)

REFERENCE below gives each exact count with its source; every one was also
reproduced by building the transformers class on the meta device
(tests/fixtures/hf/count_with_transformers.py, transformers 5.23.0 + torch 2.13.0 CPU).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dse.catalog import load_model
from dse.cli import main
from dse.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "hf"

# fixture -> (model_type, exact parameter count, source of the number)
REFERENCE = {
    "gpt2": ("gpt2", 124_439_808, "KerasHub gpt2_presets.py gpt2_base_en params"),
    "Llama-2-70b-hf": ("llama", 68_976_648_192, "HF API safetensors.total 68,976,653,312 minus 80 x 64 rotary "
                       "inv_freq buffers (see test_catalog_models.py)"),
    "Llama-3.1-8B": ("llama", 8_030_261_248, "HF API safetensors.total of meta-llama/Llama-3.1-8B; KerasHub "
                     "llama3_8b_en params"),
    "Mistral-7B-v0.1": ("mistral", 7_241_732_096, "KerasHub mistral_presets.py mistral_7b_en params"),
    "Qwen2-7B": ("qwen2", 7_615_616_512, "KerasHub qwen_presets.py qwen2.5_math_7b_en params (same shape: "
                 "28 x 3584, 28/4 heads, F 18944, V 152064, untied, QKV bias)"),
    "Qwen2-0.5B": ("qwen2", 494_032_768, "KerasHub qwen_presets.py qwen2.5_0.5b_en params (same shape: "
                   "24 x 896, 14/2 heads, F 4864, V 151936, tied)"),
    "opt-13b": ("opt", 12_853_473_280, "transformers OPTForCausalLM meta-device count (2050 position rows)"),
    "Mixtral-8x7B-v0.1": ("mixtral", 46_702_792_704, "Mixtral model card 46.7B; transformers 5.24.0 meta-device "
                          "count"),
    "Qwen1.5-MoE-A2.7B": ("qwen2_moe", 14_315_784_192, "model card 14.3B; transformers 5.24.0 meta-device count"),
    "Qwen3-30B-A3B": ("qwen3_moe", 30_532_122_624, "model card 30.5B; transformers 5.24.0 meta-device count"),
    "Qwen3-8B": ("qwen3", 8_190_735_360, "model card 8.2B; transformers 5.24.0 meta-device count"),
    "gpt-oss-120b": ("gpt_oss", 116_829_156_672, "gpt-oss model card 116.83B; transformers 5.24.0 meta-device count"),
    "Llama-4-Scout-17B-16E": ("llama4", 107_769_861_120, "its text_config: transformers 5.24.0 meta-device count of "
                              "Llama4ForCausalLM (the vision encoder is not counted)"),
    "Llama-4-Scout-17B-16E-text": ("llama4_text", 107_769_861_120, "transformers 5.24.0 meta-device count"),
    "gemma-3-1b-pt": ("gemma3_text", 999_885_952, "transformers 5.24.0 meta-device count (Gemma3ForCausalLM)"),
    "gemma-3-27b-pt": ("gemma3", 27_009_346_304, "its text_config: transformers 5.24.0 meta-device count of "
                       "Gemma3ForCausalLM (the vision tower is not counted)"),
    "gemma-2-9b": ("gemma2", 9_241_705_984, "KerasHub gemma_presets.py gemma2_9b_en params; transformers 5.24.0 "
                   "meta-device count"),
    "DeepSeek-V3": ("deepseek_v3", 671_026_404_352, "report §1: 671B; transformers 5.24.0 meta-device count "
                    "(quantization_config dropped)"),
    "DeepSeek-V2-Lite": ("deepseek_v2", 15_706_484_224, "model card 15.7B; transformers 5.24.0 meta-device count"),
    "Phi-3-mini-4k-instruct": ("phi3", 3_821_079_552, "KerasHub phi3_presets.py phi3_mini_4k_instruct_en params; "
                               "transformers 5.24.0 meta-device count"),
    "Phi-3-medium-4k-instruct": ("phi3", 13_960_238_080, "model card 14B; transformers 5.24.0 meta-device count"),
    "pythia-1.4b": ("gpt_neox", 1_414_647_808, "EleutherAI/pythia README (1,414,647,808 total); transformers 5.24.0 "
                    "meta-device count"),
    "gpt-neox-20b": ("gpt_neox", 20_554_567_680, "model card 20B; transformers 5.24.0 meta-device count"),
    "falcon-7b": ("falcon", 6_921_720_704, "model card 7B; transformers 5.24.0 meta-device count (tied head)"),
    "falcon-40b": ("falcon", 41_303_293_952, "model card 40B; transformers 5.24.0 meta-device count (tied head)"),
    "t5-base": ("t5", 222_903_552, "transformers 5.24.0 meta-device count (T5ForConditionalGeneration)"),
    "flan-t5-xl": ("t5", 2_849_757_184, "transformers 5.24.0 meta-device count 2,783,959,040 (Transformers 5 ties "
                   "every T5 head) + the checkpoint's own lm_head, 32,128 x 2,048 (tie_word_embeddings false)"),
    "t5-v1_1-base": ("t5", 247_577_856, "transformers 5.24.0 meta-device count 222,903,552 + the untied lm_head "
                     "32,128 x 768"),
    **{name: (mt, n, "transformers 5.24.0 meta-device count; model card " + card) for name, mt, n, card in (
        ("gemma-2b", "gemma", 2_506_172_416, "2.51B"), ("gemma-7b", "gemma", 8_537_680_896, "8.54B"),
        ("phi-2", "phi", 2_779_683_840, "2.7B"), ("phi-1_5", "phi", 1_418_270_720, "1.3B (1.42B with embeddings)"),
        ("starcoder2-3b", "starcoder2", 3_030_371_328, "3B"),
        ("starcoderbase-1b", "gpt_bigcode", 1_137_207_296, "1B"),
        ("stablelm-2-1_6b", "stablelm", 1_644_515_328, "1.6B"),
        ("granite-3.0-2b-base", "granite", 2_533_531_648, "2.5B"), ("SmolLM3-3B", "smollm3", 3_075_098_624, "3B"),
        ("OLMo-2-1124-7B", "olmo2", 7_298_617_344, "7.3B"), ("gpt-j-6b", "gptj", 6_050_882_784, "6B"),
        ("bloom-560m", "bloom", 559_214_592, "559M"), ("OLMo-1B-hf", "olmo", 1_176_764_416, "1B (1.18B)"),
        ("gpt-neo-125m", "gpt_neo", 125_198_592, "125M (a public copy of EleutherAI/gpt-neo-125M's config)"),
        ("OLMoE-1B-7B-0924", "olmoe", 6_919_161_856, "6.9B total, 1.3B active"),
        ("granite-3.0-1b-a400m-base", "granitemoe", 1_334_628_352, "1.3B total, 400M active"),
        ("granite-3.0-3b-a800m-base", "granitemoe", 3_298_793_472, "3.3B total, 800M active"),
        ("Phi-3.5-MoE-instruct", "phimoe", 41_873_153_344, "41.9B total, 6.6B active (its longrope rope_scaling "
         "factors left out of the fixture: no parameters)"),
        ("GLM-4.5-Air", "glm4_moe", 106_852_245_504, "106B total, 12B active (the MTP layer not built)"),
        ("GLM-4.5", "glm4_moe", 352_797_814_784, "355B total, 32B active (the MTP layer not built)"),
        ("Minitron-4B-Base", "nemotron", 4_190_509_056, "4.2B (config written from memory)"),
        ("c4ai-command-r-v01", "cohere", 34_980_831_232, "35B (config written from memory)"),
        ("c4ai-command-r7b-12-2024", "cohere2", 8_028_033_024, "8.03B, the card's 7B (config written from memory)"))},
    "bert-large-uncased": ("bert", 335_174_458, "transformers BertForMaskedLM meta-device count; = KerasHub "
                           "bert_large_en_uncased backbone 335,141,888 - pooler 1,049,600 + MLM head 1,082,170"),
}


def parameters(spec) -> int:
    """The count by the formulas (dense, and the MoE MLP in the MoE layers): as in test_catalog_models.py."""
    from test_catalog_models import parameters as formula

    return formula(spec)


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def config_path(name: str) -> str:
    return str(FIXTURES / name / "config.json")


@pytest.fixture
def no_transformers(monkeypatch):
    """Make importing transformers (or torch) fail: the import must not need them."""
    for mod in ("transformers", "torch", "huggingface_hub"):
        monkeypatch.setitem(sys.modules, mod, None)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_fixture_is_the_declared_model_type(name):
    assert json.loads(Path(config_path(name)).read_text())["model_type"] == REFERENCE[name][0]


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_hf_config_loads_offline_with_exact_count(name, no_transformers):
    spec = load_model(config_path(name))
    assert spec.name == name
    assert parameters(spec) == REFERENCE[name][1]


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_hf_config_through_the_cli(capsys, name, no_transformers):
    code, out, err = run(capsys, "show", "model", config_path(name), "--json")
    assert code == 0, err
    assert json.loads(out)["parameters"] == REFERENCE[name][1]


def test_estimate_accepts_a_config_json(capsys):
    code, out, err = run(capsys, "estimate", "--model", config_path("Mistral-7B-v0.1"), "--hw", "dgx-h100",
                         "--tp", "8", "--json")
    assert code == 0, err
    model = json.loads(out)["model"]
    assert (model["name"], model["params"], model["kv_heads"]) == ("Mistral-7B-v0.1", 7_241_732_096, 8)


def test_all_supported_model_types_are_covered():
    from dse.specs.hf import SUPPORTED

    assert {mt for mt, _, _ in REFERENCE.values()} == set(SUPPORTED)


def test_architecture_details_are_read():
    qwen = load_model(config_path("Qwen2-7B"))
    assert (qwen.qkv_bias, qwen.bias, qwen.kv_heads, qwen.tied_embeddings) == (True, False, 4, False)
    assert load_model(config_path("Qwen2-0.5B")).tied_embeddings is True
    opt = load_model(config_path("opt-13b"))
    assert (opt.ffn_type, opt.position_embeddings, opt.max_seq_len) == ("relu", 2050, 2048)
    bert = load_model(config_path("bert-large-uncased"))
    assert (bert.architecture, bert.pooler, bert.mlm_head, bert.nsp_head) == ("encoder", False, True, False)
    llama = load_model(config_path("Llama-2-70b-hf"))
    assert (llama.kv_heads, llama.ffn_type, llama.norm, llama.position) == (8, "swiglu", "rmsnorm", "rotary")


def test_default_sequence_is_a_training_length():
    # A config states the longest context (Llama 3.1: 131072 through rope_scaling; Mistral-7B 32768; Mistral-NeMo
    # 1024000), not a training length: the default is 4096, or the maximum when smaller (issue 18).
    for name, maximum in (("Llama-3.1-8B", 131072), ("Mistral-7B-v0.1", 32768), ("Mistral-Nemo-Base-2407", 1024000)):
        spec = load_model(config_path(name))
        assert (spec.seq_len, spec.max_seq_len) == (4096, maximum), name
    assert load_model(config_path("gpt2")).seq_len == 1024           # the maximum, when smaller
    assert load_model("llama3.1-405b").seq_len == 8192               # a catalog entry that states seq_len keeps it


def test_bert_pretraining_architecture_matches_the_catalog(tmp_path):
    # The same config saved from BertForPreTraining has the pooler and NSP head too:
    # 336,226,108, the catalog's bert-large (see test_catalog_models.py for the source).
    cfg = json.loads(Path(config_path("bert-large-uncased")).read_text())
    cfg["architectures"] = ["BertForPreTraining"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert parameters(load_model(str(path))) == 336_226_108 == parameters(load_model("bert-large"))


def test_unsupported_model_type_is_one_line_exit_2(capsys, tmp_path):
    cfg = {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24}   # a state-space model
    path = str(tmp_path / "config.json")
    Path(path).write_text(json.dumps(cfg))
    with pytest.raises(InputError):
        load_model(path)
    code, out, err = run(capsys, "estimate", "--model", path)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dse: error: ")
    assert path in lines[0] and "'mamba'" in lines[0]
    for supported in ("gpt2", "llama", "mistral", "qwen2", "opt", "bert"):
        assert supported in lines[0]
    assert "Traceback" not in err and out == ""


def test_config_json_errors_are_one_line(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": 4096,}')
    code, _, err = run(capsys, "show", "model", str(bad))
    assert code == 2 and "JSON syntax error" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "show", "model", str(tmp_path / "missing" / "config.json"))
    assert code == 2 and "no such file" in err
    bad.write_text('{"model_type": "llama", "hidden_size": 4096}')
    code, _, err = run(capsys, "show", "model", str(bad))
    assert code == 2 and "missing field 'num_attention_heads'" in err and str(bad) in err
