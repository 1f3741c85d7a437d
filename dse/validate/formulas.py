"""Published closed-form numbers the formulas must reproduce exactly (or nearly).

Korthikanti et al. 2022 (arXiv 2205.05198) Table 2 and §5 worked values, as collected
in the activation-offload research note (validation cases V1, V2, V8-V10); the numbers and
their sources are in ``data/published/korthikanti2022.yaml``.

Not included: the paper's hardware-FLOPs ratio for selective recompute,
72BsLh^2(1 + s/3h + ...) (2.7 % extra for GPT-3). Re-running QK^T and PV once
costs 4 B s^2 h per layer (the note's own parenthetical), i.e. 1 + s/6h + s/18h,
0.9 % for GPT-3; dse counts the physical re-run.
"""

from __future__ import annotations

TARGETS: dict = {}

K22 = "Korthikanti et al. 2022, arXiv 2205.05198"
FILE = "korthikanti2022"      # data/published/korthikanti2022.yaml: the numbers and their sources


def cases():
    from dse.formulas import memory, transformer
    from dse.validate import Case
    from dse.validate.published import load as load_published

    # GPT-3 175B layer: s=2048, b=1, h=12288, a=96 (note V1/V2). Stats of the norms are tiny extras (0.005%).
    gpt3 = dict(s=2048, b=1, h=12288, heads=96, kv_heads=96, head_dim=128, ffn=49152)
    act = lambda **o: transformer.activation_bytes_per_layer(**gpt3, attention="math", dropout=True, **o)  # noqa: E731
    pub = load_published(FILE)
    acts, flops, states = (pub.values(t) for t in ("gpt3_layer_activations", "model_flops",
                                                    "optimizer_bytes_per_param"))

    def src(key):
        return pub.source("gpt3_layer_activations", key)

    out = [
        Case("GPT-3 layer activations, no parallelism (Eq. 1: sbh(34+5as/h))", acts["no_parallelism"],
             lambda: act(tp=1), 1e-3, src("no_parallelism"), "bytes"),
        Case("GPT-3 layer, t=8 (Eq. 2: sbh(10+24/t+5as/ht))", acts["tp8"], lambda: act(tp=8), 1e-3, src("tp8"),
             "bytes"),
        Case("GPT-3 layer, t=8 + SP (Eq. 4: sbh(34/t+5as/ht))", acts["tp8_sp"],
             lambda: act(tp=8, sequence_parallel=True), 1e-3, src("tp8_sp"), "bytes"),
        Case("GPT-3 layer, t=8 + selective recompute (sbh(10+24/t))", acts["tp8_selective"],
             lambda: act(tp=8, recompute="selective"), 1e-3, src("tp8_selective"), "bytes"),
        Case("GPT-3 layer, t=8 + SP + selective (sbh 34/t)", acts["tp8_sp_selective"],
             lambda: act(tp=8, sequence_parallel=True, recompute="selective"), 1e-3, src("tp8_sp_selective"), "bytes"),
        Case("GPT-3 layer, full recompute (2sbh)", acts["full_recompute"], lambda: act(tp=8, recompute="full"), 1e-9,
             src("full_recompute"), "bytes"),
        Case("GPT-3 model FLOPs ratio to 72BsLh^2 at B=1, V=51200 (= 1.03139)", flops["gpt3_ratio_to_72BsLh2"],
             lambda: (transformer.model_flops(2048, 96, 12288, 96, 96, 128, 49152, 51200, 2048)
                      / (72 * 2048 * 96 * 12288**2)),
             1e-4, pub.source("model_flops")),
        Case("Megatron distributed optimizer: bytes/param bf16 + fp32 grads, d=8 (= 7.5)", states["distributed_d8"],
             lambda: sum(memory.model_state_bytes(1.0, dp=8, zero=1).values()), 1e-9,
             pub.source("optimizer_bytes_per_param", "distributed_d8")),
        Case("Non-distributed optimizer bytes/param (= 18)", states["non_distributed"],
             lambda: sum(memory.model_state_bytes(1.0, dp=8, zero=0).values()), 1e-9,
             pub.source("optimizer_bytes_per_param", "non_distributed")),
    ]
    return out
