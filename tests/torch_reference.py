"""Reference transformer layers in plain PyTorch, for checking dse's activation accounting.

The ground truth for :func:`dse.formulas.transformer.activation_terms` is what autograd
keeps for backward. This module builds one Megatron-style layer (one tensor-parallel
rank's shard of it) on the CPU and counts the bytes autograd saves during one forward
with ``torch.autograd.graph.saved_tensors_hooks``. Run it as a script to print the
per-layer table: ``.venv/bin/python tests/torch_reference.py``.

Counting rule (:func:`saved_storages`): every tensor handed to the pack hook is reduced to
its untyped storage; unique storages (by data pointer) are summed at their full size, so
views of one buffer count once and a view keeps its whole buffer alive. Parameters and
model-level constants shared by all layers (rotary cos/sin tables) are excluded. The
layer input IS counted: the first norm saves it, as in Korthikanti et al. 2022 (§4.1:
the LayerNorm inputs are part of the 34 sbh). The layer's output is not saved by the
layer itself; the next layer's first norm (or the head's final norm) counts it.

What the layers mirror (Megatron-LM core, bf16; facts about Megatron, Apex, Transformer
Engine and flash-attn are from their sources, the code here is ours):

- activations in [s, b, h] layout; one fused QKV GEMM in Megatron-core's grouped layout
  [s, b, kv, (a/kv + 2) d], split into views; ``query.reshape(s, b, a, d)``, which is a view
  for kv = a and a copy for kv < a (megatron/core/transformer/attention.py);
- math attention as Megatron-core DotProductAttention: K and V ``repeat_interleave``-d to a
  heads when kv < a, ``baddbmm`` with alpha = 1/sqrt(d) and beta = 0, the fused causal softmax
  ``ScaledUpperTriangMaskedSoftmax`` (saves only its output), attention dropout, ``bmm`` with V;
- flash attention = ``torch.nn.functional.scaled_dot_product_attention`` with is_causal; on
  the CPU it runs ``_scaled_dot_product_flash_attention_for_cpu``, which saves Q, K, V (the
  views passed in, K/V with kv heads: GQA is native), the output and the fp32 log-sum-exp,
  like flash-attn 2 (which also saves a 16-byte RNG state). SDPA on the CPU falls back to an
  fp32 math path when dropout_p > 0, so the flash layer runs with dropout_p = 0: flash-attn
  regenerates its dropout mask from the RNG state and stores no mask;
- dropout = ``torch.native_dropout``, which saves a 1-byte bool mask. That is what
  ``F.dropout`` runs on CUDA; on the CPU ``F.dropout`` instead saves a bf16 noise tensor;
- LayerNorm = ``torch.nn.functional.layer_norm`` (native); on the CPU it saves bf16 mean and
  rstd (2 B each per row), where CUDA and Apex save fp32 (4 B each);
- fused ops whose saved set differs from a naive composition are autograd Functions that
  save exactly what the fused kernel saves: RMSNorm (Apex FusedRMSNormAffineFunction and
  TE save the input and the fp32 inverse RMS; ``torch.rms_norm`` on the CPU instead saves
  fp32 copies of the input), bias-SwiGLU (Megatron's SwiGLUFunction saves only its 2F
  input), the causal masked softmax (Megatron's ScaledUpperTriangMaskedSoftmax saves only its
  output), and the vocab-parallel cross entropy (Megatron's _VocabParallelCrossEntropy saves
  the fp32 softmax, the target mask and the masked targets);
- tensor parallelism: the shard of one rank (a/t heads, kv/t groups, F/t, replicated norms);
  collectives are autograd Functions that give the right shapes and save nothing. With
  sequence parallelism the layer input is [s/t, b, h]; the column-parallel GEMMs all-gather
  inside and save the un-gathered shard, re-gathering in backward, as Megatron's
  LinearWithGradAccumulationAndAsyncCommunication does; the row-parallel GEMMs
  reduce-scatter back to [s/t, b, h];
- rotary embeddings out of place on Q and K, x cos + rotate_half(x) sin, with cos/sin made
  once per model forward and shared by all layers (as HF Llama and Megatron's fused RoPE do);
- selective recompute = ``torch.utils.checkpoint`` (use_reentrant=False) around the core
  attention (Megatron's ``recompute_modules=["core_attn"]``); full recompute = checkpoint
  around the whole layer. Non-reentrant checkpoint saves its tensor inputs through the
  caller's saved-tensor hooks, so they are counted, and hides the inner saves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

DROPOUT_P = 0.1


@dataclass(frozen=True)
class LayerSpec:
    """One layer's shape and the options of ``activation_terms`` (same names)."""

    s: int
    b: int
    h: int
    heads: int
    kv_heads: int
    ffn: int
    tp: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"          # none | selective | full
    attention: str = "flash"         # flash | math
    ffn_type: str = "gelu"           # gelu | relu | swiglu
    norm: str = "layernorm"          # layernorm | rmsnorm
    position: str = "learned"        # learned | rotary
    dropout: bool = True
    bias: bool = True

    @property
    def head_dim(self) -> int:
        return self.h // self.heads

    def formula_options(self) -> dict:
        """Keyword arguments for dse.formulas.transformer.activation_terms."""
        return dict(tp=self.tp, sequence_parallel=self.sequence_parallel, recompute=self.recompute,
                    attention=self.attention, ffn_type=self.ffn_type, norm=self.norm,
                    position=self.position, dropout=self.dropout, bytes_per_element=2)


def gpt(s, b, h, heads, **kw) -> LayerSpec:
    """GPT-style layer: LayerNorm with bias, learned positions, MHA, GeLU 4h, dropout."""
    return LayerSpec(s=s, b=b, h=h, heads=heads, kv_heads=kw.pop("kv_heads", heads), ffn=kw.pop("ffn", 4 * h), **kw)


def llama(s, b, h, heads, kv_heads, ffn, **kw) -> LayerSpec:
    """Llama-style layer: RMSNorm, rotary, GQA, SwiGLU, no biases, no dropout."""
    opts = dict(ffn_type="swiglu", norm="rmsnorm", position="rotary", dropout=False, bias=False)
    opts.update(kw)
    return LayerSpec(s=s, b=b, h=h, heads=heads, kv_heads=kv_heads, ffn=ffn, **opts)


# ----------------------------------------------------------- simulated collectives


class _AllReduce(torch.autograd.Function):
    """Row-parallel output all-reduce (Megatron's g): identity here, identity backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


class _CopyToTP(torch.autograd.Function):
    """Column-parallel input (Megatron's f): identity forward, all-reduce (identity) backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


def _gather_seq(x, t):
    return torch.cat([x] * t, dim=0)


def _scatter_seq(x, t):
    return x.chunk(t, dim=0)[0].contiguous()


class _ReduceScatterSeq(torch.autograd.Function):
    """Sequence-parallel reduce-scatter [s, b, h] -> [s/t, b, h]; backward all-gathers."""

    @staticmethod
    def forward(ctx, x, t):
        ctx.t = t
        return _scatter_seq(x, t)

    @staticmethod
    def backward(ctx, g):
        return _gather_seq(g, ctx.t), None


class _ScatterSeq(torch.autograd.Function):
    """Split [s, b, h] into this rank's [s/t, b, h] (embedding output under SP); backward gathers."""

    @staticmethod
    def forward(ctx, x, t):
        ctx.t = t
        return _scatter_seq(x, t)

    @staticmethod
    def backward(ctx, g):
        return _gather_seq(g, ctx.t), None


class _LinearGatherSeq(torch.autograd.Function):
    """Column-parallel GEMM under SP: all-gather the [s/t, b, h] shard, multiply, and save only the
    shard (re-gathered in backward), as Megatron's LinearWithGradAccumulationAndAsyncCommunication."""

    @staticmethod
    def forward(ctx, x, weight, bias, t):
        ctx.t, ctx.has_bias = t, bias is not None
        ctx.save_for_backward(x, weight)
        return F.linear(_gather_seq(x, t), weight, bias)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        total = _gather_seq(x, ctx.t)
        grad_total = g @ weight
        grad_x = grad_total.view(ctx.t, *x.shape).sum(0)       # reduce-scatter of identical ranks
        grad_w = g.flatten(0, -2).t() @ total.flatten(0, -2)
        grad_b = g.flatten(0, -2).sum(0) if ctx.has_bias else None
        return grad_x, grad_w, grad_b, None


# ----------------------------------------------------------- fused kernels


def _acc(x):
    """x in at least fp32 (the accumulation type of the fused kernels)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class FusedRMSNorm(torch.autograd.Function):
    """RMSNorm saving the input and the fp32 inverse RMS per row (Apex FusedRMSNormAffineFunction,
    memory_efficient=False; Transformer Engine's RMSNorm saves the same)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = _acc(x)
        rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (xf * rstd.unsqueeze(-1)).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, g):
        x, weight, rstd = ctx.saved_tensors
        xf, gf, r = _acc(x), _acc(g), rstd.unsqueeze(-1)
        gw = gf * _acc(weight)
        grad_x = r * gw - xf * r.pow(3) * (gw * xf).mean(-1, keepdim=True)
        grad_w = (gf * xf * r).flatten(0, -2).sum(0)
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


class CausalSoftmax(torch.autograd.Function):
    """Scale, upper-triangular mask and softmax over the last dim, saving only the output
    (Megatron's ScaledUpperTriangMaskedSoftmax; its 4-byte scale tensor is left out)."""

    @staticmethod
    def forward(ctx, scores, scale):
        sq, sk = scores.shape[-2:]
        masked = torch.ones(sq, sk, dtype=torch.bool).triu(1)
        probs = torch.softmax((_acc(scores) * scale).masked_fill(masked, float("-inf")), -1).to(scores.dtype)
        ctx.scale = scale
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        yf, gf = _acc(y), _acc(g)
        return (ctx.scale * yf * (gf - (gf * yf).sum(-1, keepdim=True))).to(y.dtype), None


class SwiGLU(torch.autograd.Function):
    """silu(x1) * x2 on x = [x1, x2] (last dim 2F), saving only x (Megatron SwiGLUFunction)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        x1, x2 = x.chunk(2, -1)
        return F.silu(x1) * x2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x1, x2 = _acc(x).chunk(2, -1)
        sig, gf = torch.sigmoid(x1), _acc(g)
        d1 = gf * x2 * sig * (1 + x1 * (1 - sig))
        return torch.cat((d1, gf * x1 * sig), -1).to(x.dtype)


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Cross entropy over this rank's vocabulary shard [0, V/t), in fp32, saving the softmax, the
    target mask and the masked targets (Megatron's _VocabParallelCrossEntropy; the all-reduces of
    the max, the target logit and the sum of exponentials are identities here)."""

    @staticmethod
    def forward(ctx, logits, target):
        lf = _acc(logits)
        lf = lf - lf.max(-1, keepdim=True)[0]
        v_local = lf.shape[-1]
        target_mask = target >= v_local
        masked_target = target.clone()
        masked_target[target_mask] = 0
        predicted = lf.gather(-1, masked_target.unsqueeze(-1)).squeeze(-1).masked_fill(target_mask, 0.0)
        exp = lf.exp_()
        sum_exp = exp.sum(-1)
        loss = torch.log(sum_exp) - predicted
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, target_mask, masked_target.view(-1))
        ctx.dtype = logits.dtype
        return loss

    @staticmethod
    def backward(ctx, g):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        grad = softmax.clone()
        g2 = grad.view(-1, grad.shape[-1])
        g2[torch.arange(g2.shape[0]), masked_target_1d] -= 1.0 - target_mask.view(-1).to(g2.dtype)
        return (grad * g.unsqueeze(-1)).to(ctx.dtype), None


def _dropout(x, p):
    return torch.native_dropout(x, p, True)[0]


# ----------------------------------------------------------- the layer


def rotary_tables(s, d, dtype=torch.bfloat16, base=10000.0):
    """cos and sin of shape [s, 1, 1, d] (rotate-half convention), made once per model forward."""
    inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = torch.outer(torch.arange(s, dtype=torch.float32), inv)
    ang = torch.cat((ang, ang), -1)[:, None, None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat((-x2, x1), -1)


class ReferenceLayer(torch.nn.Module):
    """One rank's shard of a pre-norm transformer layer described by a :class:`LayerSpec`."""

    def __init__(self, spec: LayerSpec, dtype=torch.bfloat16):
        super().__init__()
        sp, t, d = spec, spec.tp, spec.head_dim
        if (sp.heads % t or sp.kv_heads % t or sp.ffn % t or sp.heads % sp.kv_heads
                or (sp.sequence_parallel and sp.s % t)):
            raise ValueError(f"tp={t} does not divide heads/kv_heads/ffn/s of {spec}")
        self.spec, self.a, self.kv, self.d = spec, sp.heads // t, sp.kv_heads // t, d
        self.f = sp.ffn // t
        g = torch.Generator().manual_seed(0)

        def param(*shape, scale=0.02):
            return torch.nn.Parameter((torch.randn(*shape, generator=g) * scale).to(dtype))

        def vec(n, fill):
            return torch.nn.Parameter(torch.full((n,), fill, dtype=dtype))

        h = sp.h
        self.norm1_w, self.norm2_w = vec(h, 1.0), vec(h, 1.0)
        self.norm1_b = vec(h, 0.0) if sp.norm == "layernorm" else None
        self.norm2_b = vec(h, 0.0) if sp.norm == "layernorm" else None
        self.w_qkv = param((self.a + 2 * self.kv) * d, h)
        self.w_o = param(h, self.a * d)
        n_fc1 = 2 * self.f if sp.ffn_type == "swiglu" else self.f
        self.w_fc1 = param(n_fc1, h)
        self.w_fc2 = param(h, self.f)
        self.b_qkv = vec((self.a + 2 * self.kv) * d, 0.0) if sp.bias else None
        self.b_o = vec(h, 0.0) if sp.bias else None
        self.b_fc1 = vec(n_fc1, 0.0) if sp.bias else None
        self.b_fc2 = vec(h, 0.0) if sp.bias else None
        self.rope = rotary_tables(sp.s, d, dtype) if sp.position == "rotary" else None

    # -- building blocks
    def _norm(self, x, w, b):
        if self.spec.norm == "layernorm":
            return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
        return FusedRMSNorm.apply(x, w, 1e-5)

    def _column_linear(self, x, w, b):
        if self.spec.sequence_parallel:
            return _LinearGatherSeq.apply(x, w, b, self.spec.tp)
        return F.linear(_CopyToTP.apply(x), w, b)

    def _row_linear(self, x, w):
        y = F.linear(x, w)
        if self.spec.sequence_parallel:
            return _ReduceScatterSeq.apply(y, self.spec.tp)
        return _AllReduce.apply(y)

    def _bias_dropout_add(self, y, bias, residual):
        if bias is not None:
            y = y + bias
        if self.spec.dropout:
            y = _dropout(y, DROPOUT_P)
        return residual + y

    def _rotary(self, x):
        cos, sin = self.rope
        return x * cos + _rotate_half(x) * sin

    def _qkv(self, x):
        s, b = x.shape[0] * (self.spec.tp if self.spec.sequence_parallel else 1), x.shape[1]
        mixed = self._column_linear(x, self.w_qkv, self.b_qkv)
        group = self.a // self.kv
        mixed = mixed.view(s, b, self.kv, (group + 2) * self.d)
        q, k, v = torch.split(mixed, [group * self.d, self.d, self.d], dim=3)
        q = q.reshape(s, b, self.a, self.d)          # a copy when kv < a (grouped layout)
        if self.rope is not None:
            q, k = self._rotary(q), self._rotary(k)
        return q, k, v

    def _core_attention(self, q, k, v):
        s, b = q.shape[:2]
        if self.spec.attention == "flash":
            o = F.scaled_dot_product_attention(q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3),
                                               is_causal=True, enable_gqa=self.kv != self.a)
            if "FlashAttention" not in type(o.grad_fn).__name__:
                raise RuntimeError(f"SDPA did not use the flash backend: {o.grad_fn}")
            return o.permute(2, 0, 1, 3).contiguous().view(s, b, self.a * self.d)
        group = self.a // self.kv
        if group > 1:
            k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
        q2 = q.reshape(s, b * self.a, self.d).transpose(0, 1)
        k2 = k.reshape(s, b * self.a, self.d).transpose(0, 1)
        buf = torch.empty(b * self.a, s, s, dtype=q.dtype)
        scores = torch.baddbmm(buf, q2, k2.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(self.d))
        probs = CausalSoftmax.apply(scores, 1.0)
        if self.spec.dropout:
            probs = _dropout(probs, DROPOUT_P)
        ctx = torch.bmm(probs, v.reshape(s, b * self.a, self.d).transpose(0, 1))
        return ctx.view(b, self.a, s, self.d).permute(2, 0, 1, 3).contiguous().view(s, b, self.a * self.d)

    def _mlp(self, x):
        y = self._column_linear(x, self.w_fc1, self.b_fc1)
        kind = self.spec.ffn_type
        if kind == "swiglu":
            y = SwiGLU.apply(y)
        elif kind == "relu":
            y = F.relu(y)
        else:
            y = F.gelu(y, approximate="tanh")
        return self._row_linear(y, self.w_fc2)

    def _layer(self, x):
        q, k, v = self._qkv(self._norm(x, self.norm1_w, self.norm1_b))
        if self.spec.recompute == "selective":
            ctx = checkpoint(self._core_attention, q, k, v, use_reentrant=False)
        else:
            ctx = self._core_attention(q, k, v)
        x = self._bias_dropout_add(self._row_linear(ctx, self.w_o), self.b_o, x)
        return self._bias_dropout_add(self._mlp(self._norm(x, self.norm2_w, self.norm2_b)), self.b_fc2, x)

    def forward(self, x):
        if self.spec.recompute == "full":
            return checkpoint(self._layer, x, use_reentrant=False)
        return self._layer(x)

    def constants(self):
        """Tensors shared by every layer of a model (excluded from the per-layer count)."""
        return list(self.rope) if self.rope is not None else []

    def make_input(self, dtype=torch.bfloat16):
        s = self.spec.s // self.spec.tp if self.spec.sequence_parallel else self.spec.s
        g = torch.Generator().manual_seed(1)
        return torch.randn(s, self.spec.b, self.spec.h, generator=g).to(dtype).requires_grad_()


# ----------------------------------------------------------- head and embedding


class ReferenceHead(torch.nn.Module):
    """Output side of one rank: final norm, vocab-parallel LM head (V/t rows), fp32 cross entropy."""

    def __init__(self, s, b, h, vocab, tp=1, sequence_parallel=False, norm="layernorm", dtype=torch.bfloat16):
        super().__init__()
        self.s, self.b, self.h, self.tp, self.sp, self.norm = s, b, h, tp, sequence_parallel, norm
        g = torch.Generator().manual_seed(2)
        self.w = torch.nn.Parameter(torch.ones(h, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(h, dtype=dtype)) if norm == "layernorm" else None
        self.w_out = torch.nn.Parameter((torch.randn(vocab // tp, h, generator=g) * 0.02).to(dtype))
        self.target = torch.randint(0, vocab, (s, b), generator=g)

    def forward(self, x):
        y = F.layer_norm(x, (self.h,), self.w, self.bias, 1e-5) if self.norm == "layernorm" else \
            FusedRMSNorm.apply(x, self.w, 1e-5)
        if self.sp:
            logits = _LinearGatherSeq.apply(y, self.w_out, None, self.tp)
        else:
            logits = F.linear(_CopyToTP.apply(y), self.w_out)
        return VocabParallelCrossEntropy.apply(logits, self.target).mean()

    def make_input(self, dtype=torch.bfloat16):
        s = self.s // self.tp if self.sp else self.s
        return torch.randn(s, self.b, self.h).to(dtype).requires_grad_()

    def constants(self):
        return [self.target]


class ReferenceEmbedding(torch.nn.Module):
    """Input side of one rank, as Megatron's LanguageModelEmbedding: vocab-parallel word embedding
    (ids outside this rank's range masked to 0 and their rows zeroed), all-reduce, + learned
    position embedding, transpose to [s, b, h], scatter to [s/t, b, h] under SP, dropout."""

    def __init__(self, s, b, h, vocab, tp=1, sequence_parallel=False, position="learned", dropout=True,
                 dtype=torch.bfloat16):
        super().__init__()
        self.tp, self.sp, self.dropout = tp, sequence_parallel, dropout
        g = torch.Generator().manual_seed(3)
        self.v_local = vocab // tp
        self.word = torch.nn.Parameter((torch.randn(self.v_local, h, generator=g) * 0.02).to(dtype))
        learned = position == "learned"
        self.pos = torch.nn.Parameter((torch.randn(s, h, generator=g) * 0.02).to(dtype)) if learned else None
        self.ids = torch.randint(0, vocab, (b, s), generator=g)
        self.position_ids = torch.arange(s).repeat(b, 1)      # [b, s] per-sample ids as a data loader yields

    def forward(self):
        ids = self.ids
        if self.tp > 1:
            outside = ids >= self.v_local
            ids = ids.clone()
            ids[outside] = 0
        e = F.embedding(ids, self.word)
        if self.tp > 1:
            e = e.clone()
            e[outside, :] = 0.0
        e = _AllReduce.apply(e)
        if self.pos is not None:
            e = e + F.embedding(self.position_ids, self.pos)
        e = e.transpose(0, 1).contiguous()
        if self.sp:
            e = _ScatterSeq.apply(e, self.tp)
        return _dropout(e, DROPOUT_P) if self.dropout else e


# ----------------------------------------------------------- counting


def saved_storages(fn, exclude=()):
    """Run ``fn()`` under saved-tensor hooks; return (its output, {storage ptr: (bytes, dtype, shape)}).

    Storages of ``exclude`` (parameters, shared constants) are left out. The output must be kept
    alive while the result is used: it holds the graph, which holds the saved tensors."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, tuple[int, torch.dtype, tuple]] = {}

    def pack(t):
        st = t.untyped_storage()
        ptr, n = st.data_ptr(), st.nbytes()
        if n and ptr not in skip and ptr not in seen:
            seen[ptr] = (n, t.dtype, tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, seen


def measure_layer(spec: LayerSpec) -> tuple[int, dict]:
    """Bytes autograd saves for one forward of the layer (one rank), and the storages."""
    torch.manual_seed(0)
    layer = ReferenceLayer(spec)
    x = layer.make_input()
    out, seen = saved_storages(lambda: layer(x), exclude=[*layer.parameters(), *layer.constants()])
    total = sum(n for n, _, _ in seen.values())
    del out
    return total, seen


def measure_head(s, b, h, vocab, **kw) -> int:
    head = ReferenceHead(s, b, h, vocab, **kw)
    x = head.make_input()
    out, seen = saved_storages(lambda: head(x), exclude=[*head.parameters(), *head.constants()])
    total = sum(n for n, _, _ in seen.values())
    del out
    return total


def measure_embedding(s, b, h, vocab, **kw) -> int:
    emb = ReferenceEmbedding(s, b, h, vocab, **kw)
    out, seen = saved_storages(emb, exclude=list(emb.parameters()))
    total = sum(n for n, _, _ in seen.values())
    del out
    return total


def formula_layer(spec: LayerSpec) -> float:
    from dse.formulas import transformer
    return transformer.activation_bytes_per_layer(spec.s, spec.b, spec.h, spec.heads, spec.kv_heads, spec.head_dim,
                                                  spec.ffn, **spec.formula_options())


def main():  # pragma: no cover - documentation script
    base = dict(s=256, b=2, h=1024)
    specs = []
    for fam, mk in (("gpt", lambda **k: gpt(heads=16, **base, **k)),
                    ("llama", lambda **k: llama(heads=16, kv_heads=4, ffn=2816, **base, **k))):
        for att in ("math", "flash"):
            for rec in ("none", "selective", "full"):
                for tp, spar in ((1, False), (4, False), (4, True)):
                    specs.append((fam, mk(attention=att, recompute=rec, tp=tp, sequence_parallel=spar)))
    print(f"{'layer':6} {'attn':5} {'recompute':9} {'t':>2} {'sp':>3} {'measured B':>12} {'formula B':>12} "
          f"{'meas/sbh':>9} {'form/sbh':>9} {'err %':>6}")
    for fam, sp in specs:
        m, _ = measure_layer(sp)
        f = formula_layer(sp)
        sbh = sp.s * sp.b * sp.h
        print(f"{fam:6} {sp.attention:5} {sp.recompute:9} {sp.tp:>2} {'yes' if sp.sequence_parallel else 'no':>3} "
              f"{m:>12,} {f:>12,.0f} {m / sbh:>9.3f} {f / sbh:>9.3f} {100 * (f / m - 1):>6.2f}")


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["LayerSpec", "gpt", "llama", "ReferenceLayer", "ReferenceHead", "ReferenceEmbedding", "saved_storages",
           "measure_layer", "measure_head", "measure_embedding", "formula_layer"]
