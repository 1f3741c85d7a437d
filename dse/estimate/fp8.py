"""FP8 training's terms outside the kernel table: FP8 weight copies, scaling metadata, the weights' cast.

The kernel table carries the per-micro-batch part (:func:`dse.formulas.fp8.apply_layer`: FP8 GEMM rows, cast
rows, 1-byte saved inputs); this module adds what an iteration or a stage holds once (plan ``precision: fp8``):

- memory: each linear weight's FP8 copy and transpose (``Recipe.weight_copies`` bytes per linear weight, not
  sharded by ZeRO-1/2: every rank runs the GEMMs) and the amax histories (:func:`dse.formulas.fp8.amax_bytes`);
- time: the cast of the stage's linear weights once per iteration, after the optimizer step (HBM-bound);
- the breakdown the report prints (:func:`breakdown`): where a layer's GPU time goes (FP8 GEMMs, bf16 GEMMs and
  attention, element-wise kernels, the casts), which is why the gain is below the 2x of the peaks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.formulas import compute as _compute, finetune as _finetune, fp8 as _fp8

if TYPE_CHECKING:
    from dse.estimate.aliases import Num, Section
    from dse.formulas.precision import Recipe
    from dse.specs.hardware import GPUSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def linear_params_gpu(model: ModelSpec, plan: Plan) -> Num:
    """Linear weights of one layer on one GPU (the weights with FP8 copies; the mean over the layers)."""
    dense, experts, _ = _linears(model, plan)
    return dense + experts


def _linears(model: ModelSpec, plan: Plan) -> tuple[Num, Num, Num]:
    """(linear weights outside the routed experts, the routed experts' on this GPU, TE linear modules) of one layer
    on one GPU, the mean over the layers.

    Formula: dense model: (h (a + 2kv) d + a d h + n_m h F) / t, 4 modules (qkv, out, fc1, fc2); MLA attention:
    (A - R) / t + R - d_c' - d_c (A, R: its parameters and their TP-replicated part, less the two latent norms);
    MoE layer: the attention's + S n_m h F_s / t (shared experts), the routed experts' P_e / (t ep) (E/ep
    experts, ``p_expert`` of :func:`dse.estimate.parameters.parameters`), modules: the attention's + 2 E/ep (a
    grouped GEMM keeps FP8 metadata per expert GEMM: TE ``GroupedLinear(num_gemms)``) + 2 with shared experts
    """
    kv: Any = model.kv_heads          # resolved specs: set
    d: Any = model.head_dim
    ffn: Any = model.ffn_hidden
    t = plan.tp
    if not model.experts and not model.mla:
        return _finetune.linear_parameters(model.hidden, model.heads, kv, d, ffn, model.ffn_type, t), 0.0, 4
    from dse.estimate.parameters import _mean, layer_counts
    from dse.estimate.table_inputs import mla_options
    from dse.formulas import transformer as _transformer

    h, a = model.hidden, model.heads
    attn: Num = _finetune.linear_parameters(h, a, kv, d, 0, model.ffn_type, t)
    attn_modules = 2
    mla = mla_options(model)
    if mla:
        q, c, rope = mla["q_lora"], mla["kv_lora"], mla["rope"]
        full = _transformer.mla_attention_parameters(h, a, q, c, mla["nope"], rope, mla["v_dim"])
        rep = _transformer.mla_attention_parameters_replicated(h, q, c, rope)
        attn = (full - rep) / t + rep - q - c
        attn_modules = 5 if q else 4
    mlp = _finetune.linear_parameters(h, a, kv, d, ffn, model.ffn_type, t) - _finetune.linear_parameters(
        h, a, kv, d, 0, model.ffn_type, t)
    n = model.moe_layers
    if not n:
        return attn + mlp, 0.0, attn_modules + 2
    ep = plan.ep
    n_m = _transformer.ffn_matrices(model.ffn_type)
    shared = model.shared_experts * n_m * h * (model.shared_expert_ffn or 0) / t
    experts = layer_counts(model)["moe_experts"] / (t * ep)
    moe_modules = attn_modules + 2 * model.experts / ep + (2 if model.shared_experts else 0)
    return (attn + _mean(model, n, mlp, shared), _mean(model, n, 0.0, experts),
            _mean(model, n, attn_modules + 2, moe_modules))


def memory(model: ModelSpec, plan: Plan, r: Recipe, l_stage: Num) -> tuple[Num, Num]:
    """(FP8 weight copies, scaling metadata) of a stage's GPU, in bytes.

    Formula: copies = L_stage P_lin,gpu (w_copies - e 1_param_gather) (1 + 1 B: the FP8 weight and its transpose;
    with ``fp8_param_gather`` they replace the e-byte bf16 weight, which is not kept); metadata =
    amax_bytes(n_lin L_stage) (n_lin TE linear modules per layer: 4 in a dense layer, :func:`_linears`)
    """
    kept = r.weight_copies - (r.weights if plan.fp8_param_gather else 0)
    dense, experts, modules = _linears(model, plan)
    copies = l_stage * (dense + experts) * kept
    return copies, _fp8.amax_bytes(modules * l_stage, plan.fp8_scaling)


def weight_cast_time(model: ModelSpec, plan: Plan, gpu: GPUSpec, r: Recipe, l_stage: Num, shard_ranks: Num
                     ) -> Num:
    """Time of casting a stage's linear weights to FP8 (weight and transpose) once per iteration, HBM-bound.

    Formula: weight_cast_bytes(L_stage P_lin,gpu) / (B_hbm eta_mem); with ``fp8_param_gather``
    param_gather_cast_bytes(L_stage P_lin,gpu, d): the fp32 shard cast straight to FP8, then the transposes (the
    routed experts' master shards are over the d/ep ranks that hold the same experts, as their optimizer states)
    """
    dense, experts, _ = _linears(model, plan)
    if plan.fp8_param_gather:
        moved = _fp8.param_gather_cast_bytes(l_stage * dense, shard_ranks, plan.fp8_scaling, r.master_weights)
        if model.moe_layers:
            ep = plan.ep
            moved = moved + _fp8.param_gather_cast_bytes(l_stage * experts, shard_ranks / ep, plan.fp8_scaling,
                                                         r.master_weights)
    else:
        moved = _fp8.weight_cast_bytes(l_stage * (dense + experts), plan.fp8_scaling, r.activations)
    return _compute.memory_time(moved, gpu.hbm_bandwidth, gpu.efficiency.memory)


def gathered_fp8_bytes(model: ModelSpec, plan: Plan, r: Recipe, l_stage: Num) -> tuple[Num, Num]:
    """Bytes the ZeRO-1/2 weight all-gather saves per GPU when the linear weights are gathered in FP8: (outside the
    routed experts, the routed experts' own).

    Formula: L_stage P_lin,gpu (w_gather - 1) with ``fp8_param_gather`` (1 B per linear weight instead of the
    w_gather-byte bf16 one), else 0; split into the dense part and the routed experts' (gathered over the dp/ep
    ranks that hold them under expert parallelism)
    """
    if not plan.fp8_param_gather:
        return 0.0, 0.0
    dense, experts, _ = _linears(model, plan)
    saved = r.weight_gathers - _fp8.FP8_BYTES
    return l_stage * dense * saved, l_stage * experts * saved


def breakdown(layer: dict[str, Any], gpu: GPUSpec, r: Recipe, peak: Num, t_weight_cast: Num, t_iteration: Num
              ) -> Section:
    """Where one layer's GPU time goes under FP8 (forward + backward of one micro-batch), and the weight cast.

    Shares of the layer's kernel time (collectives excluded): ``fp8_gemm`` (the linear GEMMs at the FP8 peak),
    ``bf16_compute`` (attention and any other GEMM, still bf16), ``elementwise`` (norms, activation, residuals,
    rotary: HBM-bound, unchanged by FP8 except the fused casts), ``cast`` (the cast and transpose kernels);
    ``weight_cast`` is the per-iteration weight cast's share of the iteration.
    """
    from dse.estimate.kernel_cost import cost_of, kernel_time
    from dse.formulas.precision import peak_flops

    bf16 = peak_flops(gpu.peak_flops, r.attention_dtype)
    hw = cost_of(gpu, peak, bf16, peak_flops(gpu.peak_flops, r.head_dtype), r.activations)
    parts: dict[str, Num] = {"fp8_gemm": 0.0, "bf16_compute": 0.0, "elementwise": 0.0, "cast": 0.0}
    for name, row in layer.items():
        if row["kind"] == "collective":
            continue
        f, b = kernel_time(row, hw, _compute)
        part = ("fp8_gemm" if "fp8" in row else "cast" if name == "fp8_cast"
                else "elementwise" if row["kind"] == "elementwise" else "bf16_compute")
        parts[part] = parts[part] + f + b
    total: Num = sum(parts.values())
    out: dict[str, Any] = {f"{k}_share": v / total for k, v in parts.items()}
    out["layer_kernel_time"] = total
    out["weight_cast_time"] = t_weight_cast
    out["weight_cast_share"] = t_weight_cast / t_iteration
    return out


def compare(result: dict[str, Any], model: ModelSpec, system: Any, plan: Plan) -> dict[str, Any]:
    """Add the same plan in bf16 to an FP8 result's ``fp8`` section: its iteration time, the speedup, its memory.

    ``bf16_iteration`` [s], ``speedup_vs_bf16`` (bf16 time / FP8 time), ``bf16_gpu_memory`` [bytes],
    ``bf16_feasible``. Scalar results only (``dse estimate``).
    """
    import dataclasses

    from dse.estimate import run

    bf16 = run(model, system, dataclasses.replace(plan, precision="bf16"))
    section = result["fp8"]
    section["bf16_iteration"] = bf16["time"]["iteration"]
    section["speedup_vs_bf16"] = bf16["time"]["iteration"] / result["time"]["iteration"]
    section["bf16_gpu_memory"] = bf16["memory"]["gpu"]["total"]
    section["bf16_feasible"] = bf16["feasible"]
    return result
