"""The kernels a multi-token prediction (MTP) depth adds around its transformer layer.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there).
"""

from __future__ import annotations

from dse.formulas._array import Num
from dse.formulas.kernels.layer import _per_gpu
from dse.formulas.kernels.rows import Table

__all__ = ["mtp_kernels"]


def mtp_kernels(s: Num, b: Num, h: Num, *, tp: Num = 1, sequence_parallel: bool = False, norm: str = "rmsnorm",
                bytes_per_element: Num = 2, comm_bytes_per_element: Num | None = None) -> Table:
    """One MTP depth's own kernels on one GPU for one micro-batch: two norms, the concat, eh_proj, the final norm.

    Formula: T = s b, r = 1/t with SP; enorm and hnorm 2e T h r bytes each (saved: input + fp32 statistics);
    concat 4e T h r bytes; eh_proj GEMM (T, 2h, h/t), column-parallel, 2 T 2h h/t FLOP, saved its input 2e T h r;
    all-gather of its output e T h forward (with SP also of its input, 2e T h), backward the input gradient
    2e T h all-reduced (reduce-scattered with SP); final norm 2e T h r (its saved input is the head table's
    final_norm row)
    Source: DeepSeek-V3 (arXiv 2412.19437) §2.2 Eq. 21-22: h' = M [RMSNorm(h); RMSNorm(Emb(t_{i+k}))];
    Megatron-Core MultiTokenPredictionLayer._concat_embeddings (enorm, hnorm, torch.cat, eh_proj a
    ColumnParallelLinear 2h -> h with gather_from_tensor_model_parallel_region, then the scatter to the
    sequence-parallel region) and _postprocess (final_layernorm before the shared output head).

    The depth's transformer layer, the lookup of the shifted tokens in the shared embedding and the shared output
    head with its loss are the model's own tables (a layer of the model's last kind, the embedding, the head).

    Returns:
        kernel name -> row [dict]

    >>> k = mtp_kernels(4096, 1, 7168)   # DeepSeek-V3, one micro-batch of 4,096 tokens
    >>> k["eh_proj"]["m"], k["eh_proj"]["k"], k["eh_proj"]["n"], k["eh_proj"]["flops"] / 1e9
    (4096, 14336, 7168, 841.813590016)
    """
    e = bytes_per_element
    r = 1 / tp if sequence_parallel else 1
    stats = 8 if norm == "layernorm" else 4
    tok = s * b
    x_in = e * tok * h * r
    comm = e if comm_bytes_per_element is None else comm_bytes_per_element
    h_loc = _per_gpu(h, tp)
    t: Table = {
        "enorm": {"kind": "elementwise", "bytes": 2 * x_in, "saved": x_in + stats * tok * r},
        "hnorm": {"kind": "elementwise", "bytes": 2 * x_in, "saved": x_in + stats * tok * r},
        "concat": {"kind": "elementwise", "bytes": 4 * x_in, "saved": 0},
    }
    if sequence_parallel:   # the column-parallel GEMM gathers its sequence-sharded 2h-wide input
        t["eh_input_allgather"] = {"kind": "collective", "op": "allgather", "group": "tp", "pass": "forward",
                                   "comm": 2 * comm * tok * h, "saved": 0}
    t["eh_proj"] = {"kind": "gemm", "m": tok, "k": 2 * h, "n": h_loc, "batch": 1, "split": "column",
                    "saved": 2 * x_in, "flops": 2 * tok * 2 * h * h_loc}
    t["eh_output_allgather"] = {"kind": "collective", "op": "allgather", "group": "tp", "pass": "forward",
                                "comm": comm * tok * h, "saved": 0}
    t["eh_dgrad"] = {"kind": "collective", "op": "reduce_scatter" if sequence_parallel else "allreduce",
                     "group": "tp", "pass": "backward", "comm": 2 * comm * tok * h, "hidden_by": "eh_proj",
                     "saved": 0}
    t["mtp_final_norm"] = {"kind": "elementwise", "bytes": 2 * x_in, "saved": 0}
    return t
