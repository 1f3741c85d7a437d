"""The kernels of the input side (embedding) and of the output side (final norm, LM head, loss).

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there).
"""

from __future__ import annotations

from dse.formulas._array import Num, where
from dse.formulas.kernels.layer import _per_gpu
from dse.formulas.kernels.rows import Table

__all__ = ["embedding_kernels", "head_kernels"]


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
