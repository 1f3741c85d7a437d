"""LLM training on a package of compute chiplets: NoP, DRAM, SRAM, time and the compute/communication ratio.

The package is an R x C mesh of identical dies; each die has peak F FLOP/s, S bytes of SRAM
and one network-on-package (NoP) link of bandwidth B (bytes/s per direction) to each mesh
neighbour. DRAM attaches at the package edge (one attach point per perimeter die-side, so
its bandwidth grows with the perimeter 2(R + C)) or on every die. All functions are pure and
broadcast over numpy arrays; categorical choices (scheme, GEMM kind, schedule) are strings.

Three ways to split one transformer layer over the N = RC dies (source and status of each
in the research note ``reference/chiplet.md`` §2; the Hecaton paper body could not be read,
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
"""

from __future__ import annotations

from dse.formulas._array import maximum, minimum, where

SCHEMES = ("megatron-1d", "summa-2d", "hecaton-2d")
DRAM_PLACEMENTS = ("edge", "per-die", "io-dies")


# ------------------------------------------------------------------------- mesh geometry


def mesh_perimeter_sides(rows, cols):
    """Die sides on the package boundary, where edge DRAM attaches. Formula: 2 (R + C)."""
    return 2 * (rows + cols)


def dram_attach_points(rows, cols, placement="edge", per_side=1):
    """Number of DRAM attach points (stacks or channels) of the package.

    Formula: edge: k 2 (R + C) (k per perimeter die-side; the bandwidth grows with the perimeter,
    the note's §2d "B_DRAM proportional to sqrt(N)"); per-die: k R C (proportional to N);
    io-dies: k, fixed (DRAM behind a fixed set of IO dies, as Gemini's four per package).
    """
    if placement == "per-die":
        return rows * cols * per_side
    if placement == "io-dies":
        return per_side + 0 * rows
    return per_side * mesh_perimeter_sides(rows, cols)


def edge_hops(rows, cols):
    """Mean NoP hops from the nearest package edge to a die, plus the edge link itself.

    Formula: a/4 - a^2/(12 b) + 1/2 with a = min(R, C), b = max(R, C) (mean distance from a
    point of an a x b rectangle to its boundary, a/4 - a^2/12b, minus the half-die of the
    cell centre, plus the IO link); 8 x 8 gives 1.83 (exact mean 1.875).
    """
    a = minimum(rows, cols)
    b = maximum(rows, cols)
    return a / 4 - a * a / (12 * b) + 0.5


def interior_fraction(rows, cols):
    """Share of dies not on the package boundary. Formula: max(R-2, 0) max(C-2, 0) / (R C)."""
    return maximum(rows - 2, 0) * maximum(cols - 2, 0) / (rows * cols)


def inward_links(rows, cols):
    """Links from boundary dies into the interior (they carry edge DRAM traffic inwards).

    Formula: 2 max(R-2, 0) + 2 max(C-2, 0) (one per boundary die facing an interior die).
    """
    return 2 * maximum(rows - 2, 0) + 2 * maximum(cols - 2, 0)


def ring_bandwidth_factor(rows, cols):
    """Link directions a die uses in a ring over the whole mesh (the 1D scheme's snake).

    Formula: 2 when a nearest-neighbour Hamiltonian cycle exists (R, C >= 2 and R C even) and
    carries half the data each way; else 1 (one ring hop shares a link).
    """
    cycle = (minimum(rows, cols) >= 2) & ((rows * cols) % 2 == 0)
    return where(cycle, 2.0, 1.0)


def collective_bytes(nbytes, n):
    """Bytes one member receives in an all-gather (or sends in a reduce-scatter) of a tensor.

    Formula: (n - 1)/n S for a tensor of S bytes over n members (ring or line; Patarasuk & Yuan 2009).
    """
    return (n - 1) / n * nbytes


# ------------------------------------------------------------------------- the layer's GEMMs


def layer_gemms(h, heads, kv_heads, head_dim, ffn, ffn_type="swiglu"):
    """The weight GEMMs of one transformer layer as (name, k, n, kind), Y[T x n] = X[T x k] W[k x n].

    Formula: QKV h -> (a + 2 kv) d (column); O a d -> h (row); FC1 h -> n_g F (column, n_g = 2
    for SwiGLU gate+up, else 1); FC2 F -> h (row). ``kind`` is Megatron's column/row-parallel
    split; in the 2D scheme a column GEMM gathers its input along mesh rows, a row GEMM along
    columns (note §2c(3), step 4).
    """
    n_up = 2 if ffn_type == "swiglu" else 1
    return (("qkv", h, (heads + 2 * kv_heads) * head_dim, "column"),
            ("out", heads * head_dim, h, "row"),
            ("fc1", h, n_up * ffn, "column"),
            ("fc2", ffn, h, "row"))


def gemm_parameters(gemms):
    """Weight elements of the GEMMs. Formula: sum k n (= the note's P = 2h^2 + 2h^2/g + 3hf for Llama)."""
    total = 0
    for _, k, n, _ in gemms:
        total = total + k * n
    return total


def layer_gemm_flops(tokens, gemms):
    """Forward FLOPs of a layer's weight GEMMs for T tokens. Formula: sum 2 T k n (training: x3)."""
    total = 0
    for _, k, n, _ in gemms:
        total = total + 2 * tokens * k * n
    return total


# ------------------------------------------------------------------------- NoP bytes per die


def megatron_1d_gemm_bytes(tokens, k, n, dies, kind, bytes_per_element=2, regather=True):
    """Bytes one die receives for one GEMM under Megatron 1D TP with sharded stored activations.

    Formula: column GEMM: forward all-gather of X (T k e), backward reduce-scatter of dX plus
    (``regather``) a second all-gather of X for dW = X^T dY; row GEMM: forward reduce-scatter of
    the partial Y (T n e), backward all-gather of dY. Each costs (N-1)/N S. Without ``regather``
    (the replicated-input form, Megatron without sequence parallelism) a layer totals 4
    all-reduces, 8 (N-1)/N T h e, the note's V_1D (§2c(1)).
    Returns {"forward", "backward", "forward_steps", "backward_steps"} (steps: ring hops in series).
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


def hecaton_2d_gemm_bytes(tokens, k, n, rows, cols, kind, bytes_per_element=2, regather=True):
    """Bytes one die receives for one GEMM under the 2D all-gather/reduce-scatter scheme, per mesh dimension.

    Formula: column GEMM: horizontal T k e (C-1)/(RC), vertical T n e (R-1)/(RC); a row GEMM
    swaps R and C (note §2c(3)). A column GEMM all-gathers X[:, k/R] along its row (C dies) and
    reduce-scatters the partial Y[:, n/C] along its column (R dies).
    Backward: all-gather dY and reduce-scatter dX (the same volumes, dimensions swapped back),
    plus (``regather``) the all-gather of X again for dW. Weights never cross the NoP.
    Returns forward/backward bytes on the horizontal (``_h``) and vertical (``_v``) links and the
    number of line hops in series per dimension.
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


def summa_2d_gemm_bytes(tokens, k, n, q, bytes_per_element=2):
    """Bytes one die receives for one GEMM under SUMMA (Optimus 2D) on a q x q grid.

    Formula: forward: q - 1 input blocks (T/q x k/q) broadcast along the row and q - 1 weight blocks
    (k/q x n/q) along the column: horizontal T k e (q-1)/q^2, vertical k n e (q-1)/q^2; backward
    is two more SUMMA products (dX = dY W^T: W broadcast, partial dX reduced; dW = X^T dY: X
    broadcast, partial dW reduced), twice the forward (Colossal-AI 2D doc: 6(q-1)/q blocks per
    linear layer, forward + backward). Weights cross the NoP every micro-batch.
    """
    e = bytes_per_element
    act = tokens * k * e * (q - 1) / (q * q)
    wgt = k * n * e * (q - 1) / (q * q)
    return {"forward_h": act, "forward_v": wgt, "backward_h": 2 * act, "backward_v": 2 * wgt,
            "forward_steps_h": 2 * q - 1, "forward_steps_v": 2 * q - 1,
            "backward_steps_h": 2 * (2 * q - 1), "backward_steps_v": 2 * (2 * q - 1)}


def kv_gather_bytes(tokens, kv_heads, head_dim, rows, cols, split, bytes_per_element=2):
    """Bytes a die receives to gather K and V of whole sequences for attention (2D schemes).

    Formula: when tokens of one sequence sit on several mesh rows (``split``: micro-batch b not a
    multiple of R), each die all-gathers K and V of its heads along its column:
    T 2 kv d e (R-1)/(RC) per pass (ring-attention style; backward reduce-scatters dK, dV, the same).
    When every row holds whole sequences attention is local. How Hecaton handles attention is not
    known (note §2c): this is the upper bound of the reconstruction.
    """
    return where(split, tokens * 2 * kv_heads * head_dim * bytes_per_element * (rows - 1) / (rows * cols), 0 * tokens)


def layer_nop(scheme, tokens, micro_batch, h, heads, kv_heads, head_dim, ffn, ffn_type, rows, cols,
              bytes_per_element=2, regather=True):
    """NoP traffic of one layer and one micro-batch, per die: bytes received and busiest-link bytes.

    Formula: the sum of the scheme's per-GEMM collectives (:func:`megatron_1d_gemm_bytes`,
    :func:`summa_2d_gemm_bytes`, :func:`hecaton_2d_gemm_bytes`) plus :func:`kv_gather_bytes`
    for the 2D schemes. ``critical`` is the bytes on the busiest link direction, so that
    time = critical / B + steps alpha: 1D: bytes / ring factor (:func:`ring_bandwidth_factor`);
    2D AG/RS: max(horizontal, vertical); SUMMA: max(...) q/(q-1) (a broadcast sends each block
    over every link of the line).
    Returns forward/backward: bytes, critical, steps.
    """
    gemms = layer_gemms(h, heads, kv_heads, head_dim, ffn, ffn_type)
    e = bytes_per_element
    dies = rows * cols
    out = {}
    if scheme == "megatron-1d":
        fwd = bwd = 0.0
        s_f = s_b = 0.0
        for _, k, n, kind in gemms:
            g = megatron_1d_gemm_bytes(tokens, k, n, dies, kind, e, regather)
            fwd, bwd = fwd + g["forward"], bwd + g["backward"]
            s_f, s_b = s_f + g["forward_steps"], s_b + g["backward_steps"]
        beta = ring_bandwidth_factor(rows, cols)
        out = {"forward": fwd, "backward": bwd, "forward_critical": fwd / beta, "backward_critical": bwd / beta,
               "forward_steps": s_f, "backward_steps": s_b}
        return out
    acc = {key: 0.0 for key in ("forward_h", "forward_v", "backward_h", "backward_v", "forward_steps_h",
                                "forward_steps_v", "backward_steps_h", "backward_steps_v")}
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


def nop_time(critical_bytes, steps, link_bandwidth, hop_latency):
    """Time of a set of NoP collectives. Formula: t = bytes on the busiest link direction / B + hops alpha."""
    return critical_bytes / link_bandwidth + steps * hop_latency


def edge_injection_time(dram_bytes, rows, cols, link_bandwidth, placement="edge"):
    """NoP time to carry edge-DRAM traffic from the boundary dies to the interior.

    Formula: bytes f_int / (n_inward B), f_int = :func:`interior_fraction`, n_inward =
    :func:`inward_links` (interior dies' share of DRAM traffic crosses the boundary ring's inward
    links); 0 for per-die DRAM or when the mesh has no interior.
    """
    if placement == "per-die":
        return 0 * dram_bytes
    links = inward_links(rows, cols)
    return where(links > 0, dram_bytes * interior_fraction(rows, cols) / (maximum(links, 1) * link_bandwidth), 0 * dram_bytes)


# ------------------------------------------------------------------------- compute/communication ratio


def compute_to_communication(scheme, tokens, micro_batch, h, heads, kv_heads, head_dim, ffn, ffn_type, rows, cols,
                             bytes_per_element=2, regather=True):
    """FLOP per NoP byte per die for one layer, forward + backward (the weak-scaling metric).

    Formula: (6 T sum k n / N) / (NoP bytes received per die, fwd + bwd) (note §2d; GEMM FLOPs only,
    as in the note's worked table).
    """
    gemms = layer_gemms(h, heads, kv_heads, head_dim, ffn, ffn_type)
    flops = 3 * layer_gemm_flops(tokens, gemms) / (rows * cols)
    nop = layer_nop(scheme, tokens, micro_batch, h, heads, kv_heads, head_dim, ffn, ffn_type, rows, cols,
                    bytes_per_element, regather)
    return flops / (nop["forward"] + nop["backward"])


def worked_check_ratio(scheme, layer_params, h, ffn, group, dies, bytes_per_element=2):
    """The note's worked compute/communication table, with the note's own conventions (§2d).

    Formula: 1D: 6 P / (8 (N-1) h e) (four ring all-reduces of T h e per layer, no re-gather);
    2D: 6 P / N / (3 e [(6 + 2/g) h + 3 f] / sqrt(N)) (large-N volume, backward = 2 x forward).
    Reproduces 621.7 / 779.5 (Llama2-70B, N = 64) and 306.6 / 792.9 (Llama3.1-405B, N = 239).
    The exact per-collective accounting of :func:`compute_to_communication` differs: the 2D volume
    carries (R-1)/R factors and its backward adds one all-gather per GEMM (re-gather of X), not a
    whole forward, so the note's 2D column is conservative by about 1.3x at these sizes.
    """
    e = bytes_per_element
    if scheme == "megatron-1d":
        return 6 * layer_params / (8 * (dies - 1) * h * e)
    sum_kn = (6 + 2 / group) * h + 3 * ffn
    return 6 * layer_params / dies / (3 * e * sum_kn / dies ** 0.5)


# ------------------------------------------------------------------------- SRAM per die


def sram_per_die(scheme, tokens, h, heads, kv_heads, head_dim, ffn, ffn_type, rows, cols, bytes_per_element=2,
                 grad_bytes=4, weight_buffers=2):
    """SRAM one die needs while a layer runs: its weight block, gradient block, activation working set.

    Formula: weights = n_buf P e / N (the resident block plus the next layer's prefetch);
    gradients = P g / N (accumulated on the die during the backward pass);
    activations = max over GEMMs of the scheme's operands for one micro-batch of T tokens:
    1D column T k e + T n e/N, row T k e/N + T n e (the gathered full-width input or partial
    output every die holds); 2D AG/RS column T k e/R + T n e/C, row T k e/C + T n e/R;
    SUMMA T (k + n) e/q^2 plus double-buffered broadcast blocks 2 (T k + k n) e/q^2;
    plus the sharded layer input kept for the residual, T h e/N.
    The 1D working set grows with h at any N; the 2D one falls as 1/sqrt(N) (note §1a: the
    method "relieves constraints on SRAM capacity").
    """
    e = bytes_per_element
    dies = rows * cols
    gemms = layer_gemms(h, heads, kv_heads, head_dim, ffn, ffn_type)
    p = gemm_parameters(gemms)
    act = 0.0
    buffers = 0.0
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


def min_tile_sram(tile, bytes_per_element=2):
    """Smallest SRAM that can run any GEMM: double-buffered input, weight and output tiles of the MAC array.

    Formula: 2 x 3 t^2 e (t = tile edge in elements).
    """
    return 6 * tile * tile * bytes_per_element


# ------------------------------------------------------------------------- DRAM


def dram_traffic(micro_batches, minibatch, layers, layer_params, total_params, stored_bytes_per_layer, tokens, h,
                 bytes_per_element=2, grad_bytes=4, optimizer_bytes=12):
    """DRAM bytes of one iteration for the whole package, by phase and class.

    Formula: 2 (m/k) W + (2 m/k - 1) G + 2 m L A + [k > 1] 3 m L T h e + P (2o + g + e)
    (reconstruction of note §2d "DRAM side"); the m micro-batches of an iteration run
    layer-major in mini-batches of k micro-batches (k = 1: micro-batch-major, Megatron gradient
    accumulation; k = m: one mini-batch, the Hecaton-style schedule); with W = L P e, G = L P g:
    - weights read once per mini-batch and pass: 2 (m/k) W;
    - gradients accumulated on-die over a mini-batch, then written (k = m) or read-modified-written:
      (2 m/k - 1) G;
    - layer boundaries (k > 1 only: the next layer runs only after all k micro-batches): forward
      reads the layer input back, T h e (its write is the stored input), backward writes and reads
      dX, 2 T h e, per micro-batch and layer: 3 m L T h e;
    - stored activations written in forward, read in backward: 2 m L A;
    - optimizer (Adam, fp32 master and moments): P (o + g) read, P (o + e) written.
    Returns forward/backward/optimizer bytes and class totals.
    """
    e, g, o = bytes_per_element, grad_bytes, optimizer_bytes
    fetches = micro_batches / minibatch
    w = fetches * layers * layer_params * e
    gr = (2 * fetches - 1) * layers * layer_params * g
    acts = micro_batches * layers * stored_bytes_per_layer
    bnd_f = where(minibatch > 1, micro_batches * layers * tokens * h * e, 0 * tokens)
    opt = total_params * (2 * o + g + e)
    fwd = w + acts + bnd_f
    bwd = w + gr + acts + 2 * bnd_f
    return {"forward": fwd, "backward": bwd, "optimizer": opt, "weights": 2 * w, "gradients": gr,
            "activations": 2 * acts, "boundary": 3 * bnd_f, "total": fwd + bwd + opt}


def dram_footprint(minibatch, layers, total_params, stored_bytes_per_layer, tokens, h,
                   bytes_per_element=2, grad_bytes=4, optimizer_bytes=12):
    """DRAM bytes held at the peak of an iteration.

    Formula: model states P (e + g + o) + stored activations of the k micro-batches of a mini-batch
    (every one finishes its forward before any backward), k L A, + their layer boundaries
    (k > 1), k T h e.
    """
    states = total_params * (bytes_per_element + grad_bytes + optimizer_bytes)
    acts = minibatch * layers * stored_bytes_per_layer
    boundary = where(minibatch > 1, minibatch * tokens * h * bytes_per_element, 0 * tokens)
    return {"states": states, "activations": acts + boundary, "total": states + acts + boundary}


# ------------------------------------------------------------------------- time and energy


def overlapped_time(compute, nop, dram, overlap=1.0):
    """Time of a phase whose compute, NoP and DRAM work can overlap.

    Formula: t = max(t_c, t_n, t_d) + (1 - eta)(t_c + t_n + t_d - max) (eta = 1: perfect
    overlap, double-buffered prefetch; eta = 0: serial).
    """
    peak = maximum(maximum(compute, nop), dram)
    return peak + (1 - overlap) * (compute + nop + dram - peak)


def iteration_energy(flops, sram_bytes, nop_byte_hops, dram_bytes, flop_energy, sram_energy, nop_energy,
                     dram_energy, static_power=0.0, seconds=0.0):
    """Energy of one iteration by component (Gemini-style accounting, note §2e).

    Formula: E = F e_flop + B_sram e_sram + B_nop,hops e_nop + B_dram e_dram + P_static t.
    Returns a dict of components and their total (joules).
    """
    parts = {"compute_j": flops * flop_energy, "sram_j": sram_bytes * sram_energy, "nop_j": nop_byte_hops * nop_energy,
             "dram_j": dram_bytes * dram_energy, "static_j": static_power * seconds}
    parts["total_j"] = parts["compute_j"] + parts["sram_j"] + parts["nop_j"] + parts["dram_j"] + parts["static_j"]
    return parts


def sram_operand_bytes(flops, tile, bytes_per_element=2):
    """SRAM bytes read to feed the MAC array. Formula: F e / t (a t x t output tile reads t + t operands per k step for 2 t^2 FLOP)."""
    return flops * bytes_per_element / tile
