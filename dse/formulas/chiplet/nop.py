"""Network-on-package traffic per die for each way of splitting a layer, and the time it takes.

Part of :mod:`dse.formulas.chiplet` (the three schemes, notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum, where
from dse.formulas.chiplet.gemms import layer_gemms
from dse.formulas.chiplet.mesh import collective_bytes, interior_fraction, inward_links, ring_bandwidth_factor

__all__ = ["SCHEMES", "megatron_1d_gemm_bytes", "hecaton_2d_gemm_passes", "hecaton_2d_gemm_bytes",
           "summa_2d_gemm_bytes", "kv_gather_bytes", "layer_nop", "nop_time", "edge_injection_time"]

#: Ways to split a layer over the dies (see the package docstring).
SCHEMES = ("megatron-1d", "summa-2d", "hecaton-2d")


def megatron_1d_gemm_bytes(tokens: Num, k: Num, n: Num, dies: Num, kind: str, bytes_per_element: Num = 2,
                           regather: bool = True) -> dict[str, Num]:
    """Bytes one die receives for one GEMM under Megatron 1D TP with sharded stored activations.

    Formula: column: fwd all-gather of X (T k e), bwd reduce-scatter of dX (+ all-gather of X again); row: fwd
    reduce-scatter of Y (T n e), bwd all-gather of dY; each (N-1)/N S
    Source: Shoeybi et al. 2019 (arXiv 1909.08053) with sequence-parallel storage (Korthikanti et al. 2022, arXiv
    2205.05198 §4.2.2); research note chiplet.md §2c(1): without ``regather`` a layer totals 4 all-reduces,
    8 (N-1)/N T h e.

    Returns:
        dict forward, backward [bytes]; forward_steps, backward_steps (ring hops in series) [count]

    >>> megatron_1d_gemm_bytes(4096, 8192, 10240, 64, "column")["forward"] / 1e6   # MB
    66.060288
    """
    e = bytes_per_element
    if kind == "column":
        m = tokens * k * e
        fwd = collective_bytes(m, dies)
        bwd = fwd * (2 if regather else 1)
        n_fwd, n_bwd = 1, (2 if regather else 1)
    else:
        m = tokens * n * e
        fwd = collective_bytes(m, dies)
        bwd = fwd
        n_fwd, n_bwd = 1, 1
    return {"forward": fwd, "backward": bwd, "forward_steps": n_fwd * (dies - 1), "backward_steps": n_bwd * (dies - 1)}


def hecaton_2d_gemm_passes(tokens: Num, k: Num, n: Num, rows: Num, cols: Num, kind: str,
                           bytes_per_element: Num = 2, regather: bool = True) -> dict[str, Num]:
    """Bytes one die receives for each of a GEMM's three products under the 2D weight-stationary scheme.

    Formula: column GEMM (row GEMM: swap R and C, h and v): forward: gather X along the row
    T k e (C-1)/(RC) (h), reduce-scatter Y along the column T n e (R-1)/(RC) (v); dgrad: gather dY
    T n e (R-1)/(RC) (v), reduce-scatter dX T k e (C-1)/(RC) (h); wgrad: regather X T k e (C-1)/(RC) (h), dY
    reused, dW local
    Source: research note chiplet.md §2c(3) (first-principles reconstruction of Hecaton, arXiv 2407.05784);
    checked against a brute-force simulation of the algorithm on 2x2, 2x4 and 4x4 meshes
    (tests/test_chiplet_nop_bruteforce.py).

    Layout. A column GEMM Y[T x n] = X[T x k] W[k x n] keeps W[k_i, n_j] on die (i, j) (k split over the R
    rows, n over the C columns): the weight, and so the weight gradient, is stationary. Its input X arrives
    sharded as X[t_j, k_i] (tokens over the columns) and is all-gathered along the row; the partial
    Y[:, n_j] (a sum over the R dies of the column) is reduce-scattered along the column, leaving
    Y[t_i, n_j]: exactly the input layout of a row GEMM (k over the C columns, n over the R rows), whose
    output Y[t_j, n_i] is again a column GEMM's input layout. Backward (dgrad) runs the two collectives
    the other way: dY is all-gathered where Y was reduce-scattered, the partial dX reduce-scattered where
    X was gathered. The weight gradient dW[k_i, n_j] = X[:, k_i]^T dY[:, n_j] needs the gathered X again
    (``regather``: stored activations are kept sharded) and the dY the dgrad already gathered; its partial
    sums stay on the die (no reduction crosses the NoP), and weights never do.

    Returns:
        dict forward_h, forward_v, dgrad_h, dgrad_v, wgrad_h, wgrad_v [bytes]

    >>> p = hecaton_2d_gemm_passes(4096, 8192, 10240, 8, 8, "column")
    >>> [round(p[x] / 1e6, 2) for x in ("forward_h", "forward_v", "dgrad_h", "dgrad_v", "wgrad_h", "wgrad_v")]
    [7.34, 9.18, 7.34, 9.18, 7.34, 0.0]
    """
    e = bytes_per_element
    rc = rows * cols
    if kind == "column":                                   # input along the row (h), output along the column (v)
        x_in, y_out = tokens * k * e * (cols - 1) / rc, tokens * n * e * (rows - 1) / rc
        regathered = x_in if regather else 0 * x_in
        return {"forward_h": x_in, "forward_v": y_out, "dgrad_h": x_in, "dgrad_v": y_out,
                "wgrad_h": regathered, "wgrad_v": 0 * y_out}
    x_in, y_out = tokens * k * e * (rows - 1) / rc, tokens * n * e * (cols - 1) / rc
    regathered = x_in if regather else 0 * x_in
    return {"forward_h": y_out, "forward_v": x_in, "dgrad_h": y_out, "dgrad_v": x_in,
            "wgrad_h": 0 * y_out, "wgrad_v": regathered}


def hecaton_2d_gemm_bytes(tokens: Num, k: Num, n: Num, rows: Num, cols: Num, kind: str, bytes_per_element: Num = 2,
                          regather: bool = True) -> dict[str, Num]:
    """Bytes one die receives for one GEMM under the 2D all-gather/reduce-scatter scheme, per mesh dimension.

    Formula: column GEMM: horizontal T k e (C-1)/(RC), vertical T n e (R-1)/(RC); a row GEMM swaps R and C;
    backward = dgrad + wgrad of :func:`hecaton_2d_gemm_passes`
    Source: research note chiplet.md §2c(3), the first-principles reconstruction of Hecaton's weight-stationary
    scheme (arXiv 2407.05784; its body text was not readable); per-product layout in
    :func:`hecaton_2d_gemm_passes`.

    A column GEMM all-gathers X[:, k/R] along its row (C dies) and
    reduce-scatters the partial Y[:, n/C] along its column (R dies).
    Backward: all-gather dY and reduce-scatter dX (the same volumes, dimensions swapped back),
    plus (``regather``) the all-gather of X again for dW. Weights never cross the NoP.
    Returns:
        dict forward_h, forward_v, backward_h, backward_v [bytes]; *_steps_h, *_steps_v (hops in series) [count]

    >>> b = hecaton_2d_gemm_bytes(4096, 8192, 10240, 8, 8, "column")
    >>> b["forward_h"] / 1e6, b["forward_v"] / 1e6   # MB
    (7.340032, 9.17504)
    """
    p = hecaton_2d_gemm_passes(tokens, k, n, rows, cols, kind, bytes_per_element, regather)
    n_in = 2 if regather else 1                           # backward collectives on the input side
    out = {"forward_h": p["forward_h"], "forward_v": p["forward_v"],
           "backward_h": p["dgrad_h"] + p["wgrad_h"], "backward_v": p["dgrad_v"] + p["wgrad_v"]}
    if kind == "column":
        return {**out, "forward_steps_h": cols - 1, "forward_steps_v": rows - 1,
                "backward_steps_h": n_in * (cols - 1), "backward_steps_v": rows - 1}
    return {**out, "forward_steps_h": cols - 1, "forward_steps_v": rows - 1,
            "backward_steps_h": cols - 1, "backward_steps_v": n_in * (rows - 1)}


def summa_2d_gemm_bytes(tokens: Num, k: Num, n: Num, q: Num, bytes_per_element: Num = 2) -> dict[str, Num]:
    """Bytes one die receives for one GEMM under SUMMA (Optimus 2D) on a q x q grid.

    Formula: forward: horizontal T k e (q-1)/q^2, vertical k n e (q-1)/q^2; backward twice the forward
    Source: Xu et al. 2021 (Optimus, arXiv 2104.05343); Colossal-AI 2D_tensor_parallel.md (6(q-1)/q blocks per
    linear layer, forward + backward); research note chiplet.md §2c(2).

    Forward: q - 1 input blocks (T/q x k/q) broadcast along the row and q - 1 weight blocks (k/q x n/q) along the
    column; backward is two more SUMMA products (dX = dY W^T, dW = X^T dY). Weights cross the NoP every
    micro-batch.

    Returns:
        dict forward_h, forward_v, backward_h, backward_v [bytes]; *_steps_h, *_steps_v (hops in series) [count]

    >>> b = summa_2d_gemm_bytes(4096, 8192, 10240, 8)
    >>> b["forward_h"] / 1e6, b["forward_v"] / 1e6   # activations and weights: MB
    (7.340032, 18.35008)
    """
    e = bytes_per_element
    act = tokens * k * e * (q - 1) / (q * q)
    wgt = k * n * e * (q - 1) / (q * q)
    return {"forward_h": act, "forward_v": wgt, "backward_h": 2 * act, "backward_v": 2 * wgt,
            "forward_steps_h": 2 * q - 1, "forward_steps_v": 2 * q - 1,
            "backward_steps_h": 2 * (2 * q - 1), "backward_steps_v": 2 * (2 * q - 1)}


def kv_gather_bytes(tokens: Num, kv_heads: Num, head_dim: Num, rows: Num, cols: Num, split: Num,
                    bytes_per_element: Num = 2) -> Num:
    """Bytes a die receives to gather K and V of whole sequences for attention (2D schemes).

    Formula: T 2 kv d e (R-1)/(RC) per pass when ``split``, else 0
    Source: research note chiplet.md §2c (ring-attention style gather; how Hecaton handles attention is not known:
    this is the upper bound of the reconstruction).

    When tokens of one sequence sit on several mesh rows (micro-batch b not a multiple of R), each die all-gathers
    K and V of its heads along its column; backward reduce-scatters dK, dV, the same. When every row holds whole
    sequences attention is local.

    Args:
        split: a sequence spans several mesh rows [bool]
    Returns:
        bytes [bytes]

    >>> kv_gather_bytes(4096, 8, 128, 8, 8, True) / 1e6   # MB
    1.835008
    """
    return where(split, tokens * 2 * kv_heads * head_dim * bytes_per_element * (rows - 1) / (rows * cols), 0 * tokens)


def layer_nop(scheme: str, tokens: Num, micro_batch: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num,
              ffn: Num, ffn_type: str, rows: Num, cols: Num, bytes_per_element: Num = 2,
              regather: bool = True) -> dict[str, Num]:
    """NoP traffic of one layer and one micro-batch, per die: bytes received and busiest-link bytes.

    Formula: sum of the scheme's per-GEMM collectives (+ K/V gather for 2D); critical = bytes / ring factor (1D),
    max(horizontal, vertical) (2D AG/RS), max(...) q/(q-1) (SUMMA)
    Source: research note chiplet.md §2c; :func:`megatron_1d_gemm_bytes`, :func:`summa_2d_gemm_bytes`,
    :func:`hecaton_2d_gemm_bytes`, :func:`kv_gather_bytes`.

    ``critical`` is the bytes on the busiest link direction, so that time = critical / B + steps alpha
    (a SUMMA broadcast sends each block over every link of the line).

    Returns:
        dict forward, backward, forward_critical, backward_critical [bytes]; forward_steps, backward_steps [count]

    >>> args = (4096, 1, 8192, 64, 8, 128, 28672, "swiglu", 8, 8)   # Llama-2-70B layer on 8 x 8 dies, T = 4096
    >>> {s: round(layer_nop(s, *args)["forward"] / 1e6, 1) for s in ("megatron-1d", "summa-2d", "hecaton-2d")}   # MB
    {'megatron-1d': 264.2, 'summa-2d': 236.7, 'hecaton-2d': 124.8}
    """
    gemms = layer_gemms(h, heads, kv_heads, head_dim, ffn, ffn_type)
    e = bytes_per_element
    dies = rows * cols
    out = {}
    if scheme == "megatron-1d":
        fwd: Num = 0.0
        bwd: Num = 0.0
        s_f: Num = 0.0
        s_b: Num = 0.0
        for _, k, n, kind in gemms:
            g = megatron_1d_gemm_bytes(tokens, k, n, dies, kind, e, regather)
            fwd, bwd = fwd + g["forward"], bwd + g["backward"]
            s_f, s_b = s_f + g["forward_steps"], s_b + g["backward_steps"]
        beta = ring_bandwidth_factor(rows, cols)
        out = {"forward": fwd, "backward": bwd, "forward_critical": fwd / beta, "backward_critical": bwd / beta,
               "forward_steps": s_f, "backward_steps": s_b}
        return out
    acc: dict[str, Num] = dict.fromkeys(("forward_h", "forward_v", "backward_h", "backward_v", "forward_steps_h",
                                         "forward_steps_v", "backward_steps_h", "backward_steps_v"), 0.0)
    for _, k, n, kind in gemms:
        if scheme == "summa-2d":
            g = summa_2d_gemm_bytes(tokens, k, n, rows, e)
        elif scheme == "hecaton-2d":
            g = hecaton_2d_gemm_bytes(tokens, k, n, rows, cols, kind, e, regather)
        else:
            raise ValueError(f"unknown chiplet scheme {scheme!r}; allowed: {', '.join(SCHEMES)}")
        for key in acc:
            acc[key] = acc[key] + g[key]
    kv = kv_gather_bytes(tokens, kv_heads, head_dim, rows, cols, (micro_batch % rows) != 0, e)
    acc["forward_v"] = acc["forward_v"] + kv
    acc["backward_v"] = acc["backward_v"] + kv
    stretch = rows / maximum(rows - 1, 1) if scheme == "summa-2d" else 1.0
    for p in ("forward", "backward"):
        out[p] = acc[p + "_h"] + acc[p + "_v"]
        out[p + "_critical"] = maximum(acc[p + "_h"], acc[p + "_v"]) * stretch
        out[p + "_steps"] = maximum(acc[p + "_steps_h"], acc[p + "_steps_v"])
        out[p + "_h"], out[p + "_v"] = acc[p + "_h"], acc[p + "_v"]
    return out


def nop_time(critical_bytes: Num, steps: Num, link_bandwidth: Num, hop_latency: Num) -> Num:
    """Time of a set of NoP collectives.

    Formula: t = bytes on the busiest link direction / B + hops alpha
    Source: the alpha-beta (Hockney) model on the busiest link.

    Args:
        critical_bytes: bytes on the busiest link direction [bytes]
        steps: hops in series [count]
    Returns:
        time [s]

    >>> round(nop_time(77.1e6, 28, 100e9, 20e-9) * 1e6, 2)   # microseconds
    771.56
    """
    return critical_bytes / link_bandwidth + steps * hop_latency


def edge_injection_time(dram_bytes: Num, rows: Num, cols: Num, link_bandwidth: Num, placement: str = "edge") -> Num:
    """NoP time to carry edge-DRAM traffic from the boundary dies to the interior.

    Formula: t = bytes f_int / (n_inward B); 0 for per-die DRAM or a mesh without interior
    Source: this tool's model: the interior dies' share of DRAM traffic (:func:`interior_fraction`) crosses the
    boundary ring's inward links (:func:`inward_links`).

    Args:
        dram_bytes: DRAM bytes of the phase [bytes]
    Returns:
        time [s]

    >>> round(edge_injection_time(1e12, 8, 8, 100e9), 3)
    0.234
    """
    if placement == "per-die":
        return 0 * dram_bytes
    links = inward_links(rows, cols)
    return where(links > 0, dram_bytes * interior_fraction(rows, cols) / (maximum(links, 1) * link_bandwidth),
                 0 * dram_bytes)
