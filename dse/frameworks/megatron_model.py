"""Megatron-LM's model-definition arguments <-> a dse model (part of :mod:`dse.frameworks.megatron`).

Read (:func:`read_model`): ``--num-layers``, ``--hidden-size``, ``--num-attention-heads`` (all three, or none: the
``--model`` is estimated) and the options that shape the architecture, with Megatron's own defaults where dse's
differ: dropout 0.1 (``--attention-dropout``/``--hidden-dropout``), the FFN size (4h, or ``int(4h * 2/3 / 64) *
64`` with ``--swiglu``), and the vocabulary padded to a multiple of ``--make-vocab-size-divisible-by`` (128) x tp
(``_vocab_size_with_padding``). The vocabulary: ``--padded-vocab-size``, else ``--vocab-size`` (plus the
end-of-document token with ``NullTokenizer``), else the tokenizer's size where it is fixed (GPT2BPETokenizer
50,257, Llama2Tokenizer 32,000, BertWordPieceLowerCase 30,522, BertWordPieceCase 28,996); a Hugging Face or
SentencePiece tokenizer's size is not known offline: the ``--model``'s vocabulary is used, or give
``--vocab-size``. Multi-token prediction depths: :func:`read_mtp`. Written (:func:`model_args`): the same
arguments of a model, with what Megatron-LM cannot express as warnings.
"""

from __future__ import annotations

from dse.frameworks import megatron_moe as _moe
from dse.frameworks.common import Imported, as_choice, as_int, bad
from dse.specs.hf.common import dropout_fields

TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257, "Llama2Tokenizer": 32000, "BertWordPieceLowerCase": 30522,
                   "BertWordPieceCase": 28996}
POSITIONS = {"learned_absolute": "learned", "rope": "rotary", "none": "none", "yarn": "rotary",
             "mrope": "rotary", "relative": "none"}
MODEL_OPTIONS = ("--num-layers", "--hidden-size", "--num-attention-heads")


def read_mtp(imp: Imported, get) -> None:
    """Multi-token prediction depths (``--mtp-num-layers``; Megatron's default None: none, whatever the checkpoint
    holds): the model's ``mtp_layers``, on the model the arguments define or the --model estimated."""
    depths = get("--mtp-num-layers")
    value = as_int(imp.source, "--mtp-num-layers", depths, 0) if depths is not None else 0
    if isinstance(imp.model, dict):
        imp.model["mtp_layers"] = value
    else:
        imp.model_set["mtp_layers"] = (value, "--mtp-num-layers")
    if get("--mtp-loss-scaling-factor") is not None:
        imp.ignore("--mtp-loss-scaling-factor", "scales the MTP loss: no cost")


def read_model(imp: Imported, get, values: dict) -> None:
    given = [o for o in MODEL_OPTIONS if o in values]
    if not given:
        for o in [o for o in values if o in MODEL_ONLY and o not in ("--num-experts", "--moe-router-topk")]:
            imp.ignore(o, "no --num-layers/--hidden-size/--num-attention-heads: the --model is estimated")
        _moe.read_model(imp, get, None)     # the --model must have the experts the arguments name
        return
    for o in MODEL_OPTIONS:
        if o not in values:
            raise bad(imp.source, o, f"missing: the model needs {', '.join(MODEL_OPTIONS)} together")
    layers, hidden, heads = get("--num-layers"), get("--hidden-size"), get("--num-attention-heads")
    swiglu = bool(get("--swiglu"))
    ffn = get("--ffn-hidden-size") or (int(4 * hidden * 2 / 3 / 64) * 64 if swiglu else 4 * hidden)
    seq = get("--seq-length")
    max_pos = get("--max-position-embeddings")
    if max_pos is None:
        if seq is None:
            raise bad(imp.source, "--max-position-embeddings", "missing (and no --seq-length)")
        max_pos = seq
        imp.notes.append(f"no --max-position-embeddings: {seq} (--seq-length) assumed")
    position = POSITIONS[as_choice(imp.source, "--position-embedding-type",
                                   get("--position-embedding-type", "learned_absolute"), POSITIONS)]
    if get("--use-rotary-position-embeddings"):
        position = "rotary"
    if get("--no-position-embedding"):
        position = "none"
    if get("--position-embedding-type") in ("yarn", "mrope", "relative"):
        imp.ignore("--position-embedding-type", f"{get('--position-embedding-type')}: estimated as {position}")
    norm = as_choice(imp.source, "--normalization", get("--normalization", "LayerNorm"), ("LayerNorm", "RMSNorm"))
    # Megatron-Core: --attention-dropout on the attention probabilities (DotProductAttention; TE's and the flash
    # kernels drop inside themselves), --hidden-dropout in both bias-dropout-adds (TransformerLayer) and on the
    # embedding output (LanguageModelEmbedding.embedding_dropout)
    drops = dropout_fields(get("--attention-dropout", 0.1), get("--hidden-dropout", 0.1), get("--hidden-dropout", 0.1))
    data = dict(name=f"megatron-{layers}x{hidden}", layers=layers, hidden=hidden, heads=heads,
                vocab=_vocab(imp, get), max_seq_len=max_pos, ffn_hidden=ffn,
                ffn_type="swiglu" if swiglu else ("relu2" if get("--squared-relu") else "gelu"),
                norm=norm.lower(), zero_centered_gamma=bool(get("--apply-layernorm-1p")),
                bias=not get("--disable-bias-linear"), position=position,
                tied_embeddings=not get("--untie-embeddings-and-output-weights"), **drops,
                source="Megatron-LM arguments")
    if get("--group-query-attention"):
        data["kv_heads"] = get("--num-query-groups", 1)
    if get("--kv-channels") is not None:
        data["head_dim"] = get("--kv-channels")
    if get("--add-qkv-bias"):
        data["qkv_bias"] = True
    rotary = get("--rotary-percent")    # Megatron-LM arguments.py: "Percent of rotary dimension to use" (default 1.0)
    if rotary is not None and rotary != 1:
        if position != "rotary":
            imp.ignore("--rotary-percent", f"{rotary:g}: the positions are {position}, not rotary")
        elif not 0 < rotary <= 1:
            raise bad(imp.source, "--rotary-percent", f"{rotary:g}: must be in (0, 1]")
        else:
            data["rotary_fraction"] = rotary
    if seq is not None:
        data["seq_len"] = seq
    _moe.read_model(imp, get, data)
    imp.model = data                 # a ModelSpec's fields; built (and checked) by dse.frameworks.apply
    imp.model_keys = [o for o in values if o in MODEL_ONLY or o in MODEL_OPTIONS]


MODEL_ONLY = ("--ffn-hidden-size", "--kv-channels", "--group-query-attention", "--num-query-groups", "--swiglu",
               "--squared-relu", "--apply-layernorm-1p", "--rotary-percent",
               "--normalization", "--position-embedding-type", "--use-rotary-position-embeddings",
               "--no-position-embedding", "--untie-embeddings-and-output-weights", "--max-position-embeddings",
               "--disable-bias-linear", "--add-qkv-bias", "--attention-dropout", "--hidden-dropout", "--vocab-size",
               "--padded-vocab-size", "--make-vocab-size-divisible-by", "--tokenizer-type", "--vocab-file",
               "--merge-file", *_moe.MODEL_ONLY)


def _vocab(imp: Imported, get) -> int | None:
    """The embedding rows Megatron allocates (see the module docstring); None: take the --model's."""
    if get("--padded-vocab-size") is not None:
        return get("--padded-vocab-size")
    tokenizer = get("--tokenizer-type")
    if tokenizer is None and get("--vocab-file") and get("--merge-file"):
        tokenizer = "GPT2BPETokenizer"
        imp.notes.append("--vocab-file and --merge-file without --tokenizer-type: GPT2BPETokenizer (50,257 tokens)")
    raw = get("--vocab-size")
    if raw is not None and tokenizer == "NullTokenizer":
        raw += 1                      # _NullTokenizer.vocab_size: the end-of-document token
    if raw is None:
        raw = TOKENIZER_VOCAB.get(tokenizer or "")
    if raw is None:
        imp.notes.append(f"vocabulary of --tokenizer-type {tokenizer or '(none)'} not known offline: the "
                         "--model's is used (give --vocab-size to set it)")
        return None
    multiple = get("--make-vocab-size-divisible-by", 128) * get("--tensor-model-parallel-size", 1)
    padded = -(-raw // multiple) * multiple
    if padded != raw:
        imp.notes.append(f"vocabulary {raw} padded to {padded} (a multiple of --make-vocab-size-divisible-by x tp)")
    return padded



def model_args(m, warnings: list[str]) -> list[str]:
    layers = (f"--encoder-num-layers {m.layers - m.decoder_layers} --decoder-num-layers {m.decoder_layers}"
              if m.architecture == "encoder-decoder" else f"--num-layers {m.layers}")
    args = [f"{layers} --hidden-size {m.hidden} --num-attention-heads {m.heads} --ffn-hidden-size {m.ffn_hidden}"]
    extra = []
    if m.mla:   # Megatron-Core MLATransformerConfig (--multi-latent-attention); q_lora_rank 0: no query latent
        extra.append(f"--multi-latent-attention --kv-lora-rank {m.kv_lora_rank} --qk-head-dim {m.qk_nope_head_dim} "
                     f"--qk-pos-emb-head-dim {m.qk_rope_head_dim} --v-head-dim {m.v_head_dim}"
                     + (f" --q-lora-rank {m.q_lora_rank}" if m.q_lora_rank else ""))
        warnings.append("multi-head latent attention arguments: the read side (--from megatron) ignores them")
    elif m.head_dim != m.hidden // m.heads:
        extra.append(f"--kv-channels {m.head_dim}")
    if m.mtp_layers:   # Megatron-Core's multi-token prediction on the last stage (docs/mla.md)
        extra.append(f"--mtp-num-layers {m.mtp_layers}")
    if m.kv_heads != m.heads:
        extra.append(f"--group-query-attention --num-query-groups {m.kv_heads}")
    extra.append({"swiglu": "--swiglu", "geglu": "--swiglu", "relu": "--squared-relu", "relu2": "--squared-relu",
                  "gelu": ""}[m.ffn_type])
    if m.zero_centered_gamma:   # Megatron-Core TransformerConfig.layernorm_zero_centered_gamma
        extra.append("--apply-layernorm-1p")
    if m.ffn_type == "relu":
        warnings.append("a ReLU MLP has no Megatron-LM argument: --squared-relu is the nearest")
    if m.ffn_type == "geglu":
        warnings.append("a GeGLU MLP has no Megatron-LM argument: --swiglu is the nearest (same shapes)")
    if m.qk_norm:
        extra.append("--qk-layernorm")
    if m.parallel_residual:
        warnings.append("a parallel residual (GPT-NeoX, Falcon) has no Megatron-LM argument: run as sequential blocks")
    if m.rotary_fraction != 1:
        extra.append(f"--rotary-percent {m.rotary_fraction:g}")
    if not m.norm_bias:
        warnings.append("a LayerNorm without bias (Cohere) has no Megatron-LM argument: its norms get biases there")
    if m.layer_norms > 2:
        warnings.append(f"{m.layer_norms} norms per layer (Gemma 2) have no Megatron-LM argument")
    if m.experts:
        extra.append(_moe.moe_args(m, warnings))
    extra.append("--normalization " + ("RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"))
    if not m.bias:
        extra.append("--disable-bias-linear" + (" --add-qkv-bias" if m.qkv_bias else ""))
    args.append(" ".join(a for a in extra if a))
    position = {"learned": "learned_absolute", "rotary": "rope", "relative": "relative", "none": "none"}[m.position]
    args.append(f"--position-embedding-type {position} --max-position-embeddings {m.max_seq_len}"
                + (" --untie-embeddings-and-output-weights" if not m.tied_embeddings else ""))
    if m.position == "learned" and m.position_embeddings != m.max_seq_len:
        warnings.append(f"{m.position_embeddings} learned positions: Megatron-LM allocates "
                        "--max-position-embeddings rows")
    hidden = m.dropout if m.branch_dropouts or m.embedding_dropout else 0.0
    args.append(f"--attention-dropout {m.dropout if m.attention_dropout else 0.0:g} --hidden-dropout {hidden:g} "
                f"--padded-vocab-size {m.vocab}")
    if m.architecture != "decoder":
        if m.architecture == "encoder":
            warnings.append(f"{m.name} is an encoder: launch Megatron-LM's pretrain_bert.py, not pretrain_gpt.py")
    return args
