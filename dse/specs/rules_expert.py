"""The plan rules of an MoE model's expert parallelism, part of :data:`dse.specs.rules.MODEL_RULES`.

Megatron-Core's MoE Parallel Folding (Liu et al. 2025, arXiv 2504.14960; ``parallel_state.
initialize_model_parallel``): the attention layers run on TP x CP x DP (x PP) ranks, the MoE layers on
ETP x EP x EDP (x PP) of the same ranks, so ``ep x etp`` divides ``tp x cp x dp`` (EDP is the quotient). The
routed experts' FFN splits over ``etp`` (``--expert-tensor-parallel-size``, default tp), the shared experts' over
tp (``SharedExpertMLP`` is a dense tensor-parallel MLP). Training with tensor parallelism needs sequence
parallelism in Megatron-Core's MoE layer (``MoELayer.forward`` raises otherwise); dse asks for it where ``etp``
differs from ``tp`` (the tokens then enter the MoE layer sharded over tp).
"""

from __future__ import annotations

from dse.specs.rule import Rule


def _attention_ranks(p):
    return p.tp * p.cp * p.dp


def _divisors(n) -> str:
    return ", ".join(str(d) for d in range(1, int(n) + 1) if n % d == 0)


EXPERT_RULES = (
    Rule("etp does not divide expert_ffn", ("etp", "tp", "model.expert_ffn"),
         when=lambda p, m, s: bool(m.experts), ok=lambda p, m, s: m.expert_ffn % p.etp == 0,
         message=lambda p, m, s: f"expert tensor parallelism {p.etp} (--etp, default --tp) does not divide the "
                                 f"routed experts' FFN size expert_ffn {m.expert_ffn}; allowed --etp: divisors of "
                                 f"{m.expert_ffn}"),
    Rule("tp does not divide shared_expert_ffn", ("tp", "model.shared_expert_ffn"),
         when=lambda p, m, s: bool(m.experts and m.shared_experts),
         ok=lambda p, m, s: (m.shared_expert_ffn or 0) % p.tp == 0,
         message=lambda p, m, s: f"--tp {p.tp} does not divide the shared experts' FFN size (shared_expert_ffn "
                                 f"{m.shared_expert_ffn}: a shared expert is a tensor-parallel MLP)"),
    Rule("ep > 1 needs an MoE model", ("ep", "model.experts"),
         ok=lambda p, m, s: (p.ep == 1) | bool(m.experts),
         message=lambda p, m, s: f"--ep {p.ep}: expert parallelism needs an MoE model; {m.name} is dense "
                                 "(allowed: --ep 1)"),
    Rule("etp other than tp needs an MoE model", ("etp", "tp", "model.experts"),
         ok=lambda p, m, s: (p.etp == p.tp) | bool(m.experts),
         message=lambda p, m, s: f"--etp {p.etp}: expert tensor parallelism needs an MoE model; {m.name} is dense "
                                 f"(allowed: unset, or --etp {p.tp} = --tp)"),
    Rule("ep does not divide the experts", ("ep", "model.experts"),
         when=lambda p, m, s: bool(m.experts), ok=lambda p, m, s: m.experts % p.ep == 0,
         message=lambda p, m, s: f"--ep {p.ep} does not divide the model's {m.experts} experts"),
    Rule("ep x etp does not divide tp x cp x dp", ("ep", "etp", "tp", "cp", "dp"),
         ok=lambda p, m, s: _attention_ranks(p) % (p.ep * p.etp) == 0,
         message=lambda p, m, s: f"--ep {p.ep} x --etp {p.etp} = {p.ep * p.etp} does not divide --tp {p.tp} x --cp "
                                 f"{p.cp} x --dp {p.dp} = {_attention_ranks(p)} (the MoE layers' ETP x EP x EDP "
                                 "groups fold over the attention's TP x CP x DP ranks, Megatron-Core's MoE Parallel "
                                 f"Folding); allowed ep x etp: {_divisors(_attention_ranks(p))}"),
    Rule("moe_dispatcher needs expert parallelism", ("moe_dispatcher", "ep", "model.experts"),
         when=lambda p, m, s: p.moe_dispatcher is not None, ok=lambda p, m, s: bool(m.experts) & (p.ep > 1),
         message=lambda p, m, s: f"plan.moe_dispatcher {p.moe_dispatcher}: a token dispatcher needs an MoE model "
                                 f"with --ep > 1 (got {m.name} with --ep {p.ep}); allowed: unset"),
    Rule("flex dispatcher cannot pad to capacity", ("moe_dispatcher", "pad_to_capacity"),
         when=lambda p, m, s: p.moe_dispatcher == "flex", ok=lambda p, m, s: not p.pad_to_capacity,
         message=lambda p, m, s: "plan.moe_dispatcher flex with plan.pad_to_capacity: Megatron-Core's flex "
                                 "dispatcher with DeepEP does not pad to capacity (TransformerConfig raises); "
                                 "allowed: pad_to_capacity false, or moe_dispatcher alltoall"),
    Rule("fp8 dispatch needs the flex dispatcher", ("moe_dispatch_dtype", "moe_dispatcher"),
         when=lambda p, m, s: p.moe_dispatch_dtype != "bf16", ok=lambda p, m, s: p.moe_dispatcher == "flex",
         message=lambda p, m, s: f"plan.moe_dispatch_dtype {p.moe_dispatch_dtype} needs plan.moe_dispatcher flex "
                                 f"(DeepEP's FP8 dispatch; got {p.moe_dispatcher or 'unset'}); allowed "
                                 "moe_dispatch_dtype: bf16"),
    Rule("etp other than tp needs sequence parallelism", ("etp", "tp", "sequence_parallel"),
         when=lambda p, m, s: not p.sequence_parallel, ok=lambda p, m, s: (p.etp == p.tp) | (p.tp == 1),
         message=lambda p, m, s: f"--etp {p.etp} with --tp {p.tp} needs --sequence-parallel (Megatron-Core's MoE "
                                 "layer trains tensor parallelism with sequence parallelism only: the tokens enter "
                                 f"it sharded over tp); allowed without it: --etp {p.tp}"),
)
