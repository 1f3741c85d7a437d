"""LoRA adapters under tensor parallelism as Megatron-Bridge splits them. Part of :mod:`dse.formulas.finetune`.

Two layouts of an adapter on a tensor-parallel linear layer (``layout``):

- ``peft`` (Hugging Face PEFT's ``LoraParallelLinear``, ``peft/tuners/lora/tp_layer.py``; what dse prices for the
  pytorch and compiled stacks, where one GPU or FSDP runs PEFT's whole adapter and t = 1): on a column-parallel
  layer ``A`` (r x d_in) is whole and ``B`` split by rows, on a row-parallel one ``A`` is split by columns and ``B``
  whole; no collective of its own.
- ``megatron`` (Megatron-Bridge's ``ParallelLinearAdapter``, ``src/megatron/bridge/peft/utils.py`` lines 923-1278
  at NVIDIA-NeMo/Megatron-Bridge 067f987d; the megatron stack): both matrices split over the t ranks, with
  collectives of the r-wide bottleneck. ``linear_in`` (A) is a Megatron-Core ``ColumnParallelLinear(d_in, r,
  gather_output=True)`` on a column-parallel base layer (``input_is_parallel=False``: ``linear_qkv``,
  ``linear_fc1``) and a ``RowParallelLinear(d_in, r, input_is_parallel=True)`` on a row-parallel one
  (``linear_proj``, ``linear_fc2``; ``get_adapter_attributes_from_linear``, lines 549-679); ``linear_out`` (B) is
  always a ``ColumnParallelLinear(r, d_out)``, its output gathered on a row-parallel base layer
  (``lin_out_gather_output``). The adapter's own layers run with ``sequence_parallel = False`` (line 1026: "SP is
  irrelevant for the lora linear layer"), so each ``ColumnParallelLinear`` all-reduces its input gradient
  (``allreduce_dgrad``, Megatron-LM ``megatron/core/tensor_parallel/layers.py`` lines 1144-1146, asynchronously
  beside its weight-gradient GEMM, lines 694-698; Megatron-LM d98e8a64) unless ``disable_grad_reduce`` (A under
  sequence parallelism).

Per adapter (d_in, d_out) of rank r on t ranks, T tokens, c bytes per message element:

=========================  ==========================================  ============================================
                           column-parallel base (qkv, fc1)             row-parallel base (out, fc2)
=========================  ==========================================  ============================================
A on a rank                (r/t) x d_in                                r x (d_in/t)
B on a rank                (d_out/t) x r                               (d_out/t) x r
forward                    all-gather of A x: c T r                    all-reduce of A x: c T r; all-gather of
                                                                       B A x: c T d_out (then split by sequence
                                                                       under SP, no message)
backward                   all-reduce of B's input gradient: c T r;    all-reduce of B's input gradient: c T r;
                           without SP all-reduce of A's: c T d_in      under SP all-gather of the output's
                                                                       gradient over the sequence: c T d_out
=========================  ==========================================  ============================================

Under sequence parallelism the column-parallel base layer (Transformer Engine's ``LayerNormColumnParallelLinear``)
returns its norm output already gathered (``return_layernorm_output_gathered``, Megatron-Bridge utils.py lines
617-651, Transformer Engine >= 1.5 without TP communication overlap), so A reads the whole sequence with no
gather of its own, and with its weight frozen the base layer keeps no input (Transformer Engine d0067d0d
``transformer_engine/pytorch/module/layernorm_linear.py`` line 502: ``ln_out_to_save if weight.requires_grad else
None``): the gathered e T d_in that A keeps is the row's saved input (not the e T d_in / t shard). That path
also ignores the gradient of the returned norm output (``dgrad + grad_outputs[1]`` only when it was not gathered,
line 1134), so A's input gradient needs no collective. Megatron-Bridge's optional
``sequence_parallel_input_regather`` (off by default) is not modelled.
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, where
from dse.formulas.finetune.moe import _split

__all__ = ["LORA_LAYOUTS", "MEGATRON_ROWS", "megatron_adapter_parameters", "megatron_adapter_rows"]

LORA_LAYOUTS = ("peft", "megatron")

#: The kernel-table rows whose adapters Megatron-Bridge splits (its ``linear_qkv``, ``linear_proj``, ``linear_fc1``,
#: ``linear_fc2``) and how their base layer is split. MoE and MLA rows keep the ``peft`` layout (not modelled).
MEGATRON_ROWS = {"qkv": "column", "out": "row", "fc1": "column", "fc2": "row"}


def megatron_adapter_parameters(d_in: Num, d_out: Num, rank: Num, tp: Num = 1) -> Num:
    """Trainable parameters of one Megatron-Bridge LoRA adapter on one tensor-parallel rank.

    Formula: r d_in / t + d_out r / t = r (d_in + d_out) / t on a column- or a row-parallel base layer (A is
    (r/t) x d_in or r x (d_in/t), B is (d_out/t) x r); r (d_in + d_out) at t = 1, as PEFT's
    Source: Megatron-Bridge ``src/megatron/bridge/peft/utils.py`` ``ParallelLinearAdapter.__init__`` (lines 1033-1082:
    ``linear_in`` a ``ColumnParallelLinear(in_features, dim)`` or ``RowParallelLinear(in_features, dim)``,
    ``linear_out`` a ``ColumnParallelLinear(dim, out_features)``); Megatron-Core's parallel linear layers keep
    ``divide(output_size, t)`` rows (column) or ``divide(input_size, t)`` columns (row) of their weight.

    Returns:
        parameters [count]

    >>> megatron_adapter_parameters(4096, 4096, 16, 4), megatron_adapter_parameters(4096, 14336, 16)
    (32768.0, 294912)
    """
    return _split(rank * (d_in + d_out), tp)


def megatron_adapter_rows(prefix: str, d_in: Num, d_out: Num, split: str, rank: Num, tok: Num, *, tp: Num = 1,
                          sequence_parallel: bool = False, bytes_per_element: Num = 2,
                          comm_bytes_per_element: Num | None = None) -> tuple[dict[str, Any], Num, Num]:
    """The kernel-table rows of one Megatron-Bridge LoRA adapter on one rank: A and B GEMMs and their collectives.

    Formula: (the module docstring's table) GEMM A (m = T, k = d_in, n = r/t) on a column-parallel base layer,
    (m = T, k = d_in/t, n = r) on a row-parallel one; GEMM B (m = T, k = r, n = d_out/t) keeping e T r (its gathered
    or reduced input); collectives ``{prefix}_gather`` (forward all-gather c T r), ``{prefix}_b_dgrad`` (backward
    all-reduce c T r, beside B's weight-gradient GEMM), and without SP ``{prefix}_a_dgrad`` (backward all-reduce
    c T d_in beside A's) on a column-parallel layer; ``{prefix}_reduce`` (forward all-reduce c T r),
    ``{prefix}_b_dgrad``, ``{prefix}_gather`` (forward all-gather c T d_out) and under SP ``{prefix}_scatter``
    (backward all-gather c T d_out) on a row-parallel one; an element-wise row ``{prefix}_copies``: the
    concatenation after an all-gather along the last dimension (2 e T n forward, n = r or d_out), its backward split
    (2 e T n / t), and under SP on a row-parallel layer the forward split over the sequence (2 e T d_out / t); none
    of these at t = 1. Also returned: the width of A's input (k_in: its input gradient's) and of the adapter's output
    as added to the base layer's (n_out: d_out/t; d_out on a row-parallel layer without SP)
    Source: Megatron-Bridge ``src/megatron/bridge/peft/utils.py`` ``ParallelLinearAdapter`` (``__init__`` lines
    1033-1082, ``forward`` lines 1208-1278; ``get_adapter_attributes_from_linear`` lines 549-679); Megatron-Core
    ``megatron/core/tensor_parallel/layers.py`` (``ColumnParallelLinear``: ``allreduce_dgrad`` lines 1144-1146,
    ``gather_from_tensor_model_parallel_region`` lines 1271-1284; ``RowParallelLinear``:
    ``reduce_from_tensor_model_parallel_region``, line 1566) and ``mappings.py`` (``_gather_along_last_dim``:
    all-gather, then ``torch.cat`` of the chunks; ``_split_along_last_dim``/``_split_along_first_dim``: a
    contiguous slice).

    Returns:
        (rows, k_in, n_out): kernel name -> row [dict], widths [count]

    >>> rows, k_in, n_out = megatron_adapter_rows("lora_qkv_0", 4096, 4096, "column", 16, 8192, tp=4)
    >>> [(n, r["kind"], r.get("op"), r.get("comm")) for n, r in rows.items()]  # doctest: +NORMALIZE_WHITESPACE
    [('lora_qkv_0_a', 'gemm', None, None), ('lora_qkv_0_gather', 'collective', 'allgather', 262144),
     ('lora_qkv_0_b', 'gemm', None, None), ('lora_qkv_0_b_dgrad', 'collective', 'allreduce', 262144),
     ('lora_qkv_0_a_dgrad', 'collective', 'allreduce', 67108864), ('lora_qkv_0_copies', 'elementwise', None, None)]
    >>> rows["lora_qkv_0_a"]["n"], rows["lora_qkv_0_b"]["n"], k_in, n_out
    (4.0, 1024.0, 4096, 1024.0)
    """
    e = bytes_per_element
    c = e if comm_bytes_per_element is None else comm_bytes_per_element
    one = type(tp) is int and tp == 1
    column = split == "column"
    k_a, n_a = (d_in, _split(rank, tp)) if column else (_split(d_in, tp), rank)
    n_b = _split(d_out, tp)
    rows: dict[str, Any] = {}
    rows[f"{prefix}_a"] = {"kind": "gemm", "m": tok, "k": k_a, "n": n_a, "batch": 1, "split": "", "saved": 0,
                           "flops": 2 * tok * k_a * n_a, "adapter": True}
    back = {"kind": "collective", "group": "tp", "pass": "backward", "saved": 0}
    fwd = {"kind": "collective", "group": "tp", "pass": "forward", "saved": 0}
    if not one:
        rows[f"{prefix}_gather" if column else f"{prefix}_reduce"] = {
            **fwd, "op": "allgather" if column else "allreduce", "comm": c * tok * rank}
    rows[f"{prefix}_b"] = {"kind": "gemm", "m": tok, "k": rank, "n": n_b, "batch": 1, "split": "",
                           "saved": e * tok * rank, "flops": 2 * tok * rank * n_b, "adapter": True}
    if not one:
        rows[f"{prefix}_b_dgrad"] = {**back, "op": "allreduce", "comm": c * tok * rank, "hidden_by": f"{prefix}_b"}
        if column and not sequence_parallel:
            rows[f"{prefix}_a_dgrad"] = {**back, "op": "allreduce", "comm": c * tok * d_in, "hidden_by": f"{prefix}_a"}
        if not column:
            rows[f"{prefix}_gather"] = {**fwd, "op": "allgather", "comm": c * tok * d_out}
            if sequence_parallel:
                rows[f"{prefix}_scatter"] = {**back, "op": "allgather", "comm": c * tok * d_out}
        width = rank if column else d_out              # the tensor gathered along its last dimension
        scatter = not column and sequence_parallel     # the output split over the sequence (forward)
        split_out = d_out / tp if scatter else 0
        on = where(tp > 1, 1, 0)                       # an array of tp degrees: nothing where one is 1
        rows[f"{prefix}_copies"] = {"kind": "elementwise", "bytes": on * 2 * e * tok * (width + split_out),
                                    "bytes_backward": on * 2 * e * tok * width / tp,
                                    "kernels": on * (2 if scatter else 1), "kernels_backward": on, "saved": 0}
    n_out = d_out if not column and not sequence_parallel else n_b
    return rows, (d_in if column else k_a), n_out
