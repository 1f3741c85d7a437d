"""What an MoE layer's MLP saves for backward, tensor by tensor: the part of a layer activation offload moves.

Part of :mod:`dse.formulas.activation_offload` (notation and symbols there). An MoE layer
(:func:`dse.formulas.kernels.moe_mlp_kernels`) replaces the dense MLP's two saved tensors (the fc1 input and the
activation's) by the router's input, its fp32 probabilities and int64 top-k indices, the ``k`` routed copies of
each token in expert order, the experts' activation tensors over those copies, and the experts' outputs that the
weighted un-permutation keeps; shared experts add their activation (and a gate's input and output). SSDTrain's
forwarding writes each of these once when it has at least 8 Mi elements
(:func:`~dse.formulas.activation_offload.offloaded_terms` with ``moe``); saved-tensor hooks copy each save
(:func:`~dse.formulas.activation_offload.hooks_saved_terms` with ``moe``).
"""

from __future__ import annotations

from typing import Any

from dse.formulas._array import Num
from dse.formulas.transformer.moe import dropped_token_fraction

__all__ = ["moe_mlp_saved_terms", "moe_layer_terms"]

#: The dense layer's tensors of :func:`dse.formulas.transformer.activation_terms` that an MoE MLP replaces.
MOE_REPLACES = ("fc1_input", "mlp_activation")
#: Bytes per element of the MoE tensors that are not in the activation dtype (fp32 probabilities, int64 indices).
ELEMENT_BYTES = {"router_probs": 4, "router_indices": 8}


def moe_mlp_saved_terms(s: Num, b: Num, h: Num, experts: int, experts_per_token: Num, expert_ffn: Num, *,
                        tp: Num = 1, sequence_parallel: bool = False, ffn_type: str = "swiglu",
                        shared_experts: Num = 0, shared_ffn: Num = 0, shared_gate: bool = False,
                        bytes_per_element: Num = 2, capacity: Num | None = None, pad: bool = False,
                        imbalance: Num = 1.0, etp: Num | None = None, **ignored: Any) -> dict[str, Num]:
    """Bytes each tensor an MoE layer's MLP saves for backward, per GPU and micro-batch (balanced routing).

    Formula: T = s b, r = 1/t with SP, k top-k, c_p = C when padded to capacity, 1 - d with a capacity factor and
    no padding (d: the dropped share, :func:`dse.formulas.transformer.dropped_token_fraction`; the router drops
    those copies before the permutation), else 1, F_l = F_e / t:
    mlp_input e T h r (the router's GEMM input; with one expert, E = 1, the expert's: no router);
    router_probs 4 T r E (fp32 softmax output); router_indices 8 T r k (int64 top-k);
    routed_tokens e T k h c_p (the k copies in expert order, fc1's input); expert_activation n e T k F_l c_p
    (n = 3 gated: the 2 F input of the gated activation and fc2's input; 2 GeLU; 1 ReLU);
    expert_outputs e T k h (what the weighted sum keeps: the un-padded copies); shared experts:
    shared_activation n e T S F_s / t;
    a shared gate: shared_gate_input e T h and shared_gate_output e T. The sum equals the saved bytes of the
    MoE rows of :func:`dse.formulas.kernels.moe_mlp_kernels`; with E = k = 1 and no shared expert it is the dense
    MLP's fc1_input + mlp_activation of :func:`dse.formulas.transformer.activation_terms`.
    Source: Megatron-Core MoE (``TopKRouter``: fp32 probabilities, top-k indices; ``GroupedMLP`` saves the
    permuted tokens; ``moe_utils.unpermute`` keeps the expert outputs for the probabilities' gradient); Hugging Face
    ``MixtralSparseMoeBlock`` saves the same tensors per expert (tests/test_activation_offload_moe_torch.py).
    Expert parallelism does not change them (a GPU holds T k copies); the busiest expert's load only through d.
    Expert tensor parallelism other than tp (``etp``, MoE Parallel Folding) makes them T u k copies, u = etp / t (the
    routed tokens an expert GPU gathers over its etp group), the activation n e T u k F_e / etp (the same bytes).

    Args:
        experts: E, routed experts [count]
        experts_per_token: k, top-k [count]
        expert_ffn: F_e, a routed expert's FFN inner size [count]
        shared_experts: S, experts every token runs [count]
        shared_ffn: F_s, a shared expert's FFN inner size [count]
        shared_gate: a sigmoid gate h x 1 on the shared output [bool]
        capacity: C, the experts' capacity factor (None: dropless) [ratio]
        pad: every expert padded to its capacity [bool]
        imbalance: c, the busiest expert's tokens over the mean (the dropped share) [fraction]
        etp: expert tensor-parallel degree (None: t) [count]
        ignored: other MoE options (ep), which change no saved byte [dict]
    Returns:
        dict tensor name -> bytes [bytes]

    >>> t = moe_mlp_saved_terms(4096, 1, 4096, 8, 2, 14336)   # a Mixtral 8x7B layer's MLP, one micro-batch
    >>> t["routed_tokens"] / 2**20, t["expert_activation"] / 2**20, t["router_probs"] / 2**10   # MiB, KiB
    (64.0, 672.0, 128.0)
    """
    e = bytes_per_element
    tok = s * b
    r = 1 / tp if sequence_parallel else 1
    f_loc = expert_ffn if type(tp) is int and tp == 1 else expert_ffn / tp
    u: Num = 1                                   # an expert GPU's tokens over T (etp / t)
    if etp is not None:
        u, f_loc = etp / tp, expert_ffn if type(etp) is int and etp == 1 else expert_ffn / etp
    kept = 3 if ffn_type in ("swiglu", "geglu") else (1 if ffn_type == "relu" else 2)
    k = experts_per_token
    rows: Num = 1
    if experts > 1 and capacity is not None:
        rows = capacity if pad else 1 - dropped_token_fraction(tok * r, experts, k, capacity, imbalance)
    out: dict[str, Num] = {"mlp_input": e * tok * h * r}
    if experts > 1:
        out["router_probs"] = 4 * tok * r * experts
        out["router_indices"] = 8 * tok * r * k
        out["routed_tokens"] = e * tok * u * k * h * rows
    out["expert_activation"] = kept * e * tok * u * k * f_loc * rows
    if experts > 1:
        out["expert_outputs"] = e * tok * u * k * h
    if shared_experts:
        fs = shared_experts * shared_ffn if type(tp) is int and tp == 1 else shared_experts * shared_ffn / tp
        out["shared_activation"] = kept * e * tok * fs
        if shared_gate:
            out["shared_gate_input"] = e * tok * h
            out["shared_gate_output"] = e * tok
    return out


def moe_layer_terms(terms: dict[str, Num], moe: dict[str, Any] | None, s: Num, b: Num, h: Num,
                    **options: Any) -> dict[str, Num]:
    """A dense layer's saved tensors (``terms``) with the MLP's replaced by an MoE MLP's (``moe``: the MoE options of
    :func:`dse.formulas.kernels.moe_mlp_kernels`; None: the dense layer, unchanged).

    Formula: terms - fc1_input - mlp_activation + moe_mlp_saved_terms; unchanged under full recompute (the
    checkpoint keeps only the layer input)
    Source: :func:`moe_mlp_saved_terms`.

    Returns:
        dict tensor name -> bytes [bytes]

    >>> dense = {"norm2_input": 8.0, "fc1_input": 8.0, "mlp_activation": 24.0}
    >>> moe_layer_terms(dense, {"experts": 1, "experts_per_token": 1, "expert_ffn": 2}, 2, 1, 2, ffn_type="swiglu")
    {'norm2_input': 8.0, 'mlp_input': 8, 'expert_activation': 24}
    """
    if not moe or "fc1_input" not in terms:
        return terms
    out = {name: v for name, v in terms.items() if name not in MOE_REPLACES}
    out.update(moe_mlp_saved_terms(s, b, h, **moe, **options))
    return out
