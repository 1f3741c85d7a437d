"""The kernels an encoder-decoder layer adds: cross-attention over the encoder's output and a relative position bias.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there; ``s_q`` decoder tokens per sequence,
``s_k`` encoder tokens per sequence).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num
from dse.formulas.kernels.rows import Table

__all__ = ["cross_attention_kernels", "position_bias_kernel"]


def _loc(x: Num, tp: Num) -> Num:
    return x if type(tp) is int and tp == 1 else x / tp


def position_bias_kernel(s_q: Num, s_k: Num, b: Num, heads: Num, *, tp: Num = 1, bytes_per_element: Num = 2) -> Table:
    """The relative position bias one self-attention reads with its scores (T5).

    Formula: e b (a/t) s_q s_k bytes forward (the bias added to every score), twice that backward (its gradient,
    accumulated over the layers that share it); nothing saved (the bias is computed once per stack)
    Source: Raffel et al. 2020 (T5, arXiv 1910.10683) §2.1: a learned scalar per head and distance bucket added to
    each logit, shared by a stack's layers; Hugging Face T5Attention.compute_bias (first layer) passes the
    (1, a, s_q, s_k) bias to every layer's attention as an additive mask.

    Returns:
        kernel name -> row [dict]

    >>> position_bias_kernel(512, 512, 8, 12)["position_bias"]["bytes"] / 2**20   # t5-base encoder, b 8: MiB
    48.0
    """
    scores = b * _loc(heads, tp) * s_q * s_k
    return {"position_bias": {"kind": "elementwise", "bytes": bytes_per_element * scores, "saved": 0,
                              "selective": True}}


def cross_attention_kernels(s_q: Num, s_k: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, *,
                            tp: Num = 1, sequence_parallel: bool = False, recompute: str = "none",
                            attention: str = "flash", norm: str = "rmsnorm", dropout: bool = True,
                            bytes_per_element: Num = 2, comm_bytes_per_element: Num | None = None) -> Table:
    """The kernels of a decoder layer's cross-attention on one GPU for one micro-batch (before its MLP).

    Formula: T_q = s_q b, T_k = s_k b; norm 2e T_q h r; GEMMs q (T_q, h, a d/t), kv (T_k, h, 2 kv d/t), out
    (T_q, a d/t, h); attention over the whole s_q x s_k matrix (no causal mask): flash 4 s_q s_k b a d / t FLOP
    (x2.5 backward), or math score (s_q, d, s_k) and context (s_q, s_k, d) with softmax 2e (+ dropout 2e + 1)
    bytes per score; residual (3e + 1_drop) T_q h r; all-reduces: e T_q h forward; backward e T_q h (q's input
    gradient) and e T_k h (the encoder output's, from kv)
    Source: Vaswani et al. 2017 §3.2.3 (queries from the decoder, keys and values from the encoder output);
    Hugging Face T5LayerCrossAttention (T5LayerNorm, EncDecAttention, dropout, residual); Megatron-LM tensor
    parallelism (Shoeybi et al. 2019, arXiv 1909.08053 §3) as for self-attention (:func:`layer_kernels`).

    Saved: as self-attention's, but the kv GEMM's input is the encoder output, which every decoder layer reads and
    which is kept once for all of them (by the encoder's final norm, :mod:`dse.estimate.encoder_decoder`), not per
    layer. Full recompute keeps nothing of these rows (the layer input is norm1's); the rest becomes ``rerun``.

    Returns:
        kernel name -> row [dict]

    >>> t = cross_attention_kernels(114, 512, 8, 768, 12, 12, 64, dropout=False)   # t5-base decoder layer
    >>> list(t)[:5], t["cross_kv"]["m"], t["cross_attention"]["flops"] / 1e9
    (['cross_norm', 'cross_q', 'cross_kv', 'cross_attention', 'cross_out'], 4096, 1.434451968)
    """
    e = bytes_per_element
    tq, tk = s_q * b, s_k * b
    r = 1 / tp if sequence_parallel else 1
    stats = 8 if norm == "layernorm" else 4
    drop = 1 if dropout else 0
    hd_q, hd_kv, a_loc = _loc(heads * head_dim, tp), _loc(kv_heads * head_dim, tp), _loc(heads, tp)
    comm = e if comm_bytes_per_element is None else comm_bytes_per_element
    x_q = e * tq * h * r
    q_kept, kv_kept = e * tq * hd_q, e * tk * 2 * hd_kv
    t: dict[str, Any] = {}
    t["cross_norm"] = {"kind": "elementwise", "bytes": 2 * x_q, "saved": x_q + stats * tq * r}
    t["cross_q"] = {"kind": "gemm", "m": tq, "k": h, "n": hd_q, "batch": 1, "split": "column", "saved": x_q,
                    "flops": 2 * tq * h * hd_q}
    t["cross_kv"] = {"kind": "gemm", "m": tk, "k": h, "n": 2 * hd_kv, "batch": 1, "split": "column", "saved": 0,
                     "flops": 2 * tk * h * 2 * hd_kv}
    flops = 4 * s_q * s_k * b * a_loc * head_dim
    if attention == "math":
        scores = b * a_loc * s_q * s_k
        t["cross_score"] = {"kind": "gemm", "m": s_q, "k": head_dim, "n": s_k, "batch": b * a_loc, "split": "",
                            "class": "attention", "saved": q_kept + kv_kept / 2, "selective": True, "flops": flops / 2}
        t["cross_softmax"] = {"kind": "elementwise", "bytes": 2 * e * scores, "saved": e * scores,
                              "selective": True}
        if dropout:
            t["cross_attn_dropout"] = {"kind": "elementwise", "bytes": (2 * e + 1) * scores,
                                       "saved": (e + 1) * scores, "selective": True}
        t["cross_context"] = {"kind": "gemm", "m": s_q, "k": s_k, "n": head_dim, "batch": b * a_loc, "split": "",
                              "class": "attention", "saved": kv_kept / 2, "selective": True, "flops": flops / 2}
    else:
        executed = flops  # no mask: the kernel runs the whole s_q x s_k matrix
        t["cross_attention"] = {"kind": "flash", "class": "attention", "flops": flops, "executed": executed,
                                "executed_backward": 2.5 * executed,
                                "saved": q_kept + kv_kept + (0 if recompute == "selective" else 4 * tq * a_loc),
                                "selective": True}
    t["cross_out"] = {"kind": "gemm", "m": tq, "k": hd_q, "n": h, "batch": 1, "split": "row", "saved": e * tq * hd_q,
                      "flops": 2 * tq * hd_q * h}
    t["cross_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": comm * tq * h,
                            "pass": "forward", "saved": 0}
    t["cross_residual"] = {"kind": "elementwise", "bytes": (3 * e + drop) * tq * h * r, "saved": drop * tq * h * r}
    t["cross_q_dgrad_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": comm * tq * h,
                                    "pass": "backward", "hidden_by": "cross_q", "saved": 0}
    t["cross_kv_dgrad_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": comm * tk * h,
                                     "pass": "backward", "hidden_by": "cross_kv", "saved": 0}
    if recompute == "full":
        for row in t.values():
            row["rerun"], row["saved"] = row["saved"], 0
    return t
