"""Record what torch.compile (Inductor) saves for backward in one GPT-2 or Llama layer: the provenance of the
``saved`` amounts of stacks/compiled.yaml and the fixture tests/fixtures/compiled_saved_trace.json.

Builds the models of scripts/trace_stack.py (same dimensions) with two and three layers, compiles them with
``torch.compile`` (Inductor, caches off), runs one forward (with labels: the loss) and backward pass on the CPU, and
records what AOTAutograd's min-cut partitioner hands from the forward graph to the backward graph: every saved
value that is not a parameter or an input, views followed back to the buffer they alias, each buffer counted once.
A layer's saved bytes are the three-layer run minus the two-layer run. The partitioner runs on the joint graph before
code generation, so what it saves does not depend on the device; the generated kernels do (CPU C++ vs CUDA Triton),
so kernel counts and bytes moved are not recorded.

Usage (needs torch and transformers, which dse itself does not; ~15 minutes on two CPU cores):
    python scripts/trace_compiled.py > tests/fixtures/compiled_saved_trace.json
"""

from __future__ import annotations

import json
import sys

from trace_stack import DIMS, build

_VIEWS = {"permute", "view", "t", "transpose", "expand", "alias", "_unsafe_view", "reshape", "unsqueeze", "squeeze",
          "slice", "select", "as_strided"}
_SPLITS = {"split", "split_with_sizes", "unbind", "chunk"}


def _op(node) -> str:
    return getattr(node.target, "__name__", str(node.target)).split(".")[0] if node.op == "call_function" else ""


def _base(node):
    """The buffer a view, or a piece of a split, aliases (a getitem of a multi-output op is its own buffer)."""
    while True:
        if _op(node) in _VIEWS:
            node = node.args[0]
        elif _op(node) == "getitem" and _op(node.args[0]) in _SPLITS:
            node = node.args[0].args[0]
        else:
            return node


def saved_bytes(arch: str, layers: int, attn: str) -> int:
    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False
    functorch_config.enable_autograd_cache = False
    total = []
    original = compile_fx.min_cut_rematerialization_partition

    def partition(joint, joint_inputs, **kw):
        fw, bw = original(joint, joint_inputs, **kw)
        names = [n.name for n in bw.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
        outputs = {n.name: n for n in next(n for n in fw.graph.nodes if n.op == "output").args[0] if hasattr(n, "name")}
        buffers: dict = {}
        for name in names:
            if name not in outputs:
                continue
            base = _base(outputs[name])
            val = base.meta.get("val")
            if base.op != "placeholder" and isinstance(val, torch.Tensor):
                buffers[base.name] = val.numel() * val.element_size()
        total.append(sum(buffers.values()))
        return fw, bw

    compile_fx.min_cut_rematerialization_partition = partition
    try:
        torch._dynamo.reset()
        dims = DIMS[arch]
        model = build(arch, layers, attn, dims)
        ids = torch.randint(0, dims["vocab"], (dims["b"], dims["s"]))
        torch.compile(model)(input_ids=ids, labels=ids).loss.backward()
    finally:
        compile_fx.min_cut_rematerialization_partition = original
    return sum(total)


def main() -> None:
    import torch
    import transformers

    out = {"torch": torch.__version__, "transformers": transformers.__version__, "dims": DIMS, "saved_per_layer": {}}
    for arch in ("gpt2", "llama"):
        for attn in ("sdpa", "eager"):
            two, three = saved_bytes(arch, 2, attn), saved_bytes(arch, 3, attn)
            out["saved_per_layer"][f"{arch}-{attn}"] = three - two
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
