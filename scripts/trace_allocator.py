"""Record every allocation and free of eager GPT-2 training steps, in program order: the ground truth that
tests/test_caching_allocator.py replays through dse.measure.caching_allocator (a simulation of PyTorch's CUDA
caching allocator) to get the reserved memory a GPU would show, and compares with dse's estimate.

Builds Transformers' GPT2LMHeadModel from a config (no download; bf16 weights, dropout 0, SDPA attention, training
mode; dimensions: DIMS), then runs two training steps on the CPU (forward with labels -> loss, backward; no
optimizer, as data/h100_hf_training.jsonl measured: gradients stay and the second step accumulates into them) under
torch.profiler with ``profile_memory=True``. The profiler reports each allocation and free of PyTorch's CPU
allocator with its address and byte count in order; each allocation becomes a fresh id. The parameters (allocated
before profiling) come first, in ``model.parameters()`` order.

What a CPU trace cannot show: allocations that only CUDA makes (cuBLAS workspace, about 8-32 MiB once; cuDNN or
flash-attention scratch) and CPU-only ones; 0-dim scalars (under 64 bytes) are dropped, as CUDA keeps wrapped
numbers on the host. Otherwise the CPU runs the same modules and autograd formulas, so the tensors are the ones
CUDA allocates, in the same order.

Usage (needs torch and transformers, which dse itself does not):
    python scripts/trace_allocator.py > tests/fixtures/allocator_trace_gpt2.json
    python scripts/trace_allocator.py families > tests/fixtures/allocator_trace_families.json
    python scripts/trace_allocator.py families bloom   (only the families named; their entries merged by hand)
The second records the families of scripts/trace_stack.py's AUTO (Gemma, Phi, StarCoder2, Granite, OLMo 2,
GPTBigCode: h 256, 4 heads, vocab 32,000, their configuration classes' other defaults) with FAMILY_DIMS.
"""

from __future__ import annotations

import json
import sys
import tempfile

DIMS = {"h": 768, "heads": 12, "layers": 4, "vocab": 50257, "b": 2, "s": 512}
FAMILY_DIMS = {"layers": 4, "b": 2, "s": 512, "vocab": 32000}
SCALAR = 64     # bytes: allocations below this are dropped (0-dim scalars; CUDA keeps wrapped numbers on the host)


def build(dims: dict, checkpoint: bool):
    """GPT2LMHeadModel (or the family ``dims["arch"]``, as trace_stack.build makes it): bf16, dropout 0, SDPA
    attention, training mode; per-layer checkpointing if asked."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    if "arch" in dims:
        import trace_stack

        attn = "eager" if dims["arch"] in trace_stack.EAGER_ONLY else "sdpa"   # BLOOM: Transformers refuses SDPA
        model = trace_stack.build(dims["arch"], dims["layers"], attn, trace_stack.DIMS[dims["arch"]])
        if checkpoint:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model
    cfg = GPT2Config(n_layer=dims["layers"], n_embd=dims["h"], n_head=dims["heads"], vocab_size=dims["vocab"],
                     n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     attn_implementation="sdpa")
    model = GPT2LMHeadModel(cfg).to(torch.bfloat16).train()
    if checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def record(dims: dict, checkpoint: bool, steps: int = 2) -> dict:
    """The allocation events of ``steps`` training steps: {"persistent": [...], "steps": [[event, ...], ...]}.

    An event is ``[id, bytes]`` (allocation) or ``[id]`` (free of that id).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(2)
    model = build(dims, checkpoint)
    ids = torch.randint(0, dims["vocab"], (dims["b"], dims["s"]))
    persistent = [p.untyped_storage().nbytes() for p in model.parameters()]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for step in range(steps):
            with torch.profiler.record_function(f"step{step}"):
                loss = model(ids, labels=ids).loss
                loss.backward()
                del loss
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    marks = sorted((e["ts"], e["name"]) for e in trace["traceEvents"]
                   if e.get("ph") == "X" and str(e.get("name", "")).startswith("step"))
    starts = [ts for ts, _ in marks]
    mem = sorted((e["args"]["Ev Idx"], e["ts"], e["args"]["Addr"], e["args"]["Bytes"])
                 for e in trace["traceEvents"] if e.get("name") == "[memory]")
    live: dict[int, int] = {}
    out: list[list[list[int]]] = [[] for _ in starts]
    next_id = len(persistent)
    unknown_frees = 0
    for _, ts, addr, nbytes in mem:
        step = max(0, sum(ts >= t for t in starts) - 1)
        if nbytes > 0:
            if nbytes < SCALAR:
                live[addr] = -1
                continue
            live[addr] = next_id
            out[step].append([next_id, nbytes])
            next_id += 1
        else:
            key = live.pop(addr, None)
            if key is None:
                unknown_frees += 1
            elif key >= 0:
                out[step].append([key])
    return {"persistent": persistent, "steps": out, "unknown_frees": unknown_frees}


def main(argv: list[str]) -> None:
    import torch
    import transformers

    head = {"source": "scripts/trace_allocator.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "scalar_bytes_dropped_below": SCALAR}
    if argv[:1] == ["families"]:
        import trace_stack

        out = {arch: {name: record({**FAMILY_DIMS, "arch": arch}, ckpt) for name, ckpt in (("none", False),
                                                                                           ("full", True))}
               for arch in (argv[1:] or trace_stack.AUTO)}
        json.dump({**head, "dims": FAMILY_DIMS, "families": out}, sys.stdout, separators=(",", ":"))
        return
    cases = {}
    for name, ckpt in (("none", False), ("full", True)):
        cases[name] = record(DIMS, ckpt)
    json.dump({**head, "dims": DIMS, "recompute": cases}, sys.stdout, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1:])
