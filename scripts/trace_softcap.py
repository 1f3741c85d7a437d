"""Record what Gemma 2's soft-capping adds to eager PyTorch's training step: the provenance of the ``softcap`` and
``logit_softcap`` rows of stacks/pytorch.yaml and the fixture tests/fixtures/pytorch_softcap_trace.json.

Runs scripts/trace_stack.py's recorder (every non-view aten op of the forward and backward pass with its input and
output bytes; the tensors saved for backward) on Transformers' Gemma2ForCausalLM (eager attention, bf16, one and two
layers) with attn_logit_softcapping 50 and final_logit_softcapping 30, and again with both off. A layer's difference
(two-layer minus one-layer model) over the bf16 score matrix b a s^2 gives the attention cap's passes; the rest of
the one-layer model's difference over the bf16 logits b s V gives the final cap's.

Usage (needs torch and transformers, which dse itself does not):
    python scripts/trace_softcap.py > tests/fixtures/pytorch_softcap_trace.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trace_stack  # noqa: E402

DIMS = {"h": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "ffn": 704, "b": 3, "s": 96, "vocab": 32000}


def build(caps: dict):
    def make(arch: str, layers: int, attn: str, dims: dict):
        import torch
        from transformers import Gemma2Config, Gemma2ForCausalLM

        torch.manual_seed(0)
        cfg = Gemma2Config(num_hidden_layers=layers, hidden_size=dims["h"], num_attention_heads=dims["heads"],
                           num_key_value_heads=dims["kv_heads"], head_dim=dims["head_dim"],
                           intermediate_size=dims["ffn"], vocab_size=dims["vocab"], max_position_embeddings=1024,
                           **caps)
        cfg._attn_implementation = attn
        return Gemma2ForCausalLM(cfg).to(torch.bfloat16).train()
    return make


def main() -> None:
    trace_stack.DIMS["gemma2"] = DIMS
    runs = {}
    for name, caps in (("on", {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}),
                       ("off", {"attn_logit_softcapping": None, "final_logit_softcapping": None})):
        trace_stack.build = build(caps)
        runs[name] = {n: trace_stack.run(n, "eager", False, "gemma2") for n in (1, 2)}
    b, s, a, v = DIMS["b"], DIMS["s"], DIMS["heads"], DIMS["vocab"]
    sizes = {"softcap": 2 * b * a * s * s, "logit_softcap": 2 * b * s * v}    # bf16 scores, bf16 logits

    def total(r: dict, key: str):
        if key == "saved":
            return r["saved_bytes"], 0
        return sum(i + o for _, i, o in r["ops"][key]), len(r["ops"][key])

    out = {"dims": DIMS, "rows": {}}
    for key in ("forward", "backward", "saved"):
        lay = [x - y for x, y in zip(*(
            [p - q for p, q in zip(total(runs[c][2], key), total(runs[c][1], key))] for c in ("on", "off")))]
        one = [x - y for x, y in zip(total(runs["on"][1], key), total(runs["off"][1], key))]
        head = [x - y for x, y in zip(one, lay)]
        for row, (nbytes, kernels) in (("softcap", lay), ("logit_softcap", head)):
            out["rows"].setdefault(row, {})[key] = {"passes": nbytes / sizes[row], "kernels": kernels}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
