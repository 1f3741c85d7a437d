"""Measured Megatron-DeepSpeed iteration times on an A100 cluster (vTrain data).

88 runs of GPT models (3.6B, 18.4B, 39.1B) on up to 512 A100s with full
recomputation, 1F1B, sequence 2048, over TP/PP/DP/micro-batch combinations.
The scenario per row is fixed by the data's source, not fitted: GPT layers with
biases, LayerNorm, GeLU, dropout 0.1, learned positions, the GPT-2 BPE vocabulary (50,257) padded to a
multiple of 128·TP as Megatron does (:func:`vocab`: 50,304 at TP 1, 51,200 at TP 8 and 16), math attention with fused
softmax (vTrain's model code), fp16 with fp16 gradients, no gradient bucketing
(no overlap of the data-parallel all-reduce). Every row uses one shared set of
efficiency parameters: those in ``hwspecs/gpus/a100-sxm-80gb.yaml`` and the links
of ``hwspecs/systems/a100-cluster-800g.yaml``.

Targets: mean absolute percentage error <= 10 % and Spearman rank correlation
>= 0.85 (a search must rank plans correctly, not only be close on average).
Each row must also be within 30 % (three times the target mean), which flags gross
mispredictions. Four rows miss it for reasons the physics of the run does not
explain; they are kept in every statistic and listed in :data:`EXPECTED_MISSES`.
"""

from __future__ import annotations

import csv
from functools import lru_cache

SOURCE = "vTrain ground_truth_multi.csv (VIA-Research/vTrain, MIT), data/megatron_a100_multinode_times.csv"
TARGETS = {"mape": 0.10, "spearman": 0.85}
ROW_TOLERANCE = 0.30
SYSTEM = "a100-cluster-800g"
VOCAB = 51200     # the padded vocabulary at TP 8 and 16 (vocab(8)); each run's is vocab(tp)
TOKENS = 50257    # GPT-2 BPE (Megatron's GPT2BPETokenizer)


def vocab(tp: int) -> int:
    """The embedding rows Megatron-DeepSpeed allocates at tensor parallelism ``tp``: 50,257 padded to a multiple of
    ``--make-vocab-size-divisible-by`` (default 128) x tp (megatron/tokenizer/tokenizer.py _vocab_size_with_padding;
    the default in microsoft/Megatron-DeepSpeed megatron/arguments.py)."""
    multiple = 128 * tp
    return -(-TOKENS // multiple) * multiple

# (params_b, tp, pp, dp, micro_batch) -> why no analytical model can match the measurement.
_TP2 = ("39.1B at tp=2 runs ~1.5x slower than its tp=1 and tp=4 neighbours with the same work per GPU "
        "(tp1 pp16 mb3 and tp4 pp8 are within 11 %); no bandwidth or efficiency explains it")
EXPECTED_MISSES = {
    (3.6, 8, 1, 8, 64): "mb 64 with one micro-batch takes 2x the time of mb 32 with two: identical work "
                        "per iteration, so the doubling is outside any per-token cost model",
    (39.1, 2, 8, 32, 2): _TP2,
    (39.1, 2, 16, 16, 2): _TP2,
    (39.1, 2, 16, 16, 3): _TP2,
}


#: CSV header (vTrain's column names) -> row key
COLUMNS = {"Parameters (billion)": "params_b", "# GPUs": "gpus", "global batch": "global_batch",
           "micro batch": "micro_batch", "hidden size": "hidden", "attention heads": "heads", "# layers": "layers",
           "sequence length": "seq_len", "tensor parallelism": "tp", "data parallelism": "dp",
           "pipeline parallelism": "pp", "iteration time (ms)": "time_s"}


@lru_cache(maxsize=4)
def read_rows(file: str) -> tuple[dict, ...]:
    """The rows of a vTrain ground-truth CSV in ``data/`` (columns by name: :data:`COLUMNS`; time in seconds)."""
    from dse.catalog import data_dir

    with open(data_dir() / file, newline="", encoding="utf-8-sig") as f:
        out = []
        for r in csv.DictReader(f):
            row = {COLUMNS[k]: (float(v) if COLUMNS[k] == "params_b" else float(v) / 1e3 if COLUMNS[k] == "time_s"
                                else int(v)) for k, v in r.items()}
            row.setdefault("params_b", 0.0)
            out.append(row)
    return tuple(out)


def rows() -> list[dict]:
    return list(read_rows("megatron_a100_multinode_times.csv"))


def model_for(row):
    from dse.specs.model import ModelSpec

    name = f"gpt-{row['params_b']:g}b" if row["params_b"] else f"gpt-h{row['hidden']}-l{row['layers']}"
    return ModelSpec(name=name, layers=row["layers"], hidden=row["hidden"], heads=row["heads"],
                     vocab=vocab(row["tp"]), max_seq_len=row["seq_len"], ffn_type="gelu", norm="layernorm", bias=True,
                     position="learned", tied_embeddings=True, dropout=0.1,
                     source="vTrain ground truth").resolved()


def plan_fields(row) -> dict:
    """The plan of a vTrain run as fields (what :func:`plan_for` builds; the calibration's ``plan_data``)."""
    return dict(tp=row["tp"], pp=row["pp"], dp=row["dp"], micro_batch=row["micro_batch"],
                global_batch=row["global_batch"], seq_len=row["seq_len"], recompute="full", attention="math",
                sequence_parallel=False, zero=0, precision="fp16", grad_dtype="half", schedule="1f1b")


def plan_for(row, model):
    from dse.specs.plan import Plan

    return Plan(**plan_fields(row))


def scenarios(system=None):
    """(row, model, system, plan) for every measured run."""
    from dse.catalog import load_system

    system = system or load_system(SYSTEM)
    out = []
    for row in rows():
        model = model_for(row)
        out.append((row, model, system, plan_for(row, model)))
    return out


def cases():
    from dse.estimate import run
    from dse.validate import Case

    out = []
    for row, model, system, plan in scenarios():
        name = (f"{row['params_b']:g}B tp{row['tp']} pp{row['pp']} dp{row['dp']} mb{row['micro_batch']}")
        key = (row["params_b"], row["tp"], row["pp"], row["dp"], row["micro_batch"])
        out.append(Case(name=name, reference=row["time_s"], tolerance=ROW_TOLERANCE, source=SOURCE, unit="s",
                        compute=(lambda m=model, s=system, p=plan: run(m, s, p)["time"]["iteration"]),
                        expected_miss=EXPECTED_MISSES.get(key, "")))
    return out
