"""Fine-tuning with frozen weights: LoRA adapters, QLoRA's quantized base, and the kernels they change.

Full training (``finetune: full``) updates every weight. An MoE layer's adapters (one per expert) and quantized
linear weights: :mod:`dse.formulas.finetune.moe`; multi-head latent attention's: :mod:`dse.formulas.finetune.mla`.
LoRA (Hu et al. 2021, arXiv 2106.09685 §4.1) freezes the pretrained weights ``W`` (d_out x d_in) of chosen linear
layers and trains a low-rank update beside each: ``y = W x + (alpha / r) B A x`` with ``A`` (r x d_in) and ``B``
(d_out x r). QLoRA (Dettmers et al. 2023, arXiv 2305.14314 §3) stores the frozen linear weights in 4-bit
NormalFloat with double quantization and dequantizes each to bf16 before its GEMM, in forward and again in
backward; LoRA in 8-bit keeps them in int8 (LLM.int8, Dettmers et al. 2022, arXiv 2208.07339). Every other
parameter (embeddings, norms, biases, the LM head) is frozen in the working dtype.

What changes against full training, per layer (the kernel table, :mod:`dse.formulas.kernels`):

- a frozen linear layer's backward runs only its data-gradient GEMM (``dX = dY W``): one GEMM, not two; the
  rows are marked ``frozen``;
- a frozen linear layer with no adapter keeps nothing for backward (autograd saves a GEMM's input only for its
  weight gradient): its input is no longer saved;
- each adapter adds two GEMMs forward (``A x``, then ``B (A x)``) and four backward, keeps ``A x`` (r values
  per token) for ``B``'s gradient, and element-wise work to scale its output and add it to the base output
  (forward) and to sum the two input gradients (backward);
- QLoRA adds a dequantization kernel per frozen linear layer, forward and backward: it reads the packed
  weight and writes a bf16 copy.

Adapters follow the base layer's tensor parallelism as PEFT splits them (``layout`` peft: ``B`` split on a
column-parallel layer, ``A`` on a row-parallel one) or as Megatron-Bridge does (megatron: both, with collectives of
their own): :mod:`dse.formulas.finetune.tensor_parallel`.

Symbols:
    h: hidden size [count]
    heads: a, attention heads [count]
    kv_heads: kv, key/value heads [count]
    head_dim: d, head dimension [count]
    ffn: F, FFN inner size [count]
    ffn_type: gelu, relu or swiglu (gate and up projections) [choice]
    ffn_elements: elements of the MLP's inner tensor on this GPU, s b F / t [count]
    qkv_projection: fused (one QKV linear, GPT-2's c_attn) or separate (q, k, v linears) [choice]
    targets: all, attention, qv or mlp: which linear layers get adapters [choice]
    rank: r, LoRA rank [count]
    tp: t, tensor-parallel degree [count]
    fmt: nf4 or int8, the frozen linear weights' storage format [choice]
    in_features: d_in of a quantized linear layer (int8's per-row scale) [count]
    table: a layer's kernel table (kernel name -> row) [dict]
    adapters: kernel-table row -> list of (d_in, d_out) adapters on it [dict]
    tok: tokens of one micro-batch, s b [count]
    bytes_per_element: e, bytes per activation element [bytes]
    quantized_bytes: bytes per frozen linear weight as stored [bytes]
    layer_linear_params: a layer's linear weights on this GPU [count]
    linears: frozen linear layers of a layer (their dequantization kernels) [count]
    lora_dropout: p, PEFT's dropout on each adapter's input (0: none) [fraction]
    mask_bytes: bytes per element of a dropout mask (CUDA's fused dropout: a bool) [bytes]
    experts: E, routed experts of an MoE layer (adapter_parameters: those on one GPU, E / ep) [count]
    expert_ffn: F_e, a routed expert's FFN inner size [count]
    shared_ffn: S F_s, the shared experts' FFN inner size together (0: none) [count]
    shared_gate: a sigmoid gate h x 1 on the shared experts' output [bool]
    shared: the MoE layer has shared experts [bool]
    ep: expert-parallel degree (E / ep experts on a GPU) [count]
    etp: expert tensor-parallel degree: the routed experts (and their adapters) split over etp GPUs (None: tp) [count]
    moe_linear_params: an MoE layer's attention and MoE linear weights on one GPU (QLoRA's dequantization) [count]
    moe_linears: an MoE layer's linear modules on one GPU (its dequantization kernels) [count]
    q_lora: d_c', multi-head latent attention's query latent rank (0: a plain query projection) [count]
    kv_lora: d_c, multi-head latent attention's K/V latent rank [count]
    nope: d_nope, MLA's per-head query/key dimension without positions [count]
    rope: d_R, MLA's per-head decoupled rotary dimension [count]
    v_dim: d_v, MLA's per-head value dimension [count]
    layout: peft or megatron, how tensor parallelism splits an adapter (LORA_LAYOUTS) [choice]
    d_in: an adapted linear layer's input features (A is r x d_in) [count]
    d_out: an adapted linear layer's output features (B is d_out x r) [count]
    split: column or row, how tensor parallelism splits the adapted linear layer [choice]
    prefix: the name the adapter's kernel-table rows start with (lora_<row>_<i>) [name]
    sequence_parallel: Megatron sequence parallelism [bool]
    comm_bytes_per_element: c, bytes per element of the tensor-parallel messages (None: e) [bytes]
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num, maximum
from dse.formulas.finetune.dropout import dropout_rows
from dse.formulas.finetune.mla import (
    MLA_ROWS,
    _replicated_adapter_rows,
    mla_adapted_linears,
    mla_largest_linear,
    mla_linear_count,
    mla_linear_parameters,
)
from dse.formulas.finetune.moe import (
    _MOE_ROWS,
    _ROUTER_INPUT,
    EXPERT_ROWS,
    GATED,
    LINEAR_ROWS,
    _dims,
    _moe_adapter_rows,
    _row_tokens,
    _split,
    moe_adapted_linears,
    moe_linear_count,
    moe_linear_parameters,
)
from dse.formulas.finetune.tensor_parallel import (
    LORA_LAYOUTS,
    MEGATRON_ROWS,
    megatron_adapter_parameters,
    megatron_adapter_rows,
)

__all__ = ["GATED", "FINETUNES", "LORA_TARGETS", "QUANTIZATIONS", "EXPERT_ROWS", "quantized_bytes_per_param",
           "adapted_linears", "adapter_parameters", "linear_parameters", "largest_linear", "linear_count",
           "apply_layer", "dropout_rows", "moe_adapted_linears", "moe_linear_parameters", "moe_linear_count",
           "MLA_ROWS", "mla_adapted_linears", "mla_linear_parameters", "mla_linear_count", "mla_largest_linear",
           "LORA_LAYOUTS", "MEGATRON_ROWS", "megatron_adapter_parameters", "megatron_adapter_rows"]

FINETUNES = ("full", "lora", "qlora")
LORA_TARGETS = ("all", "attention", "qv", "mlp")
QUANTIZATIONS = ("nf4", "int8")


def quantized_bytes_per_param(fmt: str = "nf4", in_features: Num = 4096) -> Num:
    """Bytes per frozen linear weight as QLoRA stores it, quantization constants included.

    Formula: nf4 with double quantization: (4 + 8/64 + 32/(64 x 256)) / 8 = 0.5159 (4-bit values; an 8-bit absmax
    per block of 64; an fp32 constant per 256 of those); int8: 1 + 4 / d_in (an fp32 scale per output row)
    Source: Dettmers et al. 2023 (QLoRA, arXiv 2305.14314) §3 "Double Quantization": the constants fall from
    32/64 = 0.5 to 8/64 + 32/(64 x 256) = 0.127 bits per parameter; Dettmers et al. 2022 (LLM.int8(), arXiv
    2208.07339) §3: vector-wise (row) quantization with one fp32 scale per row.

    Returns:
        bytes per parameter [bytes]

    >>> round(quantized_bytes_per_param("nf4"), 4), quantized_bytes_per_param("int8", 4096)
    (0.5159, 1.0009765625)
    """
    if fmt == "nf4":
        return (4 + 8 / 64 + 32 / (64 * 256)) / 8
    return 1 + 4 / in_features


def adapted_linears(h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, ffn_type: str = "gelu",
                    qkv_projection: str = "fused", targets: str = "all") -> dict[str, list[tuple[Num, Num]]]:
    """The adapters of one layer: kernel-table row -> (d_in, d_out) of each adapted linear layer on it.

    Formula: attention rows: q (h, a d), k (h, kv d), v (h, kv d) when the projections are separate (qv: q and v;
    a fused QKV layer is one adapter, h -> (a + 2kv) d), out (a d, h); MLP rows: gate and up (h, F) each for
    SwiGLU, else fc1 (h, F); fc2 (F, h). ``all`` adapts every linear layer (QLoRA §4), ``attention`` the
    attention projections, ``qv`` only q and v (PEFT's default for Llama), ``mlp`` the MLP
    Source: Hu et al. 2021 (LoRA, arXiv 2106.09685) §4.2 and §7.1 (which weights to adapt); Dettmers et al. 2023
    (QLoRA) §4 "LoRA on all linear transformer block layers"; Hugging Face PEFT's target modules.

    Returns:
        row -> list of (d_in, d_out) [dict]

    >>> adapted_linears(4096, 32, 32, 128, 11008, "swiglu", "separate", "qv")
    {'qkv': [(4096, 4096), (4096, 4096)]}
    >>> adapted_linears(1024, 16, 16, 64, 4096, "gelu", "fused", "all")["qkv"]   # GPT-2's c_attn: one adapter
    [(1024, 3072)]
    """
    q, kv = heads * head_dim, kv_heads * head_dim
    out: dict[str, list[tuple[Num, Num]]] = {}
    if targets in ("all", "attention", "qv"):
        if qkv_projection == "fused":
            out["qkv"] = [(h, q + 2 * kv)]
        else:
            out["qkv"] = [(h, q), (h, kv)] if targets == "qv" else [(h, q), (h, kv), (h, kv)]
    if targets in ("all", "attention"):
        out["out"] = [(q, h)]
    if targets in ("all", "mlp"):
        out["fc1"] = [(h, ffn), (h, ffn)] if ffn_type in GATED else [(h, ffn)]
        out["fc2"] = [(ffn, h)]
    return out


def adapter_parameters(adapters: dict[str, list[tuple[Any, ...]]], rank: Num, tp: Num = 1,
                       experts: Num = 1, etp: Num | None = None, layout: str = "peft") -> Num:
    """Trainable parameters of one layer's adapters on one GPU.

    Formula: sum over adapters of r (d_in + d_out / t) on a column-parallel layer, r (d_in / t + d_out) on a
    row-parallel one (t = 1: r (d_in + d_out)), r (d_in + d_out) on a replicated one (an MoE router); an adapter
    (d_in, d_out, n) has rank n r; the routed experts' rows (``EXPERT_ROWS``) have one adapter per expert on the
    GPU (``experts``: E / ep), split over ``etp`` (expert tensor parallelism; None: tp) as their experts are;
    ``layout`` megatron: r (d_in + d_out) / t on the rows of ``MEGATRON_ROWS`` (both matrices split,
    :func:`megatron_adapter_parameters`)
    Source: Hu et al. 2021 (LoRA) §4.1: A is r x d_in, B is d_out x r; PEFT's ``LoraParallelLinear``;
    Hugging Face PEFT's ``ParamWrapper`` (one pair per expert of a 3-D parameter); Megatron-Bridge
    ``peft/utils.py`` ``ParallelLinearAdapter``: an expert adapter's parallel layers take the expert-TP group
    (``_get_tensor_parallel_group(..., is_expert=True)``: ``expt_tp``).

    Returns:
        parameters [count]

    >>> a = adapted_linears(4096, 32, 32, 128, 11008, "swiglu", "separate", "all")
    >>> 32 * adapter_parameters(a, 16)   # Llama-2-7B, r 16, all linear layers (PEFT prints 39,976,960)
    39976960
    >>> 32 * adapter_parameters(a, 16, 4), 32 * adapter_parameters(a, 16, 4, layout="megatron")   # one of 4 ranks
    (21004288.0, 9994240.0)
    >>> import numpy as np
    >>> 32 * adapter_parameters(a, np.array([8, 16, 64])) / 1e6   # ranks 8, 16, 64: millions
    array([ 19.98848,  39.97696, 159.90784])
    """
    total: Num = 0
    for row, shapes in adapters.items():
        for adapter in shapes:
            if layout == "megatron" and row in MEGATRON_ROWS:
                total = total + megatron_adapter_parameters(adapter[0], adapter[1], rank, tp)
                continue
            expert = row in EXPERT_ROWS
            k_a, n_b, n = _dims(adapter, LINEAR_ROWS[row], etp if expert and etp is not None else tp)
            total = total + (experts if expert else 1) * n * rank * (k_a + n_b)
    return total


def linear_parameters(h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, ffn_type: str = "gelu",
                      tp: Num = 1) -> Num:
    """Weights of a layer's linear layers on one GPU (the weights QLoRA quantizes; no biases, no norms).

    Formula: (h (a + 2kv) d + a d h + n_m h F) / t, n_m = 3 for SwiGLU, else 2
    Source: the layer's GEMM shapes (:func:`dse.formulas.transformer.layer_parameters` without biases and norms).

    Returns:
        parameters [count]

    >>> linear_parameters(4096, 32, 32, 128, 11008, "swiglu")   # Llama-2-7B: all but its two RMSNorm weights
    202375168
    """
    n_m = 3 if ffn_type in GATED else 2
    return _split(h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h + n_m * h * ffn, tp)


def largest_linear(h: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, qkv_projection: str = "fused",
                   tp: Num = 1) -> Num:
    """Weights of the largest single linear layer on one GPU (QLoRA's dequantized copy lives while its GEMM runs).

    Formula: max(h (a + 2kv) d [fused QKV] or h a d, a d h, h F) / t
    Source: the modules of Hugging Face Transformers' layers (gate, up and down are separate linears); bitsandbytes
    dequantizes one Linear4bit's weight into a new bf16 tensor for its matmul.

    Returns:
        parameters [count]

    >>> largest_linear(4096, 32, 32, 128, 11008, "separate")   # Llama-2-7B: the MLP's h x F
    45088768
    """
    q = heads * head_dim
    attn = h * (q + 2 * kv_heads * head_dim) if qkv_projection == "fused" else h * q
    return _split(maximum(maximum(attn, q * h), h * ffn), tp)


def linear_count(ffn_type: str = "gelu", qkv_projection: str = "fused") -> int:
    """Linear layers of one layer (the dequantization kernels QLoRA launches per pass).

    Formula: 1 (fused QKV) or 3 (q, k, v) + 1 (out) + 3 (gate, up, down: SwiGLU) or 2 (fc1, fc2)
    Source: the modules of Hugging Face Transformers' layers, each a bitsandbytes Linear4bit under QLoRA.

    Returns:
        linear layers [count]

    >>> linear_count("swiglu", "separate"), linear_count("gelu", "fused")
    (7, 4)
    """
    return (1 if qkv_projection == "fused" else 3) + 1 + (3 if ffn_type in GATED else 2)


def apply_layer(table: dict[str, Any], adapters: dict[str, list[tuple[Any, ...]]], rank: Num, tok: Num, *,
                tp: Num = 1, ffn_type: str = "gelu", ffn_elements: Num = 0, bytes_per_element: Num = 2,
                quantized_bytes: Num | None = None, layer_linear_params: Num = 0, linears: Num = 0,
                lora_dropout: float = 0.0, moe_linear_params: Num = 0, moe_linears: Num = 0,
                etp: Num | None = None, layout: str = "peft", sequence_parallel: bool = False,
                comm_bytes_per_element: Num | None = None) -> dict[str, Any]:
    """A layer's kernel table when its linear weights are frozen, with LoRA adapters (and QLoRA's dequantization).

    Formula: linear rows frozen (backward = the data-gradient GEMM only); an unadapted linear row saves nothing
    (and fc2 unadapted: its input leaves the activation's saved bytes, except ReLU's, which keeps its output
    anyway); per adapter, GEMM rows A (m = tok, k = d_in, n = r) and B (m = tok, k = r, n = d_out) saving
    e tok r (A x); one element-wise row: forward 5 passes over each adapted output (scale, add), backward 2
    over each output (the scale's gradient) and 3 over each input (the input gradients summed); QLoRA: one
    element-wise row reading the packed weights and writing bf16 ones, per pass, one kernel per linear layer
    Source: Hu et al. 2021 (LoRA) §4.1; PyTorch autograd's mm formula (a GEMM saves its input only when its
    weight needs a gradient); Hugging Face PEFT's LoRA Linear forward (``result + lora_B(lora_A(x)) *
    scaling``); bitsandbytes ``dequantize_4bit`` before the GEMM (QLoRA §3, "we dequantize the storage data type
    to the computation data type to perform the forward and backward pass"). ``lora_dropout`` > 0:
    :func:`dropout_rows`.

    An MoE layer's table (:func:`dse.formulas.kernels.moe_mlp_kernels`; adapters of
    :func:`~dse.formulas.finetune.moe.moe_adapted_linears`): the router, expert and shared-expert GEMMs are frozen;
    the router keeps its input only for an adapter on it or on a shared expert, the experts' fc1 its routed copies
    only when adapted, and the expert (shared) activation drops fc2's input when that fc2 has no adapter; an
    expert's adapters are grouped GEMMs like the expert's (m = the busiest expert's tokens, one per local expert),
    A (k = d_in, n = n r), B (k = n r, n = d_out), over the T k routed tokens (FLOPs, B's saved A x and the merge's
    passes); QLoRA dequantizes the layer's attention and MoE linear weights (``moe_linear_params``, ``moe_linears``
    kernels) instead of a dense MLP's. ``etp`` (expert tensor parallelism other than tp; None: tp) splits the
    routed experts' adapters as their experts (Megatron-Bridge ``ParallelLinearAdapter(is_expert=True)`` takes the
    expert-TP group ``expt_tp``). An MLA layer's projections (``q_down``, ``q_up`` or ``q_proj``, ``kv_down``,
    ``kv_up``, ``out``; :mod:`dse.formulas.finetune.mla`) are frozen alike; the adapters of the duplicated down
    projections run on the row's m (T/t with SP) at the row's model FLOPs (once over the t ranks). Adapters on rows
    the table lacks (a dense layer's MLP in an MoE layer, the MoE rows in a dense one) are skipped. ``layout``
    megatron: the adapters on ``MEGATRON_ROWS`` split as Megatron-Bridge splits them, with their collectives
    (:func:`megatron_adapter_rows`; the merge adds the adapter's output as the base layer has it, d_out / t, or d_out
    on a row-parallel layer without SP), and under ``sequence_parallel`` an adapted column-parallel row keeps its
    gathered input, e tok k, for A (its frozen base layer keeps none).

    Returns:
        kernel name -> row [dict]

    >>> t = {"qkv": {"kind": "gemm", "m": 8, "k": 4, "n": 12, "batch": 1, "saved": 64, "flops": 768},
    ...      "fc2": {"kind": "gemm", "m": 8, "k": 16, "n": 4, "batch": 1, "saved": 0, "flops": 1024}}
    >>> out = apply_layer(t, {"qkv": [(4, 12)]}, 2, 8)
    >>> out["qkv"]["frozen"], out["qkv"]["saved"], out["fc2"]["saved"], out["lora_qkv_0_b"]["saved"]
    (True, 64, 0, 32)
    """
    e = bytes_per_element
    megatron = layout == "megatron"
    moe_table = "expert_fc1" in table
    absent = ({"fc1", "fc2"} if moe_table else set()) | (set(_MOE_ROWS) - set(table))
    adapters = {name: shapes for name, shapes in adapters.items() if name not in absent and name in table}
    out: dict[str, Any] = {}
    for name, row in table.items():
        if name in LINEAR_ROWS and row["kind"] == "gemm":
            row = {**row, "frozen": True}
            if name not in adapters and not (name == "router" and adapters.keys() & _ROUTER_INPUT):
                row["saved"] = 0
                row.pop("packed", None)
            elif megatron and sequence_parallel and MEGATRON_ROWS.get(name) == "column":
                row["saved"] = e * tok * row["k"]      # A's input: the norm output gathered over the sequence
        elif name in ("expert_activation", "shared_activation"):
            row = dict(row)
            fc2 = name.replace("activation", "fc2")
            if fc2 not in adapters and ffn_type != "relu":   # fc2's input: not kept (a stack's row: its FLOPs' size)
                elements = row.get("elements", table[fc2]["flops"] / (2 * table[fc2]["n"]))
                row["saved"] = row["saved"] - e * elements
                if "packed" in row:
                    row["packed"] = row["packed"] - e * elements
        elif name == "activation":
            row = dict(row)
            if "fc2" not in adapters:          # fc2's input, which the activation row counts, is not kept for it
                if ffn_type != "relu":         # (ReLU keeps its output anyway)
                    row["saved"] = row["saved"] - e * ffn_elements
                if "packed" in row:
                    row["packed"] = row["packed"] - e * ffn_elements
            if "fc1" not in adapters and ffn_type in GATED and "packed" in row:   # the up projection's pack of
                row["packed"] = row["packed"] - e * table["fc1"]["m"] * table["fc1"]["k"]   # the input: none now
        elif name == "qkv_inputs":             # one pack of the normed input per adapter's A (the qkv row: the first)
            x = e * table["qkv"]["m"] * table["qkv"]["k"]
            row = {**row, "packed": x * max(len(adapters.get("qkv", [])) - 1, 0)}
        out[name] = row
    fwd_passes: Num = 0
    bwd_passes: Num = 0
    n_adapters = 0
    moe_fwd: Num = 0
    moe_bwd: Num = 0
    for name, shapes in adapters.items():
        if name in MLA_ROWS and MLA_ROWS[name] == "replicated":   # MLA's down projections, whole on every TP rank
            n, fwd, bwd = _replicated_adapter_rows(out, name, shapes, table[name], rank, e)
            n_adapters, moe_fwd, moe_bwd = n_adapters + n, moe_fwd + fwd, moe_bwd + bwd
            continue
        if name in _MOE_ROWS:
            split = etp if etp is not None and name in EXPERT_ROWS else tp
            n_adapters += _moe_adapter_rows(out, name, shapes, table[name], rank, split, e)
            for adapter in shapes:
                k_a, n_b, _ = _dims(adapter, LINEAR_ROWS[name], split)
                tokens = _row_tokens(name, table[name])
                moe_fwd = moe_fwd + e * tokens * 5 * n_b
                moe_bwd = moe_bwd + e * tokens * (2 * n_b + 3 * k_a)
            continue
        column = LINEAR_ROWS[name] == "column"
        for i, (d_in, d_out) in enumerate(shapes):
            if megatron and name in MEGATRON_ROWS:   # both matrices split, their collectives (Megatron-Bridge)
                rows, k_in, n_out = megatron_adapter_rows(
                    f"lora_{name}_{i}", d_in, d_out, LINEAR_ROWS[name], rank, tok, tp=tp,
                    sequence_parallel=sequence_parallel, bytes_per_element=e,
                    comm_bytes_per_element=comm_bytes_per_element)
                out.update(rows)
                fwd_passes = fwd_passes + 5 * n_out
                bwd_passes = bwd_passes + 2 * n_out + 3 * k_in
                n_adapters += 1
                continue
            k_a, n_b = (d_in, _split(d_out, tp)) if column else (_split(d_in, tp), d_out)
            out[f"lora_{name}_{i}_a"] = {"kind": "gemm", "m": tok, "k": k_a, "n": rank, "batch": 1, "split": "",
                                         "saved": 0, "flops": 2 * tok * k_a * rank, "adapter": True}
            out[f"lora_{name}_{i}_b"] = {"kind": "gemm", "m": tok, "k": rank, "n": n_b, "batch": 1, "split": "",
                                         "saved": e * tok * rank, "flops": 2 * tok * rank * n_b, "adapter": True}
            fwd_passes = fwd_passes + 5 * n_b
            bwd_passes = bwd_passes + 2 * n_b + 3 * k_a
            n_adapters += 1
    if n_adapters:
        out["lora_merge"] = {"kind": "elementwise", "bytes": e * tok * fwd_passes,
                             "bytes_backward": e * tok * bwd_passes, "kernels": 2 * n_adapters,
                             "kernels_backward": 2 * n_adapters, "saved": 0}
        if adapters.keys() & (_MOE_ROWS | {"q_down", "kv_down"}):
            merge = out["lora_merge"]
            merge["bytes"], merge["bytes_backward"] = merge["bytes"] + moe_fwd, merge["bytes_backward"] + moe_bwd
    if lora_dropout > 0:
        dropout_rows(out, adapters, tok, tp=tp, ffn_type=ffn_type, ffn_elements=ffn_elements, bytes_per_element=e)
    if quantized_bytes is not None:
        if moe_table:   # the attention's linear weights and the MoE MLP's (router, local experts, shared)
            layer_linear_params, linears = moe_linear_params, moe_linears
        moved = layer_linear_params * (quantized_bytes + e)
        out["dequantize"] = {"kind": "elementwise", "bytes": moved, "bytes_backward": moved, "kernels": linears,
                             "kernels_backward": linears, "saved": 0}
    return out
