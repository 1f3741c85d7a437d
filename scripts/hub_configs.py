"""Write the shipped Hugging Face configs, models/hf/<org>/<name>/config.json (run by hand, not by dse or the tests).

    pip download litgpt==0.5.13 --no-deps -d /tmp/lit
    unzip -q -o /tmp/lit/litgpt-*.whl 'litgpt/config.py' -d /tmp/lit
    python scripts/hub_configs.py /tmp/lit/litgpt/config.py

Every value comes from a cited source (models/hf/SOURCE.md): the architecture of the litgpt entries from litgpt's
config table (Apache-2.0; read as data, its ``Config`` dataclass fills in the derived fields), mapped onto each
model_type's config.json keys below; the facts litgpt does not state (whether the LM head is tied, GPT-2's sizes)
from the sources named in TIED and GPT2; the configs dse already ships (tests/fixtures/hf) trimmed to the keys
dse's readers read. Only those keys, ``model_type`` and ``architectures`` are written.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "models" / "hf"
FIXTURES = ROOT / "tests" / "fixtures" / "hf"

#: Hub id -> the fixture (tests/fixtures/hf/<name>) it is a trimmed copy of.
FROM_FIXTURE = {
    "openai-community/gpt2": "gpt2", "Qwen/Qwen2-0.5B": "Qwen2-0.5B", "Qwen/Qwen2-7B": "Qwen2-7B",
    "stabilityai/stablelm-2-1_6b": "stablelm-2-1_6b", "EleutherAI/gpt-j-6b": "gpt-j-6b",
    "EleutherAI/gpt-neox-20b": "gpt-neox-20b", "bigscience/bloom-560m": "bloom-560m",
    "bigcode/starcoder2-3b": "starcoder2-3b", "bigcode/starcoderbase-1b": "starcoderbase-1b",
    "ibm-granite/granite-3.0-2b-base": "granite-3.0-2b-base", "HuggingFaceTB/SmolLM3-3B": "SmolLM3-3B",
    "facebook/opt-13b": "opt-13b", "google/gemma-3-1b-pt": "gemma-3-1b-pt", "microsoft/phi-2": "phi-2",
    "microsoft/phi-1_5": "phi-1_5", "microsoft/Phi-3-mini-4k-instruct": "Phi-3-mini-4k-instruct",
    "tiiuae/falcon-7b": "falcon-7b", "tiiuae/falcon-40b": "falcon-40b", "google/gemma-2b": "gemma-2b",
    "google/gemma-7b": "gemma-7b", "mistralai/Mistral-7B-v0.1": "Mistral-7B-v0.1",
    "meta-llama/Llama-3.1-8B": "Llama-3.1-8B", "allenai/OLMo-1B-hf": "OLMo-1B-hf",
    "allenai/OLMo-2-1124-7B": "OLMo-2-1124-7B", "Qwen/Qwen3-8B": "Qwen3-8B", "google/gemma-2-9b": "gemma-2-9b",
    "EleutherAI/pythia-1.4b": "pythia-1.4b",
}
#: A fine-tune shipped as a copy of its base's config: litgpt gives both the same architecture (checked below).
SAME_AS = {
    "tiiuae/falcon-7b-instruct": "tiiuae/falcon-7b", "tiiuae/falcon-40b-instruct": "tiiuae/falcon-40b",
    "google/gemma-2b-it": "google/gemma-2b", "google/gemma-7b-it": "google/gemma-7b",
    "google/codegemma-7b-it": "google/gemma-7b", "mistralai/Mistral-7B-Instruct-v0.1": "mistralai/Mistral-7B-v0.1",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B", "google/gemma-2-9b-it": "google/gemma-2-9b",
    "allenai/OLMo-2-1124-7B-SFT": "allenai/OLMo-2-1124-7B", "allenai/OLMo-2-1124-7B-DPO": "allenai/OLMo-2-1124-7B",
    "allenai/OLMo-2-1124-7B-Instruct": "allenai/OLMo-2-1124-7B", "Qwen/Qwen3-8B-Base": "Qwen/Qwen3-8B",
    "EleutherAI/pythia-1.4b-deduped": "EleutherAI/pythia-1.4b",
}
#: litgpt lists the Llama 3.1 repositories under their names before Meta renamed them.
LITGPT_NAME = {"meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
               "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B-Instruct"}

#: Whether the LM head is the embedding matrix (tie_word_embeddings), per repository prefix, with its source.
TIED = {
    "EleutherAI/pythia-": (False, "Pythia model card: total = non-embedding + embed_in + embed_out parameters"),
    "meta-llama/Llama-2-": (False, "torchtune 0.6.1 llama2 builders (separate output projection)"),
    "codellama/CodeLlama-": (False, "torchtune 0.6.1 code_llama2 builders (separate output projection)"),
    "meta-llama/Meta-Llama-3-": (False, "torchtune 0.6.1 llama3 builders; KerasHub llama3_8b_en 8,030,261,248"),
    "meta-llama/Llama-3.1-": (False, "torchtune 0.6.1 llama3_1 builders; its config (fixture)"),
    "meta-llama/Llama-3.2-": (True, "torchtune 0.6.1 llama3_2_1b / llama3_2_3b: tie_word_embeddings=True"),
    "TinyLlama/TinyLlama-1.1B": (False, "the 1.1B of its name: 1,100,048,384 untied (tied: 1.03B)"),
    "HuggingFaceTB/SmolLM2-": (True, "the size of its name: 135M / 360M / 1.7B tied (untied: 163M / 409M / 1.81B)"),
    "mistralai/Mistral-7B-": (False, "torchtune 0.6.1 mistral_7b (separate output projection); KerasHub 7.24B"),
    "Qwen/Qwen2.5-0.5B": (True, "torchtune 0.6.1 qwen2_5_0_5b: tie_word_embeddings=True"),
    "Qwen/Qwen2.5-1.5B": (True, "torchtune 0.6.1 qwen2_5_1_5b_*: tie_word_embeddings=True"),
    "Qwen/Qwen2.5-3B": (True, "torchtune 0.6.1 qwen2_5_3b: tie_word_embeddings=True"),
    "Qwen/Qwen2.5-7B": (False, "torchtune 0.6.1 qwen2_5_7b_* (separate output projection)"),
    "Qwen/Qwen2.5-14B": (False, "torchtune 0.6.1 qwen2_5_14b_* (separate output projection)"),
    "Qwen/Qwen3-0.6B": (True, "KerasHub qwen3_0.6b_en 596,049,920 (the tied count)"),
    "Qwen/Qwen3-1.7B": (True, "KerasHub qwen3_1.7b_en 1,720,574,976 (the tied count)"),
    "Qwen/Qwen3-4B": (True, "KerasHub qwen3_4b_en 4,022,468,096 (the tied count)"),
    "Qwen/Qwen3-8B": (False, "KerasHub qwen3_8b_en 8,190,735,360 (the untied count); its config (fixture)"),
    "Qwen/Qwen3-14B": (False, "KerasHub qwen3_14b_en 14,768,307,200 (the untied count)"),
    "google/gemma-2-": (True, "Gemma2Config default; torchtune 0.6.1 gemma2 (TiedLinear output)"),
    "allenai/OLMo-1B": (True, "its config (fixture); OLMo paper Table 1: weight tying yes for 1B"),
    "allenai/OLMo-7B": (False, "OLMo paper (arXiv 2402.00838) Table 1: weight tying no for 7B"),
}

#: GPT-2's sizes: karpathy/nanoGPT model.py GPT.from_pretrained (n_layer, n_head, n_embd; vocab 50257, 1024
#: positions, biases), Radford et al. 2019 Table 2 (layers, d_model); the rest as openai-community/gpt2's config.
GPT2 = {"openai-community/gpt2-medium": (24, 16, 1024), "openai-community/gpt2-large": (36, 20, 1280),
        "openai-community/gpt2-xl": (48, 25, 1600)}


def _opt(layers: int, hidden: int, heads: int, ffn: int, proj: int, pre_ln: bool = True) -> dict:
    """An OPT config.json's keys (models/hf/SOURCE.md, source 6): the size; vocab 50272, 2048 positions, ReLU,
    dropout 0.1, attention_dropout 0 as every OPT config."""
    return {"activation_function": "relu", "architectures": ["OPTForCausalLM"], "attention_dropout": 0.0,
            "do_layer_norm_before": pre_ln, "dropout": 0.1, "ffn_dim": ffn, "hidden_size": hidden,
            "max_position_embeddings": 2048, "model_type": "opt", "num_attention_heads": heads,
            "num_hidden_layers": layers, "vocab_size": 50272, "word_embed_proj_dim": proj}


def _neo(layers: int, hidden: int, heads: int) -> dict:
    """A GPT-Neo config.json's keys (models/hf/SOURCE.md, source 7): the size; global and local layers alternating,
    window 256, vocab 50257, 2048 positions, gelu_new, no dropout."""
    return {"activation_function": "gelu_new", "architectures": ["GPTNeoForCausalLM"], "attention_dropout": 0,
            "attention_types": [[["global", "local"], layers // 2]], "embed_dropout": 0, "hidden_size": hidden,
            "intermediate_size": None, "max_position_embeddings": 2048, "model_type": "gpt_neo", "num_heads": heads,
            "num_layers": layers, "resid_dropout": 0, "vocab_size": 50257, "window_size": 256}


#: Configs written from their sources directly (models/hf/SOURCE.md, sources 6 to 8): OPT 125m to 6.7b, GPT-Neo
#: and distilgpt2 (six of GPT-2's layers; the rest as openai-community/gpt2's config, added in main).
HAND = {"facebook/opt-125m": _opt(12, 768, 12, 3072, 768), "facebook/opt-350m": _opt(24, 1024, 16, 4096, 512, False),
        "facebook/opt-1.3b": _opt(24, 2048, 32, 8192, 2048), "facebook/opt-2.7b": _opt(32, 2560, 32, 10240, 2560),
        "facebook/opt-6.7b": _opt(32, 4096, 32, 16384, 4096), "EleutherAI/gpt-neo-125m": _neo(12, 768, 12),
        "EleutherAI/gpt-neo-1.3B": _neo(24, 2048, 16), "EleutherAI/gpt-neo-2.7B": _neo(32, 2560, 20)}

#: litgpt entries generated per model_type, by hub id prefix (and the architectures class).
FAMILIES = [
    ("EleutherAI/pythia-", "gpt_neox", "GPTNeoXForCausalLM"),
    ("meta-llama/Llama-2-", "llama", "LlamaForCausalLM"), ("meta-llama/Meta-Llama-3-8B", "llama", "LlamaForCausalLM"),
    ("meta-llama/Llama-3.1-", "llama", "LlamaForCausalLM"),
    ("meta-llama/Llama-3.2-", "llama", "LlamaForCausalLM"), ("codellama/CodeLlama-", "llama", "LlamaForCausalLM"),
    ("TinyLlama/", "llama", "LlamaForCausalLM"), ("HuggingFaceTB/SmolLM2-", "llama", "LlamaForCausalLM"),
    ("mistralai/Mistral-7B-", "mistral", "MistralForCausalLM"),
    ("Qwen/Qwen2.5-", "qwen2", "Qwen2ForCausalLM"), ("Qwen/Qwen3-", "qwen3", "Qwen3ForCausalLM"),
    ("google/gemma-2-", "gemma2", "Gemma2ForCausalLM"), ("allenai/OLMo-7B", "olmo", "OlmoForCausalLM"),
    ("allenai/OLMo-1B", "olmo", "OlmoForCausalLM"),
]
#: The litgpt entries of those families left out: over 14B parameters (70B and larger are catalog YAMLs; the
#: Transformers check builds every shipped model), long-context variants, Python/Instruct CodeLlama variants,
#: Qwen3's 2507 releases and its MoE models (experts: models/*.yaml), the Llama-2 function-calling fine-tune, and
#: pythia-14m / -31m (litgpt's block_size 512 / 1024, below 4096 it sets dse's default sequence: not checked against
#: their configs).
SKIP = re.compile(r"(70b|70B|34b|32B|72B|27b|13b-(Python|Instruct)|7b-(Python|Instruct)|-1M|2507|A3B|A22B|"
                  r"-Coder|-Math|QwQ|Trelis|pythia-14m|pythia-31m)")


def litgpt_configs(path: str) -> dict:
    """litgpt's configs by hub id, each its ``Config`` (derived fields filled in)."""
    spec = importlib.util.spec_from_file_location("litgpt_config", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {f"{c['hf_config']['org']}/{c['hf_config']['name']}": mod.Config(**c) for c in mod.configs}


def read_keys() -> set[str]:
    """The config.json keys dse's readers read: every key looked up in dse/specs/hf/*.py."""
    pattern = re.compile(r"""(?:g\(|get\(|cfg\[|legacy=|, )"([a-z_A-Z0-9]+)"(?:\]|,|\)| in cfg)""")
    keys = {"hidden_activation", "rotary_pct", "model_type", "architectures"}
    for path in (ROOT / "dse" / "specs" / "hf").glob("*.py"):
        keys |= set(pattern.findall(path.read_text()))
    return keys - {"_name_or_path"}


def tied(hub: str) -> bool:
    for prefix, (value, _) in TIED.items():
        if hub.startswith(prefix):
            return value
    raise SystemExit(f"{hub}: no source for tie_word_embeddings")


def from_litgpt(hub: str, c, mt: str, arch: str) -> dict:
    """config.json keys of a litgpt Config, checked against what the family's reader assumes."""
    llama_like = mt != "gpt_neox"
    assert not c.lm_head_bias and c.n_expert == 0 and c.latent_attention is None, hub
    cfg = {"model_type": mt, "architectures": [arch], "hidden_size": c.n_embd, "intermediate_size": c.intermediate_size,
           "num_hidden_layers": c.n_layer, "num_attention_heads": c.n_head, "vocab_size": c.padded_vocab_size,
           "max_position_embeddings": c.block_size, "tie_word_embeddings": tied(hub)}
    if mt == "gpt_neox":
        assert (c.norm_class_name, c.bias, c.parallel_residual, c.shared_attention_norm, c.n_query_groups,
                c.mlp_class_name, c.gelu_approximate) == ("LayerNorm", True, True, False, c.n_head, "GptNeoxMLP",
                                                           "none"), hub
        assert c.head_size * c.n_head == c.n_embd, hub
        cfg.update(hidden_act="gelu", rotary_pct=c.rotary_percentage, use_parallel_residual=True)
        return cfg
    assert llama_like and c.rotary_percentage == 1.0 and not c.parallel_residual and not c.bias, hub
    cfg["num_key_value_heads"] = c.n_query_groups
    if c.head_size * c.n_head != c.n_embd or mt in ("qwen3", "gemma2"):
        cfg["head_dim"] = c.head_size
    if mt == "gemma2":
        assert (c.mlp_class_name, c.gelu_approximate, c.post_attention_norm, c.post_mlp_norm, c.scale_embeddings) == (
            "GemmaMLP", "tanh", True, True, True), hub
        cfg.update(hidden_activation="gelu_pytorch_tanh", sliding_window=c.sliding_window_size,
                   attn_logit_softcapping=c.attention_logit_softcapping,
                   final_logit_softcapping=c.final_logit_softcapping)
        return cfg
    assert c.mlp_class_name == "LLaMAMLP" and not c.post_attention_norm and not c.scale_embeddings, hub
    assert c.norm_qk == (mt in ("qwen3",)), hub
    assert c.attn_bias == (mt == "qwen2"), hub
    assert c.norm_class_name == ("LayerNorm" if mt == "olmo" else "RMSNorm"), hub
    cfg["hidden_act"] = "silu"
    if mt == "qwen2":
        cfg["use_sliding_window"] = False
    if mt == "mistral":
        cfg["sliding_window"] = c.sliding_window_size
    else:
        assert c.sliding_window_size is None, hub
    if mt == "olmo":
        cfg["clip_qkv"] = None
    if c.rope_adjustments:      # Llama 3.1 / 3.2 (Transformers' rope_type llama3)
        a = c.rope_adjustments
        cfg["rope_scaling"] = {"factor": a["factor"], "low_freq_factor": a["low_freq_factor"],
                               "high_freq_factor": a["high_freq_factor"],
                               "original_max_position_embeddings": a["original_max_seq_len"], "rope_type": "llama3"}
    return cfg


ARCH_FIELDS = ("n_layer", "n_embd", "n_head", "head_size", "n_query_groups", "intermediate_size", "padded_vocab_size",
               "norm_class_name", "bias", "attn_bias", "mlp_class_name", "rotary_percentage", "parallel_residual",
               "shared_attention_norm", "sliding_window_size", "norm_qk", "post_attention_norm", "post_mlp_norm")


def main(litgpt_path: str) -> None:
    lit = litgpt_configs(litgpt_path)
    keys = read_keys()
    out: dict[str, dict] = {}
    for hub, fixture in FROM_FIXTURE.items():
        cfg = json.loads((FIXTURES / fixture / "config.json").read_text())
        out[hub] = {k: v for k, v in cfg.items() if k in keys}
    for hub in FROM_FIXTURE:     # litgpt and the fixture agree (max_position_embeddings: see SOURCE.md)
        family = next(((mt, arch) for prefix, mt, arch in FAMILIES if hub.startswith(prefix)), None)
        c = lit.get(LITGPT_NAME.get(hub, hub))
        if family and c:
            mine = from_litgpt(hub, c, *family)
            differ = {k: (v, out[hub].get(k)) for k, v in mine.items() if k in out[hub] and out[hub][k] != v}
            print(f"{hub}: litgpt agrees with the fixture on {len(mine)} keys except {differ}")
    gpt2 = out["openai-community/gpt2"]
    for hub, (layers, heads, hidden) in GPT2.items():
        out[hub] = {**gpt2, "n_layer": layers, "n_head": heads, "n_embd": hidden}
    out["distilbert/distilgpt2"] = {**gpt2, "n_layer": 6}
    out.update(HAND)
    for hub, c in lit.items():
        family = next(((mt, arch) for prefix, mt, arch in FAMILIES if hub.startswith(prefix)), None)
        if family is None or SKIP.search(hub) or hub in out or hub in SAME_AS:
            continue
        out[hub] = from_litgpt(hub, c, *family)
    for hub, base in SAME_AS.items():
        a, b = lit[LITGPT_NAME.get(hub, hub)], lit[LITGPT_NAME.get(base, base)]
        differ = [f for f in ARCH_FIELDS if getattr(a, f) != getattr(b, f)]
        assert not differ, f"{hub} differs from {base} in litgpt: {differ}"
        out[hub] = out[base]
    for hub, cfg in sorted(out.items()):
        path = OUT / hub / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cfg, indent=2) + "\n")
    print(f"{len(out)} configs under {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1])
