"""Small GPT models on one node of 8 A100s: the iteration time dse predicts, per TP degree and micro-batch.

The regime issue 14 reports dse as 20-45 % too fast in (Megatron-DeepSpeed, hidden 1-2k, full recompute,
sequence 2048; worst with wide tensor parallelism and micro-batch 1). The scenarios are those of
`dse validate megatron-a100` (dse.validate.megatron: GPT with biases, LayerNorm, GeLU, dropout, learned
positions, vocabulary 51,200, math attention, fp16) with 24 layers, global batch 64, dp = 8 / tp.

Usage:  python benchmarks/small_gpt_node.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.catalog import load_system  # noqa: E402
from dse.estimate import run  # noqa: E402
from dse.specs.model import ModelSpec  # noqa: E402
from dse.specs.plan import Plan  # noqa: E402

MODELS = ((1024, 16), (1536, 16), (2048, 24))   # hidden, heads (GPT-3 350M, 760M, 1.3B shapes)
GLOBAL_BATCH = 64


def times() -> dict[str, float]:
    system = load_system("a100-cluster-800g")
    out = {}
    for h, a in MODELS:
        model = ModelSpec(name=f"gpt-h{h}", layers=24, hidden=h, heads=a, vocab=51200, max_seq_len=2048,
                          ffn_type="gelu", norm="layernorm", bias=True, position="learned", tied_embeddings=True,
                          dropout=0.1, source="synthetic").resolved()
        for tp in (1, 2, 4, 8):
            for mb in (1, 4):
                plan = Plan(tp=tp, pp=1, dp=8 // tp, micro_batch=mb, global_batch=GLOBAL_BATCH, seq_len=2048,
                            recompute="full", attention="math", sequence_parallel=False, zero=0, precision="fp16",
                            grad_dtype="half", schedule="1f1b")
                out[f"h{h} tp{tp} mb{mb}"] = run(model, system, plan)["time"]["iteration"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="also write the times (seconds per iteration) to this file")
    args = ap.parse_args()
    t = times()
    print(f"{'case':18s} {'iteration s':>12s} {'us/token':>9s}")
    for k, v in t.items():
        print(f"{k:18s} {v:12.3f} {v / (GLOBAL_BATCH * 2048) * 1e6:9.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(t, indent=1))


if __name__ == "__main__":
    main()
