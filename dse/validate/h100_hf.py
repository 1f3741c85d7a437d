"""Measured Hugging Face training steps on one H100 (``data/h100_hf_training.jsonl``).

16 configurations of GPT-2 medium and XL (random weights, vocabulary 50,257, tied LM head,
dropout 0) in eager PyTorch with Transformers on one H100 SXM: SDPA (flash) or eager (math)
attention, no or full recomputation (per-layer checkpointing), micro-batch 4 to 16, sequence
1,024. Each is compared twice: forward + backward time (the measurement has no optimizer step,
so the estimate's optimizer time is subtracted; one GPU: no data-parallel communication), and
peak allocated memory (``torch.cuda.max_memory_allocated``; the estimate's GPU total less
``reserved``, the CUDA context and allocator slack, and less the optimizer states, which the
measured run never allocated). The plan: tp = pp = dp = 1, ZeRO 0, ``precision: bf16-pure``
(bf16 weights and gradients, no fp32 master copy), ``sdpa`` -> ``attention: flash``, ``eager``
-> ``math``, on the shipped ``dgx-h100`` (its H100 carries the A100's efficiency parameters).

Targets (issue 14's acceptance): time MAPE <= 8 %, memory MAPE <= 6 %; each case within
twice its target. Today's model prices a fused Megatron stack and misses every case, always
optimistic: the misses and both targets are documented expected misses naming the cause
(:data:`TIME_CAUSES`, :data:`MEMORY_CAUSES`). Nothing is fitted to this file.
"""

from __future__ import annotations

SOURCE = ("one H100 80GB HBM3 SXM, PyTorch 2.11 + CUDA 13.0, Hugging Face Transformers, measured 2026-11-24 "
          "for this project: data/h100_hf_training.jsonl")
SYSTEM = "dgx-h100"
FILE = "h100_hf_training.jsonl"
TARGETS = {"time": {"mape": 0.08}, "memory": {"mape": 0.06}}
TIME_TOLERANCE = 2 * TARGETS["time"]["mape"]
MEMORY_TOLERANCE = 2 * TARGETS["memory"]["mape"]

_STACK = "the estimate prices Megatron's fused kernels, not eager PyTorch"
TIME_CAUSES = {
    "all": ("unfused element-wise kernels take ~45 % of device time in the measured profiles, ~3x what dse "
            "charges; the fp32 logits over 50,257 words and the cross-entropy are not priced as kernels; a "
            "vocabulary that is not a multiple of 64 runs the LM-head GEMM far below the other GEMMs' "
            "efficiency; the H100 carries the A100's GEMM efficiency and no launch floor"),
    "math": "eager attention is a chain of unfused kernels (matmul, scale, mask, fp32 softmax, dropout, matmul)",
    "full": ("full recomputation re-runs every unfused forward kernel; at small batches the GPU waits for the host "
             "(launch floor: layer_overhead is 0)"),
}
MEMORY_CAUSES = {
    "all": ("the fp32 logits ({logits}) and their gradient are not counted, nor the allocator's largest "
            "temporaries"),
    "none": "an unfused layer saves about twice the bytes dse counts (each eager op keeps its own input)",
    "full": "with full recomputation the logits and the recomputed layer's temporaries dominate the peak",
}
_PRECISION_NOTE = ("precision bf16-pure: bf16 weights and gradients, no fp32 master copy, as measured; the measured "
                   "run has no optimizer, so the estimate's optimizer states and step are subtracted")
#: Documented reasons the suite's aggregate targets are missed today (issue 14 builds the model that meets them).
EXPECTED_TARGET_MISSES = {
    "time mape": f"{_STACK}: see the time causes of the cases (--verbose); the --stack pytorch model is issue 14",
    "memory mape": f"{_STACK}: see the memory causes of the cases (--verbose); allocator-level memory is issue 14",
}


def measurements():
    """The file's ``kind: base`` rows as :class:`~dse.calibrate.measurements.Measurement`."""
    from dse.calibrate.measurements import read
    from dse.catalog import data_dir

    return read(data_dir() / FILE)


def _cause(causes: dict, plan: dict, **fmt) -> str:
    parts = [causes["all"].format(**fmt)]
    if plan["attention"] == "math" and "math" in causes:
        parts.append(causes["math"])
    if plan["recompute"] in causes:
        parts.append(causes[plan["recompute"]])
    return f"{_STACK}: " + "; ".join(parts)


def cases():
    from dse.calibrate.measurements import plan_for, predict
    from dse.catalog import load_system
    from dse.units import fmt
    from dse.validate import Case

    system = load_system(SYSTEM)
    out = []
    for m in measurements():
        plan = plan_for(m, system)
        once = {}

        def value(i, m=m, plan=plan, once=once):
            if "v" not in once:
                once["v"] = predict(m, system, plan)
            return once["v"][i]

        logits = fmt(4.0 * plan.micro_batch * plan.seq_len * m.model.vocab, "bytes")
        note = "; ".join(filter(None, [m.note, _PRECISION_NOTE]))
        out.append(Case(name=f"{m.name} time", reference=m.time_s, compute=lambda v=value: v(0),
                        tolerance=TIME_TOLERANCE, source=SOURCE, unit="s", note=note, quantity="time",
                        expected_miss=_cause(TIME_CAUSES, m.plan_data)))
        out.append(Case(name=f"{m.name} memory", reference=m.peak_bytes, compute=lambda v=value: v(1),
                        tolerance=MEMORY_TOLERANCE, source=SOURCE, unit="bytes", note=note, quantity="memory",
                        expected_miss=_cause(MEMORY_CAUSES, m.plan_data, logits=logits)))
    return out
