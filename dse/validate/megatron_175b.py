"""Measured Megatron-DeepSpeed iteration times of a 175B GPT on 512 A100s (vTrain data), held out.

The 21 runs of the vTrain source file that ``data/megatron_a100_multinode_times.csv`` leaves out (GPT-3 175B:
96 layers, hidden 12,288, 96 heads; 64 nodes; global batch 1,536; TP 2-8 x PP 8-32 x DP 2-8, micro-batches 2-6).
Nothing is fitted on them: the scenario per row, the system and the efficiencies are :mod:`.megatron`'s.

Targets: MAPE <= 10 %, each row within 30 %, as :mod:`.megatron` (no Spearman target: 21 runs within 24 % of
each other, whose order is mostly noise).
"""

from __future__ import annotations

from dse.validate.megatron import ROW_TOLERANCE, SYSTEM, model_for, plan_for, read_rows

FILE = "megatron_a100_175b_times.csv"
SOURCE = "vTrain ground_truth_multi.csv, 175B rows (VIA-Research/vTrain, MIT), data/" + FILE
TARGETS = {"mape": 0.10}


def cases():
    from dse.catalog import load_system
    from dse.estimate import run
    from dse.validate import Case

    system = load_system(SYSTEM)
    out = []
    for row in read_rows(FILE):
        model = model_for(row)
        name = f"175B tp{row['tp']} pp{row['pp']} dp{row['dp']} mb{row['micro_batch']}"
        out.append(Case(name=name, reference=row["time_s"], tolerance=ROW_TOLERANCE, source=SOURCE, unit="s",
                        compute=(lambda m=model, p=plan_for(row, model): run(m, system, p)["time"]["iteration"])))
    return out
