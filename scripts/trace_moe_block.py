"""Record what Transformers' MoE block runs for one layer on its grouped_mm path: the provenance of the
``moe_block`` rows of stacks/pytorch.yaml (tests/fixtures/pytorch_moe_trace.json).

Builds Transformers' own OlmoeSparseMoeBlock (OLMoE) and GraniteMoeMoE (Granite-MoE) from a config (bf16 weights,
training mode, small dimensions: DIMS), runs one forward and backward pass of the block alone on the CPU, plain or
under torch.utils.checkpoint (non-reentrant, as Transformers checkpoints a decoder layer), and records every
non-view aten op of each pass (TorchDispatchMode) with the shapes and dtypes of its tensor inputs and outputs.

Transformers 5.24 selects ``grouped_mm`` by default on every device (modeling_utils.get_correct_experts_implementation;
integrations/moe.py grouped_mm_experts_forward), and torch >= 2.11 runs ``torch._grouped_mm`` on the CPU too
(integrations/moe.py _can_use_grouped_mm), so the CPU trace is the GPU's op sequence. ``--sentinel`` sets the
experts' ``_is_expert_parallel``: Transformers 5.17 (what data/h200/vm2 ran) masks the expert-parallel sentinel rows
unconditionally (a masked_fill_ before fc1, masked_fill after fc1 and after fc2), 5.24 only under expert parallelism;
with the flag set 5.24 runs 5.17's op sequence.

Usage (needs torch and transformers):
    python scripts/trace_moe_block.py > tests/fixtures/pytorch_moe_trace.json
"""

from __future__ import annotations

import json
import sys

#: small dimensions: T = b s tokens, E experts, top k, hidden h, expert width F (all distinct, so that every
#: tensor's size names its kind)
DIMS = {"b": 2, "s": 48, "h": 160, "ffn": 56, "experts": 12, "top_k": 3}


def build(family: str, sentinel: bool):
    import torch
    import transformers

    d = DIMS
    if family == "olmoe":
        from transformers.models.olmoe import modeling_olmoe as mod

        cfg = transformers.OlmoeConfig(hidden_size=d["h"], intermediate_size=d["ffn"], num_experts=d["experts"],
                                       num_experts_per_tok=d["top_k"], num_attention_heads=4, num_hidden_layers=1)
        block = mod.OlmoeSparseMoeBlock(cfg)
    else:
        from transformers.models.granitemoe import modeling_granitemoe as mod

        cfg = transformers.GraniteMoeConfig(hidden_size=d["h"], intermediate_size=d["ffn"],
                                            num_local_experts=d["experts"], num_experts_per_tok=d["top_k"],
                                            num_attention_heads=4, num_hidden_layers=1)
        block = mod.GraniteMoeMoE(cfg)
    cfg._experts_implementation = "grouped_mm"
    block.experts._is_expert_parallel = sentinel
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02)
    return block.to(torch.bfloat16).train()


def run(family: str, checkpoint: bool, sentinel: bool) -> dict:
    import torch
    from torch.utils._pytree import tree_leaves
    from trace_stack import recorder

    torch.manual_seed(0)
    block = build(family, sentinel)
    x = torch.randn(DIMS["b"], DIMS["s"], DIMS["h"], dtype=torch.bfloat16, requires_grad=True)
    ops: dict = {"forward": [], "backward": []}

    def desc(x) -> list:
        return [[list(t.shape), str(t.dtype).replace("torch.", "")] for t in tree_leaves(x)
                if isinstance(t, torch.Tensor)]

    mode = recorder(ops, desc)   # scripts/trace_stack.py: every non-view aten op of each pass
    with mode:
        if checkpoint:
            y = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        else:
            y = block(x)
        loss = y.float().sum()
        mode.phase = "backward"
        loss.backward()
    return ops


def main() -> None:
    import torch
    import transformers

    out = {"torch": torch.__version__, "transformers": transformers.__version__, "dims": DIMS, "runs": {}}
    for family in ("olmoe", "granitemoe"):
        for sentinel in (False, True):
            for ckpt in (False, True):
                key = f"{family}-{'sentinel' if sentinel else 'plain'}-{'full' if ckpt else 'none'}"
                out["runs"][key] = run(family, ckpt, sentinel)
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
