"""The shipped model catalog: every file loads, validates and has its exact parameter count.

Each reference count below is the number of trainable parameters of the architecture
as the model's reference implementation builds it (tied weights counted once,
non-trainable buffers such as causal masks or rotary frequency tables excluded).
Where a count is not published exactly, it was reproduced independently by building
the Hugging Face model class from the public config on PyTorch's meta device and
summing ``numel`` over unique parameters: ``tests/fixtures/hf/count_with_transformers.py``
(transformers 5.23.0, torch 2.13.0 CPU). That script reproduced every number in
this table. "HF API safetensors.total" numbers are the Hugging Face model API's
tensor totals as quoted in public code (not fetched here: no network); the Llama 2
checkpoints also store one 64-float rotary ``inv_freq`` buffer per layer, which is
not a parameter and is subtracted. KerasHub numbers are the ``params`` metadata of
keras-team/keras-hub ``keras_hub/src/models/*/*_presets.py``.
"""

from __future__ import annotations

import json

import pytest

from dse import catalog
from dse.cli import main
from dse.formulas import transformer as T

HF_META = "transformers 5.23.0 meta-device count (tests/fixtures/hf/count_with_transformers.py)"

# name -> (exact parameter count, where the reference number comes from)
REFERENCE = {
    "gpt2-small": (124_439_808, "KerasHub gpt2_presets.py gpt2_base_en params; " + HF_META + " (GPT2LMHeadModel)"),
    "gpt2-medium": (354_823_168, "KerasHub gpt2_presets.py gpt2_medium_en params; " + HF_META),
    "gpt2-xl": (1_557_611_200, "KerasHub gpt2_presets.py gpt2_extra_large_en params; " + HF_META),
    "gpt3-175b": (174_604_259_328, HF_META + " (GPT2LMHeadModel, 96 x 12288, V 50257, 2048 positions); "
                  "Brown et al. 2020 label 175.0B"),
    "megatron-22b": (22_074_273_792, HF_META + " (GPT2LMHeadModel, 48 x 6144, V 51200, 2048 positions)"),
    "megatron-530b": (529_600_819_200, HF_META + " (GPT2LMHeadModel, 105 x 20480, V 51200, 2048 positions)"),
    "megatron-1t": (1_008_038_758_400, HF_META + " (GPT2LMHeadModel, 128 x 25600, V 51200, 2048 positions)"),
    "bert-large": (336_226_108, "KerasHub bert_presets.py bert_large_en_uncased backbone 335,141,888 + MLM "
                   "transform/bias and NSP heads 1,084,220; " + HF_META + " (BertForPreTraining)"),
    "opt-13b": (12_853_473_280, HF_META + " (OPTForCausalLM, facebook/opt-13b config, 2050 position rows)"),
    "llama2-7b": (6_738_415_616, "KerasHub llama_presets.py llama2_7b_en params; HF API safetensors.total of "
                  "meta-llama/Llama-2-7b-hf 6,738,417,664 minus 32 x 64 rotary inv_freq buffers; " + HF_META),
    "llama2-13b": (13_015_864_320, "HF API safetensors.total of meta-llama/Llama-2-13b-hf 13,015,866,880 minus "
                   "40 x 64 rotary inv_freq buffers; " + HF_META),
    "llama-65b": (65_285_660_672, "pyllama's (juncongmoo/pyllama) quantization log of decapoda-research/llama-65b-hf: "
                  "'Number of parameters: 65285660672'; Touvron et al. 2023 (arXiv 2302.13971) Table 2: 65.2B"),
    "llama2-70b": (68_976_648_192, "HF API safetensors.total of meta-llama/Llama-2-70b-hf 68,976,653,312 minus "
                   "80 x 64 rotary inv_freq buffers; " + HF_META),
    "llama3-8b": (8_030_261_248, "KerasHub llama3_presets.py llama3_8b_en params; HF API safetensors.total of "
                  "meta-llama/Llama-3.1-8B (same shape); " + HF_META),
    "llama3-70b": (70_553_706_496, "HF API safetensors.total of meta-llama/Llama-3.1-70B (same shape as "
                   "Meta-Llama-3-70B); " + HF_META),
    "llama3.1-405b": (405_853_388_800, "HF API safetensors.total of meta-llama/Llama-3.1-405B; " + HF_META),
    "t5-base": (222_903_552, "transformers 5.24.0 meta-device count (T5ForConditionalGeneration, google-t5/t5-base "
                "config); Raffel et al. 2020 §3.1.1: about 220 million"),
    "flan-t5-xl": (2_849_757_184, "transformers 5.24.0 meta-device count 2,783,959,040 (it ties every T5 LM head) + "
                   "the checkpoint's own lm_head 32,128 x 2,048 (tie_word_embeddings false: Transformers 4.x builds "
                   "it, 2,849,757,184)"),
    "mistral-7b": (7_241_732_096, "KerasHub mistral_presets.py mistral_7b_en params; " + HF_META),
    "qwen2-7b": (7_615_616_512, "KerasHub qwen_presets.py qwen2.5_math_7b_en params (same shape); " + HF_META),
    "gemma2-9b": (9_241_705_984, "KerasHub gemma_presets.py gemma2_9b_en params; transformers 5.24.0 meta-device "
                  "count (Gemma2ForCausalLM)"),
    "mixtral-8x7b": (46_702_792_704, "Mixtral model card 46.7B; transformers 5.24.0 meta-device count "
                     "(MixtralForCausalLM)"),
    "qwen3-30b-a3b": (30_532_122_624, "Qwen3 model card: 30.5B total, 29.9B non-embedding; transformers 5.24.0 "
                      "meta-device count (Qwen3MoeForCausalLM)"),
    "gpt-oss-120b": (116_829_156_672, "gpt-oss model card (arXiv 2508.10925) Table 1: 116.83B total; transformers "
                     "5.24.0 meta-device count (GptOssForCausalLM)"),
    "llama4-scout": (107_769_861_120, "Llama 4 model card: 109B total with the vision encoder; transformers 5.24.0 "
                     "meta-device count of the text decoder (Llama4ForCausalLM)"),
    "gemma3-27b": (27_009_346_304, "transformers 5.24.0 meta-device count of the text decoder (Gemma3ForCausalLM)"),
    "deepseek-v3": (671_026_404_352, "DeepSeek-V3 report (arXiv 2412.19437) §1: 671B total; transformers 5.24.0 "
                    "meta-device count (DeepseekV3ForCausalLM, deepseek-ai/DeepSeek-V3 config without "
                    "quantization_config; the MTP layer's 14B are not built, as in dse)"),
    # Smart-Infinity's evaluation models, reconstructed from their sizes (see the model files).
    "smart-infinity-gpt2-4.0b": (3_986_552_320, HF_META + " (GPT2LMHeadModel, 49 x 2560, V 50304, 1024 positions)"),
    "smart-infinity-gpt2-8.4b": (8_392_435_200, HF_META + " (GPT2LMHeadModel, 105 x 2560, V 50304, 1024 positions)"),
    "smart-infinity-bert-4.0b": (4_027_924_354, HF_META + " (BertForPreTraining, 50 x 2560, V 30592, 1024 positions; "
                                 "HF's embedding LayerNorm stands for Megatron's final LayerNorm, same count)"),
    "smart-infinity-bert-8.3b": (8_276_454_274, HF_META + " (BertForPreTraining, 104 x 2560, V 30592, 1024 positions; "
                                 "HF's embedding LayerNorm stands for Megatron's final LayerNorm, same count)"),
}

# MoE models: parameters a token uses (all but the k-of-E routed experts' unused ones), against the model cards.
ACTIVE = {"mixtral-8x7b": (12_879_925_248, 12.9e9), "qwen3-30b-a3b": (3_353_032_704, 3.3e9),
          # gpt-oss: the model card's 5.13B active excludes the unembedding (201,088 x 2,880 = 579,133,440)
          "gpt-oss-120b": (5_711_982_912, 5.13e9 + 579_133_440),
          "llama4-scout": (17_172_894_720, 17.2e9),   # the card: "17B" (17.17 B)
          "deepseek-v3": (37_552_282_624, 37e9)}

# Size labels the papers use; the exact counts must round to them (tolerance: the rounding
# of the label, 1 %). Korthikanti et al. 2022 Table 3, Brown et al. 2020 Table 2.1.
NOMINAL = {"megatron-22b": 22e9, "megatron-530b": 530e9, "megatron-1t": 1e12, "gpt3-175b": 175e9,
           # Smart-Infinity (arXiv 2403.06664) Fig. 9 labels
           "smart-infinity-gpt2-4.0b": 4.0e9, "smart-infinity-gpt2-8.4b": 8.4e9,
           "smart-infinity-bert-4.0b": 4.0e9, "smart-infinity-bert-8.3b": 8.3e9}


def parameters(spec) -> int:
    if spec.architecture == "encoder-decoder":   # both stacks: every layer's, the decoder's cross-attention, two
        tables = 2 * T.relative_position_parameters(spec.relative_buckets, spec.heads)   # bias tables, two final norms
        cross = T.cross_attention_parameters(spec.hidden, spec.heads, spec.kv_heads, spec.head_dim, spec.norm)
        return dense_parameters(spec) + spec.decoder_layers * cross + tables + T.norm_parameters(spec.hidden,
                                                                                                 spec.norm)
    if spec.experts:    # MoE: the formula of the MoE MLP in the MoE layers (dse.formulas.transformer.moe)
        n = spec.moe_layers
        mlp_bias = spec.bias if spec.mlp_bias is None else spec.mlp_bias   # PhiMoE: its attention's biases only
        mlp = T.mlp_parameters(spec.hidden, spec.ffn_hidden, spec.ffn_type, mlp_bias)
        moe = T.moe_mlp_parameters(spec.hidden, spec.experts, spec.expert_ffn, spec.ffn_type,
                                   shared_experts=spec.shared_experts, shared_ffn=spec.shared_expert_ffn or 0,
                                   shared_gate=spec.shared_expert_gate, bias=mlp_bias)
        return dense_parameters(spec) + n * (moe - mlp)
    return dense_parameters(spec)


def dense_parameters(spec) -> int:
    attention = None
    if spec.mla:    # multi-head latent attention (dse.formulas.transformer.mla)
        attention = T.mla_attention_parameters(spec.hidden, spec.heads, spec.q_lora_rank, spec.kv_lora_rank,
                                               spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim)
    return int(T.parameter_count(
        spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.head_dim, spec.ffn_hidden, spec.vocab,
        ffn_type=spec.ffn_type, norm=spec.norm_params, bias=spec.bias, qkv_bias=spec.qkv_bias,
        position_embeddings=spec.position_embeddings, token_types=spec.token_types,
        embedding_norm=spec.embedding_norm, tied=spec.tied_embeddings, final_norm=spec.final_norm,
        pooler=spec.pooler, mlm_head=spec.mlm_head, nsp_head=spec.nsp_head, layer_norms=spec.layer_norms,
        qk_norm=spec.qk_norm and spec.qk_norm_weight, attention=attention, qk_norm_full=spec.qk_norm_full,
        head_bias=spec.head_bias, mlp_bias=spec.mlp_bias)) + (
        spec.layers * spec.heads if spec.attention_sinks else 0)


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_catalog_model_has_a_reference_count():
    assert set(catalog.names(catalog.models_dir())) == set(REFERENCE)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_catalog_model_loads_and_matches_reference(name):
    spec = catalog.load_model(name)
    assert spec.name == name
    assert spec.source, f"{name}: no source"
    text = (catalog.models_dir() / f"{name}.yaml").read_text()
    assert text.lstrip().startswith("#"), f"{name}: the file must open with a comment citing its source"
    assert parameters(spec) == REFERENCE[name][0]


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_show_model_json_reports_the_count(capsys, name):
    code, out, err = run(capsys, "show", "model", name, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["name"] == name
    assert data["parameters"] == REFERENCE[name][0]


@pytest.mark.parametrize("name", sorted(NOMINAL))
def test_paper_models_round_to_their_size_label(name):
    assert parameters(catalog.load_model(name)) == pytest.approx(NOMINAL[name], rel=0.01)


def test_list_models_lists_every_model(capsys):
    code, out, err = run(capsys, "list", "models", "--json")
    assert code == 0, err
    listed = {item["name"] for item in json.loads(out) if "hf_config" not in item}   # shipped hub configs: see
    assert listed == set(REFERENCE)                                                  # tests/test_hub_configs.py
    code, out, err = run(capsys, "list", "models")
    assert code == 0, err
    for name in REFERENCE:
        assert name in out


def test_megatron_models_use_the_papers_vocabulary_and_length():
    for name in ("megatron-22b", "megatron-530b", "megatron-1t"):
        spec = catalog.load_model(name)
        assert (spec.vocab, spec.max_seq_len, spec.seq_len, spec.ffn_hidden) == (51200, 2048, 2048, 4 * spec.hidden)


def test_llama31_405b_trains_at_8k_by_default():
    spec = catalog.load_model("llama3.1-405b")
    assert (spec.seq_len, spec.max_seq_len) == (8192, 131072)
    from dse.estimate import resolve

    _, _, plan = resolve("llama3.1-405b", "h100-cluster", tp=8, pp=18)
    assert plan.seq_len == 8192


def test_bert_large_is_an_encoder_with_pretraining_heads():
    spec = catalog.load_model("bert-large")
    assert spec.architecture == "encoder"
    assert (spec.pooler, spec.mlm_head, spec.nsp_head, spec.token_types) == (True, True, True, 2)


@pytest.mark.parametrize("name", sorted(ACTIVE))
def test_moe_models_active_parameters(capsys, name):
    from dse.estimate.parameters import model_parameters

    exact, label = ACTIVE[name]
    total, active = model_parameters(catalog.load_model(name))
    assert (total, active) == (REFERENCE[name][0], exact)
    # the cards give one decimal (12.88 B: "12.9B"; 3.35 B: "3.3B"); DeepSeek-V3's report none ("37B": 37.55 B with
    # the 0.93 B input embedding, 36.63 B without it)
    assert abs(active - label) < (0.1e9 if label % 1e9 else 1e9)
    code, out, err = run(capsys, "show", "model", name, "--json")
    assert code == 0, err
    assert json.loads(out)["active_parameters"] == exact
