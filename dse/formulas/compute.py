"""Kernel times on one GPU: GEMMs, attention, element-wise (memory-bound) work.

A GEMM of m x k by k x n costs 2 m k n FLOP and runs at a fraction ``efficiency``
of the dtype's dense peak, plus a fixed ``overhead`` per kernel (launch latency and
the partial last wave). Summed over a layer, the fixed term is what makes small
micro-batches and wide tensor parallelism inefficient: efficiency_eff = F/(F + F0)
with F0 = overhead x peak x efficiency — the size-dependent efficiency that
Calculon models as a step table (Isaev et al., SC'23) in closed form.
Element-wise kernels (norms, activations, dropout, softmax) are memory-bound:
bytes / (HBM bandwidth x efficiency).
"""

from __future__ import annotations


def gemm_time(m, k, n, peak_flops, efficiency, overhead=0.0, batch=1):
    """Time of ``batch`` GEMMs of (m x k)(k x n).

    Formula: 2 m k n batch / (peak eta) + t0.
    """
    return 2 * m * k * n * batch / (peak_flops * efficiency) + overhead


def memory_time(nbytes, bandwidth, efficiency=1.0):
    """Time of a memory-bound kernel. Formula: bytes / (B_hbm eta_mem)."""
    return nbytes / (bandwidth * efficiency)


def flash_attention_flops(s, b, heads, head_dim, causal=True, backward=False):
    """FLOPs a fused (flash) attention kernel executes for one layer's local heads.

    Formula: 4 s^2 b a d (forward; x2.5 backward: recomputes QK^T and forms dQ, dK, dV, dP;
    Dao 2023, FlashAttention-2 §3), halved when causal blocks above the diagonal are skipped.
    """
    f = 4 * s * s * b * heads * head_dim
    if causal:
        f = f / 2
    return f * 2.5 if backward else f


def elementwise_bytes(s, b, h, ffn, heads, kv_heads, head_dim, *, tp=1, sequence_parallel=False, attention="flash",
                      ffn_type="gelu", position="learned", dropout=True, bytes_per_element=2):
    """HBM bytes moved by one layer's memory-bound kernels in a forward pass, per GPU.

    Formula: norms 2 x 2e sbh r; bias-dropout-residual 2 x (3e + 1_drop) sbh r;
    activation 2e sbF/t (GeLU/ReLU) or 3e sbF/t (SwiGLU); rotary 2e sb(a+kv)d/t;
    math attention (2e + (2e + 1) 1_drop) a s^2 b / t (scale-mask-softmax, dropout).
    Backward moves about twice these bytes (gradient in and out plus saved input).
    """
    e = bytes_per_element
    sb = s * b
    r = 1 / tp if sequence_parallel else 1
    drop = 1 if dropout else 0
    total = 4 * e * sb * h * r + 2 * (3 * e + drop) * sb * h * r
    total = total + (3 if ffn_type == "swiglu" else 2) * e * sb * ffn / tp
    if position == "rotary":
        total = total + 2 * e * sb * (heads + kv_heads) * head_dim / tp
    if attention == "math":
        total = total + (2 * e + (2 * e + 1) * drop) * heads / tp * s * s * b
    return total


def adam_step_bytes(params, grad_bytes=4, weight_bytes=2):
    """HBM bytes of a fused Adam step on the GPU.

    Formula: P (read+write master 8, m 8, v 8, read grad g, write weight w) = P (24 + g + w).
    """
    return params * (24 + grad_bytes + weight_bytes)
