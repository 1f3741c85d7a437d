"""Measured Hugging Face training steps on one H100 (``data/h100_hf_training.jsonl``).

16 configurations of GPT-2 medium and XL (random weights, vocabulary 50,257, tied LM head,
dropout 0) in eager PyTorch with Transformers on one H100 SXM: SDPA (flash) or eager (math)
attention, no or full recomputation (per-layer checkpointing), micro-batch 4 to 16, sequence
1,024. Each is compared twice: forward + backward time (the measurement has no optimizer step,
so the estimate's optimizer time is subtracted; one GPU: no data-parallel communication), and
peak allocated memory (``torch.cuda.max_memory_allocated``; the estimate's GPU total less
``reserved``, the CUDA context and allocator slack, and less the optimizer states, which the
measured run never allocated). The plan: tp = pp = dp = 1, ZeRO 0, ``precision: bf16-pure``
(bf16 weights and gradients, no fp32 master copy), ``stack: pytorch`` (the eager modules' kernels,
saved tensors and fp32 loss: ``stacks/pytorch.yaml``), ``sdpa`` -> ``attention: flash``,
``eager`` -> ``math``, on the shipped ``dgx-h100``, whose efficiencies come from the same file's
micro-benchmarks and kernel profiles (tests/test_h100_micro.py), not from these cases, and whose host carries the
launch price transferred from the H100 VM of the kind that measured the file (4.17x the stacks' reference host,
measured there on a tiny GPT2Block step: hwspecs/hosts/dgx-h100-host.yaml); at the reference host (1) the suite's
time MAPE is 7.9 %, every row optimistic (scripts/host_transfer.py).

Targets (issue 14's acceptance): time MAPE <= 8 %, memory MAPE <= 6 %; each case within
twice its target. Nothing is fitted to the cases. Both targets are met; the one case outside its tolerance is a
documented expected miss naming the cause (:data:`TIME_CAUSES`).
"""

from __future__ import annotations

SOURCE = ("one H100 80GB HBM3 SXM, PyTorch 2.11 + CUDA 13.0, Hugging Face Transformers, measured 2026-11-24 "
          "for this project: data/h100_hf_training.jsonl")
SYSTEM = "dgx-h100"
FILE = "h100_hf_training.jsonl"
TARGETS = {"time": {"mape": 0.08}, "memory": {"mape": 0.06}}
TIME_TOLERANCE = 2 * TARGETS["time"]["mape"]
MEMORY_TOLERANCE = 2 * TARGETS["memory"]["mape"]

_STACK = "the pytorch stack prices the traced eager kernels"
TIME_CAUSES = {
    "host": ("the host floor binds: it prices a layer pass as its launches x 14.3 us + 534 us forward, 713 us "
             "backward (the stack's reference host times, 3.42 us a launch and 128 / 171 us a pass, x dgx-h100-host's "
             "4.17, transferred from the VM's measured tiny GPT2Block step), and this micro-batch-4 step ran faster "
             "than that floor: the GPT2Block step sets one scale for every launch and pass, the full-size step's "
             "own host time may differ (dse validate h100-hf-vm: the same row on the VM's own host)"),
}
_PRECISION_NOTE = ("precision bf16-pure: bf16 weights and gradients, no fp32 master copy, as measured; the measured "
                   "run has no optimizer, so the estimate's optimizer states and step are subtracted")
#: The time rows outside the tolerance (``Measurement.name``): only they carry an expected miss, with the cause
#: of :func:`time_cause` (tests/test_validation.py checks that the list is exactly those rows). Every other row must
#: be within its tolerance.
EXPECTED_TIME_MISSES = frozenset({"gpt2-medium sdpa b4 s1024 rc-none"})
#: Documented reasons the suite's aggregate targets are missed today.
EXPECTED_TARGET_MISSES: dict[str, str] = {}   # none: both targets met (was time 8.5 %, before eager PyTorch's
                                               # non-vectorized paths were priced; 7.9 % at the reference host)


def measurements():
    """The file's ``kind: base`` rows as :class:`~dse.calibrate.measurements.Measurement`."""
    from dse.calibrate.measurements import read
    from dse.catalog import data_dir

    return read(data_dir() / FILE)


def time_cause(m) -> str:
    """The documented reason row ``m``'s time misses (:data:`TIME_CAUSES`); "" for a row not in
    :data:`EXPECTED_TIME_MISSES` (a row within its tolerance, which must stay so)."""
    return f"{_STACK}: {TIME_CAUSES['host']}" if m.name in EXPECTED_TIME_MISSES else ""


def cases():
    return measured_cases(measurements(), SYSTEM, SOURCE, time_cause)


def measured_cases(ms, system_name: str, source: str, time_cause, name=lambda m: m.name, quantity=lambda m: ""):
    """A time and a peak-memory case per measured row on ``system_name`` (shared with :mod:`.h200_hf`).

    ``time_cause(m)``: the documented reason a row's time may miss (its ``expected_miss``); ``name(m)``: its label;
    ``quantity(m)``: a prefix of its cases' quantities ("moe " gives "moe time" and "moe memory").
    """
    from dse.calibrate.measurements import plan_for, predict
    from dse.catalog import load_system
    from dse.validate import Case

    system = load_system(system_name)
    out = []
    for m in ms:
        plan = plan_for(m, system)
        once = {}

        def value(i, m=m, plan=plan, once=once):
            if "v" not in once:
                once["v"] = predict(m, system, plan)
            return once["v"][i]

        note = "; ".join(filter(None, [m.note, _PRECISION_NOTE]))
        out.append(Case(name=f"{name(m)} time", reference=m.time_s, compute=lambda v=value: v(0),
                        tolerance=TIME_TOLERANCE, source=source, unit="s", note=note, quantity=f"{quantity(m)}time",
                        expected_miss=time_cause(m)))
        out.append(Case(name=f"{name(m)} memory", reference=m.peak_bytes, compute=lambda v=value: v(1),
                        tolerance=MEMORY_TOLERANCE, source=source, unit="bytes", note=note,
                        quantity=f"{quantity(m)}memory"))
    return out
