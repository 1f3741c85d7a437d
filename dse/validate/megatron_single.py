"""Measured Megatron-DeepSpeed iteration times of small GPT models on one A100 node (vTrain data): off the regime
the A100's efficiencies were fitted on.

1,440 runs on 2, 4 or 8 A100s of the cluster behind :mod:`.megatron` (GPT with hidden 1,024 or 2,048, 16 heads,
12-24 layers, sequence 1,024, micro-batches 1-8, every TP x DP x PP that fits the GPUs), with the same software and
settings as the multi-node runs (full recompute, 1F1B, fp16, math attention with fused softmax, no gradient
bucketing): the scenario per row is :func:`dse.validate.megatron.model_for` / ``plan_for``, on the same system and
GPU efficiencies (fitted on the multi-node runs only). These layers are short: at micro-batch 1 a layer's
checkpointed step is 0.2-2 ms of GPU work, and the measured time per layer and micro-batch has a floor of
3.3-5 ms whatever the hidden size, micro-batch or TP, the host issuing the kernels (:func:`dse.estimate.passes.
layer_passes`). The host's time per launch is ``hwspecs/hosts/vtrain-a100-host.yaml``'s ``dispatch_scale``,
the one parameter fitted here (``dse calibrate --params dispatch_scale`` on these runs, 5-fold cross-validated:
:func:`calibration`, ``scripts/fit_vtrain_host.py``).

Targets: MAPE <= 10 %, Spearman >= 0.85, each row within 30 %, as :mod:`.megatron`.
"""

from __future__ import annotations

from dse.validate.megatron import ROW_TOLERANCE, SYSTEM, model_for, plan_fields, plan_for, read_rows

FILE = "megatron_a100_single_node_times.csv"
SOURCE = "vTrain ground_truth_single.csv (VIA-Research/vTrain, MIT), data/" + FILE
TARGETS = {"mape": 0.10, "spearman": 0.85}
EXPECTED_MISSES: dict = {}


def _name(row) -> str:
    return (f"h{row['hidden']} L{row['layers']} tp{row['tp']} pp{row['pp']} dp{row['dp']} mb{row['micro_batch']} "
            f"gbs{row['global_batch']}")


def measurements():
    """The runs as :class:`dse.calibrate.measurements.Measurement` (iteration time, optimizer step included)."""
    from dse.calibrate.measurements import Measurement

    return [Measurement(name=_name(r), model=model_for(r), plan_data=plan_fields(r), time_s=r["time_s"],
                        peak_bytes=None, optimizer_step=True) for r in read_rows(FILE)]


def calibration(folds: int = 5, every: int = 1) -> dict:
    """``dse calibrate``'s fit of the measured system's host ``dispatch_scale`` to every ``every``-th run."""
    from dse.calibrate import fit
    from dse.catalog import load_system

    return fit.calibrate(measurements()[::every], load_system(SYSTEM), ("dispatch_scale",), folds=folds)


def cases():
    from dse.catalog import load_system
    from dse.estimate import run
    from dse.validate import Case

    system = load_system(SYSTEM)
    out = []
    for row in read_rows(FILE):
        model = model_for(row)
        plan = plan_for(row, model)
        out.append(Case(name=_name(row), reference=row["time_s"], tolerance=ROW_TOLERANCE, source=SOURCE, unit="s",
                        compute=(lambda m=model, p=plan: run(m, system, p)["time"]["iteration"]),
                        expected_miss=EXPECTED_MISSES.get(_name(row), "")))
    return out
