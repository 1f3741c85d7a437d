"""Measured Hugging Face training steps on one H200 in a VM (``data/h200/``, issue 14).

55 configurations measured by ``dse measure --impl hf`` on one H200 SXM in a Firecracker VM (data/README.md,
``h200/``): Transformers' GPT-2 medium and XL (``gpt2_hf.jsonl``, 24: sdpa/eager x no/full recompute x
micro-batch 4/8/16) and four other families built from their config.json (``hf_families.jsonl``, 31: Qwen2-0.5B,
Pythia-1.4B, Gemma-3-1B, Llama-3.1-8B at micro-batch 2/8, Llama 1/2), sequence 1,024, random weights, dropout 0.
Compared as :mod:`.h100_hf` compares the shared H100 file (same plan mapping, same time and peak-memory
quantities, same targets and tolerances), on ``h200-vm``: the measured GPU (its efficiencies from the same
session's micro-benchmarks and profiles, tests/test_h200_micro.py) and the measured host (``firecracker-xeon-vm``:
its GPT2Block step is 4.6x the stacks' reference host's, 6.5x under checkpointing; the pytorch stack's host time per
layer pass, per launch and per layer, from five families' layers on the CPU build of torch: data/host_layers_cpu.json).
Nothing is fitted to the cases.

Left out: ``gpt2_torch.jsonl``, the harness's own plain-torch GPT (``--impl torch``), which is not the ``pytorch``
stack: one fused ``F.gelu`` kernel instead of Transformers' eight-op GeLU, its own attention module and a
different set of saved tensors; no stack prices its op list (stacks/*.yaml are traced from Transformers' modules).

Each time case carries its cause, with the row's own profile (``kind: profile``: device time per kernel
category and the kernels launched) as the evidence: the share of the measured step the GPU is busy tells a
host-bound case (the host floor: L x d + D per layer pass, the VM's scale times the stack's reference host times)
from a GPU-bound one (its kernels priced, stacks/pytorch.yaml). Only the rows outside the tolerance
carry a cause (:data:`EXPECTED_TIME_MISSES`; tests/test_h200_hf.py checks that the list is exactly those rows).
"""

from __future__ import annotations

import json
from pathlib import Path

from dse.validate.h100_hf import MEMORY_TOLERANCE, TARGETS, TIME_TOLERANCE, measured_cases  # noqa: F401

SOURCE = ("one H200 SXM in a Firecracker VM (16 Intel Xeon vCPUs), PyTorch 2.11 + CUDA 13.0, Transformers 5.17, "
          "measured 2026-11-26 for this project: data/h200/gpt2_hf.jsonl, hf_families.jsonl")
SYSTEM = "h200-vm"
FILES = ("h200/gpt2_hf.jsonl", "h200/hf_families.jsonl")
#: the profiles' GPU busy share (device time / measured step) below which a row is host-bound
HOST_BOUND = 0.8

_STACK = ("the pytorch stack prices the traced eager kernels; the host floor prices a layer pass as its launches x "
          "15.7 us + 586 us forward, 783 us backward on this VM (the stack's 3.42 us, 128 and 171 us on the reference "
          "host x the VM's measured 4.58; x 6.47 checkpointed: data/host_layers_cpu.json, "
          "data/h200/host_dispatch_cuda.json)")
CAUSES = {
    "host": ("host-bound (the profile's device time is {busy:.0%} of the measured step): the run's host time per "
             "launched kernel is {per_kernel:.0f} us ({kernels:,} kernels in {step:.1f} ms); on this VM the same "
             "family's host time per launch varies up to 2x between configurations the CPU measurement of its layer "
             "prices alike (Qwen2-0.5B b2 without recompute: 19 us per kernel with SDPA, 35 eager; Llama-3.1-8B b1 "
             "with recompute: <= 29 eager, 48 SDPA), which no per-op model reproduces"),
    "gpu": ("GPU-bound (the profile's device time is {busy:.0%} of the measured step: the host issued its "
            "{kernels:,} kernels at <= {per_kernel:.0f} us each, so a model above the measurement is its host floor; "
            "element-wise kernels take {elementwise:.0%} of the device time)"),
    "full": "torch.utils.checkpoint (non-reentrant): the host time per op under it varies by model",
    "mixed": ("neither bound: the GPU is busy {busy:.0%} of the step and the host's priced time is below it too; "
              "host-bound stretches (the norms' small kernels) and GPU-bound ones (the GEMMs) of the same pass do not "
              "overlap fully, which the pass-wise max(GPU, host) does not price"),
}
#: The time rows outside the tolerance (``label``) and the cause that applies: only they carry an expected miss.
EXPECTED_TIME_MISSES = {
    "gpt2-medium sdpa b4 s1024 rc-none": "host", "Qwen2-0.5B sdpa b2 s1024 rc-none": "host",
    "Qwen2-0.5B eager b2 s1024 rc-none": "host", "pythia-1.4b sdpa b2 s1024 rc-none": "host",
    "gemma-3-1b-pt sdpa b8 s1024 rc-none": "mixed",
    "Llama-3.1-8B sdpa b1 s1024 rc-full": "host", "Llama-3.1-8B eager b1 s1024 rc-full": "gpu",
    "gpt2-xl sdpa b4 s1024 rc-full": "host", "gemma-3-1b-pt eager b2 s1024 rc-full": "host",
}
#: Documented reasons the suite's aggregate targets are missed today: none (time 9.6 % before eager PyTorch's
#: non-vectorized element-wise paths and CUDA's softmax-backward product were priced, stacks/pytorch.yaml).
EXPECTED_TARGET_MISSES: dict[str, str] = {}


def _model_ref(name: str) -> str:
    """A row's config.json (``tests/fixtures/hf/X/config.json`` where it was measured) -> the copy shipped with the
    data (``data/h200/configs/X/config.json``); catalog names unchanged."""
    from dse.catalog import data_dir

    p = Path(name)
    return str(data_dir() / "h200" / "configs" / p.parent.name / p.name) if p.name == "config.json" else name


def rows_of(files, kind: str) -> list[dict]:
    """The rows of ``kind`` ("base", "profile", "micro") of the data files ``files`` (paths under data/), in order."""
    from dse.catalog import data_dir

    out = []
    for f in files:
        with open(data_dir() / f) as fh:
            out += [r for r in map(json.loads, filter(str.strip, fh)) if r.get("kind") == kind]
    return out


def _rows(kind: str) -> list[dict]:
    return rows_of(FILES, kind)


def _key(row: dict) -> tuple:
    return Path(str(row["model"])).parent.name or row["model"], row["attn"], int(row["b"]), row["recompute"]


def measurements():
    """The Transformers rows (``impl: hf``) of both files as :class:`~dse.calibrate.measurements.Measurement`."""
    from dse.calibrate.measurements import read
    from dse.catalog import data_dir

    return [m for f in FILES for m in read(data_dir() / f, _model_ref)]


def label(m) -> str:
    """``Qwen2-0.5B sdpa b2 s1024 rc-none`` (the row's model path shortened to the model's name)."""
    return f"{m.model.name} {m.name.split(' ', 1)[1]}"


def time_cause(m, profiles: dict) -> str:
    """The documented reason the row's time misses, with its profile's numbers; "" for a row within tolerance."""
    kind = EXPECTED_TIME_MISSES.get(label(m))
    if kind is None:
        return ""
    plan = m.plan_data
    key = (m.model.name, {"flash": "sdpa", "math": "eager"}[plan["attention"]], plan["micro_batch"], plan["recompute"])
    p = profiles[key]
    dev = sum(p["device_s_by_category"].values())
    kernels = sum(p["kernels_by_category"].values())
    parts = [CAUSES[kind].format(busy=dev / m.time_s, per_kernel=m.time_s / kernels * 1e6, kernels=kernels,
                                 step=m.time_s * 1e3,
                                 elementwise=p["device_s_by_category"].get("elementwise", 0.0) / dev)]
    if plan["recompute"] == "full":
        parts.append(CAUSES["full"])
    return f"{_STACK}: " + "; ".join(parts)


def cases():
    profiles = {_key(p): p for p in _rows("profile") if p.get("impl") == "hf"}
    ms = measurements()
    return measured_cases(ms, SYSTEM, SOURCE, lambda m: time_cause(m, profiles), name=label)
