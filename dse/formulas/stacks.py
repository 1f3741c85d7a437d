"""A software stack as data on the kernel table: the element-wise kernels, saved tensors and loss of a framework.

The kernel table (:mod:`dse.formulas.kernels`) is built with Megatron-LM's fused kernels. Another
stack (``stacks/*.yaml`` in the catalog) replaces, per table row, what the row's element-wise
kernels move and what the row saves for backward, and adds rows the framework runs that Megatron
does not (copies, bias-gradient reductions, gradient accumulation). An amount is a number of
*passes* over a tensor -- one read or one write of each of its elements -- keyed by the tensor's
size (:func:`sizes`) and dtype; :func:`amount` turns it into bytes.

A stack op (one entry of the file, already resolved to the model's variant) is a dict:
``forward``/``backward``: ``{"kernels": n, "moves": {key: passes}}``; ``saved``, ``packed`` and ``transient``:
``{key: tensors}``; ``when``: a list of conditions, any of which enables an added row; ``frozen``: the ``saved``
and ``packed`` that replace the op's when its weights are frozen (LoRA; the choice ``frozen``). A key is
``size`` (the activation dtype) or ``size:dtype`` (``fp32`` 4 bytes, ``byte`` 1, ``grad`` the
gradient dtype).

Symbols:
    s: sequence length [count]
    b: micro-batch size [count]
    h: hidden size [count]
    heads: a, attention heads [count]
    kv_heads: kv, key/value heads [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    vocab: V, vocabulary size [count]
    tp: t, tensor-parallel degree [count]
    sequence_parallel: Megatron sequence parallelism (layer-wide tensors sharded over t) [bool]
    layer_params: parameters of one layer on this GPU [count]
    param_tensors: parameter tensors of one layer [count]
    size: element counts of the tensors a stack names, as :func:`sizes` returns [dict]
    passes: passes per tensor, keyed size or size:dtype [dict]
    bytes_per_element: e, bytes per activation element [bytes]
    grad_bytes: bytes per gradient element [bytes]
    table: kernel name -> row, as dse.formulas.kernels builds it [dict]
    ops: the stack's ops resolved for the model: entry -> op (dse.specs.stack.StackSpec.ops) [dict]
    choices: the plan's attention, recompute, bias and dropout [dict]
    op: one stack op [dict]
    n: a GEMM dimension [count]
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num

__all__ = ["DTYPE_BYTES", "sizes", "amount", "apply_layer", "apply_head", "apply_embedding", "aligned",
           "transient_bytes", "qk_sizes"]

#: Bytes per element of the dtypes a stack names explicitly (``act`` and ``grad`` come from the precision recipe).
DTYPE_BYTES = {"fp32": 4, "byte": 1, "int64": 8}

Op = dict[str, Any]
Row = dict[str, Any]
Table = dict[str, Row]
Sizes = dict[str, Num]


def sizes(s: Num, b: Num, h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, vocab: Num, *, tp: Num = 1,
          sequence_parallel: bool = False, layer_params: Num = 0, param_tensors: Num = 0) -> dict[str, Num]:
    """Element counts of the tensors a stack's amounts are keyed by, on one GPU for one micro-batch.

    Formula: tok = s b; h = s b h r (r = 1/t with SP, else 1); q = s b a d / t; kv = s b kv d / t; qkv = q + 2 kv;
    f = s b F / t; scores = b (a/t) s^2; heads = s b a / t; logits = s b V / t; table = V h / t; rope = s d (one
    rotary cos or sin table: positions x head dimension, shared by the micro-batch's sequences)
    Source: the shapes of a transformer layer's tensors under Megatron-LM tensor parallelism (Shoeybi et al. 2019,
    arXiv 1909.08053 §3).

    Returns:
        size name -> elements [dict]

    >>> z = sizes(1024, 4, 1600, 25, 25, 64, 6400, 50257)   # GPT-2 XL, micro-batch 4
    >>> z["h"], z["f"], z["scores"], z["logits"]
    (6553600, 26214400, 104857600, 205852672)
    >>> import numpy as np
    >>> sizes(1024, np.array([1, 8]), 1600, 25, 25, 64, 6400, 50257)["h"]   # micro-batches 1 and 8
    array([ 1638400, 13107200])
    """
    def per_gpu(x: Num) -> Num:      # x / t, an integer stays one when the layer is not split
        return x if type(tp) is int and tp == 1 else x / tp

    tok = s * b
    r = 1 / tp if sequence_parallel else 1
    q = per_gpu(tok * heads * head_dim)
    kv = per_gpu(tok * kv_heads * head_dim)
    return {"tok": tok, "h": tok * h * r, "q": q, "kv": kv, "qkv": q + 2 * kv, "f": per_gpu(tok * ffn),
            "scores": per_gpu(b * heads * s * s), "heads": per_gpu(tok * heads), "logits": per_gpu(tok * vocab),
            "table": per_gpu(vocab * h), "rope": s * head_dim + 0 * tok, "params": layer_params,
            "param_tensors": param_tensors}


def amount(passes: dict[str, Num], size: Sizes, bytes_per_element: Num = 2, grad_bytes: Num = 2) -> Num:
    """Bytes of a stack amount: passes over tensors of the named sizes and dtypes.

    Formula: sum over keys of passes x elements(size) x bytes(dtype); dtype act = e, grad = the gradient dtype,
    fp32 = 4, byte = 1
    Source: the bytes an element-wise kernel reads and writes in HBM (Williams et al. 2009, roofline: a
    memory-bound kernel's time is its bytes over the bandwidth).

    Returns:
        bytes [bytes]

    >>> z = sizes(1024, 4, 1600, 25, 25, 64, 6400, 50257)
    >>> round(amount({"logits": 1, "logits:fp32": 5}, z) / 2**30, 4)   # logits.float() and log_softmax: GiB
    4.2177
    """
    total: Num = 0
    for key, n in passes.items():
        name, _, dtype = key.partition(":")
        per = bytes_per_element if dtype == "" else (grad_bytes if dtype == "grad" else DTYPE_BYTES[dtype])
        total = total + n * size[name] * per
    return total


def _enabled(op: Op, choices: dict[str, Any]) -> bool:
    """Whether an added row runs: any of its ``when`` conditions holds (no ``when``: always).

    A condition maps a choice (``attention``, ``recompute``, ``bias``) to a value or a list of values; all must match.
    """
    when = op.get("when")
    if not when:
        return True
    for cond in when:
        if all(choices.get(k) in (v if isinstance(v, list) else [v]) for k, v in cond.items()):
            return True
    return False


def _elementwise(op: Op, size: Sizes, e: Num, g: Num, saved: Num | None = None, pack: bool = True) -> Row:
    """One element-wise row of a stack op: forward and backward bytes and kernels, saved and packed bytes."""
    fwd, bwd = op.get("forward", {}), op.get("backward", {})

    def count(x: Any) -> Any:
        return size[x] if isinstance(x, str) else x

    return {"kind": "elementwise", "bytes": amount(fwd.get("moves", {}), size, e, g),
            "bytes_backward": amount(bwd.get("moves", {}), size, e, g),
            "kernels": count(fwd.get("kernels", 0)), "kernels_backward": count(bwd.get("kernels", 0)),
            "saved": amount(op.get("saved", {}), size, e, g) if saved is None else saved,
            **(_packed(op, size, e, g) if pack else {}), **_rated(fwd, "", size, e, g), **_rated(bwd, "_backward", size,
                                                                                            e, g)}


def _rated(side: dict[str, Any], suffix: str, size: Sizes, e: Num, g: Num) -> Row:
    """The parts of a pass's moves that run below the plain element-wise rate, where the stack names them.

    ``strided``: bytes of kernels on PyTorch's non-vectorized element-wise path with operands in different orders
    (a transposed view: ``elementwise_kernel``); ``unvectorized``: bytes of kernels whose operands share one order
    but cannot take 16-byte accesses (a broadcast operand or a slice: ``elementwise_kernel``; a dtype-converting
    copy: ``unrolled_elementwise_kernel``); each with ``..._passes``, the same passes at the activation's width
    whatever their dtype: those paths are bound per element (offset and cast arithmetic), not per byte -- an fp32
    pass costs what a bf16 one does (scripts/trace_paths.py, scripts/kernel_rates.py);
    ``softmax``: bytes of the row softmax kernel, and ``softmax_elements`` the elements it processes (each
    element of each named tensor once, whatever its passes and dtype).
    """
    out: Row = {}
    for part in ("strided", "unvectorized"):
        if side.get(part):
            out[part + suffix] = amount(side[part], size, e, g)
            even: dict[str, Any] = {}
            for k, n in side[part].items():
                even[k.partition(":")[0]] = even.get(k.partition(":")[0], 0) + n
            out[part + "_passes" + suffix] = amount(even, size, e, g)
    if side.get("softmax"):
        out["softmax" + suffix] = amount(side["softmax"], size, e, g)
        out["softmax_elements" + suffix] = amount({k.partition(":")[0]: 1 for k in side["softmax"]}, size, 1, 1)
    return out


def _packed(op: Op, size: Sizes, e: Num, g: Num) -> Row:
    """``{"packed": bytes}`` where the op packs other than what it keeps (its ``packed`` amount), else nothing.

    What saved-tensor hooks see (``torch.autograd.graph.save_on_cpu``): every tensor each autograd node saves,
    once per node and at the tensor's own size -- where ``saved`` counts each buffer alive once.
    """
    return {"packed": amount(op["packed"], size, e, g)} if "packed" in op else {}


def _scaled(row: Row, ratio: Num) -> Row:
    """An element-wise row over ``ratio`` times the elements: bytes and saved bytes scale, the kernels do not."""
    return {k: v * ratio if k in _SCALED else v for k, v in row.items()}


_SCALED = ("bytes", "bytes_backward", "saved", "packed", "strided", "strided_backward", "strided_passes",
           "strided_passes_backward", "unvectorized", "unvectorized_backward", "unvectorized_passes",
           "unvectorized_passes_backward", "softmax", "softmax_backward", "softmax_elements",
           "softmax_elements_backward")


def _norm(op: Op, choices: dict[str, Any]) -> Op:
    """A norm op, or what it keeps instead with frozen weights (LoRA: its ``frozen`` amounts)."""
    return {**op, **op["frozen"]} if choices.get("frozen") and "frozen" in op else op


def _twice(row: Row) -> Row:
    """A QK-norm row: q_norm and k_norm are two modules, each launching the norm's kernels (its bytes already span
    q and k: :func:`qk_sizes`). Traced (transformers 5.24, CPU, per layer forward with SDPA): Qwen3-0.6B 54 aten ops
    against Llama's 38 (2 x 8 RMSNorm ops), Gemma 3 1B 82; the H200 profiles' recomputed forward per layer
    (data/h200/vm2: full minus none recompute over the layers): Qwen3-0.6B 55, Gemma 3 1B 84.5."""
    return {**row, "kernels": 2 * row["kernels"], "kernels_backward": 2 * row["kernels_backward"]}


def qk_sizes(size: Sizes, full: bool = False) -> Sizes:
    """The sizes a QK-norm's amounts read: the norm over head_dim of each query and key head.

    Formula: h -> q + kv (the normed elements), tok -> (q + kv) / d = (q + kv) heads / q (one row per head and token);
    ``full`` (OLMo 2: the norm over the whole query and key projections): tok -> 2 tok (one row each per token)
    Source: Qwen3 / Gemma 3 q_norm and k_norm (transformers 5.24: the layer's RMSNorm module over head_dim); OLMo 2's
    Olmo2Attention (q_norm over a d, k_norm over kv d).

    Args:
        full: the QK-norm spans the whole query and key projections (OLMo 2) [bool]
    Returns:
        size name -> elements, as :func:`sizes` [dict]

    >>> z = sizes(1024, 2, 1152, 4, 1, 256, 6912, 262144)       # Gemma 3 1B: 4 query heads, 1 K/V head of 256
    >>> q = qk_sizes(z); q["h"] == 2048 * 5 * 256, q["tok"] == 2048 * 5
    (True, True)
    """
    rows = 2 * size["tok"] if full else (size["q"] + size["kv"]) * size["heads"] / size["q"]
    return {**size, "h": size["q"] + size["kv"], "tok": rows}


def apply_layer(table: Table, ops: dict[str, Op], size: Sizes, choices: dict[str, Any], *,
                bytes_per_element: Num = 2, grad_bytes: Num = 2) -> Table:
    """A layer's kernel table (built without recomputation) with a stack's element-wise kernels and saved tensors.

    Formula: each element-wise row's bytes, kernels and saved bytes from the stack op that names it (norm1, norm2:
    ``norm``; the QK-norm: ``qk_norm`` over :func:`qk_sizes`, where it has a weight; the residual adds:
    ``residual``; ``activation``; ``rotary``); the attention core's saved bytes and its
    copies from ``flash`` or ``math`` (eager attention's dropout: ``score_dropout``); added rows (``dropout``,
    ``kv_copy``, ``kv_repeat``, ``qkv_inputs``, ``qkv_grads``, ``rotary_grads``, ``query_scale``, ``bias_grads``,
    ``grad_accumulate``, eager attention's logit soft-capping ``softcap``, Granite's branch scale ``residual_scale``,
    OLMo 2's fp32 rotary ``rotary_fp32`` (Cohere's upcast q and k: ``rotary_upcast``), a fused projection's gradient
    cat under grouped eager attention ``qkv_grad_cat``, GPT-J's MLP-only biases ``mlp_bias_grads``, Q/K/V-only
    ``qkv_bias_grads``, attention-only ``attn_bias_grads``, per-layer rotary tables ``rotary_tables``, and Phi-3's
    slices of its fused projection ``qkv_slices``) where enabled; no ``rotary_grads`` copies where the rotary runs
    before the heads are transposed (GPT-J: ``rotary_before_transpose``)
    Source: the framework's op trace, as recorded in the stack file (stacks/*.yaml).

    GEMM rows keep their shapes and what they save (their inputs); fc2's input is counted by ``activation``. MoE: the
    expert and shared activations are ``activation`` over their own elements (T k F_e / t, T S F_s / t; the experts'
    ``expert_glu`` where given); routing, permute, unpermute the stack's ``moe_*`` (saved bytes kept), the expert GEMMs
    then ``grouped_mm`` (Transformers' experts). Gemma 2's extra norms are its ``norm``.

    Returns:
        kernel name -> row [dict]

    >>> z = sizes(1024, 1, 1600, 25, 25, 64, 6400, 50257)
    >>> gelu = {"forward": {"kernels": 8, "moves": {"f": 18}}, "backward": {"kernels": 11, "moves": {"f": 28}},
    ...         "saved": {"f": 5}}
    >>> t = apply_layer({"activation": {"kind": "elementwise", "bytes": 1, "saved": 1}}, {"activation": gelu}, z, {})
    >>> t["activation"]["bytes"] / (2 * 1024 * 6400), t["activation"]["kernels_backward"]   # passes; kernels
    (18.0, 11)
    """
    e, g = bytes_per_element, grad_bytes
    out: Table = {}
    for name, row in table.items():
        if name in ("norm1", "norm2", "post_attn_norm", "post_mlp_norm") and "norm" in ops:
            out[name] = _elementwise(_norm(ops["norm"], choices), size, e, g)
        elif name == "qk_norm" and "qk_norm" in ops and choices.get("qk_norm_weight", True):
            out[name] = _twice(_elementwise(_norm(ops["qk_norm"], choices),
                                            qk_sizes(size, choices.get("qk_norm_full", False)), e, g))
        elif name in ("attn_residual", "mlp_residual") and "residual" in ops:
            out[name] = _elementwise(ops["residual"], size, e, g)
        elif name in ("activation", "rotary") and name in ops:
            out[name] = _elementwise(ops[name], size, e, g)
        elif name in ("expert_activation", "shared_activation") and "activation" in ops:   # T k F_e elements
            routed = name[0] == "e" and "permute" in table        # the experts of a routed layer (E > 1)
            op = ops.get("expert_glu", ops["activation"]) if routed else ops["activation"]
            out[name] = _scaled(_elementwise(op, size, e, g), row["elements"] / size["f"])
        elif name in ("routing", "permute", "unpermute") and "moe_" + name in ops:   # Transformers' MoE block
            out[name] = _elementwise(ops["moe_" + name], size, e, g, saved=row["saved"])
        elif name in ("expert_fc1", "expert_fc2") and "moe_permute" in ops and "permute" in table:   # grouped_mm
            out[name] = {**row, "grouped_mm": True}
        elif name == "fc2" and "activation" in ops:
            out[name] = {**row, "saved": 0}
        elif name == "attention" and "flash" in ops:       # a fused kernel: its saved tensors, then its copies
            out[name] = {**row, "saved": amount(ops["flash"].get("saved", {}), size, e, g),
                         **_packed(ops["flash"], size, e, g)}
            out["attention_copies"] = _elementwise(ops["flash"], size, e, g, saved=0, pack=False)
        elif name in ("score", "context") and "math" in ops:
            out[name] = {**row, "saved": 0}
        elif name == "softmax" and "math" in ops:
            out[name] = {**_elementwise(ops["math"], size, e, g), "selective": True}
        elif name == "attn_dropout" and "math" in ops:      # the stack's own score dropout, where enabled
            if "score_dropout" in ops and _enabled(ops["score_dropout"], choices):
                out[name] = {**_elementwise(ops["score_dropout"], size, e, g), "selective": True}
        else:
            out[name] = row
    for name in ("dropout", "kv_copy", "kv_repeat", "qkv_inputs", "qkv_grads", "rotary_grads", "query_scale",
                 "bias_grads", "grad_accumulate", "softcap", "residual_scale", "rotary_fp32", "rotary_upcast",
                 "qkv_grad_cat", "mlp_bias_grads", "rotary_tables", "qkv_bias_grads", "attn_bias_grads", "qkv_slices"):
        if name in ops and _enabled(ops[name], choices):
            out[name] = _elementwise(ops[name], size, e, g)
            if name == "softcap":         # part of the attention core: selective recompute runs it again
                out[name]["selective"] = True
    if "qkv_grad_cat" in out and "softmax" in out:
        _repeat_kv_fused(out, size, e, choices)
    if choices.get("rotary_before_transpose"):   # GPT-J: the q, k gradients leave rotary in the projections' layout
        out.pop("rotary_grads", None)
    return out


def _repeat_kv_fused(out: Table, size: Sizes, e: Num, choices: dict[str, Any]) -> None:
    """A fused projection under grouped eager attention (GPTBigCode multi-query), in place: no K and V gradient copies
    (repeat_kv's backward sums them contiguous; the fp32 variant's kv: 4 backward passes, 2 kernels), and the K/V copies
    are the cache's only (not run without it, not saved: the matmuls save repeat_kv's, counted by ``math``).
    Source: the aten trace of GPTBigCodeForCausalLM (scripts/trace_stack.py gpt_bigcode, eager runs)."""
    row = out["softmax"]
    out["softmax"] = {**row, "bytes_backward": row["bytes_backward"] - 4 * e * size["kv"],
                      "kernels_backward": row["kernels_backward"] - 2}
    if "kv_copy" in out:
        if choices.get("kv_cache"):
            out["kv_copy"] = {**out["kv_copy"], "saved": 0, "packed": 0}
        else:
            del out["kv_copy"]


def apply_head(table: Table, ops: dict[str, Op], size: Sizes, *, bytes_per_element: Num = 2,
               choices: dict[str, Any] | None = None) -> Table:
    """The output side's table with a stack's final norm and loss (the loss adds what is live beside it).

    Formula: final_norm and loss rows' bytes, kernels and saved bytes from the stack; the loss row's
    ``transient``: tensors live at the start of the backward pass beside everything saved (the gradient of the
    log-softmax output and its input gradient); the final-logit soft-capping ``logit_softcap`` and Granite's
    logit division ``logit_scale`` where enabled
    Source: the framework's op trace (stacks/*.yaml); PyTorch's log_softmax/nll_loss autograd formulas.

    Returns:
        kernel name -> row [dict]

    >>> z = sizes(1024, 8, 1600, 25, 25, 64, 6400, 50257)
    >>> loss = {"saved": {"logits:fp32": 1}, "transient": {"logits:fp32": 2}}
    >>> t = apply_head({"loss": {"kind": "elementwise", "bytes": 0, "saved": 0}}, {"loss": loss}, z)
    >>> (t["loss"]["saved"] + t["loss"]["transient"]) / z["logits"]   # bytes per logit live at the peak
    12.0
    """
    e = bytes_per_element
    out = dict(table)
    if "final_norm" in out and "final_norm" in ops:
        out["final_norm"] = _elementwise(ops["final_norm"], size, e, e)
    if "loss" in ops:   # the stack's own loss: not Megatron's vocab-parallel one and its all-reduces
        out = {k: v for k, v in out.items() if not (k.startswith("loss_") and v["kind"] == "collective")}
        loss = _elementwise(ops["loss"], size, e, e)
        loss["transient"] = amount(ops["loss"].get("transient", {}), size, e, e)
        for name in ("logit_softcap", "logit_scale"):
            if name in ops and _enabled(ops[name], choices or {}):
                out[name] = _elementwise(ops[name], size, e, e)
        out["loss"] = loss
    return out


def apply_embedding(table: Table, ops: dict[str, Op], size: Sizes, *, bytes_per_element: Num = 2,
                    choices: dict[str, Any] | None = None) -> Table:
    """The input side's table with a stack's embedding kernels (time; the saved token ids stay as counted).

    Formula: the embedding row's bytes and kernels from the stack's ``embedding`` op; the scale by sqrt(h)
    ``embedding_scale`` (Gemma) where enabled
    Source: the framework's op trace (stacks/*.yaml).

    Returns:
        kernel name -> row [dict]

    >>> z = sizes(1024, 8, 1600, 25, 25, 64, 6400, 50257)
    >>> emb = {"forward": {"kernels": 3, "moves": {"h": 5}}, "backward": {"kernels": 4, "moves": {"h": 2, "table": 4}}}
    >>> t = apply_embedding({"embedding": {"kind": "elementwise", "bytes": 0, "saved": 7}}, {"embedding": emb}, z)
    >>> t["embedding"]["saved"], t["embedding"]["kernels"]   # the token ids stay as counted
    (7, 3)
    """
    out = dict(table)
    if "embedding" in ops and "embedding" in out:   # the stack's own backward moves the table's gradient
        out.pop("embedding_grad", None)
        out.pop("embedding_mask", None)
        out["embedding"] = _elementwise(ops["embedding"], size, bytes_per_element, bytes_per_element,
                                        saved=out["embedding"]["saved"])
    if "embedding_scale" in ops and _enabled(ops["embedding_scale"], choices or {}):
        out["embedding_scale"] = _elementwise(ops["embedding_scale"], size, bytes_per_element, bytes_per_element)
    return out


def aligned(n: Num, bytes_per_element: Num = 2) -> Num:
    """Whether a GEMM dimension is a multiple of 16 bytes, the alignment tensor-core GEMM kernels need.

    Formula: (n e) mod 16 = 0
    Source: NVIDIA cuBLAS / CUTLASS: tensor-core kernels load operands in 16-byte vectors; a leading dimension that
    is not a multiple of 16 bytes falls back to 1-element-aligned kernels (the ``align1`` kernels the measured GPT-2
    profiles show for the 50,257-word LM head, data/h100_hf_training.jsonl kind profile).

    Returns:
        1 if aligned, else 0 [bool]

    >>> aligned(50257), aligned(50304)
    (0, 1)
    """
    return ((n * bytes_per_element) % 16 == 0) * 1


def transient_bytes(table: Table) -> Num:
    """Bytes a table's kernels hold beside every saved tensor at the start of the backward pass (the loss's).

    Formula: sum over rows of transient
    Source: PyTorch's autograd of log_softmax and nll_loss: the backward of nll_loss allocates the gradient of the
    log-probabilities, log_softmax's backward its input gradient, while the saved log-probabilities are still held.

    Returns:
        bytes [bytes]

    >>> transient_bytes({"loss": {"transient": 8.0}, "lm_head": {}})
    8.0
    """
    total: Num = 0
    for row in table.values():
        total = total + row.get("transient", 0)
    return total
