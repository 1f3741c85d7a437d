"""Dropout read from every supported config.json where Transformers 5.24 applies it, and priced there.

Each family's modeling file (transformers/models/<type>/modeling_<type>.py) decides which key drops what in a
training forward: the attention probabilities (eager attention's ``nn.functional.dropout(attn_weights, p=dropout)``;
SDPA's and the flash kernels take ``dropout_p`` inside the kernel), the layers' branch outputs before their residual
adds, the embedding output. :data:`PLACES` writes that down per key; each case sets one key to 0.1 (every other
dropout key 0) and checks the kernel table: the eager scores' dropout row, the branch dropout kernels of the pytorch
stack (and Megatron's bias-dropout-add masks), the embedding's mask bytes. The torch-marked test counts the dropout
ops of the real Transformers layers in training mode on the CPU (``bernoulli_``: the CPU's unfused dropout).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse.catalog import load_model
from dse.estimate import kernel_table as KT, resolve
from dse.formulas.precision import recipe_of

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
ATT, EMB = "attention", "embedding"

#: model_type -> {config key: what it drops}: ATT the attention probabilities, an int n the branch outputs (n of
#: them per layer), EMB the embedding output; () nothing Transformers runs. Read from the modeling files (5.24).
PLACES: dict[str, dict[str, tuple]] = {
    "gpt2": {"attn_pdrop": (ATT,), "resid_pdrop": (2,), "embd_pdrop": (EMB,)},   # GPT2Attention, GPT2MLP, .drop
    "gpt_bigcode": {"attn_pdrop": (ATT,), "resid_pdrop": (2,), "embd_pdrop": (EMB,)},
    "gptj": {"attn_pdrop": (ATT,), "resid_pdrop": (2,), "embd_pdrop": (EMB,)},   # resid_dropout, GPTJMLP.dropout
    "opt": {"attention_dropout": (ATT,), "dropout": (2,)},     # OPTDecoderLayer: after self_attn and fc2
    "bert": {"attention_probs_dropout_prob": (ATT,), "hidden_dropout_prob": (2, EMB)},   # BertSelfOutput, BertOutput
    "bloom": {"attention_dropout": (ATT,), "hidden_dropout": (2,)},   # dropout_add after attention and MLP
    "falcon": {"attention_dropout": (), "hidden_dropout": (1,)},  # parallel: one dropout_add of the sum (:621)
    "gpt_neox": {"attention_dropout": (ATT,), "hidden_dropout": (2, EMB)},   # post_*_dropout, emb_dropout
    "stablelm": {"attention_dropout": (ATT,), "hidden_dropout": (1,)},     # the MLP output only (:363, :371)
    "phi": {"attention_dropout": (ATT,), "resid_pdrop": (2,), "embd_pdrop": (EMB,)},
    "phi3": {"attention_dropout": (ATT,), "resid_pdrop": (2,), "embd_pdrop": ()},   # Phi3Model has no embed dropout
    "starcoder2": {"attention_dropout": (ATT,), "residual_dropout": (2,), "embedding_dropout": (EMB,)},
    # GPTNeoSelfAttention attn_dropout and resid_dropout, GPTNeoMLP.dropout (resid_dropout), GPTNeoModel.drop
    "gpt_neo": {"attention_dropout": (ATT,), "resid_dropout": (2,), "embed_dropout": (EMB,)},
}
#: A fixture per model_type (t5: ``dropout_rate`` everywhere, encoder-decoder: not listed).
FIXTURE = {
    "gpt2": "gpt2", "gpt_bigcode": "starcoderbase-1b", "gptj": "gpt-j-6b", "opt": "opt-13b",
    "bert": "bert-large-uncased", "bloom": "bloom-560m", "falcon": "falcon-7b", "gpt_neox": "pythia-1.4b",
    "stablelm": "stablelm-2-1_6b", "phi": "phi-2", "phi3": "Phi-3-mini-4k-instruct", "starcoder2": "starcoder2-3b",
    "llama": "Llama-3.1-8B", "mistral": "Mistral-7B-v0.1", "qwen2": "Qwen2-0.5B", "qwen3": "Qwen3-8B",
    "gemma": "gemma-2b", "gemma2": "gemma-2-9b", "gemma3_text": "gemma-3-1b-pt", "gemma3": "gemma-3-27b-pt",
    "granite": "granite-3.0-2b-base", "smollm3": "SmolLM3-3B", "olmo": "OLMo-1B-hf", "olmo2": "OLMo-2-1124-7B",
    "mixtral": "Mixtral-8x7B-v0.1", "qwen2_moe": "Qwen1.5-MoE-A2.7B", "qwen3_moe": "Qwen3-30B-A3B",
    "olmoe": "OLMoE-1B-7B-0924", "granitemoe": "granite-3.0-1b-a400m-base", "phimoe": "Phi-3.5-MoE-instruct",
    "glm4_moe": "GLM-4.5-Air", "nemotron": "Minitron-4B-Base", "cohere": "c4ai-command-r-v01",
    "cohere2": "c4ai-command-r7b-12-2024", "gpt_oss": "gpt-oss-120b", "llama4_text": "Llama-4-Scout-17B-16E-text",
    "llama4": "Llama-4-Scout-17B-16E", "deepseek_v2": "DeepSeek-V2-Lite", "deepseek_v3": "DeepSeek-V3",
    "gpt_neo": "gpt-neo-125m",
}
KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "residual_dropout",
        "embedding_dropout", "dropout", "hidden_dropout_prob", "attention_probs_dropout_prob", "resid_dropout",
        "embed_dropout")


def test_every_supported_model_type_is_checked():
    """Every reader's model_type has a case below but T5 (``dropout_rate`` on the scores, the branches and the
    embedding alike: the default places)."""
    from dse.specs.hf import SUPPORTED

    assert set(SUPPORTED) - set(FIXTURE) == {"t5"} and set(PLACES) <= set(FIXTURE)


def _cases():
    for mt, fixture in FIXTURE.items():
        for key, places in PLACES.get(mt, {"attention_dropout": (ATT,)}).items():
            yield pytest.param(mt, fixture, key, places, id=f"{mt}-{key}")


def _tables(cfg: dict, tmp_path: Path, stack: str, attention: str) -> tuple:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    sets = ("model.mtp_layers=0",) if cfg.get("model_type") == "glm4_moe" else ()   # no MTP module in Transformers
    m, _, p = resolve(str(path), "dgx-h100", None, sets, stack=stack, attention=attention, dp=1, micro_batch=1,
                      seq_len=256)
    return m, KT.kernel_tables(m, p, recipe_of(p))


def _with(fixture: str, key: str, p: float) -> dict:
    """The fixture's config with every dropout key 0 but ``key`` at ``p`` (a multimodal config: in its text_config)."""
    cfg = json.loads((FIXTURES / fixture / "config.json").read_text())
    inner = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    for c in (cfg, inner):
        c.update({k: 0.0 for k in KEYS if k in c})
    inner[key] = p
    return cfg


@pytest.mark.parametrize("mt,fixture,key,places", list(_cases()))
def test_each_dropout_key_prices_what_transformers_applies(mt, fixture, key, places, tmp_path):
    """One key at 0.1: the eager scores' dropout row (pytorch stack, math attention) where it drops the attention
    probabilities, the pytorch stack's branch dropout kernels (n each way, an h-byte mask each) and Megatron's
    bias-dropout-add masks where it drops branch outputs, the embedding's s b h mask bytes where it drops the
    embedding output -- and nothing else."""
    cfg = _with(fixture, key, 0.1)
    assert cfg.get("model_type") == mt
    branches = next((x for x in places if isinstance(x, int)), 0)
    mla = mt.startswith("deepseek")          # multi-head latent attention: Megatron's flash kernels only
    stack, attention = ("megatron", "flash") if mla else ("pytorch", "math")
    m, t = _tables(cfg, tmp_path, stack, attention)
    tok_h = 256 * m.hidden
    assert m.dropout == 0.1 or places == ()
    layer = t["layer"]
    assert ("attn_dropout" in layer) == (ATT in places and not mla)
    if not mla:
        if ATT in places:     # the stack's score_dropout: one native_dropout each way, the bool mask and output
            scores = m.heads * 256 * 256
            assert (layer["attn_dropout"]["kernels"], layer["attn_dropout"]["kernels_backward"]) == (1, 1)
            assert layer["attn_dropout"]["saved"] == 3 * scores
    if not mla:
        assert ("dropout" in layer) == (branches > 0)
    if branches:
        row = layer["dropout"]
        assert (row["kernels"], row["kernels_backward"], row["saved"]) == (branches, branches, branches * tok_h)
    _, zero = _tables(_with(fixture, key, 0.0), tmp_path, stack, attention)
    mask = t["embedding"]["embedding"]["saved"] - zero["embedding"]["embedding"]["saved"]
    assert mask == (tok_h if EMB in places else 0)      # the embedding's bool mask, s b h bytes
    # Megatron's kernels for the same model: the bias-dropout-add masks on the dropped branches (the MLP's first)
    attention = "math" if m.alibi else "flash"    # BLOOM: eager attention only
    m, t = _tables(cfg, tmp_path, "megatron", attention)
    res = [t["layer"][k]["saved"] for k in ("attn_residual", "mlp_residual") if k in t["layer"]]
    assert sum(res) == branches * tok_h
    # a flash kernel drops inside itself: nothing priced apart; math attention's score dropout where it runs
    assert ("attn_dropout" in t["layer"]) == (ATT in places and attention == "math")


def test_all_keys_zero_keep_the_places_and_price_nothing(tmp_path):
    """Every dropout key 0: no mask, no dropout kernel; the fields keep where the family drops (a ``dropout``
    override then runs there: Llama's scores only)."""
    m, t = _tables(_with("Llama-3.1-8B", "attention_dropout", 0.0), tmp_path, "pytorch", "math")
    assert (m.dropout, m.attention_dropout, m.branch_dropouts, m.embedding_dropout) == (0.0, True, 0, False)
    assert not {"attn_dropout", "dropout"} & set(t["layer"])
    m, t = _tables(_with("gpt2", "attn_pdrop", 0.0), tmp_path, "pytorch", "math")
    assert (m.dropout, m.attention_dropout, m.branch_dropouts, m.embedding_dropout) == (0.0, True, 2, True)
    assert not {"attn_dropout", "dropout"} & set(t["layer"])


def test_falcon_sequential_layer_drops_its_attention_output_with_attention_dropout(tmp_path):
    """Falcon's sequential layer (parallel_attn false): ``attention_dropout`` on the attention output before its
    residual add (modeling_falcon.py:603), ``hidden_dropout`` on the MLP's -- two branch dropouts, none on the
    scores (without ALiBi neither the SDPA call nor the eager path drops them)."""
    base = {**_with("falcon-7b", "hidden_dropout", 0.0), "parallel_attn": False}
    for sets, n in (({"attention_dropout": 0.1}, 1), ({"hidden_dropout": 0.1}, 1),
                    ({"attention_dropout": 0.1, "hidden_dropout": 0.2}, 2)):
        m, t = _tables({**base, **sets}, tmp_path, "pytorch", "math")
        assert (m.branch_dropouts, m.attention_dropout, m.embedding_dropout) == (n, False, False)
        assert t["layer"]["dropout"]["kernels"] == n and "attn_dropout" not in t["layer"]


def test_megatron_arguments_set_attention_and_hidden_dropout_apart():
    """Megatron-Core: --attention-dropout on the probabilities (DotProductAttention), --hidden-dropout in both
    bias-dropout-adds and on the embedding (TransformerLayer, LanguageModelEmbedding): read apart, and the
    arguments dse writes back keep them apart."""
    from test_frameworks_in import LLAMA2_7B_ARGS

    from dse.catalog import load_model
    from dse.frameworks.megatron import read
    from dse.frameworks.megatron_model import model_args

    for attn, hidden, fields, written in (
            ("0", "0.1", [0.1, False, 2, True], "--attention-dropout 0 --hidden-dropout 0.1"),
            ("0.1", "0", [0.1, True, 0, False], "--attention-dropout 0.1 --hidden-dropout 0"),
            ("0.1", "0.1", [0.1, True, 2, True], "--attention-dropout 0.1 --hidden-dropout 0.1")):
        args = LLAMA2_7B_ARGS.replace("--attention-dropout 0 --hidden-dropout 0",
                                      f"--attention-dropout {attn} --hidden-dropout {hidden}")
        imp = read(args)
        names = ("dropout", "attention_dropout", "branch_dropouts", "embedding_dropout")
        assert [imp.model[k] for k in names] == fields
        assert "--attention-dropout" not in imp.ignored
        spec = load_model("llama2-7b", [(["dropout"], fields[0]), (["attention_dropout"], fields[1]),
                                        (["branch_dropouts"], fields[2]), (["embedding_dropout"], fields[3])])
        assert written in " ".join(model_args(spec, []))


def _count_dropouts(mt: str, cfg: dict, layers: int) -> int:
    """bernoulli_ calls (the CPU's dropout: one per F.dropout with p > 0) of a training forward of a tiny model."""
    import torch
    import transformers
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.startswith("bernoulli"):
                Count.n += 1
            return func(*args, **(kwargs or {}))

    c = transformers.AutoConfig.for_model(mt, **{**cfg, TINY_LAYERS[mt]: layers})
    c._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(c)
    model.train()
    ids = torch.randint(0, 64, (1, 16))
    with Count():
        model(input_ids=ids).logits.sum().backward()
    return Count.n


TINY = dict(vocab_size=128, hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128,
            max_position_embeddings=64)
TINY_LAYERS = {"llama": "num_hidden_layers", "gpt2": "n_layer", "starcoder2": "num_hidden_layers",
               "stablelm": "num_hidden_layers", "falcon": "num_hidden_layers", "gpt_neox": "num_hidden_layers",
               "phi3": "num_hidden_layers", "opt": "num_hidden_layers", "bloom": "n_layer", "phi": "num_hidden_layers",
               "gptj": "n_layer"}
TRACED = {
    "llama": dict(TINY), "starcoder2": dict(TINY), "stablelm": dict(TINY), "phi3": dict(TINY, pad_token_id=0),
    "phi": dict(TINY), "gpt_neox": dict(TINY), "falcon": dict(TINY, new_decoder_architecture=False, multi_query=True),
    "opt": dict(vocab_size=128, hidden_size=64, num_attention_heads=4, ffn_dim=128, word_embed_proj_dim=64,
                max_position_embeddings=64, activation_dropout=0.0, layerdrop=0.0),
    "gpt2": dict(vocab_size=128, n_embd=64, n_head=4, n_positions=64),
    "gptj": dict(vocab_size=128, n_embd=64, n_head=4, n_positions=64, rotary_dim=8),
    "bloom": dict(vocab_size=128, hidden_size=64, n_head=4),
}


def _dse_counts(cfg: dict, tmp_path: Path) -> tuple[int, int]:
    """(dropouts per layer, embedding dropouts) dse reads from a config: the scores' (eager attention), the branch
    outputs', the embedding's."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    return int(m.dropout > 0 and m.attention_dropout) + (m.branch_dropouts if m.dropout > 0 else 0), int(
        m.dropout > 0 and m.embedding_dropout)


@pytest.mark.torch
@pytest.mark.parametrize("mt", sorted(TRACED))
def test_dropout_ops_of_the_real_layers_are_what_dse_prices(mt, tmp_path):
    """Each dropout key of :data:`PLACES` at 0.1 alone, a 1- and a 2-layer model in training mode with eager
    attention: the dropout ops a layer adds (2 layers - 1) are the scores' and the branch outputs' dse reads from the
    family's config with that key; the rest of the 1-layer run is the embedding's."""
    pytest.importorskip("transformers")
    for key in PLACES.get(mt, {"attention_dropout": ()}):
        cfg = {**TRACED[mt], **{k: 0.0 for k in KEYS if k in PLACES.get(mt, {"attention_dropout": ()})}, key: 0.1}
        if mt == "falcon":
            cfg.update(alibi=False, parallel_attn=True)
        one, two = _count_dropouts(mt, cfg, 1), _count_dropouts(mt, cfg, 2)
        assert (two - one, one - (two - one)) == _dse_counts(_with(FIXTURE[mt], key, 0.1), tmp_path), key


@pytest.mark.torch
def test_falcon_sequential_layer_dropout_ops_are_what_dse_prices(tmp_path):
    """Falcon's sequential layer (parallel_attn false), traced as above: ``attention_dropout`` drops the attention
    output, ``hidden_dropout`` the MLP output, none the scores."""
    pytest.importorskip("transformers")
    for sets in ({"attention_dropout": 0.1}, {"hidden_dropout": 0.1},
                 {"attention_dropout": 0.1, "hidden_dropout": 0.2}):
        cfg = {**TRACED["falcon"], "alibi": False, "parallel_attn": False, "attention_dropout": 0.0,
               "hidden_dropout": 0.0, **sets}
        one, two = _count_dropouts("falcon", cfg, 1), _count_dropouts("falcon", cfg, 2)
        dse_cfg = {**_with("falcon-7b", "hidden_dropout", 0.0), "parallel_attn": False, **sets}
        assert (two - one, one - (two - one)) == _dse_counts(dse_cfg, tmp_path), sets
