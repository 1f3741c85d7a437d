"""A training step as a table of kernels: what each op of a layer computes, moves, saves and communicates.

One row per kernel that one GPU runs for one micro-batch, in execution order, as Calculon's
layer list does (Isaev et al., SC'23, ``calculon/llm``): the transformer layer (norms, QKV,
rotary, attention core, output projection, residual adds, MLP), the embedding, and the LM
head with its loss. The estimate's numbers are reductions over the table:

- time: every row through one per-kernel cost function (``dse.estimate.layer.kernel_time``:
  GEMM at the GEMM efficiency, flash attention at the attention efficiency, element-wise bytes
  at the HBM efficiency, collectives on the tensor-parallel group);
- activation memory: the sum of ``saved`` (:func:`saved_bytes`), plus ``rerun`` while a
  layer is recomputed (:func:`rerun_bytes`);
- FLOPs: the sum of ``flops`` (:func:`forward_flops`, :func:`recomputed_flops`);
- tensor-parallel traffic: the collectives' ``comm`` (:func:`message_bytes`).

A row is a dict; every row has ``kind`` and ``saved``, the other keys belong to its kind:

- ``kind``: ``gemm`` (``m``, ``k``, ``n``, ``batch``: ``batch`` GEMMs of (m x k)(k x n) on this GPU;
  ``split``: ``column`` or ``row`` for a Megatron tensor-parallel weight GEMM, ``""`` for the
  attention products), ``flash`` (a fused attention kernel: ``executed``, ``executed_backward``
  FLOPs as it runs them), ``elementwise`` (``bytes``: HBM bytes read and written in the forward
  pass) or ``collective`` (``op``: allreduce, allgather or reduce_scatter; ``group``: tp; ``comm``:
  message bytes, the whole tensor; ``pass``: forward or backward; ``hidden_by``: the GEMM whose weight
  gradient can hide it);
- ``flops``: forward FLOPs in the model convention (full s x s score matrix);
- ``saved``: bytes kept from the forward to the backward pass under the plan's recompute;
  ``rerun``: bytes the kernel holds while its layer is recomputed in the backward pass (full
  recompute);
- ``selective``: True for the kernels selective recompute runs again (the attention core);
- ``class``: the GEMM class whose dtype (precision recipe) sets the peak: ``attention`` or ``head``
  (absent: the layer's weight GEMMs).

Backward costs twice the forward for GEMMs (data and weight gradients, same shapes) and for
element-wise kernels; a flash kernel has its own backward FLOPs. The rows and their bytes are
those of Megatron-LM's fused kernels (the ``megatron`` software stack), the kernels that
:func:`dse.formulas.compute.elementwise_bytes` and :func:`dse.formulas.transformer.activation_terms`
count in closed form; tests check that the reductions equal those closed forms.

Symbols:
    s: sequence length [count]
    b: micro-batch size (sequences) [count]
    h: hidden size [count]
    heads: a, attention (query) heads [count]
    kv_heads: kv, key/value heads [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    vocab: V, vocabulary size [count]
    tp: t, tensor-parallel degree [count]
    sequence_parallel: Megatron sequence parallelism (shards norm/dropout tensors over t) [bool]
    recompute: none, selective or full activation recomputation [choice]
    attention: flash (fused) or math (materialised softmax) [choice]
    ffn_type: gelu, relu or swiglu [choice]
    norm: layernorm or rmsnorm [choice]
    position: learned, rotary or none (position embeddings) [choice]
    dropout: dropout layers present [bool]
    causal: decoder (causal) attention: a flash kernel skips the masked half [bool]
    final_norm: a norm before the LM head [bool]
    bytes_per_element: e, bytes per activation element (2 for bf16/fp16) [bytes]
    comm_bytes_per_element: bytes per element of the TP collectives' messages (None: e) [bytes]
    logits_bytes: e_l, bytes per logit the loss kernels read and write (fp32: 4) [bytes]
    table: kernel name -> row, as :func:`layer_kernels` returns [dict]
    stack: a software stack's ops resolved for the model (dse.specs.stack); None: Megatron's fused kernels [dict]
    stack_sizes: element counts the stack's amounts name (dse.formulas.stacks.sizes) [dict]
    stack_choices: the plan's attention, recompute, bias and dropout, for the stack's conditional rows [dict]
    grad_bytes: bytes per gradient element [bytes]
    group: the parallel group of a collective (tp: tensor parallel) [choice]
"""

from __future__ import annotations

from typing import Any

from dse.formulas import compute as _compute, stacks as _stacks
from dse.formulas._array import Num, where

__all__ = ["KINDS", "layer_kernels", "embedding_kernels", "head_kernels", "weight_gemms", "forward_flops",
           "recomputed_flops", "executed_flops", "saved_bytes", "rerun_bytes", "message_bytes"]

#: The kinds of kernel a row can be.
KINDS = ("gemm", "flash", "elementwise", "collective")

#: One kernel: its kind and numbers (numbers or numpy arrays; see the module docstring).
Row = dict[str, Any]
#: A table: kernel name -> row, in execution order.
Table = dict[str, Row]


def _per_gpu(x: Num, tp: Num) -> Num:
    """x / t, leaving x an integer when the layer is not split (t = 1)."""
    return x if type(tp) is int and tp == 1 else x / tp


def layer_kernels(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, *, tp: Num = 1,
                  sequence_parallel: bool = False, recompute: str = "none", attention: str = "flash",
                  ffn_type: str = "gelu", norm: str = "layernorm", position: str = "learned", dropout: bool = True,
                  causal: bool = True, bytes_per_element: Num = 2, comm_bytes_per_element: Num | None = None,
                  stack: dict[str, Any] | None = None, stack_sizes: dict[str, Num] | None = None,
                  stack_choices: dict[str, Any] | None = None,
                  grad_bytes: Num = 2) -> Table:
    """The kernels of one transformer layer on one GPU for one micro-batch (Megatron-LM's fused kernels).

    Formula: T = s b, r = 1/t with SP (else 1); GEMMs QKV (T, h, (a+2kv)d/t), out (T, a d/t, h), fc1 (T, h, n_g F/t),
    fc2 (T, F/t, h); attention: flash (4 s^2 b a d/t FLOP) or score (s, d, s) and context (s, s, d) x b a/t with
    softmax 2e and dropout (2e+1) bytes per score; element-wise bytes: norms 2e T h r each, bias-dropout-residual
    (3e + 1_drop) T h r each, activation n_g' e T F/t, rotary 2e T (a+kv) d/t; collectives: 2 all-reduces of
    e T h forward, 2 backward
    Source: Megatron-LM (Shoeybi et al. 2019, arXiv 1909.08053 §3; Korthikanti et al. 2022, arXiv 2205.05198
    Table 2) kernel by kernel; the layer list of Calculon (Isaev et al., SC'23); saved bytes as in
    transformer.activation_terms (checked against PyTorch's saved tensors).

    Each row's ``saved`` is the part of :func:`dse.formulas.transformer.activation_terms` that the kernel keeps:
    a norm its input and fp32 statistics, a weight GEMM its input, the attention core its Q, K, V (the fused QKV
    buffer, a Q copy, the rotated K), a flash kernel its fp32 log-sum-exp, math attention the repeated K/V,
    the softmax output and the dropout mask and output, the activation function its input/output, a
    bias-dropout-residual its 1-byte mask. Full recompute keeps only the layer input (on ``norm1``) and the
    rest becomes ``rerun``. n_g = 2 for SwiGLU (gate and up in one GEMM), else 1; n_g' = 3 (SwiGLU) or 2.

    Returns:
        kernel name -> row (see the module docstring) [dict]

    >>> k = layer_kernels(2048, 1, 4096, 32, 32, 128, 11008, ffn_type="swiglu", norm="rmsnorm", position="rotary",
    ...                   dropout=False)   # Llama-2-7B layer
    >>> list(k)
    ['norm1', 'qkv', 'rotary', 'attention', 'out', 'attn_allreduce', 'attn_residual', 'norm2', 'fc1', 'activation', 'fc2', 'mlp_allreduce', 'mlp_residual', 'fc1_dgrad_allreduce', 'qkv_dgrad_allreduce']
    >>> k["fc1"]["m"], k["fc1"]["k"], k["fc1"]["n"], k["fc1"]["split"]
    (2048, 4096, 22016, 'column')
    """
    e = bytes_per_element
    tok = s * b
    r = 1 / tp if sequence_parallel else 1
    stats = 8 if norm == "layernorm" else 4
    drop = 1 if dropout else 0
    full = recompute == "full"
    selective = recompute == "selective"
    split = not (type(tp) is int and tp == 1)     # unsplit (t = 1), shapes stay integers
    hd_q = heads * head_dim / tp if split else heads * head_dim
    hd_kv = kv_heads * head_dim / tp if split else kv_heads * head_dim
    a_loc = heads / tp if split else heads
    f_loc = ffn / tp if split else ffn
    n_up = 2 if ffn_type == "swiglu" else 1
    grouped = where(kv_heads < heads, 1, 0)
    rotary = position == "rotary"
    math = attention == "math"
    math_kept = math and not selective
    expanded = grouped if math_kept else 0          # K, V repeated to a heads are what QK^T and PV keep
    msg = (e if comm_bytes_per_element is None else comm_bytes_per_element) * tok * h   # the TP collectives' message
    x_in = e * tok * h * r                          # a layer-wide tensor as stored (sharded with SP)
    norm_in = x_in + stats * tok * r

    # what the attention core keeps of its inputs Q, K, V
    qkv_kept = e * tok * (hd_q + 2 * hd_kv) * (1 - expanded)
    qkv_kept = qkv_kept + e * tok * hd_q * where(grouped + (1 if rotary else 0) > 0, 1, 0)   # Q as its own tensor
    if rotary:
        qkv_kept = qkv_kept + e * tok * hd_kv * (1 - expanded)                             # the rotated K

    t = {}
    t["norm1"] = {"kind": "elementwise", "bytes": 2 * x_in, "saved": norm_in}
    n_qkv = hd_q + 2 * hd_kv
    t["qkv"] = {"kind": "gemm", "m": tok, "k": h, "n": n_qkv, "batch": 1, "split": "column", "saved": x_in,
                "flops": 2 * tok * h * n_qkv}
    if rotary:
        t["rotary"] = {"kind": "elementwise", "bytes": 2 * e * tok * (hd_q + hd_kv), "saved": 0}
    attn_flops = 4 * s * s * b * a_loc * head_dim
    if math:
        batch = b * a_loc
        scores = a_loc * s * s * b
        t["score"] = {"kind": "gemm", "m": s, "k": head_dim, "n": s, "batch": batch, "split": "", "class": "attention",
                      "saved": qkv_kept + e * tok * hd_q * expanded, "selective": True,
                      "flops": 2 * s * head_dim * s * batch}
        t["softmax"] = {"kind": "elementwise", "bytes": 2 * e * scores, "saved": e * scores if math_kept else 0,
                        "selective": True}
        if dropout:
            t["attn_dropout"] = {"kind": "elementwise", "bytes": (2 * e + 1) * scores,
                                 "saved": (e + 1) * scores if math_kept else 0, "selective": True}
        t["context"] = {"kind": "gemm", "m": s, "k": s, "n": head_dim, "batch": batch, "split": "", "class": "attention",
                        "saved": e * tok * hd_q * expanded, "selective": True,
                        "flops": 2 * s * s * head_dim * batch}
    else:
        lse = 0 if selective else 4 * tok * a_loc
        t["attention"] = {"kind": "flash", "class": "attention", "flops": attn_flops,
                          "executed": _compute.flash_attention_flops(s, b, a_loc, head_dim, causal),
                          "executed_backward": _compute.flash_attention_flops(s, b, a_loc, head_dim, causal,
                                                                              backward=True),
                          "saved": qkv_kept + lse, "selective": True}
    t["out"] = {"kind": "gemm", "m": tok, "k": hd_q, "n": h, "batch": 1, "split": "row", "saved": e * tok * hd_q,
                "flops": 2 * tok * hd_q * h}
    t["attn_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": msg, "pass": "forward",
                           "saved": 0}
    t["attn_residual"] = {"kind": "elementwise", "bytes": (3 * e + drop) * tok * h * r, "saved": drop * tok * h * r}
    t["norm2"] = {"kind": "elementwise", "bytes": 2 * x_in, "saved": norm_in}
    t["fc1"] = {"kind": "gemm", "m": tok, "k": h, "n": n_up * f_loc, "batch": 1, "split": "column", "saved": x_in,
                "flops": 2 * tok * h * n_up * f_loc}
    kept = {"swiglu": 3, "relu": 1}.get(ffn_type, 2)
    t["activation"] = {"kind": "elementwise", "bytes": (3 if ffn_type == "swiglu" else 2) * e * tok * f_loc,
                       "saved": kept * e * tok * f_loc}
    t["fc2"] = {"kind": "gemm", "m": tok, "k": f_loc, "n": h, "batch": 1, "split": "row", "saved": 0,
                "flops": 2 * tok * f_loc * h}
    t["mlp_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": msg, "pass": "forward",
                          "saved": 0}
    t["mlp_residual"] = {"kind": "elementwise", "bytes": (3 * e + drop) * tok * h * r, "saved": drop * tok * h * r}
    t["fc1_dgrad_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": msg,
                                "pass": "backward", "hidden_by": "fc1", "saved": 0}
    t["qkv_dgrad_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": msg,
                                "pass": "backward", "hidden_by": "qkv", "saved": 0}
    if stack:  # another software stack's element-wise kernels and saved tensors (dse.formulas.stacks)
        t = _stacks.apply_layer(t, stack, stack_sizes or {}, stack_choices or {}, bytes_per_element=e,
                                grad_bytes=grad_bytes)
    if full:   # the checkpoint keeps the layer input; the rest is held only while the layer runs again
        for row in t.values():
            row["rerun"], row["saved"] = row["saved"], 0
        t["norm1"]["saved"] = x_in
    return t


def embedding_kernels(s: Num, b: Num, h: Num, *, tp: Num = 1, sequence_parallel: bool = False,
                      dropout: bool = True, position: str = "learned", bytes_per_element: Num = 2,
                      comm_bytes_per_element: Num | None = None) -> Table:
    """The input side's kernels on one GPU for one micro-batch: the vocab-parallel lookup and its all-reduce.

    Formula: lookup (+ positions, dropout) e s b h bytes forward; all-reduce of e s b h (forward only); saved:
    8 s b token ids (+ 8 s b position ids, learned positions) + s b out-of-shard mask (t > 1) + s b h r
    dropout mask
    Source: Megatron-LM VocabParallelEmbedding (Shoeybi et al. 2019, arXiv 1909.08053 §3); saved bytes as in
    transformer.embedding_activation_bytes.

    Returns:
        kernel name -> row [dict]

    >>> k = embedding_kernels(1024, 1, 1600)   # GPT-2 XL
    >>> k["embedding"]["saved"], k["embedding_allreduce"]["pass"]
    (1654784, 'forward')
    """
    r = 1 / tp if sequence_parallel else 1
    tok = s * b
    ids = 16 * tok if position == "learned" else 8 * tok
    saved = ids + where(tp > 1, tok, 0 * s) + where(dropout, tok * h * r, 0 * s)
    comm = bytes_per_element if comm_bytes_per_element is None else comm_bytes_per_element
    msg = comm * tok * h
    return {"embedding": {"kind": "elementwise", "bytes": bytes_per_element * tok * h, "saved": saved},
            "embedding_allreduce": {"kind": "collective", "op": "allreduce", "group": "tp", "comm": msg,
                                    "pass": "forward", "saved": 0}}


def head_kernels(s: Num, b: Num, h: Num, vocab: Num, *, tp: Num = 1, sequence_parallel: bool = False,
                 norm: str = "layernorm", final_norm: bool = True, bytes_per_element: Num = 2,
                 logits_bytes: Num = 4) -> Table:
    """The output side's kernels on one GPU for one micro-batch: final norm, LM-head GEMM, fp32 loss.

    Formula: LM head GEMM (s b, h, V/t); loss 3 e_l s b V/t bytes forward (logits of e_l bytes, fp32: 4: softmax,
    loss, gradient); saved: final-norm input e s b h r (+ statistics), head input e s b h r, fp32 softmax 4 s b V/t
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) §4.3 (4sbV/t for the vocab-parallel cross-entropy); saved
    bytes as in transformer.head_activation_bytes.

    The final norm's time is not charged (one norm against a layer's two per layer, and L layers).

    Returns:
        kernel name -> row [dict]

    >>> k = head_kernels(2048, 1, 4096, 32000, norm="rmsnorm")   # Llama-2-7B
    >>> k["lm_head"]["n"], k["loss"]["saved"] / 2**20   # vocabulary columns; fp32 softmax, MiB
    (32000, 250.0)
    """
    e = bytes_per_element
    r = 1 / tp if sequence_parallel else 1
    stats = 8 if norm == "layernorm" else 4
    tok = s * b
    v_loc = _per_gpu(vocab, tp)
    t = {}
    if final_norm:
        t["final_norm"] = {"kind": "elementwise", "bytes": 0, "saved": (e * tok * h + stats * tok) * r}
    t["lm_head"] = {"kind": "gemm", "m": tok, "k": h, "n": v_loc, "batch": 1, "split": "column", "class": "head",
                    "saved": e * tok * h * r, "flops": 2 * tok * h * v_loc}
    t["loss"] = {"kind": "elementwise", "bytes": logits_bytes * tok * v_loc * 3, "saved": 4 * tok * v_loc}
    return t


def weight_gemms(table: Table) -> tuple[tuple[str, Num, Num, str], ...]:
    """The weight GEMMs of a table as (name, k, n, split): the list the chiplet model splits over its dies.

    Formula: the rows with kind gemm and a column/row split, in execution order
    Source: Shoeybi et al. 2019 (Megatron-LM, arXiv 1909.08053) §3 for the column/row split.

    Returns:
        tuple of (name, k, n, split) [tuple]

    >>> weight_gemms(layer_kernels(1, 1, 8192, 64, 8, 128, 28672, ffn_type="swiglu"))   # Llama-2-70B
    (('qkv', 8192, 10240, 'column'), ('out', 8192, 8192, 'row'), ('fc1', 8192, 57344, 'column'), ('fc2', 28672, 8192, 'row'))
    """
    return tuple((name, row["k"], row["n"], row["split"]) for name, row in table.items()
                 if row["kind"] == "gemm" and row["split"])


def forward_flops(table: Table) -> Num:
    """Forward FLOPs of the kernels of a table (model convention: the full score matrix).

    Formula: sum over rows of flops (GEMM 2 m k n batch; attention 4 s^2 b a d / t)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A; a layer's reduction times 3 T L t / (s b) is
    transformer.model_flops without the LM head.

    Returns:
        FLOPs per micro-batch on one GPU [FLOP]

    >>> forward_flops(layer_kernels(2048, 1, 12288, 96, 96, 128, 49152)) / 1e12   # a GPT-3 layer: TFLOP
    7.627861917696
    """
    total = 0
    for row in table.values():
        total = total + row.get("flops", 0)
    return total


def recomputed_flops(table: Table, recompute: str = "none") -> Num:
    """Forward FLOPs that activation recomputation runs again in the backward pass.

    Formula: full: sum of flops; selective: sum of flops of the attention core; none: 0
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) §5 and App. A; as transformer.recompute_flops per layer.

    Returns:
        FLOPs per micro-batch on one GPU [FLOP]

    >>> k = layer_kernels(2048, 1, 12288, 96, 96, 128, 49152, recompute="selective")
    >>> recomputed_flops(k, "selective") / forward_flops(k)   # s / (6h + s): the attention share of a GPT-3 layer
    0.02702702702702703
    """
    if recompute == "full":
        return forward_flops(table)
    if recompute != "selective":
        return 0
    total = 0
    for row in table.values():
        if row.get("selective"):
            total = total + row.get("flops", 0)
    return total


def executed_flops(table: Table, recompute: str = "none") -> dict[str, Num]:
    """FLOPs the kernels of a table execute forward, backward and in recomputation (a flash kernel as it runs).

    Formula: forward = sum of GEMM flops + flash executed; backward = 2 x GEMM flops + flash executed_backward;
    recompute: the forward again (full), the attention core's forward (selective), 0 (none)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A (backward = 2x forward for GEMMs); Dao 2023,
    FlashAttention-2 (arXiv 2307.08691) §3 for the fused kernel (causal half skipped, 2.5x backward).

    Returns:
        dict forward, backward, recompute per micro-batch on one GPU [FLOP]

    >>> f = executed_flops(layer_kernels(4096, 1, 8192, 64, 8, 128, 28672, ffn_type="swiglu"), "selective")
    >>> {k: round(v / 1e12, 2) for k, v in f.items()}   # a Llama-2-70B layer, causal flash attention: TFLOP
    {'forward': 7.28, 'backward': 14.71, 'recompute': 0.27}
    """
    fwd = bwd = sel = 0
    for row in table.values():
        kind = row["kind"]
        if kind == "gemm":
            f, b = row["flops"], 2 * row["flops"]
        elif kind == "flash":
            f, b = row["executed"], row["executed_backward"]
        else:
            continue
        fwd, bwd = fwd + f, bwd + b
        if "selective" in row:
            sel = sel + f
    rec = fwd if recompute == "full" else (sel if recompute == "selective" else 0)
    return {"forward": fwd, "backward": bwd, "recompute": rec}


def saved_bytes(table: Table) -> Num:
    """Bytes the kernels of a table keep for the backward pass.

    Formula: sum over rows of saved
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, per tensor as transformer.activation_terms (a
    layer's sum is activation_bytes_per_layer; embedding and head rows: embedding_activation_bytes,
    head_activation_bytes).

    Returns:
        bytes per micro-batch on one GPU [bytes]

    >>> saved_bytes(layer_kernels(2048, 1, 12288, 96, 96, 128, 49152, tp=8, attention="math")) / (2048 * 12288)
    23.001302083333332
    >>> import numpy as np
    >>> saved_bytes(layer_kernels(2048, np.array([1, 2, 4]), 12288, 96, 96, 128, 49152, tp=8,
    ...                           recompute="full")) / 2**20   # the layer input, 2 sbh: MiB
    array([ 48.,  96., 192.])
    """
    total = 0
    for row in table.values():
        total = total + row["saved"]
    return total


def rerun_bytes(table: Table) -> Num:
    """Bytes the kernels hold while their layer is recomputed in the backward pass (full recompute), else 0.

    Formula: sum over rows of rerun
    Source: Chen et al. 2016 (arXiv 1604.06174): a checkpointed segment is re-run forward, holding its
    activations; as transformer.recompute_working_bytes.

    Returns:
        bytes [bytes]

    >>> k = layer_kernels(2048, 1, 12288, 96, 96, 128, 49152, tp=8, recompute="full", attention="math")
    >>> rerun_bytes(k) / 2**20, saved_bytes(k) / 2**20   # MiB: the layer running again; its checkpoint
    (552.03125, 48.0)
    """
    total = 0
    for row in table.values():
        total = total + row.get("rerun", 0)
    return total


def message_bytes(table: Table, group: str = "tp", recompute: str = "none") -> Num:
    """Message bytes of a group's collectives that one micro-batch runs per table, all passes together.

    Formula: sum of comm over the forward and backward collectives, + the forward ones again under full recompute
    Source: Megatron-LM tensor parallelism (Shoeybi et al. 2019, arXiv 1909.08053 §3): 2 all-reduces of an
    [s, b, h] activation forward and 2 backward per layer; a ring moves 2 (t-1)/t of each through every rank.

    Returns:
        bytes [bytes]

    >>> message_bytes(layer_kernels(2048, 1, 4096, 32, 32, 128, 16384), recompute="full") / (2 * 2048 * 4096)
    6.0
    """
    total = 0
    for row in table.values():
        if row["kind"] == "collective" and row["group"] == group:
            total = total + (2 if (recompute == "full" and row["pass"] == "forward") else 1) * row["comm"]
    return total
