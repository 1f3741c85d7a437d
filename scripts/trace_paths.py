"""Which CUDA code path each element-wise kernel of an eager Transformers training step takes: the provenance of the
`strided` and `cast` passes of stacks/pytorch.yaml and of tests/fixtures/pytorch_paths.json.

Runs one forward and backward pass of a Transformers model (a config from tests/fixtures/hf, bf16, one and two
layers, CPU) under a TorchDispatchMode that records every non-view aten op with the shape, strides and dtype of
each tensor operand, and classifies each element-wise op as PyTorch's CUDA TensorIterator would launch it
(aten/src/ATen/native/cuda/CUDALoops.cuh, ``gpu_kernel_impl``; Copy.cu, ``copy_kernel_cuda``):

- ``vector``: every operand contiguous in the output's layout, one dtype -> ``vectorized_elementwise_kernel``
  (16-byte loads); also the float -> bfloat16 copy, which has its own vectorized kernel
  (``bfloat16_copy_kernel_cuda``);
- ``unvectorized``: contiguous but the operands' dtypes differ (bf16 -> fp32 upcasts) -> ``unrolled_elementwise_kernel``
  with per-element ``LoadWithCast`` / ``StoreWithCast`` (no vector loads); or an operand broadcast (a stride 0:
  RoPE's cos/sin tables, RMSNorm's per-token rsqrt and its weight, the causal mask) or sliced, every operand's
  dimensions in the output's memory order -> the generic ``elementwise_kernel<128, 4>`` (``<128, 2>``) with a
  per-element offset calculation, coalesced;
- ``strided``: the same generic kernel with an operand whose dimensions lie in another order than the output's (a
  transposed view): one side's accesses uncoalesced;
- other kernels by name: ``gemm``, ``softmax``, ``reduce``, ``cat``, ``fill``, ``other``.

Per class it prints the kernels launched per layer (the two-layer run minus the one-layer run) and their elements:
the output's, once per kernel (``elements``), and the passes (one read or one write of every element, of every
non-broadcast operand: ``passes``) -- to set against the measured profiles' kernel names and call counts
(scripts/profile_compare.py --kernels 60).

Usage:  python scripts/trace_paths.py MODEL [b s] [--attn eager|sdpa]   (MODEL: a folder of tests/fixtures/hf)
        python scripts/trace_paths.py --fixture > tests/fixtures/pytorch_paths_trace.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

GEMM = {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear"}
SOFTMAX = {"_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data"}
REDUCE = {"sum", "mean", "amax", "max", "var_mean", "norm", "nll_loss_forward", "nll_loss_backward"}
FILL = {"fill_", "zero_", "zeros", "ones", "full", "zeros_like", "ones_like", "new_zeros", "scalar_tensor"}
OTHER = {"embedding", "embedding_dense_backward", "index_select", "gather", "scatter", "arange", "native_layer_norm",
         "native_layer_norm_backward", "_scaled_dot_product_flash_attention_for_cpu",
         "_scaled_dot_product_flash_attention_for_cpu_backward", "where", "triu", "tril", "_local_scalar_dense",
         "ne", "eq", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "_assert_tensor_metadata", "cumsum",
         "index", "new_ones", "empty_like", "empty", "new_empty", "new_empty_strided", "empty_strided", "copy"}
DEBUG = False
VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "split", "slice", "select", "unsqueeze",
         "squeeze", "detach", "alias", "as_strided", "_reshape_alias", "split_with_sizes", "lift_fresh", "unbind",
         "chunk", "view_as", "reshape", "unfold", "diagonal", "narrow", "_to_copy_view", "contiguous"}


def _dense_strides(shape: tuple, strides: tuple) -> bool:
    """The tensor is non-overlapping and dense (some permutation of a contiguous layout)."""
    dims = sorted((st, n) for n, st in zip(shape, strides) if n != 1)
    expect = 1
    for st, n in dims:
        if st != expect:
            return False
        expect *= n
    return True


def classify(name: str, ins: list, outs: list) -> str:
    """The CUDA path of one op; ``ins``/``outs``: (shape, strides, dtype) of its tensor operands (0-dim dropped)."""
    if name in GEMM:
        return "gemm"
    if name in SOFTMAX:
        return "softmax"
    if name in REDUCE:
        return "reduce"
    if name == "cat":
        return "cat"
    if name in FILL:
        return "fill"
    if name in OTHER or not outs:
        return "other"
    out = outs[0]
    ops = [t for t in ins if t[0]] + [o for o in outs if o[0]]
    same = all(t[0] == out[0] and (t[1] == out[1] or all(n == 1 or a == b for n, a, b in zip(t[0], t[1], out[1])))
               for t in ops)
    if not same or not _dense_strides(out[0], out[1]):
        own = _order(out)
        return "unvectorized" if all(_order(t) == [d for d in own if d in _order(t)] for t in ops
                                     if len(t[0]) == len(out[0])) else "strided"
    dtypes = {t[2] for t in ops}
    if len(dtypes) > 1:
        return "vector" if name in ("_to_copy", "copy_") and out[2] == "torch.bfloat16" and \
            {t[2] for t in ins if t[0]} == {"torch.float32"} else "unvectorized"
    return "vector"


def _order(t: tuple) -> list:
    """The dimensions of a tensor from the outermost to the innermost in memory (size-1 and broadcast dims dropped)."""
    return [d for _, d in sorted(((st, d) for d, (n, st) in enumerate(zip(t[0], t[1])) if n != 1 and st != 0),
                                 reverse=True)]


def run(model_dir: str, layers: int, b: int, s: int, attn: str, checkpoint: bool = False) -> dict:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(model_dir)
    cfg = getattr(cfg, "text_config", cfg)
    cfg.num_hidden_layers = layers
    if hasattr(cfg, "layer_types") and cfg.layer_types:
        cfg.layer_types = cfg.layer_types[:layers]
    for k in ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "residual_dropout",
              "embedding_dropout"):     # StarCoder2's residual_dropout 0.1 ran otherwise (bernoulli_, div_, mul)
        if hasattr(cfg, k):
            setattr(cfg, k, 0.0)
    cfg._attn_implementation = attn
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).train()
    if checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(0, cfg.vocab_size, (b, s))
    stats: dict = {"forward": defaultdict(lambda: [0, 0, 0]), "backward": defaultdict(lambda: [0, 0, 0])}

    def meta(x) -> list:
        return [(tuple(t.shape), tuple(t.stride()), str(t.dtype)) for t in tree_leaves(x)
                if isinstance(t, torch.Tensor) and t.dim() > 0]

    class Record(TorchDispatchMode):
        phase = "forward"

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.__name__.split(".")[0]
            if name in VIEWS:
                return out
            ins = meta((args, kwargs))
            outs = meta(out) or ins[:1]      # in-place and out= ops: the first operand is the output
            if name.endswith("_") or name == "copy_":
                outs, ins = ins[:1], ins[1:] + ins[:1] * (name != "copy_")
            cls = classify(name, ins, outs)
            n = 1
            for d in (outs[0][0] if outs else ()):
                n *= d
            passes = n * sum(1 for t in ins + outs if t[0] == (outs[0][0] if outs else None)
                             and 0 not in [st for st, d in zip(t[1], t[0]) if d != 1])
            if DEBUG and cls not in ("gemm", "other"):
                print(self.phase, cls, name, ins, outs, file=sys.stderr)
            rec = stats[self.phase][(cls, name)]
            rec[0], rec[1], rec[2] = rec[0] + 1, rec[1] + n, rec[2] + passes
            return out

    mode = Record()
    with mode:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        mode.phase = "backward"
        loss.backward()
    return {ph: {f"{c}:{n}": v for (c, n), v in d.items()} for ph, d in stats.items()}


def per_layer(model_dir: str, b: int, s: int, attn: str, checkpoint: bool = False) -> dict:
    """Kernels, elements and passes per (class:op) and pass, of one layer (two layers minus one)."""
    one, two = run(model_dir, 1, b, s, attn, checkpoint), run(model_dir, 2, b, s, attn, checkpoint)
    out: dict = {}
    for ph in ("forward", "backward"):
        keys = set(one[ph]) | set(two[ph])
        d = {k: [x - y for x, y in zip(two[ph].get(k, [0, 0, 0]), one[ph].get(k, [0, 0, 0]))] for k in keys}
        out[ph] = {k: v for k, v in sorted(d.items()) if any(v)}
    return out


#: the fixture's runs (tests/fixtures/pytorch_paths_trace.json): model folder, attention (b 2, s 64)
FIXTURE = (("Qwen2-0.5B", "eager"), ("Qwen2-0.5B", "sdpa"), ("gemma-3-1b-pt", "eager"), ("gpt2", "eager"))


def main(argv: list[str]) -> None:
    if argv == ["--fixture"]:
        import torch
        import transformers

        runs = {f"{m} {a}": per_layer(f"tests/fixtures/hf/{m}", 2, 64, a) for m, a in FIXTURE}
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__, "b": 2, "s": 64,
                   "runs": runs}, sys.stdout, indent=None, separators=(",", ":"))
        sys.stdout.write("\n")
        return
    attn = "eager"
    if "--attn" in argv:
        i = argv.index("--attn")
        attn = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    ckpt = "--checkpoint" in argv
    argv = [a for a in argv if a != "--checkpoint"]
    model = argv[0]
    b, s = (int(argv[1]), int(argv[2])) if len(argv) > 2 else (1, 128)
    json.dump({"model": model, "b": b, "s": s, "attn": attn, "checkpoint": ckpt,
               "layer": per_layer(model, b, s, attn, ckpt)}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
