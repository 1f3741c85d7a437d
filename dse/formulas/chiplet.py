"""LLM training on a package of compute chiplets: NoP, DRAM, SRAM, time and the compute/communication ratio.

The package is an R x C mesh of identical dies; each die has peak F FLOP/s, S bytes of SRAM
and one network-on-package (NoP) link of bandwidth B (bytes/s per direction) to each mesh
neighbour. DRAM attaches at the package edge (one attach point per perimeter die-side, so
its bandwidth grows with the perimeter 2(R + C)) or on every die. All functions are pure and
broadcast over numpy arrays; categorical choices (scheme, GEMM kind, schedule) are strings.

Three ways to split one transformer layer over the N = RC dies (source and status of each
in the research note ``docs/reference/chiplet.md`` §2; the Hecaton paper body could not be read,
so scheme (3) is the note's first-principles reconstruction, not the paper's text):

1. ``megatron-1d`` — Megatron tensor parallelism (Shoeybi et al. 2019, arXiv 1909.08053)
   over a ring laid on the mesh as a snake (Hamiltonian cycle). Column-parallel QKV and FC1,
   row-parallel O and FC2; activations between blocks are stored sharded (sequence-parallel
   style, Korthikanti et al. 2022), so each block all-gathers its input and reduce-scatters
   its output: the per-die volume is the same as the all-reduce form, 2(N-1)/N T h e per
   block and pass, independent of N.
2. ``summa-2d`` — Optimus 2D tensor parallelism (SUMMA; Xu et al. 2021, arXiv 2104.05343;
   Colossal-AI ``2D_tensor_parallel.md``) on a q x q grid: activations *and weights* are
   broadcast along rows and columns every GEMM; the backward pass is two more SUMMA products.
3. ``hecaton-2d`` — the 2D all-gather / reduce-scatter, weight-stationary scheme (note §2c(3)):
   die (i, j) keeps its weight block; a GEMM all-gathers its input along one mesh dimension and
   reduce-scatters its output along the other, and consecutive GEMMs swap the two dimensions,
   so any R x C works and every collective is a line of nearest neighbours.

Collective timing on a mesh without wrap-around links (stated assumptions):
- a ring over all N dies exists as a nearest-neighbour cycle when R, C >= 2 and RC is even; it
  is then used in both directions (bandwidth 2B per die); otherwise (odd x odd, or a 1 x N line)
  one hop of the ring doubles up on a link and the ring runs at B;
- an all-gather or reduce-scatter along a line of n dies is bound by the end die, which has one
  link in that dimension: time = received bytes / B (the bidirectional trick of a ring does not
  help a line);
- collectives along rows and along columns use disjoint links and overlap (chunked pipelining);
  so a 2D scheme's NoP time is set by the busier dimension;
- a SUMMA broadcast along a line needs q block transfers per link per product.

Symbols:
    rows: R, mesh rows [count]
    cols: C, mesh columns [count]
    dies: N = R C, dies of the package [count]
    q: side of a square q x q mesh (SUMMA) [count]
    scheme: megatron-1d, summa-2d or hecaton-2d [choice]
    tokens: T, tokens per micro-batch (b s) [count]
    micro_batch: b, sequences per micro-batch [count]
    h: hidden size [count]
    heads: a, attention heads [count]
    kv_heads: kv, key/value heads [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    ffn_type: gelu, relu or swiglu [choice]
    k: inner dimension of the GEMM (input features) [count]
    n: output features of the GEMM [count]
    kind: column or row (Megatron's split of the GEMM) [choice]
    gemms: the layer's GEMMs, as returned by :func:`layer_gemms` [tuple]
    nbytes: S, bytes of the full tensor [bytes]
    bytes_per_element: e, bytes per activation/weight element [bytes]
    grad_bytes: g, bytes per gradient [bytes]
    optimizer_bytes: o, optimizer-state bytes per parameter (Adam incl. master: 12) [bytes]
    regather: all-gather the GEMM input again in backward for dW (sharded stored activations) [bool]
    placement: edge, per-die or io-dies (where DRAM attaches) [choice]
    link_bandwidth: B, one NoP link, per direction [bytes/s]
    hop_latency: alpha, latency per NoP hop [s]
    layers: L, transformer layers [count]
    micro_batches: m, micro-batches per iteration [count]
    minibatch: k_mb, micro-batches per mini-batch of the layer-major schedule [count]
    layer_params: P_layer, weight elements of one layer [count]
    total_params: P, parameters of the model [count]
    stored_bytes_per_layer: A, activation bytes one layer stores per micro-batch [bytes]
    tile: t, edge of the MAC array's output tile [count]
"""

from __future__ import annotations

from dse.formulas import kernels as _kernels
from dse.formulas._array import Num, maximum, minimum, where

__all__ = ["SCHEMES", "DRAM_PLACEMENTS", "mesh_perimeter_sides", "dram_attach_points", "edge_hops",
           "interior_fraction", "inward_links", "ring_bandwidth_factor", "collective_bytes", "layer_gemms",
           "gemm_parameters", "layer_gemm_flops", "megatron_1d_gemm_bytes", "hecaton_2d_gemm_bytes",
           "summa_2d_gemm_bytes", "kv_gather_bytes", "layer_nop", "nop_time", "edge_injection_time",
           "compute_to_communication", "worked_check_ratio", "sram_per_die", "min_tile_sram", "dram_traffic",
           "dram_footprint", "overlapped_time", "iteration_energy", "sram_operand_bytes"]

#: Ways to split a layer over the dies (see the module docstring).
SCHEMES = ("megatron-1d", "summa-2d", "hecaton-2d")
Gemm = tuple[str, Num, Num, str]     # (name, k, n, kind) of one weight GEMM: Y[T x n] = X[T x k] W[k x n]
#: Where DRAM attaches: package edge (bandwidth grows with the perimeter), every die, or fixed IO dies.
DRAM_PLACEMENTS = ("edge", "per-die", "io-dies")


# ------------------------------------------------------------------------- mesh geometry


def mesh_perimeter_sides(rows: Num, cols: Num) -> Num:
    """Die sides on the package boundary, where edge DRAM attaches.

    Formula: 2 (R + C)
    Source: geometry of an R x C mesh.

    Returns:
        die sides [count]

    >>> mesh_perimeter_sides(8, 8)
    32
    """
    return 2 * (rows + cols)


def dram_attach_points(rows: Num, cols: Num, placement: str = "edge", per_side: Num = 1) -> Num:
    """Number of DRAM attach points (stacks or channels) of the package.

    Formula: edge: k 2 (R + C); per-die: k R C; io-dies: k
    Source: research note chiplet.md §2d ("B_DRAM proportional to sqrt(N)" for edge DRAM); Gemini (HPCA'24) code
    for four IO dies per package.

    Args:
        per_side: k, attach points per perimeter die-side (per die, or in total for io-dies) [count]
    Returns:
        attach points [count]

    >>> dram_attach_points(8, 8), dram_attach_points(8, 8, "per-die"), dram_attach_points(8, 8, "io-dies", 4)
    (32, 64, 4)
    """
    if placement == "per-die":
        return rows * cols * per_side
    if placement == "io-dies":
        return per_side + 0 * rows
    return per_side * mesh_perimeter_sides(rows, cols)


def edge_hops(rows: Num, cols: Num) -> Num:
    """Mean NoP hops from the nearest package edge to a die, plus the edge link itself.

    Formula: a/4 - a^2/(12 b) + 1/2 with a = min(R, C), b = max(R, C)
    Source: mean distance from a point of an a x b rectangle to its boundary, a/4 - a^2/12b (geometry), minus the
    half-die of the cell centre, plus the IO link; this tool's approximation (8 x 8: 1.83, exact mean 1.875).

    Returns:
        hops [count]

    >>> round(edge_hops(8, 8), 2)
    1.83
    """
    a = minimum(rows, cols)
    b = maximum(rows, cols)
    return a / 4 - a * a / (12 * b) + 0.5


def interior_fraction(rows: Num, cols: Num) -> Num:
    """Share of dies not on the package boundary.

    Formula: max(R-2, 0) max(C-2, 0) / (R C)
    Source: geometry of an R x C mesh.

    Returns:
        share [fraction]

    >>> interior_fraction(8, 8)
    0.5625
    """
    return maximum(rows - 2, 0) * maximum(cols - 2, 0) / (rows * cols)


def inward_links(rows: Num, cols: Num) -> Num:
    """Links from boundary dies into the interior (they carry edge DRAM traffic inwards).

    Formula: 2 max(R-2, 0) + 2 max(C-2, 0)
    Source: geometry of an R x C mesh (one link per boundary die facing an interior die).

    Returns:
        links [count]

    >>> inward_links(8, 8)
    24
    """
    return 2 * maximum(rows - 2, 0) + 2 * maximum(cols - 2, 0)


def ring_bandwidth_factor(rows: Num, cols: Num) -> Num:
    """Link directions a die uses in a ring over the whole mesh (the 1D scheme's snake).

    Formula: 2 when R, C >= 2 and R C even (a nearest-neighbour Hamiltonian cycle, used both ways); else 1
    Source: grid graphs have a Hamiltonian cycle iff both sides are >= 2 and the node count is even (Itai et al.
    1982, SIAM J. Comput. 11(4)); a bidirectional ring halves the per-direction volume.

    Returns:
        factor [1]

    >>> import numpy as np
    >>> ring_bandwidth_factor(np.array([8, 3, 1]), np.array([8, 3, 16]))
    array([2., 1., 1.])
    """
    cycle = (minimum(rows, cols) >= 2) & ((rows * cols) % 2 == 0)
    return where(cycle, 2.0, 1.0)


def collective_bytes(nbytes: Num, n: Num) -> Num:
    """Bytes one member receives in an all-gather (or sends in a reduce-scatter) of a tensor.

    Formula: (n - 1)/n S
    Source: Patarasuk & Yuan 2009 (ring or line all-gather / reduce-scatter).

    Args:
        n: members [count]
    Returns:
        bytes [bytes]

    >>> collective_bytes(64e6, 8) / 1e6   # MB
    56.0
    """
    return (n - 1) / n * nbytes


# ------------------------------------------------------------------------- the layer's GEMMs


def layer_gemms(h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num,
                ffn_type: str = "swiglu") -> tuple[Gemm, ...]:
    """The weight GEMMs of one transformer layer as (name, k, n, kind), Y[T x n] = X[T x k] W[k x n].

    Formula: QKV h -> (a + 2 kv) d (column); O a d -> h (row); FC1 h -> n_g F (column, n_g = 2 for SwiGLU, else 1);
    FC2 F -> h (row)
    Source: Shoeybi et al. 2019 (Megatron-LM, arXiv 1909.08053) §3 for the column/row split; research note
    chiplet.md §2c(3) step 4 (a column GEMM gathers its input along mesh rows in the 2D scheme, a row GEMM along
    columns).

    The weight GEMMs of the kernel table (:func:`dse.formulas.kernels.layer_kernels` unsplit,
    :func:`dse.formulas.kernels.weight_gemms`): the GPU and the chiplet models share one list.

    Returns:
        tuple of (name, k, n, kind) [tuple]

    >>> for gemm in layer_gemms(8192, 64, 8, 128, 28672):   # Llama-2-70B
    ...     print(gemm)
    ('qkv', 8192, 10240, 'column')
    ('out', 8192, 8192, 'row')
    ('fc1', 8192, 57344, 'column')
    ('fc2', 28672, 8192, 'row')
    """
    return _kernels.weight_gemms(_kernels.layer_kernels(1, 1, h, heads, kv_heads, head_dim, ffn, ffn_type=ffn_type))


def gemm_parameters(gemms: tuple[Gemm, ...]) -> Num:
    """Weight elements of the GEMMs.

    Formula: P_layer = sum k n (= 2h^2 + 2h^2/g + 3hF for Llama)
    Source: research note chiplet.md §2b, §3c (Llama-2-70B: 855,638,016; Llama-3.1-405B: 3,187,671,040).

    Returns:
        weight elements [count]

    >>> gemm_parameters(layer_gemms(8192, 64, 8, 128, 28672)), gemm_parameters(layer_gemms(16384, 128, 8, 128, 53248))
    (855638016, 3187671040)
    """
    total: Num = 0
    for _, k, n, _ in gemms:
        total = total + k * n
    return total


def layer_gemm_flops(tokens: Num, gemms: tuple[Gemm, ...]) -> Num:
    """Forward FLOPs of a layer's weight GEMMs for T tokens.

    Formula: sum 2 T k n (training: x3)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A (2 FLOP per multiply-add).

    Returns:
        FLOPs [FLOP]

    >>> layer_gemm_flops(4096, layer_gemms(8192, 64, 8, 128, 28672)) / 1e12   # TFLOP
    7.009386627072
    """
    total: Num = 0
    for _, k, n, _ in gemms:
        total = total + 2 * tokens * k * n
    return total


# ------------------------------------------------------------------------- NoP bytes per die


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


def hecaton_2d_gemm_bytes(tokens: Num, k: Num, n: Num, rows: Num, cols: Num, kind: str, bytes_per_element: Num = 2,
                          regather: bool = True) -> dict[str, Num]:
    """Bytes one die receives for one GEMM under the 2D all-gather/reduce-scatter scheme, per mesh dimension.

    Formula: column GEMM: horizontal T k e (C-1)/(RC), vertical T n e (R-1)/(RC); a row GEMM swaps R and C
    Source: research note chiplet.md §2c(3), the first-principles reconstruction of Hecaton's weight-stationary
    scheme (arXiv 2407.05784; its body text was not readable).

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
    e = bytes_per_element
    rc = rows * cols
    n_in = 2 if regather else 1                           # backward collectives on the input side
    if kind == "column":                                  # input gathered along the row (horizontal)
        gather_in = tokens * k * e * (cols - 1) / rc
        scatter_out = tokens * n * e * (rows - 1) / rc
        return {"forward_h": gather_in, "forward_v": scatter_out,
                "backward_h": n_in * gather_in, "backward_v": scatter_out,
                "forward_steps_h": cols - 1, "forward_steps_v": rows - 1,
                "backward_steps_h": n_in * (cols - 1), "backward_steps_v": rows - 1}
    gather_in = tokens * k * e * (rows - 1) / rc          # row GEMM: input gathered along the column
    scatter_out = tokens * n * e * (cols - 1) / rc
    return {"forward_h": scatter_out, "forward_v": gather_in,
            "backward_h": scatter_out, "backward_v": n_in * gather_in,
            "forward_steps_h": cols - 1, "forward_steps_v": rows - 1,
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
              ffn: Num, ffn_type: str, rows: Num, cols: Num, bytes_per_element: Num = 2, regather: bool = True) -> dict[str, Num]:
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
    acc: dict[str, Num] = dict.fromkeys(("forward_h", "forward_v", "backward_h", "backward_v", "forward_steps_h", "forward_steps_v", "backward_steps_h", "backward_steps_v"), 0.0)
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
    return where(links > 0, dram_bytes * interior_fraction(rows, cols) / (maximum(links, 1) * link_bandwidth), 0 * dram_bytes)


# ------------------------------------------------------------------------- compute/communication ratio


def compute_to_communication(scheme: str, tokens: Num, micro_batch: Num, h: Num, heads: Num, kv_heads: Num,
                             head_dim: Num, ffn: Num, ffn_type: str, rows: Num, cols: Num, bytes_per_element: Num = 2,
                             regather: bool = True) -> Num:
    """FLOP per NoP byte per die for one layer, forward + backward (the weak-scaling metric).

    Formula: (6 T sum k n / N) / (NoP bytes received per die, fwd + bwd)
    Source: research note chiplet.md §2d (GEMM FLOPs only, as in its worked table); Hecaton (arXiv 2407.05784)
    abstract: the ratio "remains nearly constant" as workload and hardware grow together.

    Returns:
        ratio [FLOP/byte]

    >>> import numpy as np
    >>> q = np.array([4, 8, 16])   # Llama-2-70B, T = 4096: 1D falls as 1/N, 2D as 1/sqrt(N)
    >>> np.round(compute_to_communication("megatron-1d", 4096, 1, 8192, 64, 8, 128, 28672, "swiglu", q, q))
    array([2089.,  497.,  123.])
    >>> np.round(compute_to_communication("hecaton-2d", 4096, 1, 8192, 64, 8, 128, 28672, "swiglu", q, q))
    array([2579., 1105.,  516.])
    """
    gemms = layer_gemms(h, heads, kv_heads, head_dim, ffn, ffn_type)
    flops = 3 * layer_gemm_flops(tokens, gemms) / (rows * cols)
    nop = layer_nop(scheme, tokens, micro_batch, h, heads, kv_heads, head_dim, ffn, ffn_type, rows, cols,
                    bytes_per_element, regather)
    ratio: Num = flops / (nop["forward"] + nop["backward"])
    return ratio


def worked_check_ratio(scheme: str, layer_params: Num, h: Num, ffn: Num, group: Num, dies: Num,
                       bytes_per_element: Num = 2) -> Num:
    """The note's worked compute/communication table, with the note's own conventions (§2d).

    Formula: 1D: 6 P / (8 (N-1) h e); 2D: 6 P / N / (3 e [(6 + 2/g) h + 3 f] / sqrt(N))
    Source: research note chiplet.md §2d worked check: 621.7 / 779.5 (Llama2-70B, N = 64) and 306.6 / 792.9
    (Llama3.1-405B, N = 239).

    1D: four ring all-reduces of T h e per layer, no re-gather; 2D: large-N volume, backward = 2 x forward.
    The exact per-collective accounting of :func:`compute_to_communication` differs: the 2D volume
    carries (R-1)/R factors and its backward adds one all-gather per GEMM (re-gather of X), not a
    whole forward, so the note's 2D column is conservative by about 1.3x at these sizes.

    Args:
        layer_params: P, weight elements of one layer [count]
        group: g = heads / kv_heads [count]
    Returns:
        ratio [FLOP/byte]

    >>> round(worked_check_ratio("megatron-1d", 855638016, 8192, 28672, 8, 64), 1)
    621.7
    >>> round(worked_check_ratio("hecaton-2d", 855638016, 8192, 28672, 8, 64), 1)
    779.5
    """
    e = bytes_per_element
    if scheme == "megatron-1d":
        return 6 * layer_params / (8 * (dies - 1) * h * e)
    sum_kn = (6 + 2 / group) * h + 3 * ffn
    return 6 * layer_params / dies / (3 * e * sum_kn / dies ** 0.5)


# ------------------------------------------------------------------------- SRAM per die


def sram_per_die(scheme: str, tokens: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, ffn_type: str,
                 rows: Num, cols: Num, bytes_per_element: Num = 2, grad_bytes: Num = 4,
                 weight_buffers: Num = 2) -> dict[str, Num]:
    """SRAM one die needs while a layer runs: its weight block, gradient block, activation working set.

    Formula: weights n_buf P e / N + gradients P g / N + max over GEMMs of the operands + T h e / N
    Source: research note chiplet.md §1a, §2c (the 2D method "relieves constraints on SRAM capacity"); this tool's
    accounting.

    weights = n_buf P e / N (the resident block plus the next layer's prefetch);
    gradients = P g / N (accumulated on the die during the backward pass);
    activations = max over GEMMs of the scheme's operands for one micro-batch of T tokens:
    1D column T k e + T n e/N, row T k e/N + T n e (the gathered full-width input or partial
    output every die holds); 2D AG/RS column T k e/R + T n e/C, row T k e/C + T n e/R;
    SUMMA T (k + n) e/q^2 plus double-buffered broadcast blocks 2 (T k + k n) e/q^2;
    plus the sharded layer input kept for the residual, T h e/N.
    The 1D working set grows with h at any N; the 2D one falls as 1/sqrt(N).

    Args:
        weight_buffers: n_buf, weight blocks held at once [count]
    Returns:
        dict weights, gradients, activations, buffers, total [bytes]

    >>> {s: round(sram_per_die(s, 4096, 8192, 64, 8, 128, 28672, "swiglu", 8, 8)["total"] / 2**20)
    ...  for s in ("megatron-1d", "summa-2d", "hecaton-2d")}   # MiB per die
    {'megatron-1d': 174, 'summa-2d': 141, 'hecaton-2d': 167}
    """
    e = bytes_per_element
    dies = rows * cols
    gemms = layer_gemms(h, heads, kv_heads, head_dim, ffn, ffn_type)
    p = gemm_parameters(gemms)
    act: Num = 0.0
    buffers: Num = 0.0
    for _, k, n, kind in gemms:
        if scheme == "megatron-1d":
            w = tokens * k * e + tokens * n * e / dies if kind == "column" else tokens * k * e / dies + tokens * n * e
        elif scheme == "hecaton-2d":
            w = tokens * k * e / rows + tokens * n * e / cols if kind == "column" else tokens * k * e / cols + tokens * n * e / rows
        else:
            w = tokens * (k + n) * e / dies
            buffers = maximum(buffers, 2 * (tokens * k + k * n) * e / dies)
        act = maximum(act, w)
    act = act + tokens * h * e / dies
    weights = weight_buffers * p * e / dies
    grads = p * grad_bytes / dies
    return {"weights": weights, "gradients": grads, "activations": act, "buffers": buffers,
            "total": weights + grads + act + buffers}


def min_tile_sram(tile: Num, bytes_per_element: Num = 2) -> Num:
    """Smallest SRAM that can run any GEMM: double-buffered input, weight and output tiles of the MAC array.

    Formula: 2 x 3 t^2 e
    Source: double buffering of the three operand tiles of an output-stationary array (this tool's bound).

    Returns:
        bytes [bytes]

    >>> min_tile_sram(128)   # bytes
    196608
    """
    return 6 * tile * tile * bytes_per_element


# ------------------------------------------------------------------------- DRAM


def dram_traffic(micro_batches: Num, minibatch: Num, layers: Num, layer_params: Num, total_params: Num,
                 stored_bytes_per_layer: Num, tokens: Num, h: Num, bytes_per_element: Num = 2, grad_bytes: Num = 4,
                 optimizer_bytes: Num = 12, step_bytes: Num | None = None) -> dict[str, Num]:
    """DRAM bytes of one iteration for the whole package, by phase and class.

    Formula: 2 (m/k) W + (2 m/k - 1) G + 2 m L A + [k > 1] 3 m L T h e + P s_opt, s_opt = 2o + g + e
    Source: reconstruction of research note chiplet.md §2d "DRAM side" (Hecaton's scheduling "largely reduces DRAM
    accesses", arXiv 2407.05784 abstract; its schedule was not readable).

    The m micro-batches of an iteration run
    layer-major in mini-batches of k micro-batches (k = 1: micro-batch-major, Megatron gradient
    accumulation; k = m: one mini-batch, the Hecaton-style schedule); with W = L P e, G = L P g:
    - weights read once per mini-batch and pass: 2 (m/k) W;
    - gradients accumulated on-die over a mini-batch, then written (k = m) or read-modified-written:
      (2 m/k - 1) G;
    - layer boundaries (k > 1 only: the next layer runs only after all k micro-batches): forward
      reads the layer input back, T h e (its write is the stored input), backward writes and reads
      dX, 2 T h e, per micro-batch and layer: 3 m L T h e;
    - stored activations written in forward, read in backward: 2 m L A;
    - optimizer (Adam, fp32 master and moments): P (o + g) read, P (o + e) written: s_opt = 2o + g + e bytes
      per parameter, or ``step_bytes`` (:func:`dse.formulas.optimizer.step_bytes_per_param`, which equals it in
      mixed precision and also covers an update without a master copy).

    Args:
        step_bytes: s_opt, bytes the optimizer step reads and writes per parameter (None: 2o + g + e) [bytes]
    Returns:
        dict forward, backward, optimizer, weights, gradients, activations, boundary, total [bytes]

    >>> import numpy as np   # Llama-2-70B, 16 micro-batches: per micro-batch (k = 1) vs one mini-batch (k = 16)
    >>> t = dram_traffic(16, np.array([1, 16]), 80, 855638016, 68.98e9, 1.5e9, 4096, 8192)
    >>> np.round(t["weights"] / 1e12, 3), np.round(t["total"] / 1e12, 2)   # TB
    (array([4.381, 0.274]), array([18.78,  6.71]))
    """
    e, g, o = bytes_per_element, grad_bytes, optimizer_bytes
    fetches = micro_batches / minibatch
    w = fetches * layers * layer_params * e
    gr = (2 * fetches - 1) * layers * layer_params * g
    acts = micro_batches * layers * stored_bytes_per_layer
    bnd_f = where(minibatch > 1, micro_batches * layers * tokens * h * e, 0 * tokens)
    opt = total_params * (2 * o + g + e if step_bytes is None else step_bytes)
    fwd = w + acts + bnd_f
    bwd = w + gr + acts + 2 * bnd_f
    return {"forward": fwd, "backward": bwd, "optimizer": opt, "weights": 2 * w, "gradients": gr,
            "activations": 2 * acts, "boundary": 3 * bnd_f, "total": fwd + bwd + opt}


def dram_footprint(minibatch: Num, layers: Num, total_params: Num, stored_bytes_per_layer: Num, tokens: Num, h: Num,
                   bytes_per_element: Num = 2, grad_bytes: Num = 4, optimizer_bytes: Num = 12) -> dict[str, Num]:
    """DRAM bytes held at the peak of an iteration.

    Formula: P (e + g + o) + k L A + [k > 1] k T h e
    Source: reconstruction of research note chiplet.md §2d: the k micro-batches of a mini-batch all finish their
    forward before any backward, so their stored activations (and layer boundaries) are alive together.

    Returns:
        dict states, activations, total [bytes]

    >>> round(dram_footprint(16, 80, 68.98e9, 1.5e9, 4096, 8192)["total"] / 1e12, 2)   # TB
    3.16
    """
    states = total_params * (bytes_per_element + grad_bytes + optimizer_bytes)
    acts = minibatch * layers * stored_bytes_per_layer
    boundary = where(minibatch > 1, minibatch * tokens * h * bytes_per_element, 0 * tokens)
    return {"states": states, "activations": acts + boundary, "total": states + acts + boundary}


# ------------------------------------------------------------------------- time and energy


def overlapped_time(compute: Num, nop: Num, dram: Num, overlap: Num = 1.0) -> Num:
    """Time of a phase whose compute, NoP and DRAM work can overlap.

    Formula: t = max(t_c, t_n, t_d) + (1 - eta)(t_c + t_n + t_d - max)
    Source: roofline-style overlap (eta = 1: perfect, double-buffered prefetch; eta = 0: serial); the themoonlight
    summary of Hecaton v2 mentions overlapping computation with memory access (research note chiplet.md §1a).

    Args:
        compute: t_c [s]
        nop: t_n [s]
        dram: t_d [s]
        overlap: eta [fraction]
    Returns:
        time [s]

    >>> import numpy as np
    >>> overlapped_time(3.0, 1.0, 2.0, np.array([1.0, 0.5, 0.0]))
    array([3. , 4.5, 6. ])
    """
    peak = maximum(maximum(compute, nop), dram)
    return peak + (1 - overlap) * (compute + nop + dram - peak)


def iteration_energy(flops: Num, sram_bytes: Num, nop_byte_hops: Num, dram_bytes: Num, flop_energy: Num,
                     sram_energy: Num, nop_energy: Num, dram_energy: Num, static_power: Num = 0.0,
                     seconds: Num = 0.0) -> dict[str, Num]:
    """Energy of one iteration of a chiplet package by component.

    Formula: E = F e_flop + B_sram e_sram + B_nop,hops e_nop + B_dram e_dram + P_static t
    Source: Gemini (HPCA'24) code SET-Scheduling-Project/GEMINI-HPCA2024 src/main.cpp (per-byte and per-MAC
    energies); research note chiplet.md §1c, §2e.

    Args:
        flops: F, FLOPs executed [FLOP]
        sram_bytes: B_sram, SRAM bytes read and written [bytes]
        nop_byte_hops: B_nop,hops, NoP bytes times hops [bytes]
        dram_bytes: B_dram, DRAM bytes [bytes]
        flop_energy: e_flop [J/FLOP]
        sram_energy: e_sram [J/byte]
        nop_energy: e_nop, per byte and hop [J/byte]
        dram_energy: e_dram [J/byte]
        static_power: P_static [W]
        seconds: t, iteration time [s]
    Returns:
        dict compute_j, sram_j, nop_j, dram_j, static_j, total_j [J]

    >>> e = iteration_energy(1e15, 1e13, 1e12, 1e12, 0.5e-12, 0.1e-12, 0.6e-12 * 8, 5.5e-12 * 8)
    >>> {k: round(v, 1) for k, v in e.items()}
    {'compute_j': 500.0, 'sram_j': 1.0, 'nop_j': 4.8, 'dram_j': 44.0, 'static_j': 0.0, 'total_j': 549.8}
    """
    parts = {"compute_j": flops * flop_energy, "sram_j": sram_bytes * sram_energy, "nop_j": nop_byte_hops * nop_energy,
             "dram_j": dram_bytes * dram_energy, "static_j": static_power * seconds}
    parts["total_j"] = parts["compute_j"] + parts["sram_j"] + parts["nop_j"] + parts["dram_j"] + parts["static_j"]
    return parts


def sram_operand_bytes(flops: Num, tile: Num, bytes_per_element: Num = 2) -> Num:
    """SRAM bytes read to feed the MAC array.

    Formula: B = F e / t
    Source: output-stationary tiling: a t x t output tile reads t + t operands per k step for 2 t^2 FLOP.

    Args:
        flops: F, FLOPs executed [FLOP]
    Returns:
        bytes [bytes]

    >>> sram_operand_bytes(1e15, 128) / 1e12   # TB
    15.625
    """
    return flops * bytes_per_element / tile
