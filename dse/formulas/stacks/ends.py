"""A software stack's kernels at the ends of the model (embedding; final norm and loss), and what the ends' GEMMs
and loss need beside them: the LM head's alignment, the loss's transient bytes.

Part of :mod:`dse.formulas.stacks` (the op format and the symbols are there).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num
from dse.formulas.stacks.amounts import Op, Sizes, Table, amount
from dse.formulas.stacks.rows import _elementwise, _enabled

__all__ = ["apply_head", "apply_embedding", "aligned", "transient_bytes"]

def apply_head(table: Table, ops: dict[str, Op], size: Sizes, *, bytes_per_element: Num = 2,
               choices: dict[str, Any] | None = None) -> Table:
    """The output side's table with a stack's final norm and loss (the loss adds what is live beside it).

    Formula: final_norm and loss rows' bytes, kernels and saved bytes from the stack; the loss row's
    ``transient``: tensors live at the start of the backward pass beside everything saved (the gradient of the
    log-softmax output and its input gradient); the final-logit soft-capping ``logit_softcap`` and Granite's
    logit division ``logit_scale`` where enabled
    Source: the framework's op trace (stacks/*.yaml); PyTorch's log_softmax/nll_loss autograd formulas.

    Returns:
        kernel name -> row [dict]

    >>> from dse.formulas.stacks import sizes
    >>> z = sizes(1024, 8, 1600, 25, 25, 64, 6400, 50257)
    >>> loss = {"saved": {"logits:fp32": 1}, "transient": {"logits:fp32": 2}}
    >>> t = apply_head({"loss": {"kind": "elementwise", "bytes": 0, "saved": 0}}, {"loss": loss}, z)
    >>> (t["loss"]["saved"] + t["loss"]["transient"]) / z["logits"]   # bytes per logit live at the peak
    12.0
    """
    e = bytes_per_element
    out = dict(table)
    if "final_norm" in out and "final_norm" in ops:
        out["final_norm"] = _elementwise(ops["final_norm"], size, e, e)
    if "loss" in ops:   # the stack's own loss: not Megatron's vocab-parallel one and its all-reduces
        out = {k: v for k, v in out.items() if not (k.startswith("loss_") and v["kind"] == "collective")}
        loss = _elementwise(ops["loss"], size, e, e)
        loss["transient"] = amount(ops["loss"].get("transient", {}), size, e, e)
        for name in ("logit_softcap", "logit_scale"):
            if name in ops and _enabled(ops[name], choices or {}):
                out[name] = _elementwise(ops[name], size, e, e)
        out["loss"] = loss
    return out


def apply_embedding(table: Table, ops: dict[str, Op], size: Sizes, *, bytes_per_element: Num = 2,
                    choices: dict[str, Any] | None = None) -> Table:
    """The input side's table with a stack's embedding kernels (time; the saved token ids stay as counted).

    Formula: the embedding row's bytes and kernels from the stack's ``embedding`` op; the scale by sqrt(h)
    ``embedding_scale`` (Gemma) where enabled
    Source: the framework's op trace (stacks/*.yaml).

    Returns:
        kernel name -> row [dict]

    >>> from dse.formulas.stacks import sizes
    >>> z = sizes(1024, 8, 1600, 25, 25, 64, 6400, 50257)
    >>> emb = {"forward": {"kernels": 3, "moves": {"h": 5}}, "backward": {"kernels": 4, "moves": {"h": 2, "table": 4}}}
    >>> t = apply_embedding({"embedding": {"kind": "elementwise", "bytes": 0, "saved": 7}}, {"embedding": emb}, z)
    >>> t["embedding"]["saved"], t["embedding"]["kernels"]   # the token ids stay as counted
    (7, 3)
    """
    out = dict(table)
    if "embedding" in ops and "embedding" in out:   # the stack's own backward moves the table's gradient
        out.pop("embedding_grad", None)
        out.pop("embedding_mask", None)
        out["embedding"] = _elementwise(ops["embedding"], size, bytes_per_element, bytes_per_element,
                                        saved=out["embedding"]["saved"])
    if "embedding_scale" in ops and _enabled(ops["embedding_scale"], choices or {}):
        out["embedding_scale"] = _elementwise(ops["embedding_scale"], size, bytes_per_element, bytes_per_element)
    return out


def aligned(n: Num, bytes_per_element: Num = 2) -> Num:
    """Whether a GEMM dimension is a multiple of 16 bytes, the alignment tensor-core GEMM kernels need.

    Formula: (n e) mod 16 = 0
    Source: NVIDIA cuBLAS / CUTLASS: tensor-core kernels load operands in 16-byte vectors; a leading dimension that
    is not a multiple of 16 bytes falls back to 1-element-aligned kernels (the ``align1`` kernels the measured GPT-2
    profiles show for the 50,257-word LM head, data/h100_hf_training.jsonl kind profile).

    Returns:
        1 if aligned, else 0 [bool]

    >>> aligned(50257), aligned(50304)
    (0, 1)
    """
    return ((n * bytes_per_element) % 16 == 0) * 1


def transient_bytes(table: Table) -> Num:
    """Bytes a table's kernels hold beside every saved tensor at the start of the backward pass (the loss's).

    Formula: sum over rows of transient
    Source: PyTorch's autograd of log_softmax and nll_loss: the backward of nll_loss allocates the gradient of the
    log-probabilities, log_softmax's backward its input gradient, while the saved log-probabilities are still held.

    Returns:
        bytes [bytes]

    >>> transient_bytes({"loss": {"transient": 8.0}, "lm_head": {}})
    8.0
    """
    total: Num = 0
    for row in table.values():
        total = total + row.get("transient", 0)
    return total
