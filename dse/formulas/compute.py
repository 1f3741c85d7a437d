"""Kernel times on one GPU: GEMMs, attention, element-wise (memory-bound) work.

A GEMM of m x k by k x n costs 2 m k n FLOP and runs at a fraction ``efficiency``
of the dtype's dense peak, plus a fixed ``overhead`` per kernel (launch latency and
the partial last wave). Summed over a layer, the fixed term is what makes small
micro-batches and wide tensor parallelism inefficient: efficiency_eff = F/(F + F0)
with F0 = overhead x peak x efficiency — the size-dependent efficiency that
Calculon models as a step table (Isaev et al., SC'23) in closed form.
Element-wise kernels (norms, activations, dropout, softmax) are memory-bound:
bytes / (HBM bandwidth x efficiency).

Symbols:
    s: sequence length [count]
    b: micro-batch size (sequences) [count]
    h: hidden size [count]
    ffn: F, FFN inner size [count]
    heads: a, attention heads (on this GPU where stated) [count]
    kv_heads: kv, key/value heads [count]
    head_dim: d, head dimension [count]
    tp: t, tensor-parallel degree [count]
    sequence_parallel: Megatron sequence parallelism (shards norm/dropout tensors over t) [bool]
    attention: flash or math (materialised softmax) [choice]
    ffn_type: gelu, relu or swiglu [choice]
    position: learned, rotary or none [choice]
    dropout: dropout layers present [bool]
    bytes_per_element: e, bytes per activation element [bytes]
    peak_flops: dense peak of the dtype [FLOP/s]
    efficiency: eta, achieved share of the peak [fraction]
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from dse.formulas import optimizer as _optimizer, precision as _precision
from dse.formulas._array import Num, _np, is_scalar, minimum, where

__all__ = ["gemm_time", "grouped_gemm_time", "memory_time", "flash_attention_flops", "elementwise_bytes",
           "adam_step_bytes"]


def gemm_time(m: Num, k: Num, n: Num, peak_flops: Num, efficiency: Num, overhead: Num = 0.0, batch: Num = 1,
              depth: Num = 0.0) -> Num:
    """Time of ``batch`` GEMMs of (m x k)(k x n).

    Formula: t = 2 m k n batch / (peak eta) x (1 + k0 / k) + t0
    Source: 2mkn FLOP per GEMM (Narayanan et al. 2021, arXiv 2104.04473, App. A); the fixed per-kernel term t0
    is this tool's closed form of Calculon's size-dependent efficiency (Isaev et al., SC'23), fitted in
    benchmarks/calibrate.py; k0: each output tile's prologue and epilogue (loading the pipeline, writing the
    tile) cost as much as k0 steps of its main loop over k, so a shallow GEMM runs below the peak rate
    (CUTLASS's tile structure, NVIDIA CUTLASS docs "Efficient GEMM in CUDA"; k0 fitted per GPU to measured GEMMs,
    dse.calibrate.micro).

    Args:
        m: rows of the left operand (tokens) [count]
        k: inner dimension [count]
        n: columns of the right operand [count]
        overhead: t0, fixed time per kernel [s]
        batch: GEMMs of this shape run together [count]
        depth: k0, the main-loop depth a tile's prologue and epilogue cost (0: none) [count]
    Returns:
        time [s]

    >>> round(gemm_time(4096, 4096, 4096, 312e12, 0.8) * 1e6, 1)   # 137 GFLOP at 250 TFLOP/s: microseconds
    550.6
    >>> import numpy as np
    >>> gemm_time(np.array([512, 4096]), 4096, 4096, 312e12, 0.8, overhead=1e-5) * 1e6   # microseconds
    array([ 78.8296041 , 560.63683282])
    >>> round(gemm_time(8192, 64, 8192, 989.5e12, 0.8, depth=97) * 1e6, 1)   # k = 64: 2.5x the flat-rate time
    27.3
    """
    t = 2 * m * k * n * batch / (peak_flops * efficiency)
    if not (type(depth) in (int, float) and depth == 0):
        t = t * (1 + depth / k)
    return t + overhead


def grouped_gemm_time(m: Num, k: Num, n: Num, batch: Num, peak_flops: Num,
                      rates: dict[str, dict[str, float]]) -> Num:
    """Time of one grouped GEMM kernel (``torch._grouped_mm``) over ``batch`` groups of (m x k)(k x n), at the
    rate measured for the nearest measured group shape.

    Formula: t = 2 m k n batch / (peak eta_g(m; k', n')), (k', n') the measured shape nearest (k, n) in
    |ln(k/k')| + |ln(n/n')|, eta_g its measured share of the peak at m rows per group, linear in ln m between the
    measured row counts (the nearest one outside them)
    Source: PyTorch's grouped GEMM (aten/src/ATen/native/cuda/GroupMM.cu: one CUTLASS 3 sm90 kernel over every
    group, ``GroupProblemShape``) measured as such: ``dse measure --moe`` times ``torch._grouped_mm`` for four
    published expert shapes at 256, 1,024 and 4,096 rows per expert (dse.measure.micro.expert_gemm_tflops,
    data/h200/micro.jsonl); at 256 rows it runs at 0.34-0.90 of the dense GEMM of the same FLOPs, lowest for the
    smallest shapes (few output tiles per group), so neither the dense rate nor one factor describes it.

    Args:
        m: rows per group (an expert's routed tokens) [count]
        k: inner dimension [count]
        n: columns of a group's weight [count]
        batch: groups (local experts) [count]
        rates: measured shapes "k x n" -> {rows: share of the peak} [dict]
    Returns:
        time [s]

    >>> r = {"2048x1536": {"256": 0.415, "1024": 0.679}, "768x2048": {"256": 0.361, "1024": 0.547}}
    >>> round(grouped_gemm_time(256, 2048, 2048, 64, 989.5e12, r) * 1e6, 1)   # OLMoE's fc1: microseconds
    334.7
    >>> round(grouped_gemm_time(512, 1024, 1024, 32, 989.5e12, r) * 1e6, 1)   # Granite-MoE's fc1: 768x2048's rate
    76.5
    """
    log = math.log if is_scalar(m, k, n) else _np().log
    best: Any = None
    eff: Any = None
    for shape, points in rates.items():
        kk, nn = (float(x) for x in shape.split("x"))
        dist = abs(log(k / kk)) + abs(log(n / nn))
        here = _interp(log(m), sorted((math.log(float(r)), v) for r, v in points.items()))
        if best is None:
            best, eff = dist, here
        else:
            eff, best = where(dist < best, here, eff), minimum(dist, best)
    t: Num = 2 * m * k * n * batch / (peak_flops * eff)
    return t


def _interp(x: Any, points: list[tuple[float, float]]) -> Any:
    """Piecewise-linear y(x) through sorted (x, y) ``points``, constant beyond the first and the last."""
    if type(x) is float:
        if x <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x <= x1:
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        return points[-1][1]
    return _np().interp(x, [p for p, _ in points], [v for _, v in points])


def memory_time(nbytes: Num, bandwidth: Num, efficiency: Num = 1.0) -> Num:
    """Time of a memory-bound kernel.

    Formula: t = bytes / (B_hbm eta_mem)
    Source: roofline model (Williams et al., CACM 2009), memory-bound side.

    Args:
        nbytes: bytes read and written [bytes]
        bandwidth: B_hbm, memory bandwidth [bytes/s]
        efficiency: eta_mem, achieved share of the bandwidth [fraction]
    Returns:
        time [s]

    >>> round(memory_time(2e9, 2.039e12, 0.8) * 1e3, 3)   # 2 GB at 80 % of an A100-80GB's HBM: ms
    1.226
    """
    return nbytes / (bandwidth * efficiency)


def flash_attention_flops(s: Num, b: Num, heads: Num, head_dim: Num, causal: bool = True,
                          backward: bool = False) -> Num:
    """FLOPs a fused (flash) attention kernel executes for one layer's local heads.

    Formula: 4 s^2 b a d (forward; x2.5 backward), halved when causal
    Source: Dao 2023, FlashAttention-2 (arXiv 2307.08691) §3: the backward pass recomputes QK^T and forms dQ, dK,
    dV, dP (2.5x the forward matmuls); causal blocks above the diagonal are skipped.

    Args:
        causal: skip the masked half of the score matrix [bool]
        backward: count the backward pass instead of the forward [bool]
    Returns:
        FLOPs [FLOP]

    >>> flash_attention_flops(4096, 1, 32, 128) / 1e12   # Llama-2-7B layer, causal forward: TFLOP
    0.137438953472
    """
    f = 4 * s * s * b * heads * head_dim
    if causal:
        f = f / 2
    return f * 2.5 if backward else f


def elementwise_bytes(s: Num, b: Num, h: Num, ffn: Num, heads: Num, kv_heads: Num, head_dim: Num, *, tp: Num = 1,
                      sequence_parallel: bool = False, attention: str = "flash", ffn_type: str = "gelu",
                      position: str = "learned", dropout: bool = True, bytes_per_element: Num = 2) -> Num:
    """HBM bytes moved by one layer's memory-bound kernels in a forward pass, per GPU.

    Formula: norms 2 x 2e sbh r; bias-dropout-residual 2 x (3e + 1_drop) sbh r; activation 2e sbF/t (GeLU/ReLU)
    or 3e sbF/t (SwiGLU); rotary 2e sb(a+kv)d/t; math attention (2e + (2e + 1) 1_drop) a s^2 b / t
    Source: byte counts of Megatron-LM's fused kernels (read input, write output per element; masks 1 B),
    r = 1/t with sequence parallelism; this tool's accounting. Backward moves about twice these bytes.

    Returns:
        bytes moved in the forward pass [bytes]

    >>> elementwise_bytes(2048, 1, 4096, 11008, 32, 32, 128, ffn_type="swiglu", position="rotary") / 1e6   # MB
    386.924544
    """
    e = bytes_per_element
    sb = s * b
    r = 1 / tp if sequence_parallel else 1
    drop = 1 if dropout else 0
    total = 4 * e * sb * h * r + 2 * (3 * e + drop) * sb * h * r
    total = total + (3 if ffn_type in ("swiglu", "geglu") else 2) * e * sb * ffn / tp
    if position == "rotary":
        total = total + 2 * e * sb * (heads + kv_heads) * head_dim / tp
    if attention == "math":
        total = total + (2 * e + (2 * e + 1) * drop) * heads / tp * s * s * b
    return total


def adam_step_bytes(params: Num, grad_bytes: Num = 4, weight_bytes: Num = 2) -> Num:
    """HBM bytes of a fused Adam step on the GPU.

    Formula: P (read+write master 8, m 8, v 8, read grad g, write weight w) = P (24 + g + w)
    Source: the operands of Adam (Kingma & Ba 2015, Algorithm 1) in mixed precision (Micikevicius et al. 2018):
    each fp32 state is read and written once.

    Adam in bf16 mixed precision through :func:`dse.formulas.optimizer.step_bytes` (the one optimizer
    definition); the estimate calls that with the plan's optimizer and precision.

    Args:
        params: P, parameters this GPU updates [count]
        grad_bytes: g, bytes per gradient read [bytes]
        weight_bytes: w, bytes per half-precision weight written [bytes]
    Returns:
        bytes moved [bytes]

    >>> adam_step_bytes(1e9) / 1e9   # 30 B per parameter with fp32 gradients: GB
    30.0
    """
    r = dataclasses.replace(_precision.recipe("bf16"), weights=weight_bytes)  # type: ignore[arg-type]  # Num broadcasts
    return _optimizer.step_bytes(params, "adam", r, grad_bytes)
