"""PEFT's ``lora_dropout`` in a LoRA layer's kernel table. Part of :mod:`dse.formulas.finetune` (symbols there)."""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num
from dse.formulas.finetune.moe import GATED, LINEAR_ROWS, _split

__all__ = ["dropout_rows"]


def dropout_rows(table: dict[str, Any], adapters: dict[str, list[tuple[Num, Num]]], tok: Num, *, tp: Num = 1,
                 ffn_type: str = "gelu", ffn_elements: Num = 0, bytes_per_element: Num = 2,
                 mask_bytes: Num = 1) -> None:
    """PEFT's ``lora_dropout`` > 0 in a LoRA layer's kernel table (in place): each adapter drops its own input.

    Formula: an adapted row keeps n_a (e + e_mask) tok d_in instead of its input (e tok d_in): each of its n_a
    adapters keeps its dropped input (for A's weight gradient) and its dropout mask, and the input itself is no
    longer kept by anyone (a frozen GEMM keeps nothing); fc2 adapted: the activation row drops fc2's input too
    (ReLU keeps its output anyway); the separate q, k, v adapters' extra packs of the normed input go. Time: one
    dropout kernel per adapter each way, forward reading x and writing the dropped copy and the mask, backward
    reading the gradient and the mask and writing the input gradient: tok d_in (2 e + e_mask) each way
    Source: Hugging Face PEFT's LoRA ``Linear.forward`` (``lora_B(lora_A(dropout(x)))``, ``lora_dropout`` an
    ``nn.Dropout`` per adapted layer); PyTorch's fused ``native_dropout`` on CUDA saves a bool mask (on CPU,
    ``F.dropout`` saves a scaled mask in the input dtype: 2 B in bf16). MLA's down projections (replicated rows) drop
    their rank's tokens (T/t with sequence parallelism). Checked: ``scripts/trace_lora.py
    --dropout 0.1`` (``tests/fixtures/lora_dropout_trace.json``).

    Returns:
        None: the table is changed in place [none]

    >>> t = {"qkv": {"kind": "gemm", "m": 8, "k": 4, "n": 12, "saved": 64, "frozen": True},
    ...      "lora_merge": {"kind": "elementwise", "bytes": 0, "bytes_backward": 0, "kernels": 2,
    ...                     "kernels_backward": 2}}
    >>> dropout_rows(t, {"qkv": [(4, 12)]}, 8)
    >>> t["qkv"]["saved"], t["lora_merge"]["bytes"], t["lora_merge"]["kernels"]
    (96, 160, 3)
    """
    e = bytes_per_element
    moved: Num = 0
    kernels = 0
    for name, shapes in adapters.items():
        row = table[name]
        split = LINEAR_ROWS[name]
        k_in = _split(shapes[0][0], tp) if split == "row" else shapes[0][0]   # the adapters of a row share its input
        rows = row["m"] if split == "replicated" else tok    # MLA's duplicated down projections: T/t with SP
        kept = len(shapes) * (e + mask_bytes) * rows * k_in
        table[name] = {**row, "saved": kept, **({"packed": kept} if "packed" in row else {})}
        moved = moved + len(shapes) * rows * k_in * (2 * e + mask_bytes)
        kernels += len(shapes)
    if "fc2" in adapters and "activation" in table and ffn_type != "relu":
        act = dict(table["activation"])
        act["saved"] = act["saved"] - e * ffn_elements
        if "packed" in act:
            act["packed"] = act["packed"] - e * ffn_elements
        table["activation"] = act
    if "fc1" in adapters and ffn_type in GATED and "packed" in table.get("activation", {}):
        act = dict(table["activation"])      # the up projection's A no longer packs the input: its dropout's copy does
        act["packed"] = act["packed"] - e * table["fc1"]["m"] * table["fc1"]["k"]
        table["activation"] = act
    if "qkv_inputs" in table:
        table["qkv_inputs"] = {**table["qkv_inputs"], "packed": 0}
    merge = table["lora_merge"]
    table["lora_merge"] = {**merge, "bytes": merge["bytes"] + moved, "bytes_backward": merge["bytes_backward"] + moved,
                           "kernels": merge["kernels"] + kernels,
                           "kernels_backward": merge["kernels_backward"] + kernels}
