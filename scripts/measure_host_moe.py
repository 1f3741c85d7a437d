"""Host (CPU) time of a Megatron-Core MoE layer: router, token dispatcher and experts, against a dense Megatron-Core MLP
(data/host_moe_cpu.json; docs/moe.md, "Host time of the MoE layer, measured").

dse prices the megatron stack's host time as (kernels launched) x ``dispatch`` (stacks/megatron.yaml, 13.5 us on the
reference host, measured on a dense GPT layer: scripts/measure_host.py). Megatron-Core's MoE layer runs more Python
per layer than a dense MLP: the router (gating linear, top-k, auxiliary loss), the alltoall token dispatcher
(preprocess with its token counting and device-to-host copies, permute, unpermute) and the experts (SequentialMLP:
one MLP module per local expert, in a Python loop). This script measures that host work where nothing else is in
the way: megatron-core's own MoELayer on the CPU build of torch, one process (world size 1, gloo: expert parallel
size 1, so every expert is local and the all-to-alls are skipped), tiny tensors (hidden 16, 8 tokens: ``--tokens``,
bf16 weights, fp32 router), one thread, the fastest of ``--repeats`` calls in the thread's CPU time (interleaved;
the machine may be shared). Per configuration (E local experts, top-k):

- ``forward_us``: the layer's forward with grad enabled; ``step_us``: ``zero_grad``, forward, ``out.sum().backward()``;
- ``router_dispatch_*``: the same with the experts replaced by an identity module: the router and the dispatcher alone;
- ``ops_forward`` / ``ops_backward``: non-view aten ops dispatched (TorchDispatchMode, a separate run), and
  ``modules``: nn.Module calls of the forward;
- ``MLP``: a dense Megatron-Core MLP (ColumnParallelLinear, SwiGLU, RowParallelLinear) of the same width;
- ``TransformerLayer``: a whole Megatron-Core GPT layer (local spec: LayerNorm, QKV, unfused core attention,
  projection, then a GeLU MLP with biases, or the MoE layer with E experts, top-4).

The CPU build of torch has no CUDA: megatron-core 0.16's alltoall dispatcher creates a ``torch.cuda.Stream`` for its
device-to-host copies and its router moves its weight to ``torch.cuda.current_device()``; ``_cuda_shim`` stands in
for those (no-op streams and events; the current device is the CPU), so the few CUDA runtime calls they make on a GPU
host (a stream wait, an event record, the copies' enqueue per MoE layer forward) are not in the times; the
attention dropout's CUDA RNG fork (a swap of the generator's state on a GPU) is a no-op here. Without
Transformer Engine the router's top-k and the permutation run unfused (the recipes' ``moe_router_fusion`` and
``moe_permute_fusion`` use TE's fused kernels) and the experts are SequentialMLP's per-expert modules (the recipes run
TE's GroupedLinear, one module with a per-expert loop inside): what is measured is Megatron-Core's Python around them.

Usage (needs torch and megatron-core, which dse itself does not; torch pinned to the CPU build measured):
    python -m venv /tmp/mcore && /tmp/mcore/bin/pip install megatron-core==0.16.1 torch==2.13.0
    /tmp/mcore/bin/python scripts/measure_host_moe.py [--repeats N] > run.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform

TINY = {"hidden": 16, "ffn": 16, "heads": 2, "tokens": 8}
WHAT = ("host time of one Megatron-Core MoELayer (alltoall dispatcher, SequentialMLP experts, aux-loss router; world "
        "size 1), of a dense Megatron-Core MLP and of whole Megatron-Core GPT layers (local spec) on the CPU build of "
        "torch, tiny tensors (TINY); fastest of the repeats in the thread's CPU time")


def _cuda_shim() -> None:
    """No-op CUDA streams and events, and the CPU as the current device, for megatron-core on the CPU build of torch."""
    import torch

    class _Event:
        def synchronize(self):
            pass

        def wait(self, *a):
            pass

        def record(self, *a):
            pass

    class _Stream:
        def __init__(self, *a, **k):
            pass

        def wait_stream(self, other):
            pass

        def record_event(self, *a):
            return _Event()

        def synchronize(self):
            pass

        def wait_event(self, e):
            pass

        def __eq__(self, other):
            return isinstance(other, _Stream)

        def __hash__(self):
            return 0

    current = _Stream()
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.Stream = _Stream
    torch.cuda.current_stream = lambda *a: current
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    torch.cuda.Event = _Event
    import megatron.core.transformer.moe.moe_utils as mu
    if not hasattr(mu, "te_general_gemm"):   # megatron-core 0.16.1 without Transformer Engine leaves it undefined
        mu.te_general_gemm = None
    from megatron.core.tensor_parallel import random as rng

    rng.CudaRNGStatesTracker.fork = lambda self, name="model-parallel-rng": contextlib.nullcontext()   # dropout's RNG


def setup() -> None:
    import torch

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    _cuda_shim()
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(1, 1)


def config(experts: int, topk: int, layer: bool = False):
    """The TransformerConfig: SwiGLU experts (or MLP) without biases, or, for a whole ``layer``, a GPT layer's
    GeLU MLP with biases (the layer dse's Megatron launch counts describe; its experts without biases)."""
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    ffn = 4 * TINY["hidden"] if layer and not experts else TINY["ffn"]
    return TransformerConfig(
        num_layers=1, hidden_size=TINY["hidden"], num_attention_heads=TINY["heads"], ffn_hidden_size=ffn,
        num_moe_experts=experts or None, moe_router_topk=topk, moe_ffn_hidden_size=TINY["ffn"] if experts else None,
        moe_token_dispatcher_type="alltoall", moe_grouped_gemm=False, moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=1e-3, moe_router_dtype="fp32", use_cpu_initialization=True,
        add_bias_linear=layer and not experts, gated_linear_unit=not layer,
        activation_func=torch.nn.functional.gelu if layer else torch.nn.functional.silu,
        params_dtype=torch.bfloat16, bf16=True, hidden_dropout=0.0, attention_dropout=0.0)


class _NoExperts:
    """Stands in for the experts: the router and the dispatcher alone."""

    def __new__(cls):
        import torch

        class Identity(torch.nn.Module):
            def forward(self, x, tokens_per_expert, probs):
                return x * probs.unsqueeze(-1).to(x.dtype), None

        return Identity()


def build(experts: int, topk: int, no_experts: bool = False, layer: bool = False):
    """A Megatron-Core MoELayer (local spec: SequentialMLP, alltoall dispatcher) with ``experts`` local experts, or a
    dense Megatron-Core MLP (experts 0), in training mode; with ``layer`` the whole TransformerLayer (local spec:
    LayerNorm, unfused core attention, then the MoE layer or the MLP)."""
    import torch
    from megatron.core.transformer.spec_utils import build_module

    torch.manual_seed(0)
    if layer:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

        spec = get_gpt_layer_local_spec(num_experts=experts or None, moe_grouped_gemm=False)
        return build_module(spec, config=config(experts, topk, layer=True), layer_number=1).train()
    if experts:
        from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec

        spec = get_moe_module_spec(use_te=False, num_experts=experts, moe_grouped_gemm=False)
    else:
        from megatron.core.models.gpt.gpt_layer_specs import get_mlp_module_spec

        spec = get_mlp_module_spec(use_te=False)
    module = build_module(spec, config=config(experts, topk)).train()
    if no_experts:
        module.experts = _NoExperts()
    return module


def passes(layer):
    import torch

    x = torch.randn(TINY["tokens"], 1, TINY["hidden"], dtype=torch.bfloat16, requires_grad=True)
    kwargs = {}
    if hasattr(layer, "self_attention"):   # a TransformerLayer: the causal mask given (its default is made on CUDA)
        kwargs["attention_mask"] = torch.triu(torch.ones(1, 1, TINY["tokens"], TINY["tokens"], dtype=torch.bool), 1)

    def forward():
        return layer(x, **kwargs)[0]

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        forward().float().sum().backward()

    return forward, step


def timed(fns: list, repeats: int) -> list[float]:
    """The fastest thread-CPU time of each callable [us], interleaved over ``repeats`` rounds after warm-up
    (scripts/measure_host_layers.py's ``timed``, one call a round)."""
    from measure_host_layers import timed as timed_layers

    return timed_layers(fns, 1, repeats)


def counts(layer) -> dict:
    """Non-view and view aten ops of the forward and the backward, and the forward's nn.Module calls
    (scripts/measure_host_layers.py's ``counts``, with this script's passes)."""
    from measure_host_layers import counts as counts_layers

    layer.zero_grad(set_to_none=True)
    return counts_layers(layer, passes(layer)[0], lambda out: out.float().sum().backward())


def measure(experts: int, topk: int, repeats: int, layer: bool = False) -> dict:
    full = build(experts, topk, layer=layer)
    bare = build(experts, topk, no_experts=True) if experts and not layer else None
    (f1, s1) = passes(full)
    fns = [f1, s1] + (list(passes(bare)) if bare is not None else [])
    t = timed(fns, repeats)
    row = {"module": "TransformerLayer" if layer else "MoELayer" if experts else "MLP",
           "experts": experts, "topk": topk if experts else 0, "forward_us": t[0], "step_us": t[1],
           "backward_us": t[1] - t[0], **counts(full)}
    if bare is not None:
        c = counts(bare)
        row.update(router_dispatch_forward_us=t[2], router_dispatch_step_us=t[3],
                   router_dispatch_ops_forward=c["ops_forward"], router_dispatch_ops_backward=c["ops_backward"])
    return row


def main() -> None:
    import megatron.core
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--experts", default="8,16,32,64,128")
    ap.add_argument("--topk", default="2,4,8")
    ap.add_argument("--tokens", type=int, default=TINY["tokens"])
    args = ap.parse_args()
    TINY["tokens"] = args.tokens
    torch.set_num_threads(1)
    setup()
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    rows = [measure(0, 0, args.repeats)]
    rows += [measure(e, k, args.repeats) for e in map(int, args.experts.split(","))
             for k in map(int, args.topk.split(","))]
    rows += [measure(e, 4 if e else 0, args.repeats, layer=True) for e in (0, 8, 16, 32)]
    out = {"what": WHAT,
           "cpu": cpu, "torch": torch.__version__, "megatron_core": getattr(megatron.core, "__version__", "?"),
           "python": platform.python_version(), "threads": 1, "tiny": TINY, "repeats": args.repeats, "rows": rows}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
