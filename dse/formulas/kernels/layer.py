"""The kernels of one transformer layer (Megatron-LM's fused kernels, or a software stack's).

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there).
"""

from __future__ import annotations

from typing import Any

from dse.formulas import compute as _compute, finetune as _finetune, fp8 as _fp8, stacks as _stacks
from dse.formulas._array import Num, where
from dse.formulas.kernels.mla import mla_attention_kernels
from dse.formulas.kernels.moe import dispatcher_gathers, moe_mlp_kernels
from dse.formulas.kernels.rotary import _rotary_layout, unfused_rotary_row
from dse.formulas.kernels.rows import Row, Table

__all__ = ["layer_kernels", "softmax_row", "fused_softmax_available", "unfused_rotary_row"]   # the last: rotary.py


def _per_gpu(x: Num, tp: Num) -> Num:
    """x / t, leaving x an integer when the layer is not split (t = 1)."""
    return x if type(tp) is int and tp == 1 else x / tp


def fused_softmax_available(s: Num, b: Num, heads: Num, bytes_per_element: Num = 2) -> Any:
    """Whether Megatron-LM's fused scaled masked softmax kernel runs (else the unfused fp32 path).

    Formula: 16 < s <= 2048 and s mod 4 = 0 and (b a/t) mod 4 = 0, with 16-bit inputs
    Source: FusedScaleMaskSoftmax.forward, ``custom_kernel_constraint`` (key length in (16, 2048], query length and
    attention batch b x np multiples of 4; ``input_in_float16``): NVIDIA Megatron-LM megatron/model/fused_softmax.py,
    as microsoft/Megatron-DeepSpeed and vTrain's model code (VIA-Research/vTrain src/model/fused_softmax.py) carry it.

    Args:
        heads: a/t, attention heads on this GPU [count]
    Returns:
        the fused kernel runs [bool, or an array of them]

    >>> fused_softmax_available(2048, 1, 16 / 8), fused_softmax_available(2048, 2, 2), fused_softmax_available(4096, 4, 4)
    (False, True, False)
    """
    ok = (b * heads) % 4 == 0
    if type(ok) is bool:
        return ok and 16 < s <= 2048 and s % 4 == 0 and bytes_per_element == 2
    return ok & (s > 16) & (s <= 2048) & (s % 4 == 0) & (bytes_per_element == 2)


def softmax_row(s: Num, b: Num, heads: Num, bytes_per_element: Num = 2, kept: bool = True) -> Row:
    """The attention softmax of Megatron-LM's math attention: the fused kernel, or its unfused fp32 fallback.

    Formula: fused (:func:`fused_softmax_available`): one kernel each way, 2e bytes per score forward and 4e
    backward, keeps the e-byte probabilities; unfused: .float() (e + 4), x scale (8), masked_fill_ (8), fp32
    softmax (8), .half() (4 + e) = 2e + 32 bytes per score in 5 kernels forward; backward the same chain's
    gradients: to fp32 (e + 4), softmax backward (12), masked fill (8), x scale (8), to half (4 + e) = 2e + 36 in 5
    kernels; keeps the fp32 probabilities (4 bytes per score)
    Source: FusedScaleMaskSoftmax.forward's fallback with ``softmax_in_fp32`` and a scale (query-key layer scaling,
    coeff = layer number: vTrain's model code, VIA-Research/vTrain src/model/gpt_modeling.py, which the measured
    Megatron runs of ``dse validate megatron-a100`` come from); bytes: each op reads its input and writes its output
    once (the torch.nn.Softmax kernel and its backward read their inputs once per row).

    Args:
        heads: a/t, attention heads on this GPU [count]
        kept: the probabilities are kept for backward (no recomputation of the attention core) [bool]
    Returns:
        the row (kind elementwise, with backward bytes and kernels) [dict]

    >>> r = softmax_row(2048, 1, 2)   # 16 heads on tp 8, micro-batch 1: b a/t = 2, the unfused path
    >>> r["bytes"] / (2 * 2048 ** 2), r["bytes_backward"] / (2 * 2048 ** 2), r["kernels"], r["saved"] / 2048 ** 2
    (36.0, 40.0, 5, 8.0)
    """
    e = bytes_per_element
    scores = heads * s * s * b
    fused = fused_softmax_available(s, b, heads, e)
    return {"kind": "elementwise", "bytes": where(fused, 2 * e, 2 * e + 32) * scores,
            "bytes_backward": where(fused, 4 * e, 2 * e + 36) * scores, "kernels": where(fused, 1, 5),
            "kernels_backward": where(fused, 1, 5), "saved": where(fused, e, 4) * scores if kept else 0,
            "selective": True}


def layer_kernels(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, *, tp: Num = 1,
                  sequence_parallel: bool = False, recompute: str = "none", attention: str = "flash",
                  ffn_type: str = "gelu", norm: str = "layernorm", position: str = "learned", dropout: bool = True,
                  causal: bool = True, bytes_per_element: Num = 2, comm_bytes_per_element: Num | None = None,
                  stack: dict[str, Any] | None = None, stack_sizes: dict[str, Num] | None = None,
                  stack_choices: dict[str, Any] | None = None,
                  grad_bytes: Num = 2, finetune: dict[str, Any] | None = None, fp8: str | None = None,
                  layer_norms: int = 2, qk_norm: bool = False, moe: dict[str, Any] | None = None,
                  softmax_fallback: bool = False, attention_share: Num | None = None,
                  executed_share: Num | None = None, mla: dict[str, Any] | None = None,
                  parallel_residual: bool = False, rotary_fraction: Num = 1.0, rotary_unfused: bool = False,
                  score_dropout: bool = True, branch_dropouts: int = 2) -> Table:
    """The kernels of one transformer layer on one GPU for one micro-batch (Megatron-LM's fused kernels).

    Formula: T = s b, r = 1/t with SP (else 1); GEMMs QKV (T, h, (a+2kv)d/t), out (T, a d/t, h), fc1 (T, h, n_g F/t),
    fc2 (T, F/t, h); attention: flash (4 s^2 b a d/t FLOP, halved when causal) or score (s, d, s) and context (s, s, d) x b a/t with
    softmax 2e and dropout (2e+1) bytes per score; element-wise bytes: norms 2e T h r each, bias-dropout-residual
    (3e + 1_drop) T h r each, activation n_g' e T F/t, rotary 2e T (a+kv) d/t; collectives: 2 all-reduces of
    e T h forward, 2 backward
    Source: Megatron-LM (Shoeybi et al. 2019, arXiv 1909.08053 §3; Korthikanti et al. 2022, arXiv 2205.05198
    Table 2) kernel by kernel; the layer list of Calculon (Isaev et al., SC'23); saved bytes as in
    transformer.activation_terms (checked against PyTorch's saved tensors).

    Each row's ``saved`` is the part of :func:`dse.formulas.transformer.activation_terms` that the kernel keeps:
    a norm its input and fp32 statistics, a weight GEMM its input, the attention core its Q, K, V (the fused QKV
    buffer, a Q copy, the rotated K), a flash kernel its fp32 log-sum-exp, math attention the repeated K/V,
    the softmax output and the dropout mask and output, the activation function its input/output, a
    bias-dropout-residual its 1-byte mask. Full recompute keeps only the layer input (on ``norm1``) and the
    rest becomes ``rerun``. n_g = 2 for SwiGLU (gate and up in one GEMM), else 1; n_g' = 3 (SwiGLU) or 2.
    ``finetune`` (LoRA, QLoRA): the keyword arguments of :func:`dse.formulas.finetune.apply_layer` but the table
    and the token count: frozen linear rows, adapter rows, dequantization. ``fp8`` (delayed or current scaling;
    None: the GEMMs in the activations' dtype): FP8 linear GEMMs and their cast kernels
    (:func:`dse.formulas.fp8.apply_layer`).
    Gemma 2's extra norms (``layer_norms`` 4: after the attention and after the MLP) are norm rows of their own;
    a QK-norm (Qwen3) reads and writes Q and K (2e T (a+kv) d/t) and keeps its input and fp32 statistics.
    ``moe`` (the keyword arguments of :func:`dse.formulas.kernels.moe.moe_mlp_kernels` after h) replaces fc1,
    the activation and fc2 by an MoE MLP's kernels. ``softmax_fallback`` (math attention, no other stack): where
    Megatron's fused softmax kernel does not run (:func:`fused_softmax_available`), the softmax row is its unfused
    fp32 fallback (:func:`softmax_row`); off, the row is always the fused kernel, as the closed forms count it.
    ``mla`` (q_lora, kv_lora, nope, rope, v_dim of :func:`dse.formulas.kernels.mla.mla_attention_kernels`)
    replaces qkv, rotary, the attention core and out by multi-head latent attention's kernels (flash attention
    only); the backward TP all-reduce on the attention side is then the latents' input gradient, e T (d_c' or h,
    + d_c + d_R), hidden by kv_up.

    ``parallel_residual`` (GPT-J, GPT-NeoX, Falcon: x + attn(n1(x)) + mlp(n2(x))): the MLP's norm reads the layer
    input, which norm1 keeps already (norm2 saves its statistics only); the two branches' row-parallel outputs are
    summed before one all-reduce forward (Black et al. 2022, GPT-NeoX-20B, arXiv 2204.06745 §2.1.2: "the results can
    be reduced locally before performing a single all-reduce"). With one shared norm (``layer_norms`` 1, Falcon-7B's
    input_layernorm) there is no norm2, fc1 reads qkv's saved input, and the two branches' input gradients are summed
    before one backward all-reduce. ``rotary_fraction`` rho (GPT-NeoX rotary_pct, Phi partial_rotary_factor): a
    software stack's rotary ops run on the rotated share and a torch.cat writes the whole Q and K back (Transformers'
    apply_rotary_pos_emb: rho x the traced passes + 2 passes over Q and K each way); Megatron's fused rotary reads and
    writes the whole Q and K whatever rho (its pass-through part is copied), as priced. A stack's fused QKV projection
    with rotary positions (GPT-NeoX, Phi-3, Falcon): the flash kernel keeps the rotated Q and K, new tensors, besides
    the fused buffer its V is a view of (the stack's fused row was traced on GPT-2, without rotary).
    ``rotary_unfused``: Megatron-Core's RoPE of a model whose YaRN attention factor is not 1 (gpt-oss), which it
    applies with eager PyTorch ops instead of the fused kernel (:func:`unfused_rotary_row`).

    ``dropout`` runs where the model applies it: on the attention probabilities (``score_dropout``: math attention's
    dropout row; a flash kernel -- FlashAttention, SDPA's flash and memory-efficient kernels, Transformer Engine --
    drops inside itself from its Philox state and saves no mask, so nothing is priced apart) and on
    ``branch_dropouts`` branch outputs (the bias-dropout-residual's mask: the MLP's first, then the attention's).
    Source: Megatron-Core DotProductAttention (``attention_dropout`` on the probabilities) and TransformerLayer
    (``hidden_dropout`` in both bias-dropout-adds); Transformers 5.24's eager attention
    (``nn.functional.dropout(attn_weights, p=dropout)``) and each family's branch dropouts (dse.specs.hf readers).

    The attention rows' ``flops`` (the model's FLOPs, what MFU counts) count the unmasked half of a causal score
    matrix, as the flash kernel executes it (FlashAttention-2, Dao 2023, arXiv 2307.08691 §4.1: "with causal
    mask, we divide the FLOPs count by 2"); math attention's GEMMs still execute the whole matrix (their time
    and :func:`executed_flops` use m, k, n), so the model's FLOPs and its time count attention alike.
    ``attention_share`` (sliding-window and chunked layers, :func:`dse.formulas.transformer.attention_share`; None:
    1/2 causal, else 1) replaces that half: the model's attention FLOPs are 4 s^2 b a d share / t; a flash kernel
    executes ``executed_share`` of the matrix (None: the same; 1 for a windowed layer under SDPA's explicit mask).

    Returns:
        kernel name -> row (see the module docstring) [dict]

    >>> k = layer_kernels(2048, 1, 4096, 32, 32, 128, 11008, ffn_type="swiglu", norm="rmsnorm", position="rotary",
    ...                   dropout=False)   # Llama-2-7B layer
    >>> list(k)
    ['norm1', 'qkv', 'rotary', 'attention', 'out', 'attn_allreduce', 'attn_residual', 'norm2', 'fc1', 'activation', 'fc2', 'mlp_allreduce', 'mlp_residual', 'fc1_dgrad_allreduce', 'qkv_dgrad_allreduce']
    >>> k["fc1"]["m"], k["fc1"]["k"], k["fc1"]["n"], k["fc1"]["split"]
    (2048, 4096, 22016, 'column')
    """
    e = bytes_per_element
    tok = s * b
    r = 1 / tp if sequence_parallel else 1
    stats = 8 if norm == "layernorm" else 4
    drop_attn = 1 if dropout and branch_dropouts >= 2 else 0     # the attention output's dropout mask
    drop_mlp = 1 if dropout and branch_dropouts >= 1 else 0      # the MLP output's (or the parallel sum's)
    full = recompute == "full"
    selective = recompute == "selective"
    split = not (type(tp) is int and tp == 1)     # unsplit (t = 1), shapes stay integers
    hd_q = heads * head_dim / tp if split else heads * head_dim
    hd_kv = kv_heads * head_dim / tp if split else kv_heads * head_dim
    a_loc = heads / tp if split else heads
    f_loc = ffn / tp if split else ffn
    gated = ffn_type in ("swiglu", "geglu")
    n_up = 2 if gated else 1
    grouped = where(kv_heads < heads, 1, 0)
    rotary = position == "rotary"
    math = attention == "math"
    math_kept = math and not selective
    expanded = grouped if math_kept else 0          # K, V repeated to a heads are what QK^T and PV keep
    msg = (e if comm_bytes_per_element is None else comm_bytes_per_element) * tok * h   # the TP collectives' message
    x_in = e * tok * h * r                          # a layer-wide tensor as stored (sharded with SP)
    norm_in = x_in + stats * tok * r

    # what the attention core keeps of its inputs Q, K, V
    qkv_kept = e * tok * (hd_q + 2 * hd_kv) * (1 - expanded)
    qkv_kept = qkv_kept + e * tok * hd_q * where(grouped + (1 if rotary else 0) > 0, 1, 0)   # Q as its own tensor
    if rotary:
        qkv_kept = qkv_kept + e * tok * hd_kv * (1 - expanded)                             # the rotated K

    t = {}
    t["norm1"] = {"kind": "elementwise", "bytes": 2 * x_in, "saved": norm_in}
    if mla:   # multi-head latent attention (DeepSeek-V2/V3): its own projection, norm, rope and attention rows
        t.update(mla_attention_kernels(s, b, h, heads, tp=tp, sequence_parallel=sequence_parallel, recompute=recompute,
                                       causal=causal, bytes_per_element=e, **mla))
    else:
        n_qkv = hd_q + 2 * hd_kv
        t["qkv"] = {"kind": "gemm", "m": tok, "k": h, "n": n_qkv, "batch": 1, "split": "column", "saved": x_in,
                    "flops": 2 * tok * h * n_qkv}
        if qk_norm:
            t["qk_norm"] = {"kind": "elementwise", "bytes": 2 * e * tok * (hd_q + hd_kv),
                            "saved": (e * head_dim + 4) * tok * (hd_q + hd_kv) / head_dim}
        if rotary:
            t["rotary"] = (unfused_rotary_row(e * tok * (hd_q + hd_kv)) if rotary_unfused else
                           {"kind": "elementwise", "bytes": 2 * e * tok * (hd_q + hd_kv), "saved": 0})
        half: Num = 0.5 if causal else 1     # a causal mask leaves half of the score matrix to compute
        if attention_share is not None:      # sliding-window / chunked layers: the mean share over the layers
            half = attention_share
        attn_flops = 4 * s * s * b * a_loc * head_dim * half
        if math:
            batch = b * a_loc
            scores = a_loc * s * s * b
            t["score"] = {"kind": "gemm", "m": s, "k": head_dim, "n": s, "batch": batch, "split": "",
                          "class": "attention", "saved": qkv_kept + e * tok * hd_q * expanded, "selective": True,
                          "flops": 2 * s * head_dim * s * batch * half}
            t["softmax"] = softmax_row(s, b, a_loc, e, math_kept) if softmax_fallback and not stack else {
                "kind": "elementwise", "bytes": 2 * e * scores, "saved": e * scores if math_kept else 0,
                "selective": True}
            if dropout and score_dropout:
                t["attn_dropout"] = {"kind": "elementwise", "bytes": (2 * e + 1) * scores,
                                     "saved": (e + 1) * scores if math_kept else 0, "selective": True}
            t["context"] = {"kind": "gemm", "m": s, "k": s, "n": head_dim, "batch": batch, "split": "",
                            "class": "attention", "saved": e * tok * hd_q * expanded, "selective": True,
                            "flops": 2 * s * s * head_dim * batch * half}
        else:
            lse = 0 if selective else 4 * tok * a_loc
            if attention_share is None:
                run = _compute.flash_attention_flops(s, b, a_loc, head_dim, causal)
                run_b = _compute.flash_attention_flops(s, b, a_loc, head_dim, causal, backward=True)
            else:
                ran = attention_share if executed_share is None else executed_share
                run = _compute.flash_attention_flops(s, b, a_loc, head_dim, False) * ran
                run_b = _compute.flash_attention_flops(s, b, a_loc, head_dim, False, backward=True) * ran
            t["attention"] = {"kind": "flash", "class": "attention", "flops": attn_flops, "executed": run,
                              "executed_backward": run_b, "saved": qkv_kept + lse, "selective": True}
        t["out"] = {"kind": "gemm", "m": tok, "k": hd_q, "n": h, "batch": 1, "split": "row", "saved": e * tok * hd_q,
                    "flops": 2 * tok * hd_q * h}
    t["attn_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": msg, "pass": "forward",
                           "saved": 0}
    extra_norms = layer_norms > 2      # Gemma 2: a norm after the attention and after the MLP, before the adds
    if extra_norms:
        t["post_attn_norm"] = {"kind": "elementwise", "bytes": 2 * x_in, "saved": norm_in}
    t["attn_residual"] = {"kind": "elementwise", "bytes": (3 * e + drop_attn) * tok * h * r,
                          "saved": drop_attn * tok * h * r}
    shared_norm = parallel_residual and layer_norms == 1     # Falcon-7B: the attention's norm output feeds the MLP
    if not shared_norm:
        t["norm2"] = {"kind": "elementwise", "bytes": 2 * x_in, "saved": norm_in}
    if moe:
        t.update(moe_mlp_kernels(s, b, h, tp=tp, sequence_parallel=sequence_parallel, ffn_type=ffn_type,
                                 bytes_per_element=e, **moe))
    else:
        t["fc1"] = {"kind": "gemm", "m": tok, "k": h, "n": n_up * f_loc, "batch": 1, "split": "column",
                    "saved": 0 if shared_norm else x_in, "flops": 2 * tok * h * n_up * f_loc,
                    **({"packed": x_in} if shared_norm else {})}   # the hooks pack the shared norm's output again
        kept = 3 if gated else (1 if ffn_type == "relu" else 2)
        t["activation"] = {"kind": "elementwise", "bytes": (3 if gated else 2) * e * tok * f_loc,
                           "saved": kept * e * tok * f_loc}
        t["fc2"] = {"kind": "gemm", "m": tok, "k": f_loc, "n": h, "batch": 1, "split": "row", "saved": 0,
                    "flops": 2 * tok * f_loc * h}
    if extra_norms:
        t["post_mlp_norm"] = {"kind": "elementwise", "bytes": 2 * x_in, "saved": norm_in}
    mlp_msg, empty = msg, {}   # the dispatcher gathers the routed tokens: the tp group carries the shared experts'
    if moe and "expert_allreduce" in t:   # (dse.formulas.kernels.moe.dispatcher_gathers)
        gathers = dispatcher_gathers(tp, moe.get("ep", 1), sequence_parallel, moe.get("etp"))
        mlp_msg, empty = msg * where(gathers, 1 if moe.get("shared_experts") else 0, 1), {"optional": True}
    t["mlp_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": mlp_msg,
                          "pass": "forward", "saved": 0, **empty}
    t["mlp_residual"] = {"kind": "elementwise", "bytes": (3 * e + drop_mlp) * tok * h * r,
                         "saved": drop_mlp * tok * h * r}
    t["fc1_dgrad_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": mlp_msg,
                                "pass": "backward", "hidden_by": "expert_fc1" if moe else "fc1", "saved": 0, **empty}
    if mla:   # the latents' input gradients (the up projections are column-parallel, the down ones duplicated)
        q_in = mla["q_lora"] if mla["q_lora"] else h
        t["qkv_dgrad_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "pass": "backward",
                                    "comm": msg * (q_in + mla["kv_lora"] + mla["rope"]) / h, "hidden_by": "kv_up",
                                    "saved": 0}
    else:
        t["qkv_dgrad_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": msg,
                                    "pass": "backward", "hidden_by": "qkv", "saved": 0}
    if stack:  # another software stack's element-wise kernels and saved tensors (dse.formulas.stacks)
        t = _stacks.apply_layer(t, stack, stack_sizes or {}, stack_choices or {}, bytes_per_element=e,
                                grad_bytes=grad_bytes)
        if rotary:
            ch = stack_choices or {}   # Phi-3's slices of one projection reach the attention as separate tensors
            t = _rotary_layout(t, rotary_fraction, e * tok * hd_q, e * tok * hd_kv,
                               fused=ch.get("qkv") == "fused" and not ch.get("slices"), cat=bool(ch.get("slices")))
    if parallel_residual:
        _parallel_residual(t, x_in, layer_norms, keeps_input=not stack or norm == "layernorm")
    if finetune:  # frozen weights with LoRA adapters (dse.formulas.finetune)
        t = _finetune.apply_layer(t, tok=tok, tp=tp, ffn_type=ffn_type, ffn_elements=tok * f_loc,
                                  bytes_per_element=e, sequence_parallel=sequence_parallel,
                                  comm_bytes_per_element=comm_bytes_per_element, **finetune)
    if fp8:  # Transformer Engine's FP8 linear layers (dse.formulas.fp8)
        routed: Num = 0
        if moe and moe["experts"] > 1:    # the routed copies the grouped GEMMs run: the expert activation's rows
            f_exp = moe["expert_ffn"] if not split else moe["expert_ffn"] / tp    # (C T k padded, kept ones capped)
            routed = t["expert_activation"]["elements"] / f_exp
        t = _fp8.apply_layer(t, scaling=fp8, bytes_per_element=e, ffn_type=ffn_type, ffn_elements=tok * f_loc,
                             routed_tokens=routed, input_elements=x_in / e)
    if full:   # the checkpoint keeps the layer input; the rest is held only while the layer runs again
        for row in t.values():
            row["rerun"], row["saved"] = row["saved"], 0
            row.pop("packed", None)
        t["norm1"]["saved"] = x_in
    return t


def _parallel_residual(t: Table, x_in: Num, layer_norms: int, keeps_input: bool) -> None:
    """A parallel-residual layer's table, in place (see :func:`layer_kernels`): norm2 does not keep the layer input
    again (where the norm keeps its input: Megatron's norms, PyTorch's LayerNorm), one forward all-reduce, and with
    one shared norm one backward all-reduce."""
    if "norm2" in t and keeps_input:    # the hooks still pack its input (once per autograd node)
        t["norm2"] = {**t["norm2"], "saved": t["norm2"]["saved"] - x_in,
                      "packed": t["norm2"].get("packed", t["norm2"]["saved"])}
    del t["attn_allreduce"]
    if layer_norms == 1:
        del t["fc1_dgrad_allreduce"]
