"""Host (CPU) time of one Transformers decoder layer per family: the provenance of the pytorch stack's per-launch and
per-layer host times (stacks/pytorch.yaml ``dispatch``, ``layer_dispatch``; data/host_layers_cpu.json).

A layer's host time is not the same per launched kernel for every model: Transformers' decoder layer runs Python
around its ops (the layer and attention modules' forward, the attention interface, the arguments it passes on) that
does not grow with the kernels it launches, so a family with many small element-wise kernels per layer (Gemma 3's
fp32 RMSNorms) spends less host time per kernel than GPT-2. This script measures it where nothing else is in the
way: the CPU build of torch with tiny tensors (hidden 64, sequence 16, bf16 weights, one thread), so that what is
timed is the framework's host work (Python, module calls, autograd, the dispatcher), not arithmetic.

For every model (the five families of data/h200/: gpt2-medium, Qwen2-0.5B, pythia-1.4b, gemma-3-1b-pt,
Llama-3.1-8B, built from their config.json with tiny dimensions), attention (sdpa, eager) and checkpointing (none;
Transformers' gradient checkpointing, torch.utils.checkpoint non-reentrant) it builds the ``*ForCausalLM`` model
with 1 and with 1 + DEPTH layers and times, the fastest of ``--repeats`` single calls in the
thread's CPU time (interleaved; the machine may be shared: CPU time leaves out the time the thread waits),

- ``forward_us``: the forward pass with the loss (grad enabled, as in training), and
- ``step_us``: ``zero_grad(set_to_none=True)``, forward with the loss, backward (as a training step),

and records the aten ops of the step (TorchDispatchMode, a separate run: ``ops_forward`` / ``ops_backward``
non-view ops, ``views_forward`` / ``views_backward`` view ops) and the nn.Module calls (a global forward pre-hook).
A layer's numbers are the difference of the two models over DEPTH (the embedding, the head, the loss
and the once-per-step backward call cancel).

Usage (needs torch and transformers, which dse itself does not):
    python scripts/measure_host_layers.py [--repeats N] > run.json

data/host_layers_cpu.json holds two such runs (``runs``: each run's times) and their mean (``layers``).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: model name -> its config.json (the measured families of data/h200/; GPT-2 medium from tests/fixtures/hf/gpt2)
MODELS = {
    "gpt2-medium": "tests/fixtures/hf/gpt2/config.json",
    "Qwen2-0.5B": "data/h200/configs/Qwen2-0.5B/config.json",
    "pythia-1.4b": "data/h200/configs/pythia-1.4b/config.json",
    "gemma-3-1b-pt": "data/h200/configs/gemma-3-1b-pt/config.json",
    "Llama-3.1-8B": "data/h200/configs/Llama-3.1-8B/config.json",
}
#: tiny dimensions: the host's work per op does not depend on them, the CPU's arithmetic is then negligible
#: a layer is the difference of a (1 + DEPTH)-layer and a 1-layer model over DEPTH
DEPTH = 4
TINY = {"hidden": 64, "heads": 4, "head_dim": 16, "ffn": 128, "vocab": 128, "b": 1, "s": 16}
VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "split", "slice", "select", "unsqueeze",
         "squeeze", "detach", "alias", "as_strided", "_reshape_alias", "split_with_sizes", "lift_fresh", "unbind",
         "narrow", "expand_as", "reshape", "flatten", "unflatten"}


def build(name: str, layers: int, attn: str, checkpoint: bool):
    """The family's ``*ForCausalLM`` from its config.json with TINY dimensions and ``layers`` layers (bf16, dropout 0,
    training mode, no K/V cache)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = {k: v for k, v in json.loads((ROOT / MODELS[name]).read_text()).items()
           if k not in ("architectures", "torch_dtype", "layer_types")}   # layer_types: rebuilt for the new depth
    heads = TINY["heads"]
    orig_heads = raw.get("num_attention_heads", raw.get("n_head", heads))
    kv = raw.get("num_key_value_heads")
    tiny = {"num_hidden_layers": layers, "n_layer": layers, "hidden_size": TINY["hidden"], "n_embd": TINY["hidden"],
            "num_attention_heads": heads, "n_head": heads, "intermediate_size": TINY["ffn"], "n_inner": TINY["ffn"],
            "vocab_size": TINY["vocab"], "use_cache": False, "bos_token_id": None, "eos_token_id": None,
            "pad_token_id": None, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "attention_dropout": 0.0,
            "hidden_dropout": 0.0}
    if kv is not None:            # grouped-query attention keeps its ratio (at least one K/V head)
        tiny["num_key_value_heads"] = heads if kv == orig_heads else max(1, heads * kv // orig_heads)
    if raw.get("head_dim") is not None:
        tiny["head_dim"] = TINY["head_dim"]
    keys = set(raw) | {"num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"}
    if raw.get("model_type") == "gpt2":
        keys |= {"n_layer", "n_embd", "n_head", "n_inner"}
    raw.update({k: v for k, v in tiny.items() if k in keys or k in ("use_cache",)})
    cfg = AutoConfig.for_model(**raw)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).train()
    if checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def passes(model):
    """Callables: the forward pass with the loss, and a training step (zero_grad, forward, backward)."""
    import torch

    ids = torch.randint(0, TINY["vocab"], (TINY["b"], TINY["s"]))

    def forward():
        return model(input_ids=ids, labels=ids, use_cache=False).loss

    def step():
        model.zero_grad(set_to_none=True)
        forward().backward()

    return forward, step


def counts(model, forward=None, backward=None) -> dict:
    """Aten ops (non-view, view) of a training step's forward and backward, and the nn.Module calls.

    ``forward``: the pass to count (default: the model's forward with the loss, :func:`passes`); ``backward``: what
    runs the backward from its output (default: ``.backward()`` of the loss); scripts/measure_host_moe.py counts its
    Megatron-Core layers with them."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    c = {"ops_forward": 0, "views_forward": 0, "ops_backward": 0, "views_backward": 0, "modules": 0}

    class Record(TorchDispatchMode):
        phase = "forward"

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            kind = "views" if name in VIEWS or getattr(func, "is_view", False) else "ops"
            c[f"{kind}_{self.phase}"] += 1
            return func(*args, **(kwargs or {}))

    def count_module(module, args):
        c["modules"] += 1

    forward = forward or passes(model)[0]
    hook = torch.nn.modules.module.register_module_forward_pre_hook(count_module)
    model.zero_grad(set_to_none=True)
    mode = Record()
    try:
        with mode:
            loss = forward()
            mode.phase = "backward"
            loss.backward() if backward is None else backward(loss)
    finally:
        hook.remove()
    return c


def timed(fns: list, inner: int, repeats: int) -> list[float]:
    """The fastest time of each callable [us], measured interleaved over ``repeats`` rounds after warm-up.

    The thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall time: the time the thread is descheduled on a shared
    machine is not the framework's."""
    for fn in fns:
        fn()
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.thread_time()
            for _ in range(inner):
                fn()
            best[i] = min(best[i], (time.thread_time() - t0) / inner * 1e6)
    return best


def layer(name: str, attn: str, checkpoint: bool, repeats: int) -> dict:
    """One family's layer: the difference of the (1 + DEPTH)-layer and the 1-layer model over DEPTH."""
    m1, m5 = (build(name, n, attn, checkpoint) for n in (1, 1 + DEPTH))
    (f1, s1), (f5, s5) = passes(m1), passes(m5)
    tf1, tf5, ts1, ts5 = timed([f1, f5, s1, s5], 1, repeats)
    c1, c5 = counts(m1), counts(m5)
    out = {"model": name, "attn": attn, "recompute": "full" if checkpoint else "none",
           "forward_us": (tf5 - tf1) / DEPTH, "step_us": (ts5 - ts1) / DEPTH}
    out.update({k: (c5[k] - c1[k]) / DEPTH for k in c1})
    return out


def main() -> None:
    import torch
    import transformers

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=101)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    rows = [layer(name, attn, ckpt, args.repeats) for name in args.models.split(",")
            for attn in ("sdpa", "eager") for ckpt in (False, True)]
    out = {"what": "host time of one Transformers decoder layer on the CPU build of torch, tiny tensors (TINY), "
                   "(1 + depth)-layer minus 1-layer model over depth; fastest of the repeats in the thread's CPU time",
           "cpu": cpu, "torch": torch.__version__, "transformers": transformers.__version__,
           "python": platform.python_version(), "threads": 1, "tiny": TINY, "depth": DEPTH, "repeats": args.repeats,
           "layers": rows}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
