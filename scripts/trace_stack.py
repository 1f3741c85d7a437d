"""Record what eager PyTorch (Hugging Face Transformers) runs and saves for one GPT-2 layer: the provenance of
stacks/pytorch.yaml and the fixture tests/fixtures/pytorch_stack_trace.json.

Builds Transformers' GPT2LMHeadModel from a config (no download; bf16 weights, dropout 0, training mode) with
one or two layers, runs one forward (with labels: the loss) and backward pass on the CPU, and records

- every non-view aten op of each pass (TorchDispatchMode) with the bytes of its tensor inputs and outputs, and
- every tensor saved for backward (torch.autograd.graph.saved_tensors_hooks), deduplicated by storage,
  parameters excluded.

A layer's numbers are the difference between the two-layer and the one-layer model (the embedding and the head
cancel). The CPU runs the same modules and autograd formulas as CUDA; kernels that only CUDA launches (a second
LayerNorm-backward kernel, cuDNN attention's own buffers) are not in the trace and are stated in the stack file.

Usage (needs torch and transformers, which dse itself does not):
    python scripts/trace_stack.py > tests/fixtures/pytorch_stack_trace.json
"""

from __future__ import annotations

import json
import sys


def run(layers: int, attn: str, checkpoint: bool, h: int = 320, heads: int = 5, b: int = 3, s: int = 96,
        vocab: int = 50257) -> dict:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=layers, n_embd=h, n_head=heads, vocab_size=vocab, n_positions=1024, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    cfg._attn_implementation = attn
    model = GPT2LMHeadModel(cfg).to(torch.bfloat16).train()
    if checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(0, vocab, (b, s))
    views = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "split", "slice", "select", "unsqueeze",
             "squeeze", "detach", "alias", "as_strided", "_reshape_alias", "split_with_sizes", "lift_fresh"}
    ops = {"forward": [], "backward": []}

    def nbytes(x) -> int:
        return sum(t.numel() * t.element_size() for t in tree_leaves(x) if isinstance(t, torch.Tensor))

    class Record(TorchDispatchMode):
        phase = "forward"

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.__name__.split(".")[0]
            if name not in views:
                ops[self.phase].append([name, nbytes(args), nbytes(out)])
            return out

    saved: dict = {}

    def pack(t):
        st = t.untyped_storage()
        saved[st.data_ptr()] = st.nbytes()
        return t

    mode = Record()
    with mode, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids).loss
        mode.phase = "backward"
        loss.backward()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return {"ops": ops, "saved_bytes": sum(v for k, v in saved.items() if k not in params)}


def main() -> None:
    import torch
    import transformers

    dims = {"h": 320, "heads": 5, "b": 3, "s": 96, "vocab": 50257}
    out = {"torch": torch.__version__, "transformers": transformers.__version__, "dims": dims, "runs": {}}
    for attn in ("sdpa", "eager"):
        for ckpt in (False, True):
            key = f"{attn}-{'full' if ckpt else 'none'}"
            out["runs"][key] = {str(n): run(n, attn, ckpt) for n in (1, 2)}
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
