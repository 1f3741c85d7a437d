"""SRAM overflow: what a die evicts to DRAM when a layer's working set does not fit, and the DRAM bytes it costs.

Part of :mod:`dse.formulas.chiplet` (notation and symbols there).

The working set of :func:`~dse.formulas.chiplet.sram_per_die` keeps, per die, the layer's weight block
(and a prefetch buffer for the next layer's), the layer's gradient block (partial sums accumulated over a
mini-batch) and the operands of the running GEMM for one micro-batch. When it exceeds the die's SRAM the
schedule gives up residency, cheapest first (DRAM bytes per byte freed, this tool's ordering):

1. the prefetch buffer: no extra bytes; the next layer's block then loads as its first micro-batch runs
   (streamed tile by tile, as the phase's overlap of compute and DRAM already assumes) instead of during
   the previous layer's work;
2. the resident weight block: the evicted part streams from DRAM for every micro-batch instead of once
   per mini-batch, (m - m/k) more reads per pass;
3. the gradient block: the evicted partial sums are read, added to and written back every micro-batch
   instead of once per mini-batch, 2 (m - m/k) more bytes each (with k = 1 both cost nothing: weights and
   gradients then stream through tile buffers, which is what the micro-batch-major schedule does anyway);
4. the GEMM operands (activations and partial outputs): the part of a GEMM's operands beyond what is left
   is written to DRAM when produced and read back when consumed: 2 per byte in the forward product, 2 in
   the dgrad product, 1 more read in the wgrad product (and 2 again when the forward is recomputed).

Spilling runs as long as the double-buffered operand tiles of the MAC array fit
(:func:`~dse.formulas.chiplet.min_tile_sram`); below that nothing runs.
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum, minimum, where

__all__ = ["sram_spill", "spill_dram_traffic"]


def sram_spill(capacity: Num, weight_block: Num, gradient_block: Num, operands: tuple[Num, ...], resident_input: Num,
               weight_buffers: Num = 2, floor: Num = 0.0) -> dict[str, Num]:
    """What one die evicts from SRAM, by class, when a layer's working set exceeds its capacity.

    Formula: X = n_buf W + G + max_g a_g + r - S; evict the prefetch buffers e_p = min(X, (n_buf-1) W), then the
    weight block e_w = min(X - e_p, W), then the gradient block e_g = min(X - e_p - e_w, G); the GEMM operands
    spill s_g = max(0, a_g + r - (S - resident weights and gradients)) per GEMM g; runs iff S >= floor
    Source: this tool's schedule (module docstring), the working set of :func:`~dse.formulas.chiplet.sram_per_die`;
    Hecaton's abstract names DRAM access as why inference chiplet designs fail at training (arXiv 2407.05784,
    research note chiplet.md §1a).

    Args:
        capacity: S, SRAM of one die [bytes]
        weight_block: W, one layer's weight bytes per die [bytes]
        gradient_block: G, one layer's gradient bytes per die [bytes]
        operands: a_g, activation operand bytes per die of each GEMM (:func:`gemm_operand_bytes`, with buffers)
            [bytes]
        resident_input: r, the sharded layer input kept for the residual [bytes]
        weight_buffers: n_buf, weight blocks held at once [count]
        floor: smallest SRAM any GEMM runs in (:func:`min_tile_sram`) [bytes]
    Returns:
        dict working_set, resident, prefetch, weights, gradients, activations (sum over GEMMs of s_g) [bytes];
        runs [bool]

    >>> s = sram_spill(128 * 2**20, 25.5 * 2**20, 51 * 2**20, (64 * 2**20, 40 * 2**20), 1 * 2**20)
    >>> {k: round(float(v) / 2**20, 1) for k, v in s.items() if k != "runs"}   # MiB
    {'working_set': 167.0, 'resident': 128.0, 'prefetch': 25.5, 'weights': 13.5, 'gradients': 0.0, 'activations': 0.0}
    """
    peak: Num = 0.0
    for a in operands:
        peak = maximum(peak, a)
    wset = weight_buffers * weight_block + gradient_block + peak + resident_input
    excess = maximum(wset - capacity, 0.0)
    e_p = minimum(excess, (weight_buffers - 1) * weight_block)
    e_w = minimum(excess - e_p, weight_block)
    e_g = minimum(excess - e_p - e_w, gradient_block)
    free = capacity - (weight_buffers * weight_block - e_p - e_w) - (gradient_block - e_g) - resident_input
    acts: Num = 0.0
    for a in operands:
        acts = acts + maximum(a - free, 0.0)
    runs = capacity >= floor
    return {"working_set": wset, "resident": where(runs, minimum(wset, capacity), maximum(floor, capacity + 1.0)),
            "prefetch": e_p, "weights": e_w, "gradients": e_g, "activations": acts, "runs": runs}


def spill_dram_traffic(spill: dict[str, Num], micro_batches: Num, minibatch: Num, layers: Num, dies: Num,
                       recompute: bool = False) -> dict[str, Num]:
    """DRAM bytes the evictions of :func:`sram_spill` add to one iteration, for the whole package, by phase.

    Formula: weights (m - m/k) L N e_w per pass; gradients 2 (m - m/k) L N e_g (backward); GEMM operands
    2 m L N sum s_g (forward), (3 + 2 [recompute]) m L N sum s_g (backward)
    Source: this tool's schedule (module docstring); the resident-block traffic these replace is
    :func:`~dse.formulas.chiplet.dram_traffic`'s 2 (m/k) W and (2 m/k - 1) G.

    Args:
        spill: :func:`sram_spill`'s result (per die) [dict]
        recompute: the backward pass recomputes the forward (its spills repeat) [bool]
    Returns:
        dict forward, backward, weights, gradients, activations, total [bytes]

    >>> import numpy as np   # 16 micro-batches in one mini-batch vs micro-batch-major: reuse is what spilling loses
    >>> s = {"weights": 2**20, "gradients": 0.0, "activations": 0.0}
    >>> spill_dram_traffic(s, 16, np.array([16, 1]), 80, 64)["total"] / 2**30   # GiB
    array([150.,   0.])
    """
    reuse = micro_batches - micro_batches / minibatch          # micro-batches that reused a resident block
    per = layers * dies
    w = reuse * per * spill["weights"]
    g = 2 * reuse * per * spill["gradients"]
    a_f = 2 * micro_batches * per * spill["activations"]
    a_b = (3 + (2 if recompute else 0)) * micro_batches * per * spill["activations"]
    fwd, bwd = w + a_f, w + g + a_b
    return {"forward": fwd, "backward": bwd, "weights": 2 * w, "gradients": g, "activations": a_f + a_b,
            "total": fwd + bwd}
