"""Which kernels of a fully recomputed layer run again: PyTorch's non-reentrant checkpoint stops early.

Part of :mod:`dse.formulas.kernels` (the row format is there).
"""

from __future__ import annotations

from typing import Any

from dse.formulas.kernels.rows import Table

__all__ = ["early_stop"]


def _keeps(row: dict[str, Any]) -> bool:
    """A row keeps something for the backward pass under full recompute (``rerun`` not 0; arrays: any element)."""
    v = row.get("rerun", 0)
    if type(v) in (int, float):
        return bool(v)
    return bool((v != 0).any())


def early_stop(table: Table, parallel_residual: bool = False) -> Table:
    """A fully recomputed layer's table with the kernels the recomputation never reaches flagged ``stopped``.

    Formula: stopped = rows after the last row with rerun > 0, up to mlp_residual (+ attn_residual with a parallel
    residual; only mlp_residual when a dropout row keeps a mask); recompute = forward - sum of the stopped rows
    The recomputation runs the layer's forward until the last tensor the backward pass needs is packed again,
    then stops; the rows after the last row that keeps something (``rerun``), up to the layer's last forward row
    (``mlp_residual``), do not run again. A weight GEMM packs its input and weight before its kernel runs, so the
    MLP's output GEMM (fc2, whose input the activation row counts) stops with the residual add after it. A parallel
    residual (GPT-NeoX, GPT-J: x + attn(n1(x)) + mlp(n2(x))) adds both branches after the MLP: its attention
    residual stops too. A stack's ``dropout`` row keeps the MLP output's mask, packed after fc2: only the residual
    then stops. Collectives are not flagged: the estimate's breakdown re-runs every forward collective under full
    recompute (a tensor-parallel all-reduce after fc2 would stop too; eager PyTorch layers have none).
    Source: torch/utils/checkpoint.py (torch 2.13), ``_checkpoint_hook`` / ``_recomputation_hook``: with
    ``early_stop`` (the default, ``set_checkpoint_early_stop``) the recomputation's pack hook raises
    ``_StopRecomputationError`` once ``recomp_counter == len(weak_holders)``; the autograd wrappers
    (torch/csrc/autograd/generated/VariableType: ``grad_fn->self_ = SavedVariable(self, false)`` before the
    redispatch) pack an op's inputs before its kernel. Transformers checkpoints every decoder layer this way
    (``use_reentrant=False``). Checked on CPU torch (tests/test_checkpoint_early_stop.py): the backward of a
    checkpointed Transformers GPT-2, Llama and GPT-NeoX layer runs one addmm/mm fewer per layer than with early stop
    off, and one add fewer (two with a parallel residual); on the H200 profiles the recomputed forward GEMM kernels
    are 3 of 4 per Pythia layer (168 vs 96 ``bias_TNT`` calls) and 6 of 7 per Llama-3.1-8B layer.

    Args:
        table: a layer's kernel table under full recompute (rows with ``rerun``), in execution order [dict]
        parallel_residual: both branch outputs are added after the MLP [bool]
    Returns:
        the table, the stopped rows copied with ``stopped: True`` (the input is not changed) [dict]

    >>> from dse.formulas.kernels import layer_kernels
    >>> t = early_stop(layer_kernels(1024, 1, 768, 12, 12, 64, 3072, recompute="full", dropout=False))
    >>> [k for k, r in t.items() if r.get("stopped")]
    ['fc2', 'mlp_residual']
    """
    order = list(table)
    if "mlp_residual" not in table:
        return table
    end = order.index("mlp_residual")
    last = max((i for i, k in enumerate(order[:end + 1]) if _keeps(table[k])), default=-1)
    if "dropout" in table and _keeps(table["dropout"]):   # the MLP output's dropout mask: packed after fc2
        last = end - 1
    stopped = [k for k in order[last + 1:end + 1] if table[k]["kind"] != "collective"]
    if parallel_residual and "attn_residual" in table and not _keeps(table["attn_residual"]) and stopped:
        stopped.append("attn_residual")
    if not stopped:
        return table
    return {k: ({**row, "stopped": True} if k in stopped else row) for k, row in table.items()}
