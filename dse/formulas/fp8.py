"""FP8 training as Transformer Engine runs it: FP8 linear GEMMs, their cast kernels, FP8 weight copies.

``precision: fp8`` (:mod:`dse.formulas.precision`) is NVIDIA Transformer Engine's recipe (TE, ``fp8_autocast``;
Micikevicius et al. 2022, "FP8 Formats for Deep Learning", arXiv 2209.05433): the linear layers' GEMMs (QKV,
attention output, MLP fc1 and fc2: forward, data gradient, weight gradient) take FP8 operands, E4M3 in forward and
E5M2 for gradients (``Format.HYBRID``), 1 byte each, with an fp32 scale per tensor, and accumulate and write in
bf16; everything else stays in bf16: attention (flash), softmax, norms, residuals, the LM head and the loss. The
bf16 working weights, fp32 master weights and optimizer states are those of bf16 mixed precision.

What it changes on the kernel table (:mod:`dse.formulas.kernels`), per layer and micro-batch:

- the four linear GEMM rows run at the ``fp8`` peak with the GPU's FP8 GEMM efficiency (``fp8`` key), their
  operands are 1 B (``operand_bytes``), and the input each keeps for its weight gradient is its FP8 copy (TE
  saves the quantized input, not the bf16 one: ``transformer_engine/pytorch/module/linear.py``,
  ``layernorm_linear.py``, ``layernorm_mlp.py``);
- cast kernels (``fp8_cast``, element-wise): every FP8 operand is produced by a kernel that reads the bf16
  tensor (e bytes per element), writes the FP8 copy (1 B) and, for Hopper's FP8 tensor cores (which take only
  the "TN" layout, so the weight gradient X^T dY needs both operands transposed), also the FP8 transpose (1 B);
  the tensor's absolute maximum (amax) is reduced in the same pass;
- delayed scaling (``DelayedScaling``, TE's original recipe): the scale comes from the amax history of earlier
  iterations, so the cast fuses into the kernel that produces the tensor: the norm before QKV and fc1 writes its
  output in FP8 (``LayerNormLinear``/``LayerNormMLP``: read e, write 1), the MLP activation writes fc2's input in
  FP8 (TE's ``fp8_gelu``/``swiglu`` with an FP8 output); the attention output (input of the output projection)
  has a fused cast + transpose (read e, write 1 + 1); in backward each output gradient dY has a fused
  cast + transpose (read e, write 1 + 1) and the inputs saved without their transpose (the norms' and the
  activation's FP8 outputs) are transposed (read 1, write 1);
- current scaling (``Float8CurrentScaling``): the scale is the tensor's own amax, known only after a full pass
  over it, so no producer can write FP8 directly: each operand takes an amax pass (read e) and a cast + transpose
  (read e, write 1 + 1), forward for the four inputs and backward for the four output gradients;
- weights: each linear weight is cast (and transposed) once per iteration, after the optimizer step; TE keeps
  the FP8 copies across the micro-batches (``is_first_microbatch``), so the cast is per iteration, not per
  micro-batch: read e, write 1 + 1 (current scaling: + e for the amax pass);
- memory: the FP8 weight and its transpose (1 + 1 B per linear weight, ``Recipe.weight_copies``) beside the bf16
  copy; the saved FP8 inputs (1 B instead of e); delayed scaling's amax histories (fp32, ``amax_history_len``,
  TE's default 1024, for the 3 forward tensors of a GEMM: input, weight, output, and the 2 backward ones: output
  gradient, input gradient) and scales: :func:`amax_bytes`, some KB per layer.

Not modelled (stated): the per-micro-batch all-reduce of the amax values over the data-parallel group (a few KB,
latency only), FP8 tensor-parallel all-gathers (the collectives stay bf16), FP8 attention (TE's optional FP8 DPA),
Blackwell's MXFP8 block scaling (no transposes needed there: the Hopper rule here is conservative for B200),
blockwise (1x128, 128x128) scales, an MoE layer's FP8 dispatch (Megatron-Core's all-to-all payload stays bf16;
DeepSeek-V3 dispatches FP8), the padding of each expert's tokens to a multiple of 16 rows (TE ``Fp8Padding``).

MoE and MLA layers (:func:`apply_layer`): the routed and shared experts and MLA's projections are Transformer Engine
linears too; the router, the permutations and the all-to-alls stay bf16.

Symbols:
    table: a layer's kernel table (kernel name -> row) [dict]
    scaling: delayed (amax history) or current (the tensor's own amax) [choice]
    bytes_per_element: e, bytes of a bf16 element [bytes]
    ffn_type: gelu, relu or swiglu [choice]
    ffn_elements: elements of fc2's input on this GPU, s b F / t [count]
    routed_tokens: routed copies the grouped expert GEMMs run on this GPU: T k, C T k padded, (1-d) T k capped [count]
    input_elements: elements of the layer's normed input as stored, s b h (/t with sequence parallelism) [count]
    elements: elements of the tensor cast to FP8 [count]
    transpose: the cast also writes the FP8 transpose (Hopper's weight-gradient layout) [bool]
    linear_params: linear weights on one GPU (those with FP8 copies) [count]
    shard_ranks: d, data-parallel ranks sharing the optimizer states (the fp32 master shards) [count]
    master_bytes: m, bytes of an fp32 master weight [bytes]
    linears: linear layers (TE modules with FP8 metadata) [count]
    history: amax history length (TE ``amax_history_len``) [count]
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num

__all__ = ["SCALINGS", "LINEAR_ROWS", "cast_bytes", "weight_cast_bytes", "param_gather_cast_bytes", "amax_bytes",
           "apply_layer"]

SCALINGS = ("delayed", "current")
#: The linear GEMM rows of a layer's kernel table (Transformer Engine modules): their GEMMs run in FP8. The MoE
#: router and the shared experts' sigmoid gate are plain PyTorch GEMMs in Megatron-Core and stay bf16.
LINEAR_ROWS = ("qkv", "out", "fc1", "fc2", "q_proj", "q_down", "kv_down", "q_up", "kv_up", "expert_fc1",
               "expert_fc2", "shared_fc1", "shared_fc2")
#: FP8 rows whose input another row keeps in bf16 (the router, q_down): they keep their own FP8 copy as well.
_OWN_COPY = ("kv_down", "shared_fc1")
#: Bytes of one FP8 element (E4M3 or E5M2).
FP8_BYTES = 1


def cast_bytes(elements: Num, scaling: str = "delayed", bytes_per_element: Num = 2, transpose: bool = True) -> Num:
    """HBM bytes of one stand-alone FP8 cast of a bf16 tensor (amax reduced in the same pass).

    Formula: elements (e + 1 + 1_transpose + e_current), e_current = e for current scaling (a separate amax pass
    over the tensor before the cast), else 0
    Source: Transformer Engine ``fp8_cast_transpose_fused`` / ``cast_to_fp8`` (transformer_engine/pytorch/cpp_
    extensions/cast.py, transpose.py): read the bf16 tensor, write the FP8 row-wise copy and its transpose, amax
    in the same kernel; ``Float8CurrentScaling`` computes the amax first (TE docs, "FP8 Current Scaling").

    Returns:
        bytes [bytes]

    >>> cast_bytes(1000), cast_bytes(1000, "current"), cast_bytes(1000, transpose=False)
    (4000, 6000, 3000)
    """
    e = bytes_per_element
    return elements * (e + FP8_BYTES + (FP8_BYTES if transpose else 0) + (e if scaling == "current" else 0))


def weight_cast_bytes(linear_params: Num, scaling: str = "delayed", bytes_per_element: Num = 2) -> Num:
    """HBM bytes of casting the linear weights to FP8 (weight and transpose), once per iteration.

    Formula: linear_params (e + 2 + e_current)
    Source: Transformer Engine caches the FP8 weight and its transpose across the micro-batches of an iteration
    (``is_first_microbatch`` in ``transformer_engine/pytorch/module/linear.py``: "the weights are cast to FP8 only
    on the first micro-batch"); :func:`cast_bytes`.

    Returns:
        bytes per iteration [bytes]

    >>> weight_cast_bytes(202375168) / 1e9   # Llama-2-7B's linear weights of one layer: 0.81 GB per iteration
    0.809500672
    >>> import numpy as np   # arrays broadcast: two stages of 1e9 weights, current scaling, GB
    >>> weight_cast_bytes(np.array([1e9, 1e9]), "current") / 1e9
    array([6., 6.])
    """
    return cast_bytes(linear_params, scaling, bytes_per_element)


def param_gather_cast_bytes(linear_params: Num, shard_ranks: Num, scaling: str = "delayed",
                            master_bytes: Num = 4) -> Num:
    """HBM bytes of producing the FP8 linear weights once per iteration when they live in FP8 only.

    Formula: linear_params / d (m + 1 + m_current) + linear_params (1 + 1), m_current = m for current scaling
    Source: Megatron-LM ``--fp8-param-gather`` (``megatron/core/fp8_utils.py``, ``quantize_param_shard``; set by
    Megatron-Bridge's FP8 recipes, ``training/mixed_precision.py``): after the step each data-parallel rank casts
    its fp32 master shard (d = the ranks sharing the optimizer states) straight into the FP8 parameter (read m,
    write 1; current scaling first reduces the shard's amax: read m), the distributed optimizer all-gathers the
    FP8 bytes, and Transformer Engine builds each weight's transpose for the backward GEMMs once per iteration
    (read 1, write 1: Hopper's "TN"-only FP8 tensor cores, as in :func:`cast_bytes`). No bf16 weight is kept.

    Returns:
        bytes per iteration [bytes]

    >>> param_gather_cast_bytes(202375168, 8) / 1e9   # Llama-2-7B's linear weights of one layer, 8 ranks
    0.531234816
    >>> weight_cast_bytes(202375168) / 1e9            # the same weights cast from their bf16 copy
    0.809500672
    """
    current = master_bytes if scaling == "current" else 0
    return linear_params / shard_ranks * (master_bytes + FP8_BYTES + current) + linear_params * 2 * FP8_BYTES


def amax_bytes(linears: Num, scaling: str = "delayed", history: Num = 1024) -> Num:
    """Bytes of FP8 scaling metadata: amax histories and scales of every FP8 tensor of the linear layers.

    Formula: linears x 5 tensors x (history + 2) x 4 B (delayed: an fp32 amax history, scale and inverse scale for
    input, weight, output, output gradient and input gradient); current scaling keeps no history: linears x 5 x 2 x 4
    Source: Transformer Engine ``DelayedScaling(amax_history_len=1024)`` (transformer_engine/common/recipe: default
    1024) and the FP8 metadata of a module (``fp8_meta["scaling_fwd"]``: 3 tensors per GEMM, ``scaling_bwd``: 2).

    Returns:
        bytes [bytes]

    >>> amax_bytes(4) / 1024   # one layer's four linear modules: 80 KiB
    80.15625
    """
    per_tensor = (history + 2) * 4 if scaling == "delayed" else 2 * 4
    return linears * 5 * per_tensor


def apply_layer(table: dict[str, Any], *, scaling: str = "delayed", bytes_per_element: Num = 2,
                ffn_type: str = "gelu", ffn_elements: Num = 0, routed_tokens: Num = 0,
                input_elements: Num = 0) -> dict[str, Any]:
    """A layer's kernel table with FP8 linear GEMMs, their FP8 saved inputs and the cast kernels (``fp8_cast``).

    Formula: GEMM rows of :data:`LINEAR_ROWS` present: ``fp8`` and ``operand_bytes`` 1; saved inputs x 1/e; the inputs
    of fc2, the routed and the shared experts' fc2 (counted on their activation rows) 1 B instead of e (ReLU keeps
    its bf16 output as well: + 1 B); kv_down and shared_fc1, whose input another row keeps in bf16, keep their own
    FP8 copy (``input_elements`` bytes). Delayed scaling: the norms that feed a LayerNorm-fused linear write FP8
    (norm1 before qkv, norm2 before fc1 or one expert, MLA's q_norm and kv_norm before q_up and kv_up; bytes -
    (e - 1) per output element), and the dense activation writes FP8 (same); every other FP8 input is cast and
    transposed by its GEMM's module in forward, (e + 2) m k (out, MLA's q_proj/q_down/kv_down, the grouped expert
    GEMMs over all ``routed_tokens`` rows, the shared experts); backward: cast + transpose of every output gradient
    (e + 2) m n, transposes of the inputs their producers wrote in FP8, 2 m k; one kernel per tensor (a grouped
    GEMM's experts in one multi-tensor kernel). Current scaling: norms and activations unchanged; ``fp8_cast``:
    (2e + 2) m k per input forward, (2e + 2) m n per output gradient backward; 3 kernels per tensor (amax, the
    scale from it, cast + transpose: Transformer Engine ``Float8CurrentScalingQuantizer::quantize_impl``,
    transformer_engine/pytorch/csrc/quantizer.cpp), and per local expert for a grouped GEMM (``split_quantize``
    fuses the experts into one multi-tensor cast for delayed scaling only, ``multi_tensor_quantize_impl``: "Currently
    only have fused kernel for FP8 delayed scaling"; current scaling quantizes each expert's rows on their own);
    each FP8 GEMM row's ``cast`` is its input's share of them (forward bytes, kernels), which run just before it
    Source: the module docstring (Transformer Engine's Linear, LayerNormLinear, LayerNormMLP); Megatron-Core's
    MoE and MLA layers with Transformer Engine: the MoE layer's ``pre_mlp_layernorm`` is a separate TENorm (its
    output also feeds the router), the routed experts are TE ``GroupedLinear`` modules (``TEGroupedMLP``) whose
    input and output gradient are quantized with one ``fused_multi_quantize`` over the local experts
    (transformer_engine/pytorch/module/grouped_linear.py), with Megatron's fused SwiGLU between them writing
    bf16 (megatron/core/transformer/moe/experts.py); the shared experts are TE linears after that norm
    (``SharedExpertMLP``); MLA's down projections are TE ``Linear`` after the separate ``input_layernorm`` and its
    up projections ``TELayerNormColumnParallelLinear`` with the latent norms fused (gpt_layer_specs.py). One
    expert without a router (``E = 1``) is priced as the dense MLP, LayerNormMLP's fusions included.

    Returns:
        kernel name -> row [dict]

    >>> t = {"norm1": {"kind": "elementwise", "bytes": 64, "saved": 40},
    ...      "qkv": {"kind": "gemm", "m": 8, "k": 4, "n": 12, "batch": 1, "saved": 64, "flops": 768},
    ...      "out": {"kind": "gemm", "m": 8, "k": 4, "n": 4, "batch": 1, "saved": 64, "flops": 256}}
    >>> out = apply_layer(t)
    >>> out["norm1"]["bytes"], out["qkv"]["saved"], out["qkv"]["fp8"], out["fp8_cast"]["bytes"]
    (48.0, 32.0, True, 128)
    >>> out["fp8_cast"]["bytes_backward"]   # dY of qkv and out cast + transposed; qkv's input transposed
    576
    >>> g = {"router": {"kind": "gemm", "m": 8, "k": 4, "n": 4, "batch": 1, "saved": 64, "flops": 256},
    ...      "expert_fc1": {"kind": "gemm", "m": 6, "k": 4, "n": 2, "batch": 4, "saved": 128, "flops": 256}}
    >>> out = apply_layer(g, routed_tokens=16)   # 4 local experts, 16 routed copies: the router stays bf16
    >>> "fp8" in out["router"], out["expert_fc1"]["fp8"], out["fp8_cast"]["bytes"], out["fp8_cast"]["bytes_backward"]
    (False, True, 256, 128)
    """
    e = bytes_per_element
    delayed = scaling == "delayed"
    routed = "router" in table                                 # experts behind a router (E > 1)
    one_expert = () if routed else ("expert_fc1", "expert_fc2", "expert_activation")   # E = 1: the dense MLP
    fused = ("qkv", "fc1", "fc2", "q_up", "kv_up", *one_expert[:2])     # inputs their producers write in FP8
    fused_out = (("norm1",) if "qkv" in table else ()) + ("q_norm", "kv_norm")
    if "fc1" in table or one_expert and "expert_fc1" in table:
        fused_out += ("norm2",)
    fp8_act = ("activation", *one_expert[2:])                 # write fc2's input in FP8
    out: dict[str, Any] = {}
    fwd: Num = 0
    bwd: Num = 0
    kf = kb = 0
    for name, row in table.items():
        if name in LINEAR_ROWS and row["kind"] == "gemm":
            k, n = row["k"], row["n"]
            m = routed_tokens if routed and name.startswith("expert_") else row["m"]   # all routed rows
            saved = row["saved"] * FP8_BYTES / e + (FP8_BYTES * input_elements if name in _OWN_COPY else 0)
            row = {**row, "fp8": True, "operand_bytes": FP8_BYTES, "saved": saved}
            bwd = bwd + cast_bytes(m * n, scaling, e)          # the output gradient dY, cast and transposed
            tensors = row["batch"] if routed and name.startswith("expert_") else 1   # current scaling: per expert
            kb += 1 if delayed else 3 * tensors
            own: tuple[Num, int] = (0, 0)                    # its input's cast: bytes, kernels (forward)
            if not delayed:                                    # the input: amax, scale, cast + transpose
                own = cast_bytes(m * k, scaling, e), 3 * tensors
            elif name in fused:
                bwd = bwd + 2 * FP8_BYTES * m * k              # written in FP8 by its producer: transpose it later
                kb += 1
            else:                                              # cast + transpose by its module
                own = cast_bytes(m * k, scaling, e), 1
            fwd, kf = fwd + own[0], kf + own[1]
            row["cast"] = own                                  # where in the layer fp8_cast's forward kernels run
        elif delayed and name in fused_out:                    # the norm writes its output in FP8
            row = {**row, "bytes": row["bytes"] * (e + FP8_BYTES) / (2 * e)}
        elif name in ("activation", "expert_activation", "shared_activation"):   # fc2's saved input in FP8
            elements = ffn_elements if name == "activation" else row["elements"]
            row = dict(row)
            row["saved"] = row["saved"] + (FP8_BYTES if ffn_type == "relu" else FP8_BYTES - e) * elements
            if delayed and name in fp8_act:                    # the activation writes its output in FP8
                row["bytes"] = row["bytes"] - (e - FP8_BYTES) * elements
        out[name] = row
    out["fp8_cast"] = {"kind": "elementwise", "bytes": fwd, "bytes_backward": bwd, "kernels": kf,
                       "kernels_backward": kb, "saved": 0}
    return out
