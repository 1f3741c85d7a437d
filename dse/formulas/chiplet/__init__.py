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

The equations live in one submodule per question; every name is importable from this package:

- :mod:`~dse.formulas.chiplet.mesh`: mesh geometry, DRAM attach points, ring bandwidth, collective volume;
- :mod:`~dse.formulas.chiplet.gemms`: the layer's weight GEMMs, their parameters and FLOPs;
- :mod:`~dse.formulas.chiplet.nop`: NoP bytes per die for each scheme, NoP time, edge-DRAM injection;
- :mod:`~dse.formulas.chiplet.ratio`: the compute-to-communication ratio (and the note's worked check);
- :mod:`~dse.formulas.chiplet.sram`: SRAM per die, smallest SRAM for a GEMM tile;
- :mod:`~dse.formulas.chiplet.dram`: DRAM traffic per iteration and the DRAM footprint;
- :mod:`~dse.formulas.chiplet.spill`: what a die evicts when a layer's working set exceeds its SRAM, and the DRAM
  bytes that costs;
- :mod:`~dse.formulas.chiplet.time_energy`: overlapped phase time, iteration energy, SRAM operand bytes.

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

from dse.formulas.chiplet.dram import dram_footprint, dram_traffic
from dse.formulas.chiplet.gemms import gemm_parameters, layer_gemm_flops, layer_gemms
from dse.formulas.chiplet.mesh import (
    DRAM_PLACEMENTS,
    collective_bytes,
    dram_attach_points,
    edge_hops,
    interior_fraction,
    inward_links,
    mesh_perimeter_sides,
    ring_bandwidth_factor,
)
from dse.formulas.chiplet.nop import (
    SCHEMES,
    edge_injection_time,
    hecaton_2d_gemm_bytes,
    hecaton_2d_gemm_passes,
    kv_gather_bytes,
    layer_nop,
    megatron_1d_gemm_bytes,
    nop_time,
    summa_2d_gemm_bytes,
)
from dse.formulas.chiplet.ratio import compute_to_communication, worked_check_ratio
from dse.formulas.chiplet.spill import spill_dram_traffic, sram_spill
from dse.formulas.chiplet.sram import gemm_operand_bytes, min_tile_sram, sram_per_die
from dse.formulas.chiplet.time_energy import iteration_energy, overlapped_time, sram_operand_bytes

__all__ = ["SCHEMES", "DRAM_PLACEMENTS", "mesh_perimeter_sides", "dram_attach_points", "edge_hops",
           "interior_fraction", "inward_links", "ring_bandwidth_factor", "collective_bytes", "layer_gemms",
           "gemm_parameters", "layer_gemm_flops", "megatron_1d_gemm_bytes", "hecaton_2d_gemm_passes",
           "hecaton_2d_gemm_bytes", "summa_2d_gemm_bytes", "kv_gather_bytes", "layer_nop", "nop_time",
           "edge_injection_time",
           "compute_to_communication", "worked_check_ratio", "sram_per_die", "gemm_operand_bytes", "min_tile_sram",
           "sram_spill", "spill_dram_traffic", "dram_traffic",
           "dram_footprint", "overlapped_time", "iteration_energy", "sram_operand_bytes"]
