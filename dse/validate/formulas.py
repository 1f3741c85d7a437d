"""Published closed-form numbers the formulas must reproduce exactly (or nearly).

Korthikanti et al. 2022 (arXiv 2205.05198) Table 2 and §5 worked values, as collected
in the activation-offload research note (validation cases V1, V2, V8-V10).

Not included: the paper's hardware-FLOPs ratio for selective recompute,
72BsLh^2(1 + s/3h + ...) (2.7 % extra for GPT-3). Re-running QK^T and PV once
costs 4 B s^2 h per layer (the note's own parenthetical), i.e. 1 + s/6h + s/18h,
0.9 % for GPT-3; dse counts the physical re-run.
"""

from __future__ import annotations

TARGETS: dict = {}

K22 = "Korthikanti et al. 2022, arXiv 2205.05198"


def cases():
    from dse.formulas import memory, transformer
    from dse.validate import Case

    # GPT-3 175B layer: s=2048, b=1, h=12288, a=96 (note V1/V2). Stats of the norms are tiny extras (0.005%).
    gpt3 = dict(s=2048, b=1, h=12288, heads=96, kv_heads=96, head_dim=128, ffn=49152)
    act = lambda **o: transformer.activation_bytes_per_layer(**gpt3, attention="math", dropout=True, **o)  # noqa: E731
    out = [
        Case("GPT-3 layer activations, no parallelism (Eq. 1: sbh(34+5as/h))", 2_868_903_936, lambda: act(tp=1),
             1e-3, f"{K22}, Eq. 1", "bytes"),
        Case("GPT-3 layer, t=8 (Eq. 2: sbh(10+24/t+5as/ht))", 578_813_952, lambda: act(tp=8), 1e-3, f"{K22}, Eq. 2", "bytes"),
        Case("GPT-3 layer, t=8 + SP (Eq. 4: sbh(34/t+5as/ht))", 358_612_992, lambda: act(tp=8, sequence_parallel=True),
             1e-3, f"{K22}, Eq. 4", "bytes"),
        Case("GPT-3 layer, t=8 + selective recompute (sbh(10+24/t))", 327_155_712, lambda: act(tp=8, recompute="selective"),
             1e-3, f"{K22}, Table 2", "bytes"),
        Case("GPT-3 layer, t=8 + SP + selective (sbh 34/t)", 106_954_752,
             lambda: act(tp=8, sequence_parallel=True, recompute="selective"), 1e-3, f"{K22}, Table 2", "bytes"),
        Case("GPT-3 layer, full recompute (2sbh)", 50_331_648, lambda: act(tp=8, recompute="full"), 1e-9,
             f"{K22}, Table 2", "bytes"),
        Case("GPT-3 model FLOPs ratio to 72BsLh^2 at B=1, V=51200 (= 1.03139)", 1.03139,
             lambda: transformer.model_flops(2048, 96, 12288, 96, 96, 128, 49152, 51200, 2048) / (72 * 2048 * 96 * 12288**2),
             1e-4, "Korthikanti App. A; Megatron-LM core_v0.7.0 num_floating_point_operations"),
        Case("Megatron distributed optimizer: bytes/param bf16 + fp32 grads, d=8 (= 7.5)", 7.5,
             lambda: sum(memory.model_state_bytes(1.0, dp=8, zero=1).values()), 1e-9,
             "Megatron-LM docs/.../dist_optimizer.md: 6 + 12/d"),
        Case("Non-distributed optimizer bytes/param (= 18)", 18.0,
             lambda: sum(memory.model_state_bytes(1.0, dp=8, zero=0).values()), 1e-9,
             "Megatron-LM theoretical_memory_usage.py"),
    ]
    return out
