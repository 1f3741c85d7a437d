"""DRAM of a chiplet package: bytes moved per iteration under the layer-major schedule, and bytes held at the peak.

Part of :mod:`dse.formulas.chiplet` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num, where

__all__ = ["dram_traffic", "dram_footprint"]

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
