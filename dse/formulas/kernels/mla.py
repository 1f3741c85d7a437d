"""Multi-head latent attention as kernels: down projections, latent norms, up projections, decoupled RoPE,
flash attention with unequal query/key and value head dims, output projection.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there). One GPU, one micro-batch, following
Megatron-Core's ``MLASelfAttention`` (Transformer Engine layers, rope fusion on): ``linear_q_down_proj`` and
``linear_kv_down_proj`` are duplicated on every tensor-parallel rank (they run on the rank's s b r tokens, r = 1/t
with sequence parallelism); ``q_layernorm`` and ``kv_layernorm`` normalise the latents; ``linear_q_up_proj`` and
``linear_kv_up_proj`` are column-parallel over the heads; ``fused_apply_mla_rope_for_q`` / ``_for_kv`` rotate the
d_R dims and write the contiguous query [a d_qk], key [a d_qk] (the shared rotary key expanded to every head) and
value [a d_v]; the core attention is a flash kernel over them; ``linear_proj`` is row-parallel.
"""

from __future__ import annotations

from dse.formulas import compute as _compute
from dse.formulas._array import Num
from dse.formulas.kernels.rows import Table

__all__ = ["mla_attention_kernels"]


def mla_attention_kernels(s: Num, b: Num, h: Num, heads: Num, q_lora: Num, kv_lora: Num, nope: Num, rope: Num,
                          v_dim: Num, *, tp: Num = 1, sequence_parallel: bool = False, recompute: str = "none",
                          causal: bool = True, bytes_per_element: Num = 2) -> Table:
    """The attention kernels of one multi-head-latent-attention layer, after the input norm, before the out-proj's
    collective (the rows ``qkv`` ... ``out`` of a standard layer).

    Formula: T = s b, r = 1/t with SP, a_t = a/t, d_qk = d_nope + d_R, e bytes per element.
    q_down GEMM (T r, h, d_c') [or q_proj (T, h, a_t d_qk) column-parallel when q_lora = 0]; q_norm 2 e T r d_c'
    bytes; kv_down GEMM (T r, h, d_c + d_R); kv_norm 2 e T r d_c; q_up (T, d_c', a_t d_qk) and kv_up (T, d_c,
    a_t (d_nope + d_v)) column-parallel; rope (fused, writes Q, K, V contiguous): e T [2 a_t d_qk + a_t (d_nope + d_v)
    + d_R + a_t (d_qk + d_v)] bytes; attention: flash with 2 s^2 b a_t (d_qk + d_v) FLOP (x1/2 causal), executed
    backward 2 s^2 b a_t (3 d_qk + 2 d_v) (x1/2 causal); out (T, a_t d_v, h) row-parallel. Model FLOPs of the
    duplicated down projections count once over the t ranks (2 T h n / t per GPU, like the router).
    Saved: the down projections' input e T h r (once), each norm its input and fp32 rstd (e d + 4 per token row),
    the up projections their latent inputs e T r (d_c' + d_c), the flash kernel Q, K, V e T a_t (2 d_qk + d_v) and its
    fp32 log-sum-exp 4 T a_t, the out-proj its input O e T a_t d_v. Selective recompute reruns the flash kernel and
    keeps Q, K, V only (as for standard attention).
    Source: DeepSeek-V2 (arXiv 2405.04434) §2.1 Eqs. 9-19; Megatron-Core ``MLASelfAttention``
    (``get_query_key_value_tensors``: the down projections ``parallel_mode="duplicated"``, the fused MLA rope, the
    ``query``/``key``/``value`` made contiguous); FlashAttention-2 (Dao 2023, arXiv 2307.08691) §3 for the forward
    (QK^T over d_qk, PV over d_v) and backward (S = QK^T again, dV = P^T dO and dP = dO V^T over d_v, dQ = dS K and
    dK = dS^T Q over d_qk) GEMMs, causal blocks skipped.

    Returns:
        kernel name -> row, in execution order [dict]

    >>> k = mla_attention_kernels(4096, 1, 7168, 128, 1536, 512, 128, 64, 128)   # a DeepSeek-V3 layer's attention
    >>> list(k)
    ['q_down', 'q_norm', 'kv_down', 'kv_norm', 'q_up', 'kv_up', 'rotary', 'attention', 'out']
    >>> k["kv_up"]["n"], round(k["attention"]["flops"] / 1e12, 3)   # a (d_nope + d_v); TFLOP, causal
    (32768, 0.687)
    """
    e = bytes_per_element
    tok = s * b
    r = 1 / tp if sequence_parallel else 1
    split = not (type(tp) is int and tp == 1)
    a = heads / tp if split else heads
    qk = nope + rope
    x_in = e * tok * h * r
    plain_q = type(q_lora) is int and q_lora == 0
    t: Table = {}
    if plain_q:    # DeepSeek-V2-Lite: h -> a d_qk, column-parallel like a QKV projection
        t["q_proj"] = {"kind": "gemm", "m": tok, "k": h, "n": a * qk, "batch": 1, "split": "column", "saved": x_in,
                       "flops": 2 * tok * h * a * qk}
    else:
        t["q_down"] = {"kind": "gemm", "m": tok * r, "k": h, "n": q_lora, "batch": 1, "split": "", "saved": x_in,
                       "flops": 2 * tok * h * q_lora / tp}
        t["q_norm"] = {"kind": "elementwise", "bytes": 2 * e * tok * r * q_lora, "saved": (e * q_lora + 4) * tok * r}
    t["kv_down"] = {"kind": "gemm", "m": tok * r, "k": h, "n": kv_lora + rope, "batch": 1, "split": "", "saved": 0,
                    "flops": 2 * tok * h * (kv_lora + rope) / tp}
    t["kv_norm"] = {"kind": "elementwise", "bytes": 2 * e * tok * r * kv_lora, "saved": (e * kv_lora + 4) * tok * r}
    if not plain_q:
        t["q_up"] = {"kind": "gemm", "m": tok, "k": q_lora, "n": a * qk, "batch": 1, "split": "column",
                     "saved": e * tok * r * q_lora, "flops": 2 * tok * q_lora * a * qk}
    t["kv_up"] = {"kind": "gemm", "m": tok, "k": kv_lora, "n": a * (nope + v_dim), "batch": 1, "split": "column",
                  "saved": e * tok * r * kv_lora, "flops": 2 * tok * kv_lora * a * (nope + v_dim)}
    t["rotary"] = {"kind": "elementwise", "saved": 0,
                   "bytes": e * tok * (2 * a * qk + a * (nope + v_dim) + rope + a * (qk + v_dim))}
    half = 0.5 if causal else 1
    selective = recompute == "selective"
    d_fwd, d_bwd = (qk + v_dim) / 2, (3 * qk + 2 * v_dim) / 5   # 4 s^2 a d and 10 s^2 a d (x causal) as executed
    t["attention"] = {"kind": "flash", "class": "attention", "flops": 2 * s * s * b * a * (qk + v_dim) * half,
                      "executed": _compute.flash_attention_flops(s, b, a, d_fwd, causal),
                      "executed_backward": _compute.flash_attention_flops(s, b, a, d_bwd, causal, backward=True),
                      "saved": e * tok * a * (2 * qk + v_dim) + (0 if selective else 4 * tok * a), "selective": True}
    t["out"] = {"kind": "gemm", "m": tok, "k": a * v_dim, "n": h, "batch": 1, "split": "row",
                "saved": e * tok * a * v_dim, "flops": 2 * tok * a * v_dim * h}
    return t
