"""A GPT-2-style model in plain ``torch.nn`` (random weights, no download) and its timed training steps.

The model follows Hugging Face's ``GPT2LMHeadModel`` in what the cost model cares about: learned
positions, pre-LayerNorm blocks with a fused QKV projection, GeLU (tanh) MLP of 4h, a final
LayerNorm, an LM head tied to the token embedding, dropout 0, the loss over fp32 logits.
Attention is ``sdpa`` (``torch.nn.functional.scaled_dot_product_attention``: flash kernels on
a GPU) or ``eager`` (matmul, scale, causal mask, fp32 softmax, matmul). ``recompute="full"``
checkpoints every block (``torch.utils.checkpoint``, non-reentrant), as Transformers' gradient
checkpointing does. ``impl="hf"`` times Transformers' own ``GPT2LMHeadModel`` built from the same
config instead (the model of the shared H100 file; needs transformers). Models are built on the
device in the training dtype. Imported only by ``dse measure``: torch is an optional dependency.
"""

from __future__ import annotations

import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, attn: str):
        super().__init__()
        self.heads, self.attn = heads, attn
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.c_attn, self.c_proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.c_fc, self.mlp_proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in self.c_attn(x).split(h, dim=2))
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(h // self.heads)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
            y = torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, s, h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, vocab: int, n_positions: int, attn: str = "sdpa",
                 recompute: str = "none"):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(n_positions, hidden)
        self.h = nn.ModuleList(Block(hidden, heads, attn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.recompute = recompute

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.h:
            x = checkpoint(block, x, use_reentrant=False) if self.recompute == "full" else block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()           # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), ids.view(-1))


def _clock(device: str):
    """(start, stop) timers in seconds: CUDA events on a GPU, perf_counter on the CPU."""
    if device == "cuda":
        def start():
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e

        def stop(e):
            f = torch.cuda.Event(enable_timing=True)
            f.record()
            f.synchronize()
            return e.elapsed_time(f) / 1e3
        return start, stop
    return time.perf_counter, lambda t0: time.perf_counter() - t0


def hf_gpt2(config: dict, attn: str, recompute: str):
    """Transformers' ``GPT2LMHeadModel`` of ``config`` (dropout 0, random weights) and its loss function."""
    from dse._optional import require

    transformers = require("transformers", "test", "dse measure --impl hf")
    if "hf_config" in config:       # any causal LM Transformers builds from a config.json (no weights read)
        import json

        with open(config["hf_config"]) as f:
            fields = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        fields.update(use_cache=False)
        for k, v in fields.items():   # every dropout probability (StarCoder2's residual_dropout, embedding_dropout)
            if ("dropout" in k or k.endswith("pdrop")) and isinstance(v, (int, float)) and not isinstance(v, bool):
                fields[k] = 0.0
        cfg = transformers.AutoConfig.for_model(**fields)
        cfg._attn_implementation = attn
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        return _checkpointed(model, recompute), lambda ids: model(input_ids=ids, labels=ids).loss
    cfg = transformers.GPT2Config(n_layer=config["layers"], n_embd=config["hidden"], n_head=config["heads"],
                                  vocab_size=config["vocab"], n_positions=config["n_positions"], resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = attn
    model = transformers.GPT2LMHeadModel(cfg)
    return _checkpointed(model, recompute), lambda ids: model(input_ids=ids, labels=ids).loss


def _checkpointed(model, recompute: str):
    """Transformers' gradient checkpointing (per layer, non-reentrant) when ``recompute`` is full; training mode."""
    if recompute == "full":
        if hasattr(model, "activation_checkpointing_enable"):     # transformers >= 5.24
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def build(config: dict, attn: str, recompute: str, device: str, dtype, impl: str = "torch"):
    """(model, loss of a batch of token ids): built on ``device`` in ``dtype``, gradients allocated (zeros)."""
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            if impl == "hf":
                model, loss_of = hf_gpt2(config, attn, recompute)
            else:
                model = GPT(config["layers"], config["hidden"], config["heads"], config["vocab"],
                            config["n_positions"], attn, recompute)
                loss_of = model
    finally:
        torch.set_default_dtype(old)
    model.to(device=device, dtype=dtype)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    return model, loss_of


def train_steps(config: dict, attn: str, recompute: str, b: int, s: int, device: str, dtype, warmup: int,
                repeats: int, impl: str = "torch", profile: bool = False) -> dict:
    """Median forward (with the loss) and backward time over ``repeats`` steps after ``warmup``; memory on CUDA.

    ``profile``: one more step under ``torch.profiler`` after the timed ones, summarised in ``row["profile"]``
    (its peak memory is not counted).
    """
    model, loss_of = build(config, attn, recompute, device, dtype, impl)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    vocab = config["vocab"] if "vocab" in config else model.config.vocab_size
    ids = torch.randint(0, vocab, (b, s), device=device)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    static = torch.cuda.memory_allocated() if cuda else 0
    start, stop = _clock(device)
    fwd, bwd = [], []
    for i in range(warmup + repeats):
        t0 = start()
        loss = loss_of(ids)
        t_f = stop(t0)
        t1 = start()
        loss.backward()
        t_b = stop(t1)
        if i >= warmup:
            fwd.append(t_f)
            bwd.append(t_b)
    params = sum(p.numel() for p in model.parameters())
    row = {"params": params, "fwd_s": statistics.median(fwd), "bwd_s": statistics.median(bwd)}
    row["step_s"] = row["fwd_s"] + row["bwd_s"]
    if cuda:
        peak = torch.cuda.max_memory_allocated()
        row.update(static_bytes=static, peak_bytes=peak, act_peak_bytes=peak - static)
    row["tokens_per_s"] = b * s / row["step_s"]
    if profile:
        from dse.measure.profile import profile_step

        row["profile"] = profile_step(torch, lambda: loss_of(ids).backward(), device)
    del model, loss
    if cuda:
        torch.cuda.empty_cache()
    return row
