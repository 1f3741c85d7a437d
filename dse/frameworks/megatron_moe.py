"""Megatron-Core's Mixture-of-Experts arguments <-> a dse model and plan (part of :mod:`dse.frameworks.megatron`).

Read: ``--num-experts``, ``--moe-router-topk`` (Megatron's default 2), ``--moe-ffn-hidden-size`` (default
``--ffn-hidden-size``), ``--moe-shared-expert-intermediate-size`` (one shared expert of that size),
``--moe-layer-freq`` (an int n: layer i is MoE when i % n == 0; or a list such as ``'([0]*3+[1]*58)'``),
``--moe-router-num-groups``/``--moe-router-group-topk`` (group-limited routing) into the model the arguments
define; ``--moe-expert-capacity-factor``, ``--moe-pad-expert-input-to-capacity`` and the token dispatcher
(``--moe-token-dispatcher-type``, ``--moe-enable-deepep``, ``--moe-flex-dispatcher-backend``) into the plan. When the
arguments define no model (the ``--model``'s is estimated), ``--num-experts`` and ``--moe-router-topk`` must
agree with it: a mismatch is a one-line error (it is an architecture the estimate would not price), not a silent
change of the model. Written: the same arguments of a model and plan (:func:`moe_args`, :func:`plan_args`).
"""

from __future__ import annotations

import ast
from typing import Any

from dse.frameworks.common import Imported, as_float, as_int, bad

OPTIONS = {"--num-experts": "int", "--moe-router-topk": "int", "--moe-ffn-hidden-size": "int",
           "--moe-shared-expert-intermediate-size": "int", "--moe-layer-freq": "str",
           "--moe-router-num-groups": "int", "--moe-router-group-topk": "int",
           "--moe-expert-capacity-factor": "str", "--moe-pad-expert-input-to-capacity": "flag",
           "--moe-grouped-gemm": "flag", "--moe-token-dispatcher-type": "str", "--moe-enable-deepep": "flag",
           "--moe-flex-dispatcher-backend": "str"}
#: Megatron-Core's token dispatchers (``--moe-token-dispatcher-type``) and flex backends dse reads
DISPATCHERS = ("allgather", "alltoall", "flex")
FLEX_BACKENDS = ("deepep", "hybridep")
MODEL_ONLY = ("--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
              "--moe-layer-freq", "--moe-router-num-groups", "--moe-router-group-topk")


def read_plan(imp: Imported, get) -> None:
    """The capacity factor and padding, and the token dispatcher (plan fields)."""
    _read_dispatcher(imp, get)
    factor = get("--moe-expert-capacity-factor")
    if factor is not None:
        value = as_float(imp.source, "--moe-expert-capacity-factor", factor, 0.0)
        if value <= 0:
            raise bad(imp.source, "--moe-expert-capacity-factor", f"expected a number > 0, got {factor!r}")
        imp.set("expert_capacity", value, "--moe-expert-capacity-factor")
    if get("--moe-pad-expert-input-to-capacity"):
        imp.set("pad_to_capacity", True, "--moe-pad-expert-input-to-capacity")


def _read_dispatcher(imp: Imported, get) -> None:
    """``--moe-token-dispatcher-type`` (Megatron's default allgather), ``--moe-enable-deepep`` and
    ``--moe-flex-dispatcher-backend`` into ``moe_dispatcher``: alltoall, or flex (DeepEP's kernels; HybridEP,
    NVIDIA's NVLink + RDMA variant, is priced as DeepEP's). With expert parallelism 1 the dispatcher is the
    tensor-parallel gather dse prices there (no field); allgather with ep > 1 is not priced (one-line error)."""
    kind, deepep, backend = (get("--moe-token-dispatcher-type"), get("--moe-enable-deepep"),
                             get("--moe-flex-dispatcher-backend"))
    if kind is not None and kind not in DISPATCHERS:
        raise bad(imp.source, "--moe-token-dispatcher-type", f"expected one of {', '.join(DISPATCHERS)}, got {kind!r}")
    if backend is not None and backend not in FLEX_BACKENDS:
        raise bad(imp.source, "--moe-flex-dispatcher-backend", f"dse prices {' or '.join(FLEX_BACKENDS)} (DeepEP's "
                                                                 f"NVLink + RDMA forwarding), got {backend!r}")
    if (deepep or backend) and kind != "flex":
        key = "--moe-enable-deepep" if deepep else "--moe-flex-dispatcher-backend"
        raise bad(imp.source, key, f"needs --moe-token-dispatcher-type flex (got {kind or 'allgather, the default'})")
    ep = get("--expert-model-parallel-size")
    if kind is None or ep is None or as_int(imp.source, "--expert-model-parallel-size", ep) == 1:
        if kind is not None:
            imp.ignore("--moe-token-dispatcher-type", "expert parallelism 1: dse prices the tensor-parallel gather")
        return
    if kind == "allgather":
        raise bad(imp.source, "--moe-token-dispatcher-type", "allgather with --expert-model-parallel-size > 1 is not "
                                                             "priced; allowed: alltoall, flex")
    if backend == "hybridep":
        imp.ignore("--moe-flex-dispatcher-backend", "hybridep: priced as DeepEP's NVLink + RDMA forwarding")
    imp.set("moe_dispatcher", kind, "--moe-token-dispatcher-type")


def read_model(imp: Imported, get, data: dict[str, Any] | None) -> None:
    """The MoE fields into ``data`` (the model the arguments define), or the checks against the ``--model``'s."""
    experts = get("--num-experts")
    if experts is None:
        for o in MODEL_ONLY[1:]:
            if get(o) is not None:
                raise bad(imp.source, o, "an MoE argument without --num-experts")
        return
    topk = get("--moe-router-topk", 2)
    if data is None:    # the --model's architecture: it must have these experts
        imp.expect["experts"] = (experts, "--num-experts")
        imp.expect["experts_per_token"] = (topk, "--moe-router-topk")
        return
    data.update(experts=experts, experts_per_token=topk,
                expert_ffn=get("--moe-ffn-hidden-size") or data.get("ffn_hidden"))
    shared = get("--moe-shared-expert-intermediate-size")
    if shared:
        data.update(shared_experts=1, shared_expert_ffn=shared)
    if get("--moe-router-num-groups") is not None:
        data["expert_groups"] = get("--moe-router-num-groups")
        data["expert_groups_per_token"] = get("--moe-router-group-topk")
    if get("--moe-layer-freq") is not None:
        pattern = layer_pattern(imp.source, get("--moe-layer-freq"), data["layers"])
        dense = [i for i, p in enumerate(pattern) if not p]
        if dense == list(range(len(dense))):
            data["first_dense_layers"] = len(dense)
        else:
            data["dense_layers"] = tuple(dense)


def layer_pattern(source: str, value: str, layers: int) -> list[int]:
    """Megatron's ``--moe-layer-freq``: an int n (layer i is MoE when i % n == 0) or a Python list expression of 0/1
    per layer (``'([0]*3+[1]*58)'``, ``'([1]*3+[0]*1)*3'``): lists of 0 and 1, ``+`` and ``*`` by an int only."""
    text = str(value).strip().strip("'\"")
    if text.isdigit():
        n = as_int(source, "--moe-layer-freq", text)
        return [1 if i % n == 0 else 0 for i in range(layers)]
    try:
        out = _pattern(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError):
        raise bad(source, "--moe-layer-freq", f"expected an int or a list expression of 0/1 such as "
                                              f"'([0]*3+[1]*58)', got {value!r}") from None
    if len(out) != layers:
        raise bad(source, "--moe-layer-freq", f"{len(out)} entries for {layers} layers")
    return out


def _pattern(node: ast.expr) -> list[int]:
    """The list a ``--moe-layer-freq`` expression denotes (no evaluation: lists of 0/1 literals, + and * only)."""
    if isinstance(node, ast.List) and all(isinstance(e, ast.Constant) and e.value in (0, 1) for e in node.elts):
        return [int(e.value) for e in node.elts if isinstance(e, ast.Constant)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _pattern(node.left) + _pattern(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        if isinstance(node.right, ast.Constant) and type(node.right.value) is int:
            return _pattern(node.left) * node.right.value
        if isinstance(node.left, ast.Constant) and type(node.left.value) is int:
            return _pattern(node.right) * node.left.value
    raise ValueError("not a 0/1 list expression")


def moe_args(m, warnings: list[str]) -> str:
    """Megatron-Core's MoE arguments of an MoE model (the expert-parallel size is a plan argument)."""
    out = (f"--num-experts {m.experts} --moe-router-topk {m.experts_per_token} --moe-ffn-hidden-size {m.expert_ffn} "
           "--moe-grouped-gemm")
    if m.shared_experts:
        out += f" --moe-shared-expert-intermediate-size {m.shared_experts * m.shared_expert_ffn}"
        if m.shared_expert_gate:
            warnings.append("the shared experts' sigmoid gate (Qwen2-MoE) is not emitted")
    if m.moe_layers < m.layers:
        pattern = [0 if i < m.first_dense_layers or (i + 1) % m.moe_layer_step or i in m.dense_layers else 1
                   for i in range(m.layers)]
        out += f" --moe-layer-freq '{pattern}'"
    if m.expert_groups:   # group-limited routing (Megatron-Core's TopKRouter group_limited_topk)
        out += f" --moe-router-num-groups {m.expert_groups} --moe-router-group-topk {m.expert_groups_per_token}"
    return out


def plan_args(plan, system, warnings: list[str] | None = None) -> str:
    """Expert parallelism, the token dispatcher dse priced (``plan.moe_dispatcher``; unset: NCCL's all-to-all in one
    node or when padding to capacity, else DeepEP's NVLink + RDMA forwarding:
    :func:`dse.formulas.parallelism.dispatch_shares`) and the capacity factor. Expert tensor parallelism other than
    tp (MoE Parallel Folding) is written as --expert-tensor-parallel-size; the EP group is etp x ep consecutive
    ranks (Megatron's expert rank order). DeepEP's FP8 dispatch has no Megatron-Core option (a warning)."""
    etp = plan.tp if plan.etp is None else plan.etp
    out = f"--expert-model-parallel-size {plan.ep}" + f" --expert-tensor-parallel-size {etp}" * (etp != plan.tp)
    if plan.ep > 1:
        how = plan.moe_dispatcher or ("alltoall" if etp * plan.ep <= system.node.gpus_per_node or plan.pad_to_capacity
                                      else "flex")
        out += f" --moe-token-dispatcher-type {how}" + " --moe-enable-deepep" * (how == "flex")
    if plan.moe_dispatch_dtype == "fp8" and warnings is not None:
        warnings.append("DeepEP's FP8 dispatch (moe_dispatch_dtype fp8) is not a Megatron-Core option: its flex "
                        "dispatcher sends bf16")
    if plan.expert_capacity is not None:
        out += f" --moe-expert-capacity-factor {plan.expert_capacity:g}"
        out += " --moe-pad-expert-input-to-capacity" * bool(plan.pad_to_capacity)
    return out
