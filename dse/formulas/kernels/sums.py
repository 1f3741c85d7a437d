"""Reductions over a kernel table: the weight GEMMs, FLOPs, saved and recomputed bytes, collective messages.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there).
"""

from __future__ import annotations

from dse.formulas._array import Num
from dse.formulas.kernels.layer import layer_kernels  # noqa: F401 (the examples build a layer's table)
from dse.formulas.kernels.rows import Table

__all__ = ["weight_gemms", "forward_flops", "recomputed_flops", "executed_flops", "saved_bytes", "packed_bytes", "backward_flops",
           "rerun_bytes",
           "message_bytes"]


def weight_gemms(table: Table) -> tuple[tuple[str, Num, Num, str], ...]:
    """The weight GEMMs of a table as (name, k, n, split): the list the chiplet model splits over its dies.

    Formula: the rows with kind gemm and a column/row split, in execution order
    Source: Shoeybi et al. 2019 (Megatron-LM, arXiv 1909.08053) §3 for the column/row split.

    Returns:
        tuple of (name, k, n, split) [tuple]

    >>> weight_gemms(layer_kernels(1, 1, 8192, 64, 8, 128, 28672, ffn_type="swiglu"))   # Llama-2-70B
    (('qkv', 8192, 10240, 'column'), ('out', 8192, 8192, 'row'), ('fc1', 8192, 57344, 'column'), ('fc2', 28672, 8192, 'row'))
    """
    return tuple((name, row["k"], row["n"], row["split"]) for name, row in table.items()
                 if row["kind"] == "gemm" and row["split"])


def forward_flops(table: Table) -> Num:
    """Forward FLOPs of the kernels of a table (the model's FLOPs: a causal score matrix counts its unmasked half).

    Formula: sum over rows of flops (GEMM 2 m k n batch; attention 4 s^2 b a d / t, x 1/2 when causal)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A; a layer's reduction times 3 T L t / (s b) is
    transformer.model_flops (with the same ``causal``) without the LM head; the causal half as FlashAttention-2
    (Dao 2023, arXiv 2307.08691) §4.1 counts it.

    Returns:
        FLOPs per micro-batch on one GPU [FLOP]

    >>> forward_flops(layer_kernels(2048, 1, 12288, 96, 96, 128, 49152, causal=False)) / 1e12   # GPT-3 layer: TFLOP
    7.627861917696
    >>> forward_flops(layer_kernels(2048, 1, 12288, 96, 96, 128, 49152)) / 1e12   # causal: half the score matrix
    7.524782702592
    """
    total = 0
    for row in table.values():
        total = total + row.get("flops", 0)
    return total


def backward_flops(table: Table) -> Num:
    """Backward FLOPs of a table in the model convention: twice the forward, once for a frozen weight's GEMM.

    Formula: sum over GEMM and flash rows of 2 flops, or 1 flops for a ``frozen`` GEMM (its input gradient only)
    Source: the backward pass computes, per GEMM, the input gradient and the weight gradient, each as many FLOPs
    as the forward (Narayanan et al. 2021, arXiv 2104.04473 §5.1: 3x forward per step); a frozen weight (LoRA, Hu
    et al. 2021, arXiv 2106.09685) needs no weight gradient.

    Returns:
        FLOPs per micro-batch on one GPU [FLOP]

    >>> k = layer_kernels(2048, 1, 12288, 96, 96, 128, 49152)
    >>> backward_flops(k) == 2 * forward_flops(k)
    True
    """
    total = 0
    for row in table.values():
        if row["kind"] in ("gemm", "flash"):
            total = total + (row["flops"] if "frozen" in row else 2 * row["flops"])
    return total


def recomputed_flops(table: Table, recompute: str = "none") -> Num:
    """Forward FLOPs that activation recomputation runs again in the backward pass.

    Formula: full: sum of flops (less the rows a non-reentrant checkpoint never reaches again, ``stopped``:
    :func:`dse.formulas.kernels.early_stop`); selective: sum of flops of the attention core; none: 0
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) §5 and App. A; as transformer.recompute_flops per layer.

    Returns:
        FLOPs per micro-batch on one GPU [FLOP]

    >>> k = layer_kernels(2048, 1, 12288, 96, 96, 128, 49152, recompute="selective")
    >>> recomputed_flops(k, "selective") / forward_flops(k)   # s / (12h + s): the causal attention share, GPT-3 layer
    0.0136986301369863
    """
    if recompute == "full":
        return forward_flops({k: r for k, r in table.items() if "stopped" not in r})
    if recompute != "selective":
        return 0
    total = 0
    for row in table.values():
        if row.get("selective"):
            total = total + row.get("flops", 0)
    return total


def executed_flops(table: Table, recompute: str = "none") -> dict[str, Num]:
    """FLOPs the kernels of a table execute forward, backward and in recomputation (a flash kernel as it runs).

    Formula: forward = sum of GEMM 2 m k n batch + flash executed; backward = 2 x GEMM + flash executed_backward;
    recompute: the forward again (full; less the ``stopped`` rows), the attention core's forward (selective), 0 (none)
    Source: Narayanan et al. 2021 (arXiv 2104.04473) App. A (backward = 2x forward for GEMMs); Dao 2023,
    FlashAttention-2 (arXiv 2307.08691) §3 for the fused kernel (causal half skipped, 2.5x backward).

    Returns:
        dict forward, backward, recompute per micro-batch on one GPU [FLOP]

    >>> f = executed_flops(layer_kernels(4096, 1, 8192, 64, 8, 128, 28672, ffn_type="swiglu"), "selective")
    >>> {k: round(v / 1e12, 2) for k, v in f.items()}   # a Llama-2-70B layer, causal flash attention: TFLOP
    {'forward': 7.28, 'backward': 14.71, 'recompute': 0.27}
    """
    fwd = bwd = sel = stop = 0
    for row in table.values():
        kind = row["kind"]
        if kind == "gemm":    # as executed: math attention's GEMMs compute the masked half of a causal matrix too
            f = 2 * row["m"] * row["k"] * row["n"] * row["batch"]
            b = 2 * f
        elif kind == "flash":
            f, b = row["executed"], row["executed_backward"]
        else:
            continue
        fwd, bwd = fwd + f, bwd + b
        if "selective" in row:
            sel = sel + f
        if "stopped" in row:
            stop = stop + f
    rec = fwd - stop if recompute == "full" else (sel if recompute == "selective" else 0)
    return {"forward": fwd, "backward": bwd, "recompute": rec}


def packed_bytes(table: Table) -> Num:
    """Bytes the saved-tensor hooks of a table's kernels pack: each tensor once per autograd node that saves it.

    Formula: sum over rows of packed (a row without ``packed``: its saved)
    Source: PyTorch 2.13 torch/autograd/graph.py ``saved_tensors_hooks`` / ``save_on_cpu``: the pack hook runs for
    every tensor every node saves, at the tensor's own size; a buffer saved by two nodes (a shared GEMM input, the
    eager softmax output) is packed twice, a view of a larger buffer at the view's size. Checked against PyTorch's
    autograd on Transformers' GPT-2, Llama and OPT layers (tests/test_stacks.py). Megatron's fused kernels have no
    ``packed``: there it equals saved_bytes.

    Returns:
        bytes per micro-batch on one GPU [bytes]

    >>> t = {"softmax": {"saved": 6.0, "packed": 9.0}, "out": {"saved": 2.0}}
    >>> packed_bytes(t), saved_bytes(t)
    (11.0, 8.0)
    """
    total = 0
    for row in table.values():
        total = total + (row["packed"] if "packed" in row else row["saved"])
    return total


def saved_bytes(table: Table) -> Num:
    """Bytes the kernels of a table keep for the backward pass.

    Formula: sum over rows of saved
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, per tensor as transformer.activation_terms (a
    layer's sum is activation_bytes_per_layer; embedding and head rows: embedding_activation_bytes,
    head_activation_bytes).

    Returns:
        bytes per micro-batch on one GPU [bytes]

    >>> saved_bytes(layer_kernels(2048, 1, 12288, 96, 96, 128, 49152, tp=8, attention="math")) / (2048 * 12288)
    23.001302083333332
    >>> import numpy as np
    >>> saved_bytes(layer_kernels(2048, np.array([1, 2, 4]), 12288, 96, 96, 128, 49152, tp=8,
    ...                           recompute="full")) / 2**20   # the layer input, 2 sbh: MiB
    array([ 48.,  96., 192.])
    """
    total = 0
    for row in table.values():
        total = total + row["saved"]
    return total


def rerun_bytes(table: Table) -> Num:
    """Bytes the kernels hold while their layer is recomputed in the backward pass (full recompute), else 0.

    Formula: sum over rows of rerun
    Source: Chen et al. 2016 (arXiv 1604.06174): a checkpointed segment is re-run forward, holding its
    activations; as transformer.recompute_working_bytes.

    Returns:
        bytes [bytes]

    >>> k = layer_kernels(2048, 1, 12288, 96, 96, 128, 49152, tp=8, recompute="full", attention="math")
    >>> rerun_bytes(k) / 2**20, saved_bytes(k) / 2**20   # MiB: the layer running again; its checkpoint
    (552.03125, 48.0)
    """
    total = 0
    for row in table.values():
        total = total + row.get("rerun", 0)
    return total


def message_bytes(table: Table, group: str = "tp", recompute: str = "none") -> Num:
    """Message bytes of a group's collectives that one micro-batch runs per table, all passes together.

    Formula: sum of comm over the forward and backward collectives, + the forward ones again under full recompute,
    in all-reduce equivalents: an all-gather or a reduce-scatter counts half its comm (a ring moves (t-1)/t of the
    tensor through every rank for it, 2 (t-1)/t for an all-reduce)
    Source: Megatron-LM tensor parallelism (Shoeybi et al. 2019, arXiv 1909.08053 §3): 2 all-reduces of an
    [s, b, h] activation forward and 2 backward per layer; a ring moves 2 (t-1)/t of each through every rank
    (Patarasuk & Yuan 2009; the all-gather and reduce-scatter are its two halves).

    Returns:
        bytes [bytes]

    >>> message_bytes(layer_kernels(2048, 1, 4096, 32, 32, 128, 16384), recompute="full") / (2 * 2048 * 4096)
    6.0
    """
    total = 0
    for row in table.values():
        if row["kind"] == "collective" and row["group"] == group:
            half = 0.5 if row.get("op") in ("allgather", "reduce_scatter") else 1
            total = total + (2 if (recompute == "full" and row["pass"] == "forward") else 1) * half * row["comm"]
    return total
