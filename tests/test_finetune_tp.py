"""LoRA under tensor and context parallelism as Megatron-Bridge runs it (dse.formulas.finetune.tensor_parallel).

The reference is a brute-force replay of Megatron-Bridge's ``ParallelLinearAdapter`` (src/megatron/bridge/peft/
utils.py at 067f987d) on Megatron-Core's parallel linear layers (megatron/core/tensor_parallel/layers.py at
d98e8a64): each rank's weight shapes and the collectives each layer issues, flag by flag as the source sets them.
"""

from __future__ import annotations

import itertools

import pytest

import dse
from dse.formulas import finetune as F
from dse.formulas.kernels import layer_kernels, message_bytes


def _column(d_in, d_out, t, T, gather_output, disable_grad_reduce=False):
    """Megatron-Core ColumnParallelLinear on one of t ranks (sequence_parallel False, as the adapter sets it):
    weight (d_out/t, d_in); forward all-gather of the output when gather_output; backward all-reduce of the input
    gradient when allreduce_dgrad = t > 1 and not disable_grad_reduce."""
    assert d_out % t == 0                                  # divide(output_size, world_size)
    calls = []
    if t > 1 and gather_output:
        calls.append(("forward", "allgather", T * d_out))
    if t > 1 and not disable_grad_reduce:
        calls.append(("backward", "allreduce", T * d_in))
    return (d_out // t, d_in), calls


def _row(d_in, d_out, t, T):
    """Megatron-Core RowParallelLinear(input_is_parallel=True) on one rank: weight (d_out, d_in/t); forward
    all-reduce of the output (reduce_from_tensor_model_parallel_region)."""
    assert d_in % t == 0
    return (d_out, d_in // t), ([("forward", "allreduce", T * d_out)] if t > 1 else [])


def _adapter(d_in, d_out, r, t, T, column_base, sp):
    """ParallelLinearAdapter(in, out, dim=r) on one rank: (weights, collectives). A column-parallel base layer
    (TELayerNormColumnParallelLinear) returns its norm output gathered under SP, so disable_sequence_parallel_comm
    is True there (utils.py lines 617-651); a row-parallel one scatters the output under SP."""
    input_is_parallel = not column_base
    disable_sp_comm = True if column_base else not sp
    if input_is_parallel:
        w_in, c_in = _row(d_in, r, t, T)
    else:
        w_in, c_in = _column(d_in, r, t, T, gather_output=True, disable_grad_reduce=sp)
    w_out, c_out = _column(r, d_out, t, T, gather_output=input_is_parallel)
    calls = c_in + c_out
    if not disable_sp_comm and input_is_parallel and t > 1:   # scatter_to_sequence_parallel_region: backward gather
        calls.append(("backward", "allgather", T * d_out))
    return [w_in, w_out], calls


SHAPES = [(4096, 4096, "column"), (4096, 1024, "column"), (4096, 14336, "column"), (4096, 4096, "row"),
          (14336, 4096, "row")]


@pytest.mark.parametrize("tp,sp", list(itertools.product((1, 2, 4, 8), (False, True))))
def test_per_rank_shapes_flops_and_collectives_match_megatron_bridge(tp, sp):
    r, T, e = 16, 2048, 2
    for d_in, d_out, split in SHAPES:
        weights, calls = _adapter(d_in, d_out, r, tp, T, split == "column", sp)
        params = sum(a * b for a, b in weights)
        assert F.megatron_adapter_parameters(d_in, d_out, r, tp) == params
        assert F.adapter_parameters({"qkv" if split == "column" else "out": [(d_in, d_out)]}, r, tp,
                                    layout="megatron") == params
        rows, _, _ = F.megatron_adapter_rows("x", d_in, d_out, split, r, T, tp=tp, sequence_parallel=sp,
                                             bytes_per_element=e)
        a, b = rows["x_a"], rows["x_b"]
        assert (a["n"], a["k"]) == weights[0] and (b["n"], b["k"]) == weights[1]   # (d_out, d_in) of each weight
        assert a["flops"] == 2 * T * a["k"] * a["n"] and b["flops"] + a["flops"] == 2 * T * params
        got = sorted((row["pass"], row["op"], row["comm"] / e) for row in rows.values()
                     if row["kind"] == "collective")
        assert got == sorted(calls), (d_in, d_out, split)


def test_tp1_megatron_layout_is_peft_layout():
    args = (4096, 32, 8, 128, 14336)
    shapes = F.adapted_linears(*args, ffn_type="swiglu", qkv_projection="separate", targets="all")
    assert F.adapter_parameters(shapes, 16, 1, layout="megatron") == F.adapter_parameters(shapes, 16, 1)
    kw = dict(ffn_type="swiglu", norm="rmsnorm", position="rotary", dropout=False, sequence_parallel=False)
    peft = layer_kernels(2048, 1, *args, finetune={"adapters": shapes, "rank": 16}, **kw)
    meg = layer_kernels(2048, 1, *args, finetune={"adapters": shapes, "rank": 16, "layout": "megatron"}, **kw)
    assert peft == meg


def test_megatron_layout_adds_the_adapter_collectives_to_the_table():
    h, T, r, t = 4096, 4096, 16, 4
    shapes = F.adapted_linears(h, 32, 8, 128, 14336, "swiglu", "separate", "all")
    kw = dict(ffn_type="swiglu", norm="rmsnorm", position="rotary", dropout=False, tp=t)
    for sp in (False, True):
        peft = layer_kernels(T, 1, h, 32, 8, 128, 14336, finetune={"adapters": shapes, "rank": r},
                             sequence_parallel=sp, **kw)
        meg = layer_kernels(T, 1, h, 32, 8, 128, 14336, finetune={"adapters": shapes, "rank": r, "layout": "megatron"},
                            sequence_parallel=sp, **kw)
        extra = 0.0
        for row, adapters in shapes.items():
            for d_in, d_out in adapters:
                column = row in ("qkv", "fc1")
                # all-reduce equivalents: an all-gather counts half (dse.formulas.kernels.message_bytes)
                fwd = 0.5 * r if column else r + 0.5 * d_out
                bwd = r + (0 if sp else d_in) if column else r + (0.5 * d_out if sp else 0)
                extra += 2 * T * (fwd + bwd)
        assert message_bytes(meg) - message_bytes(peft) == pytest.approx(extra)
        assert meg["qkv"]["saved"] == 2 * T * h        # also under SP: the gathered norm output that A keeps
        assert peft["qkv"]["saved"] == 2 * T * h / (t if sp else 1)


def test_estimate_splits_the_adapters_on_the_megatron_stack_only():
    kw = dict(tp=4, dp=2, finetune="lora", lora_rank=16, zero=1)
    meg = dse.estimate("llama3-8b", "dgx-h100", **kw)
    peft = dse.estimate("llama3-8b", "dgx-h100", stack="pytorch", **kw)
    total = meg["model"]["params_trainable"]
    assert total == peft["model"]["params_trainable"] == 41_943_040
    grad = 4                                    # fp32 gradients of the adapters (bf16 mixed precision)
    assert meg["memory"]["gpu"]["gradients"] == total / 4 * grad          # r (d_in + d_out) / t on every rank
    h, q, kv, ffn, r, L = 4096, 4096, 1024, 14336, 16, 32
    peft_gpu = L * r * ((h + q / 4) + 2 * (h + kv / 4) + (q / 4 + h) + 2 * (h + ffn / 4) + (ffn / 4 + h))
    assert peft["memory"]["gpu"]["gradients"] == peft_gpu * grad           # A whole on column, B whole on row


def test_rank_must_divide_over_tp_on_the_megatron_stack():
    with pytest.raises(dse.errors.InputError, match="--lora-rank 4 with --tp 8"):
        dse.estimate("llama3-8b", "dgx-h100", tp=8, finetune="lora", lora_rank=4)
    dse.estimate("llama3-8b", "dgx-h100", tp=8, finetune="lora", lora_rank=4, stack="pytorch")


@pytest.mark.parametrize("zero", (1, 2))
def test_context_parallelism_shards_the_adapter_states_over_dp_x_cp(zero):
    # Megatron-Core's distributed optimizer and gradient buffers take the data-parallel group with context
    # parallelism (megatron/core/process_groups_config.py setup_process_groups_for_optimizer:
    # get_data_parallel_group(with_context_parallel=True); optimizer/__init__.py: data_parallel_group=intra_dp_cp_group)
    kw = dict(tp=2, dp=2, finetune="lora", lora_rank=16, zero=zero, seq_len=8192)
    one = dse.estimate("llama3-8b", "dgx-h100", cp=1, **kw)["memory"]["gpu"]
    two = dse.estimate("llama3-8b", "dgx-h100", cp=2, **kw)["memory"]["gpu"]
    assert two["optimizer"] == pytest.approx(one["optimizer"] / 2, rel=1e-12)
    assert two["gradients"] == pytest.approx(one["gradients"] / (2 if zero == 2 else 1), rel=1e-12)
    assert two["weights"] == one["weights"]
    assert two["activations"] < one["activations"]



def test_an_array_of_tp_degrees_prices_each_as_its_scalar():
    import numpy as np

    from dse.formulas.kernels import table_launches

    def pick(v, i):
        return np.asarray(v)[i].item() if np.ndim(v) else v

    for split, sp in itertools.product(("column", "row"), (False, True)):
        rows, k_in, n_out = F.megatron_adapter_rows("x", 4096, 4096, split, 16, 2048, tp=np.array([1, 2, 4]),
                                                    sequence_parallel=sp)
        for i, t in enumerate((1, 2, 4)):
            one, k1, n1 = F.megatron_adapter_rows("x", 4096, 4096, split, 16, 2048, tp=t, sequence_parallel=sp)
            at = {name: {k: pick(v, i) for k, v in row.items()} for name, row in rows.items()}
            assert (pick(k_in, i), pick(n_out, i)) == (k1, n1)
            for name, row in at.items():
                if name in one:
                    assert row == one[name], (name, t)
                else:                 # t = 1: no copies, and collectives over one rank cost nothing
                    assert t == 1 and (row["kind"] == "collective" or row["bytes"] == row["kernels"] == 0), name
            assert table_launches(at, ranks=t) == table_launches(one, ranks=t)
