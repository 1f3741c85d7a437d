"""A GPT-2-style model in plain ``torch.nn`` (random weights, no download) and its timed training steps.

The model follows Hugging Face's ``GPT2LMHeadModel`` in what the cost model cares about: learned
positions, pre-LayerNorm blocks with a fused QKV projection, GeLU (tanh) MLP of 4h, a final
LayerNorm, an LM head tied to the token embedding, dropout 0, the loss over fp32 logits.
Attention is ``sdpa`` (``torch.nn.functional.scaled_dot_product_attention``: flash kernels on
a GPU) or ``eager`` (matmul, scale, causal mask, fp32 softmax, matmul). ``recompute="full"``
checkpoints every block (``torch.utils.checkpoint``, non-reentrant), as Transformers' gradient
checkpointing does. Imported only by ``dse measure``: torch is an optional dependency.
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


def train_steps(config: dict, attn: str, recompute: str, b: int, s: int, device: str, dtype, warmup: int,
                repeats: int) -> dict:
    """Median forward (with the loss) and backward time over ``repeats`` steps after ``warmup``; memory on CUDA."""
    torch.manual_seed(0)
    model = GPT(config["layers"], config["hidden"], config["heads"], config["vocab"], config["n_positions"], attn,
                recompute).to(device=device, dtype=dtype)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    ids = torch.randint(0, config["vocab"], (b, s), device=device)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    static = torch.cuda.memory_allocated() if cuda else 0
    start, stop = _clock(device)
    fwd, bwd = [], []
    for i in range(warmup + repeats):
        t0 = start()
        loss = model(ids)
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
    del model, loss
    if cuda:
        torch.cuda.empty_cache()
    return row
