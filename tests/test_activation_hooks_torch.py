"""What ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` really copies, against dse's count of it.

The reference layers of tests/torch_reference.py (one Megatron-core-style layer of one tensor-parallel
rank, bf16, CPU) run their forward inside PyTorch's own ``save_on_cpu(pin_memory=True)``, with its pack
and unpack hooks wrapped to add up the bytes of the pinned tensors they allocate and copy (out, forward)
and of the tensors they hand back to backward (in). Without CUDA the pack hook still allocates a host
tensor and copies into it (``is_pinnable`` is False, so the copy is a plain one): the bytes are those a GPU
run moves over PCIe. dse's count, :func:`dse.formulas.activation_offload.hooks_bytes_per_layer`, with the
layer's weight bytes from dse's own parameter formulas, must match within 3 % (as the unique-buffer count
of tests/test_activations_torch.py), and every byte copied out must come back once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_reference as R  # noqa: E402

from dse.formulas import activation_offload as AO, transformer as T  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

TOL = 0.03


def copied_by_save_on_cpu(spec: R.LayerSpec) -> tuple[int, int]:
    """(bytes save_on_cpu copies to the host in forward, bytes it copies back in backward) for one layer."""
    torch.manual_seed(0)
    layer = R.ReferenceLayer(spec)
    x = layer.make_input()
    hooks = torch.autograd.graph.save_on_cpu(pin_memory=True)
    pack, unpack = hooks.pack_hook, hooks.unpack_hook
    moved = {"out": 0, "in": 0}

    def counting_pack(t):
        device, packed = pack(t)
        moved["out"] += packed.numel() * packed.element_size()
        assert packed.data_ptr() != t.data_ptr()     # a copy, not the tensor itself
        return device, packed

    def counting_unpack(p):
        t = unpack(p)
        moved["in"] += t.numel() * t.element_size()
        return t

    hooks.pack_hook, hooks.unpack_hook = counting_pack, counting_unpack   # what __enter__ registers
    with hooks:
        y = layer(x)
    y.float().sum().backward()
    return moved["out"], moved["in"]


def formula(spec: R.LayerSpec) -> float:
    """dse's count: the layer's saves (once per save) plus the weight bytes of one rank's shard."""
    d, t = spec.head_dim, spec.tp
    split = T.layer_parameters(spec.h, spec.heads, spec.kv_heads, d, spec.ffn, spec.ffn_type, spec.norm, spec.bias)
    replicated = T.layer_parameters_replicated(spec.h, spec.ffn_type, spec.norm, spec.bias)
    weights = 2 * ((split - replicated) / t + replicated)
    return AO.hooks_bytes_per_layer(spec.s, spec.b, spec.h, spec.heads, spec.kv_heads, d, spec.ffn,
                                    layer_weight_bytes=weights, **spec.formula_options())


CASES = [R.gpt(s=128, b=2, h=512, heads=8, attention=att, recompute=rec, dropout=drop)
         for att in ("flash", "math") for rec in ("none", "selective", "full") for drop in (True, False)]
CASES += [
    R.gpt(s=256, b=4, h=256, heads=4),                                               # activations outweigh weights
    R.gpt(s=128, b=2, h=512, heads=8, tp=2),
    R.gpt(s=128, b=2, h=512, heads=8, tp=2, sequence_parallel=True, attention="math"),
    R.gpt(s=128, b=2, h=512, heads=8, kv_heads=2),                                    # GQA, learned: Q copied
    R.llama(s=128, b=2, h=512, heads=8, kv_heads=2, ffn=1376),                       # rotary, GQA, SwiGLU, flash
    R.llama(s=128, b=2, h=512, heads=8, kv_heads=2, ffn=1376, attention="math"),
    R.llama(s=64, b=4, h=256, heads=4, kv_heads=4, ffn=688, recompute="selective"),  # rotary MHA
]


def _id(s: R.LayerSpec) -> str:
    return (f"{'llama' if s.position == 'rotary' else 'gpt'}-{s.attention}-{s.recompute}-kv{s.kv_heads}-t{s.tp}"
            f"{'-sp' if s.sequence_parallel else ''}{'' if s.dropout else '-nodrop'}")


@pytest.mark.parametrize("spec", CASES, ids=[_id(s) for s in CASES])
def test_save_on_cpu_copies_what_dse_counts(spec):
    out, back = copied_by_save_on_cpu(spec)
    assert back == out                                   # every saved tensor is copied back once in backward
    want = formula(spec)
    assert abs(want / out - 1) <= TOL, (out, want, out / (spec.s * spec.b * spec.h), want / (spec.s * spec.b * spec.h))


def test_the_hooks_copy_more_than_the_unique_buffers():
    """Without the weights and the second save of the attention output the count would miss (flash, GPT)."""
    spec = R.gpt(s=128, b=2, h=512, heads=8)
    out, _ = copied_by_save_on_cpu(spec)
    unique = T.activation_bytes_per_layer(spec.s, spec.b, spec.h, spec.heads, spec.kv_heads, spec.head_dim, spec.ffn,
                                          **spec.formula_options())
    assert abs(unique / out - 1) > 0.5        # at s b = 256 the weights (12 h^2) outweigh the activations
    assert abs(formula(spec) / out - 1) <= TOL
