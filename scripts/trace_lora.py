"""Record what a LoRA-adapted Llama layer saves for backward in eager PyTorch: the provenance of
tests/fixtures/lora_saved_trace.json (the activation bytes of ``--finetune lora`` with ``--stack pytorch``).

Builds Transformers' LlamaForCausalLM as scripts/trace_stack.py does (bf16, dropout 0, 1 and 2 layers, CPU),
freezes every parameter and wraps the targeted linear layers as Hugging Face PEFT's LoRA ``Linear`` computes
them: ``base(x) + lora_B(lora_A(dropout(x))) * scaling`` (A: d_in -> r, B: r -> d_out, both trainable, bf16;
``dropout`` an identity with ``lora_dropout = 0``, else ``nn.Dropout`` of its own per adapted layer, as PEFT builds
``lora_dropout``). It runs one forward (with labels) and backward pass and records every tensor saved for
backward (``torch.autograd.graph.saved_tensors_hooks``): deduplicated by storage with parameters excluded
(``saved_bytes``), and every pack at the tensor's own size (``packed_bytes``). A layer's numbers are the
difference between the two-layer and the one-layer model; the second layer's input already requires a
gradient (the first layer's adapters), so it is an interior layer.

Usage (needs torch and transformers, which dse itself does not):
    python scripts/trace_lora.py > tests/fixtures/lora_saved_trace.json
    python scripts/trace_lora.py --dropout 0.1 > tests/fixtures/lora_dropout_trace.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TARGETS = {"all": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
           "attention": ("q_proj", "k_proj", "v_proj", "o_proj"), "qv": ("q_proj", "v_proj"),
           "mlp": ("gate_proj", "up_proj", "down_proj")}
RANK = 8
DROPOUT = 0.0


def lora_model(layers: int, attn: str, targets: str):
    import torch
    from torch import nn
    from trace_stack import DIMS, build

    class LoraLinear(nn.Module):
        def __init__(self, base: nn.Linear):
            super().__init__()
            self.base = base
            self.lora_a = nn.Linear(base.in_features, RANK, bias=False, dtype=torch.bfloat16)
            self.lora_b = nn.Linear(RANK, base.out_features, bias=False, dtype=torch.bfloat16)
            self.scaling = 16 / RANK
            self.dropout = nn.Dropout(DROPOUT) if DROPOUT > 0 else nn.Identity()

        def forward(self, x):
            return self.base(x) + self.lora_b(self.lora_a(self.dropout(x))) * self.scaling

    model = build("llama", layers, attn, DIMS["llama"])
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name in TARGETS[targets]:
                if hasattr(parent, name):
                    setattr(parent, name, LoraLinear(getattr(parent, name)))
    return model


def run(layers: int, attn: str, targets: str) -> dict:
    import torch
    from trace_stack import DIMS

    d = DIMS["llama"]
    model = lora_model(layers, attn, targets)
    model.train()
    ids = torch.randint(0, d["vocab"], (d["b"], d["s"]))
    saved: dict = {}
    packed: list = []

    def pack(t):
        st = t.untyped_storage()
        saved[st.data_ptr()] = st.nbytes()
        packed.append((t.numel() * t.element_size(), st.data_ptr()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"saved_bytes": sum(v for k, v in saved.items() if k not in params),
            "packed_bytes": sum(n for n, ptr in packed if ptr not in params), "trainable_params": trainable}


def main() -> None:
    import torch
    import transformers
    from trace_stack import DIMS

    global DROPOUT
    if sys.argv[1:2] == ["--dropout"]:
        DROPOUT = float(sys.argv[2])
    out = {"arch": "llama", "torch": torch.__version__, "transformers": transformers.__version__,
           "dims": DIMS["llama"], "rank": RANK, "runs": {}}
    if DROPOUT:
        out["lora_dropout"] = DROPOUT
    for attn in ("sdpa", "eager"):
        for targets in TARGETS:
            out["runs"][f"{attn}-{targets}"] = {str(n): run(n, attn, targets) for n in (1, 2)}
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
