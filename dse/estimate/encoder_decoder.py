"""An encoder-decoder model (T5) in the estimate: two stacks of layers at two sequence lengths.

An encoder layer runs over the input (``plan.seq_len`` tokens, bidirectional self-attention); a decoder layer over
the target (``plan.target_len`` tokens: causal self-attention, then cross-attention over the encoder's output, then
its MLP). The kernel table's ``layer`` is a decoder layer and its ``dense_layer`` an encoder layer, mixed by
``moe_share`` = decoder layers / layers as a mixed dense/MoE model's are (:func:`dse.estimate.kernel_table.
kernel_tables`): the sums and times of L mean layers are the two stacks' exactly. The embedding looks up the input and
the target tokens; the head runs over the target tokens, and holds the encoder's final norm, whose output every
decoder layer's cross-attention reads (kept once). The parameters' per-layer numbers are the mean of the two kinds
of layer (:mod:`dse.estimate.parameters`); one relative position table per stack counts with the embedding, the
encoder's final norm with the head. Pipeline and context parallelism are refused (dse.specs.rules): how the two
stacks split over stages is not modelled.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dse.estimate.table_inputs import stack_inputs

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Num, Section
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

Table = dict[str, Any]


def is_encoder_decoder(model: ModelSpec) -> bool:
    """Whether the model has an encoder and a decoder stack."""
    return model.architecture == "encoder-decoder"


def lengths(model: ModelSpec, plan: Plan, s: Num) -> tuple[Num, Num]:
    """Tokens per sequence the embedding and the head see: (input + target, target), or (s, s) for one stack."""
    if not is_encoder_decoder(model):
        return s, s
    tgt = plan.target_len if plan.target_len is not None else (model.target_len or s)
    return s + tgt, tgt


def _after(table: Table, key: str, rows: Table) -> Table:
    """``table`` with ``rows`` inserted after the row ``key`` (at the end if absent)."""
    if key not in table:
        return {**table, **rows}
    out: Table = {}
    for name, row in table.items():
        out[name] = row
        if name == key:
            out.update(rows)
    return out


def layer_tables(model: ModelSpec, plan: Plan, K: FormulaModule, shape: tuple[Any, ...],
                 opts: dict[str, Any]) -> tuple[Table, Table, int]:
    """(decoder layer table, encoder layer table, decoder layers) of one micro-batch on one GPU.

    Encoder: :func:`layer_kernels` at the input length, unmasked (causal false), plus the relative position bias
    it reads (:func:`position_bias_kernel`); decoder: at the target length, causal, its position bias, and
    :func:`cross_attention_kernels` over the input length after the self-attention's residual. A software stack's
    rows for the decoder are sized at the target length; the cross-attention rows are Megatron's.
    """
    s, b, h, a, kv, d, ffn = shape
    _, tgt = lengths(model, plan, s)
    e, t = opts["bytes_per_element"], opts["tp"]
    enc = K.layer_kernels(*shape, **{**opts, "causal": False})
    dec_opts = {**opts, "causal": True}
    if opts.get("stack"):   # the decoder's tensors are target-length
        _, size, _ = stack_inputs(model, dataclasses.replace(plan, seq_len=tgt), plan.stack)
        dec_opts["stack_sizes"] = size
    dec = K.layer_kernels(tgt, b, h, a, kv, d, ffn, **dec_opts)
    attn = "attention" if plan.attention == "flash" else "score"
    if model.position == "relative":
        enc = _after(enc, attn, K.position_bias_kernel(s, s, b, a, tp=t, bytes_per_element=e))
        dec = _after(dec, attn, K.position_bias_kernel(tgt, tgt, b, a, tp=t, bytes_per_element=e))
    cross = K.cross_attention_kernels(tgt, s, b, h, a, kv, d, tp=t, sequence_parallel=opts["sequence_parallel"],
                                      recompute=opts["recompute"], attention=plan.attention, norm=opts["norm"],
                                      dropout=opts["dropout"], bytes_per_element=e,
                                      comm_bytes_per_element=opts["comm_bytes_per_element"])
    dec = _after(dec, "attn_residual", cross)
    return dec, enc, model.decoder_layers or 0


def encoder_output(head: Table, model: ModelSpec, s: Num, b: Num, *, tp: Num, sequence_parallel: bool,
                   bytes_per_element: Num) -> Table:
    """The head's table with the encoder's final norm: its input and statistics, and its output (the encoder
    output every decoder layer's cross-attention K/V GEMM reads), kept once for all the decoder layers."""
    e, r, tok = bytes_per_element, (1 / tp if sequence_parallel else 1), s * b
    stats = 8 if model.norm == "layernorm" else 4
    row = {"kind": "elementwise", "bytes": 2 * e * tok * model.hidden * r,
           "saved": (2 * e * tok * model.hidden + stats * tok) * r}
    return {"encoder_final_norm": row, **head}


def layer_counts(model: ModelSpec, T: FormulaModule) -> Section:
    """:func:`dse.estimate.parameters.layer_counts` of an encoder-decoder model: ``dense`` an encoder layer,
    ``moe`` (and ``moe_active``) a decoder layer (its cross-attention too), ``moe_layers`` the decoder layers."""
    h = model.hidden
    norms = {"layer_norms": model.layer_norms, "qk_norm": model.qk_norm}
    enc = T.layer_parameters(h, model.heads, model.kv_heads, model.head_dim, model.ffn_hidden, model.ffn_type,
                             model.norm, model.bias, model.qkv_bias, **norms)
    rep = T.layer_parameters_replicated(h, model.ffn_type, model.norm, model.bias, head_dim=model.head_dim, **norms)
    dec = enc + T.cross_attention_parameters(h, model.heads, model.kv_heads, model.head_dim, model.norm, model.bias)
    dec_rep = rep + T.norm_parameters(h, model.norm) + (h if model.bias else 0)
    return {"dense": enc, "dense_rep": rep, "moe": dec, "moe_active": dec, "moe_rep": dec_rep, "moe_experts": 0,
            "moe_layers": model.decoder_layers}


def end_parameters(model: ModelSpec, T: FormulaModule) -> tuple[Num, Num]:
    """(embedding side, head side) parameters beyond one stack's: a relative position table per stack; the
    encoder's final norm."""
    tables = 2 * T.relative_position_parameters(model.relative_buckets, model.heads)
    return tables, (T.norm_parameters(model.hidden, model.norm) if model.final_norm else 0)
