"""Software stacks: the catalog's ``stacks/*.yaml`` read and checked, and a stack resolved for one model.

A stack file (see ``stacks/pytorch.yaml`` for the format) describes, per kernel-table row, the
element-wise kernels a framework runs, what they move and what they save; the formulas that apply it
are :mod:`dse.formulas.stacks`. ``megatron`` (the default) has no file rows: the kernel table as
built is Megatron-LM's fused kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from dse.errors import InputError
from dse.formulas.stacks import DTYPE_BYTES

#: The stacks a plan may name (files of the catalog's stacks/ directory).
STACKS = ("megatron", "pytorch", "compiled")
#: Size names an amount may use (dse.formulas.stacks.sizes).
SIZES = ("tok", "h", "q", "kv", "qkv", "f", "scores", "heads", "logits", "table", "rope", "params", "param_tensors",
         "routed", "picks", "probs")
#: Entries a stack file may hold, with the variants an entry may be split into (None: not split).
ENTRIES: dict[str, tuple[str, ...] | None] = {
    "norm": ("layernorm", "rmsnorm", "gemma_rmsnorm", "fp32_rmsnorm", "olmo_layernorm", "layernorm1p",
             "fp32_layernorm"),
    "residual": None, "activation": ("gelu", "gelu_new", "relu", "silu_glu", "silu_glu_chunk", "gelu_glu", "bloom_gelu",
                                     "relu2"),
    "rotary": None, "flash": ("fused", "separate"), "math": ("activation", "fp32", "alibi", "fp32_scores"),
    "dropout": None,
    "score_dropout": None, "kv_copy": ("fused", "separate"), "kv_repeat": None, "qkv_inputs": None, "qkv_grads": None,
    "rotary_grads": ("fused", "separate"), "query_scale": None, "bias_grads": ("fused", "separate"),
    "grad_accumulate": None,
    "embedding": None, "final_norm": None, "qk_norm": None, "loss": None, "softcap": None, "logit_softcap": None,
    "embedding_scale": None, "residual_scale": None, "logit_scale": None, "rotary_fp32": None, "qkv_grad_cat": None,
    "rotary_upcast": None,
    "mlp_bias_grads": None, "rotary_tables": None, "qkv_bias_grads": None,
    "attn_bias_grads": None, "out_bias_grads": None, "moe_routing": None, "moe_permute": None, "moe_unpermute": None,
    "expert_glu": ("silu_glu", "gelu_glu"), "qkv_slices": None}
#: Entries that may name another entry (``final_norm: norm``): the same op over their own tensors.
ALIASES = ("final_norm", "qk_norm")
#: A variant a stack may leave out, and the one it then takes: Gemma's RMSNorm is RMSNorm with the weight applied in
#: fp32 (what a stack that does not say otherwise, such as a fused one, runs alike).
FALLBACK = {"gemma_rmsnorm": "rmsnorm", "fp32_rmsnorm": "gemma_rmsnorm",
            # BLOOM's autograd GeLU is the tanh chain of gelu_new, its ALiBi attention the fp32-softmax one, OLMo's
            # weightless fp32 LayerNorm a LayerNorm, where a stack (compiled) does not trace them apart
            "bloom_gelu": "gelu_new", "alibi": "fp32", "olmo_layernorm": "layernorm",
            # GPT-Neo's fp32 q and k before the score product: the fp32-softmax attention where not traced apart
            "fp32_scores": "fp32",
            # Nemotron's LayerNorm1P is a LayerNorm (the (1 + w) add over the h weights: one small kernel, eager only;
            # Megatron-Core and TE fold it into the norm kernel, zero_centered_gamma); its squared ReLU a chain of two
            # element-wise ops that, fused (compiled), keeps its input and output as the GeLU chain does
            "layernorm1p": "layernorm", "relu2": "gelu",
            # Cohere's LayerNorm without bias in fp32 ops: one LayerNorm kernel each way where fused
            "fp32_layernorm": "layernorm",
            # Phi-3's SwiGLU over the chunks of one gate_up_proj: a SwiGLU where a stack does not trace it apart
            "silu_glu_chunk": "silu_glu"}
#: Which model property picks an entry's variant (an entry without variants applies as written).
VARIANT_OF = {"norm": "norm", "activation": "activation", "expert_glu": "activation", "flash": "qkv", "kv_copy": "qkv",
              "math": "softmax", "rotary_grads": "qkv",
              "bias_grads": "qkv"}
_OP_KEYS = ("forward", "backward", "saved", "packed", "transient", "when", "frozen")
_CHOICES = {"attention": ("flash", "math"), "recompute": ("none", "selective", "full"), "bias": (True, False),
            "dropout": (True, False), "qkv": ("fused", "separate"), "grouped": (True, False),
            "scale_query": (True, False), "rotary": (True, False), "frozen": (True, False),
            "softcap": (True, False), "logit_softcap": (True, False), "embedding_scale": (True, False),
            "kv_cache": (True, False), "residual_scale": (True, False), "logit_scale": (True, False),
            "rotary_fp32": (True, False), "rotary_upcast": (True, False), "mlp_bias": (True, False),
            "rotary_before_transpose": (True, False),
            "qkv_bias": (True, False), "slices": (True, False)}


@dataclass(frozen=True)
class StackSpec:
    """A software stack: its per-row ops (variants unresolved), host time per launched kernel, vocabulary padding."""

    name: str
    title: str = ""
    source: str = ""
    dispatch: float = 0.0          # host time per kernel launched [s]; 0: the GPU spec's layer_overhead floor
    layer_dispatch: tuple[float, float] = (0.0, 0.0)  # host time per layer pass (forward, backward) past launches [s]
    checkpoint_dispatch: float = 1.0  # a layer's host time under torch.utils.checkpoint / unscaled, default for a host
    ends_dispatch: float = 0.0     # host time per kernel of the plain torch ops outside the layers [s]; 0: dispatch
    pads_vocab: bool = True        # the LM head's vocabulary is padded to an aligned size (Megatron: 128 t)
    flash_window: bool = True      # its flash kernel skips the tiles outside a sliding window or chunk (false: masks)
    checkpoint_early_stop: bool = False  # full recompute stops after the last saved tensor (torch non-reentrant)
    gemm_memsets: float = 0.0      # cudaMemsetAsync the libraries issue per GEMM call (cuBLAS, PyTorch's reductions)
    memset_host: float = 0.0       # host time per such memset on the reference host [s]
    rows: dict = field(default_factory=dict)

    def ops(self, norm: str, activation: str, qkv: str = "fused", softmax: str = "activation") -> dict:
        """The stack's ops for a model: each split entry resolved to the model's variant (norm, activation, how
        Q/K/V are projected, the eager softmax's dtype)."""
        return _resolve(self, norm, activation, qkv, softmax)


@lru_cache(maxsize=64)
def _resolve(stack: StackSpec, norm: str, activation: str, qkv: str, softmax: str) -> dict:
    pick = {"norm": norm, "activation": activation, "qkv": qkv, "softmax": softmax}
    out: dict = {}
    for name, op in stack.rows.items():
        entry = name
        if isinstance(op, str):           # an alias: final_norm: norm
            entry, op = op, stack.rows[op]
        variants = ENTRIES[entry]
        if variants is not None and isinstance(op, dict) and op and set(op) <= set(variants):
            key = pick[VARIANT_OF[entry]]
            while key not in op and key in FALLBACK:     # fp32_rmsnorm -> gemma_rmsnorm -> rmsnorm
                key = FALLBACK[key]
            if key not in op:
                continue                  # the stack says nothing for this variant: the fused row stays
            op = op[key]
        out[name] = op
    return out


def _check_passes(d: Any, where: str) -> None:
    if not isinstance(d, dict):
        raise InputError(f"{where}: expected a mapping of size[:dtype] to a number of passes")
    for key, n in d.items():
        size, _, dtype = str(key).partition(":")
        if size not in SIZES:
            raise InputError(f"{where}: unknown size '{size}'; allowed: {', '.join(SIZES)}")
        if dtype and dtype not in (*DTYPE_BYTES, "grad"):
            raise InputError(f"{where}: unknown dtype '{dtype}'; allowed: {', '.join((*DTYPE_BYTES, 'grad'))}")
        if not isinstance(n, (int, float)) or n < 0:
            raise InputError(f"{where}.{key}: expected a number >= 0, got {n!r}")


def _check_op(op: Any, where: str) -> None:
    if not isinstance(op, dict):
        raise InputError(f"{where}: expected a mapping with keys {', '.join(_OP_KEYS)}")
    for key, val in op.items():
        if key not in _OP_KEYS:
            raise InputError(f"{where}: unknown key '{key}'; allowed: {', '.join(_OP_KEYS)}")
        if key in ("forward", "backward"):
            if not isinstance(val, dict) or set(val) - {"kernels", "moves", "strided", "unvectorized", "softmax"}:
                raise InputError(f"{where}.{key}: expected {{kernels: n, moves: {{size: passes}}}} (and optional "
                                 f"strided / unvectorized / softmax: {{size: passes}}, parts of moves)")
            k = val.get("kernels", 0)
            if not (isinstance(k, int) and k >= 0) and k not in SIZES:
                raise InputError(f"{where}.{key}.kernels: expected a count >= 0 or a size name, got {k!r}")
            _check_passes(val.get("moves", {}), f"{where}.{key}.moves")
            for part in ("strided", "unvectorized", "softmax"):
                _check_passes(val.get(part, {}), f"{where}.{key}.{part}")
                slow = val.get(part, {}) if part == "softmax" else \
                    {k: n + val.get("unvectorized" if part == "strided" else "strided", {}).get(k, 0)
                     for k, n in val.get(part, {}).items()}   # strided and unvectorized: disjoint parts of moves
                over = [k for k, n in slow.items() if n > val.get("moves", {}).get(k, 0)]
                if over:
                    raise InputError(f"{where}.{key}.{part}.{over[0]}: more passes than moves has (a part of moves)")
        elif key in ("saved", "packed", "transient"):
            _check_passes(val, f"{where}.{key}")
        elif key == "frozen":     # what the op keeps instead when its weights are frozen (LoRA)
            if not isinstance(val, dict) or set(val) - {"saved", "packed"}:
                raise InputError(f"{where}.frozen: expected {{saved: {{size: tensors}}, packed: {{size: tensors}}}}")
            for k, v in val.items():
                _check_passes(v, f"{where}.frozen.{k}")
        else:
            if not isinstance(val, list) or not all(isinstance(c, dict) for c in val):
                raise InputError(f"{where}.when: expected a list of conditions, e.g. [{{attention: math}}]")
            for c in val:
                for ck, cv in c.items():
                    if ck not in _CHOICES:
                        raise InputError(f"{where}.when: unknown choice '{ck}'; allowed: {', '.join(_CHOICES)}")
                    for v in (cv if isinstance(cv, list) else [cv]):
                        if v not in _CHOICES[ck]:
                            raise InputError(f"{where}.when.{ck}: unknown value {v!r}; allowed: "
                                             f"{', '.join(map(str, _CHOICES[ck]))}")


def parse(data: dict, where: str) -> StackSpec:
    """A :class:`StackSpec` from a stack file's mapping; a bad entry is a one-line :class:`InputError`."""
    from dse.units import parse as parse_unit

    allowed = ("name", "title", "source", "dispatch", "layer_dispatch", "checkpoint_dispatch", "ends_dispatch",
               "pads_vocab", "flash_window", "checkpoint_early_stop", "gemm_memsets", "memset_host", "rows")
    for key in data:
        if key not in allowed:
            raise InputError(f"{where}: unknown field '{key}'; allowed: {', '.join(allowed)}")
    rows = data.get("rows") or {}
    if not isinstance(rows, dict):
        raise InputError(f"{where}.rows: expected a mapping of entry -> op")
    for name, op in rows.items():
        if name not in ENTRIES:
            raise InputError(f"{where}.rows: unknown entry '{name}'; allowed: {', '.join(ENTRIES)}")
        if isinstance(op, str):
            if op not in rows or op != "norm" or name not in ALIASES:
                raise InputError(f"{where}.rows.{name}: only {' and '.join(ALIASES)} may alias an entry (norm), "
                                 f"got {op!r}")
            continue
        variants = ENTRIES[name]
        if variants is not None and isinstance(op, dict) and set(op) <= set(variants) and op:
            for v, vop in op.items():
                _check_op(vop, f"{where}.rows.{name}.{v}")
        elif variants is not None and isinstance(op, dict) and set(op) & set(variants):
            bad = sorted(set(op) - set(variants))[0]
            raise InputError(f"{where}.rows.{name}: unknown variant '{bad}'; allowed: {', '.join(variants)}")
        else:
            _check_op(op, f"{where}.rows.{name}")
    dispatch = data.get("dispatch", 0)
    ends = data.get("ends_dispatch", 0)
    ckpt = data.get("checkpoint_dispatch", 1.0)
    memsets = data.get("gemm_memsets", 0.0)
    if isinstance(memsets, bool) or not isinstance(memsets, (int, float)) or not memsets >= 0:
        raise InputError(f"{where}.gemm_memsets: {memsets!r}; expected a number >= 0 (memsets per GEMM call)")
    memset_host = data.get("memset_host", 0)
    if isinstance(ckpt, bool) or not isinstance(ckpt, (int, float)) or not ckpt >= 1:
        raise InputError(f"{where}.checkpoint_dispatch: {ckpt!r}; expected a number >= 1 (a factor on the host time)")
    return StackSpec(name=str(data.get("name", "")), title=str(data.get("title", "")),
                     source=str(data.get("source", "")),
                     dispatch=parse_unit(dispatch, "s", f"{where}.dispatch") if dispatch else 0.0,
                     layer_dispatch=_layer_dispatch(data.get("layer_dispatch"), f"{where}.layer_dispatch"),
                     checkpoint_dispatch=float(ckpt),
                     ends_dispatch=parse_unit(ends, "s", f"{where}.ends_dispatch") if ends else 0.0,
                     pads_vocab=bool(data.get("pads_vocab", True)),
                     flash_window=bool(data.get("flash_window", True)),
                     checkpoint_early_stop=bool(data.get("checkpoint_early_stop", False)),
                     gemm_memsets=float(memsets),
                     memset_host=parse_unit(memset_host, "s", f"{where}.memset_host") if memset_host else 0.0,
                     rows=_freeze(rows))


def _layer_dispatch(value: Any, where: str) -> tuple[float, float]:
    """``layer_dispatch: {forward: 109 us, backward: 124 us}`` -> (forward, backward) [s]; absent: (0, 0)."""
    from dse.units import parse as parse_unit

    if value is None:
        return 0.0, 0.0
    if not isinstance(value, dict) or not set(value) <= {"forward", "backward"}:
        raise InputError(f"{where}: expected a mapping with forward and backward (host time per layer pass, "
                         f"e.g. {{forward: 109 us, backward: 124 us}}), got {value!r}")
    f, b = (parse_unit(value.get(k, 0), "s", f"{where}.{k}") if value.get(k) else 0.0 for k in ("forward", "backward"))
    if f < 0 or b < 0:
        raise InputError(f"{where}: host times must be >= 0, got {value!r}")
    return f, b


class _FrozenDict(dict):
    """A dict that hashes by identity, so a StackSpec can key the resolve cache."""

    def __hash__(self) -> int:          # type: ignore[override]
        return id(self)


def _freeze(rows: dict) -> dict:
    return _FrozenDict(rows)


@cache
def load(name: str) -> StackSpec:
    """The catalog's stack ``name`` (one of :data:`STACKS`)."""
    from dse.catalog import read_yaml, root

    if name not in STACKS:
        raise InputError(f"stack: unknown stack '{name}'; allowed: {', '.join(STACKS)}")
    path = root() / "stacks" / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"stack: {path} not found (the catalog's stacks/ directory)")
    spec = parse(read_yaml(path, "stack"), str(path))
    if spec.name != name:
        raise InputError(f"{path}: name '{spec.name}' differs from the file name '{name}'")
    return spec
