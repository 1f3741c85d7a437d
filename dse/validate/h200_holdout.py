"""Held-out Hugging Face training steps on a second H200 VM (``data/h200/vm2/``, issue 14).

Measured 2026-11-27 by ``dse measure --impl hf --profile`` (``scripts/device_measure_holdout.sh``) on another
H200 SXM VM of the same kind as ``h200-hf``'s, one day later, after every parameter of ``h200-vm`` and of the
pytorch stack was set. Nothing was fitted to these rows: they check the model out of sample. Three files:

- ``dense_families.jsonl``: twelve dense families no GPU of this project had run, built from the shipped config.json
  (``models/hf``: Llama-3.2-1B, Qwen3-0.6B, Phi-2, SmolLM2-360M, OLMo-1B, StableLM-2-1.6B, StarCoder2-3B,
  Qwen2.5-1.5B, Phi-3-mini, Granite-3.0-2B, SmolLM3-3B, Mistral-7B), sdpa/eager x no/full recompute, micro-batch 4
  (47 configurations: StarCoder2's eager full-recompute one was cut by the section's time limit);
- ``repeat_families.jsonl``: 24 configurations of ``h200-hf``'s four families measured again on this VM (the
  same arguments as ``data/h200/hf_families.jsonl``): the device time of every one is within 1 % of the first
  VM's, the step time of the host-bound ones up to 1.84x (``tests/test_h200_holdout.py``);
- ``moe_families.jsonl``: two small-expert MoE families, OLMoE-1B-7B (64 experts, top 8) and Granite-3.0-1B-A400M
  (32, top 8), micro-batch 2, in Transformers' eager code: on a GPU its experts run ``torch._grouped_mm`` (the
  profiles; priced by the pytorch stack's moe rows, docs/moe.md "Transformers' MoE on a GPU"), quantities
  ``moe time`` and ``moe memory``.

Compared as :mod:`.h200_hf` compares its rows (same plan mapping, quantities, targets and tolerances) on
``h200-vm``: the GPU is the same kind, the host is the first VM's measured host, which this VM's is not (its
host-bound rows run slower: the repeated rows). Rows outside the tolerance carry their cause, read from their own
profile (:data:`EXPECTED_TIME_MISSES`, printed by ``scripts/gen_holdout_misses.py``; the test checks the list is
exactly those rows).
"""

from __future__ import annotations

from pathlib import Path

from dse.validate.h100_hf import TARGETS, measured_cases  # noqa: F401

SOURCE = ("a second H200 SXM VM (Firecracker, 16 Intel Xeon vCPUs), PyTorch 2.11 + CUDA 13.0, Transformers 5.17, "
          "measured 2026-11-27 for this project and held out: data/h200/vm2/")
SYSTEM = "h200-vm"
FILES = ("h200/vm2/dense_families.jsonl", "h200/vm2/repeat_families.jsonl", "h200/vm2/moe_families.jsonl")
#: the profiles' GPU busy share (device time / measured step) below which a row is host-bound
HOST_BOUND = 0.8

CAUSES = {
    "host": ("host-bound (the profile's device time is {busy:.0%} of the measured step; {per_kernel:.0f} us of step "
             "per launched kernel, {kernels:,} kernels): this VM's host, which h200-vm does not describe; the same "
             "configurations measured again here ran up to 1.84x the first VM's step time at equal device time "
             "(repeat_families.jsonl)"),
    "gpu": ("GPU-bound (the profile's device time is {busy:.0%} of the measured step, element-wise kernels "
            "{elementwise:.0%} of it): the priced kernels fall short of the profile's device time"),
    "moe": ("Transformers' MoE block, host-bound on this VM (the profile's device time is {busy:.0%} of the measured "
            "step; {per_kernel:.0f} us of step per launched kernel, {kernels:,} kernels): this VM's host is not "
            "h200-vm's (as the host-bound dense rows); the device time is priced (the pytorch stack's moe rows, the "
            "experts at the measured torch._grouped_mm rate: within 3 % of the profile's, which holds 11-17 % of "
            "Transformers 5.17's sentinel masks, masked_fill, that 5.24, the stack's version, runs only under "
            "expert parallelism)"),
}
#: The time rows outside the tolerance (``label``) and the cause that applies: only they carry an expected miss.
EXPECTED_TIME_MISSES: dict[str, str] = {
    "Llama-3.2-1B sdpa b4 s1024 rc-full": "host", "Qwen3-0.6B sdpa b4 s1024 rc-none": "host",
    "Qwen3-0.6B sdpa b4 s1024 rc-full": "host", "Qwen3-0.6B eager b4 s1024 rc-none": "host",
    "Qwen3-0.6B eager b4 s1024 rc-full": "host", "phi-2 sdpa b4 s1024 rc-full": "host",
    "SmolLM2-360M sdpa b4 s1024 rc-none": "host", "SmolLM2-360M sdpa b4 s1024 rc-full": "host",
    "SmolLM2-360M eager b4 s1024 rc-none": "host", "SmolLM2-360M eager b4 s1024 rc-full": "host",
    "OLMo-1B-hf sdpa b4 s1024 rc-full": "host", "stablelm-2-1_6b sdpa b4 s1024 rc-full": "host",
    "starcoder2-3b sdpa b4 s1024 rc-full": "host", "Qwen2.5-1.5B sdpa b4 s1024 rc-full": "host",
    "granite-3.0-2b-base sdpa b4 s1024 rc-full": "host", "SmolLM3-3B sdpa b4 s1024 rc-full": "host",
    "SmolLM3-3B eager b4 s1024 rc-full": "host", "Qwen2-0.5B sdpa b8 s1024 rc-none": "host",
    "Qwen2-0.5B sdpa b2 s1024 rc-full": "host", "Qwen2-0.5B eager b2 s1024 rc-none": "host",
    "Qwen2-0.5B eager b2 s1024 rc-full": "host", "pythia-1.4b eager b2 s1024 rc-none": "host",
    "pythia-1.4b eager b2 s1024 rc-full": "host", "gemma-3-1b-pt sdpa b2 s1024 rc-full": "host",
    "gemma-3-1b-pt sdpa b8 s1024 rc-full": "host", "gemma-3-1b-pt eager b2 s1024 rc-none": "host",
    "Llama-3.1-8B sdpa b1 s1024 rc-full": "host", "OLMoE-1B-7B-0924 sdpa b2 s1024 rc-none": "moe",
    "OLMoE-1B-7B-0924 sdpa b2 s1024 rc-full": "moe", "OLMoE-1B-7B-0924 eager b2 s1024 rc-none": "moe",
    "OLMoE-1B-7B-0924 eager b2 s1024 rc-full": "moe", "granite-3.0-1b-a400m-base sdpa b2 s1024 rc-none": "moe",
    "granite-3.0-1b-a400m-base sdpa b2 s1024 rc-full": "moe",
    "granite-3.0-1b-a400m-base eager b2 s1024 rc-none": "moe",
    "granite-3.0-1b-a400m-base eager b2 s1024 rc-full": "moe",
}
#: Documented reasons the suite's aggregate targets are missed today.
EXPECTED_TARGET_MISSES: dict[str, str] = {
    "time mape": ("out of sample, before any change: 15.0 % (mean -14.7 %; 14.7 %, -14.3 % with Phi-3's sliced "
                  "projections priced; 15.6 %, -15.3 % since the QK-norm's launches and the stack's refitted host "
                  "times; 13.9 %, -13.5 % with the libraries' memsets priced); every dense row outside the "
                  "tolerance is host-bound (its profile's device time < 80 % of the step), and every GPU-bound row "
                  "is inside it: "
                  "the kernels carry over to twelve new families, this VM's host does not carry over from the first "
                  "VM's (the repeated rows; this VM's host speed fitted on half its rows predicts the other half "
                  "within 7.3-8.3 %: docs/calibration.md)"),
}


def model_ref(name: str) -> str:
    """A row's config.json -> what dse loads: ``models/hf/ORG/NAME/config.json`` -> the hub id ``ORG/NAME`` (the
    shipped catalog copy), ``tests/fixtures/hf/NAME/config.json`` -> ``data/h200/configs/NAME/config.json``."""
    from dse.catalog import data_dir

    p = Path(name)
    if p.parts[:2] == ("models", "hf"):
        return "/".join(p.parts[2:-1])
    return str(data_dir() / "h200" / "configs" / p.parent.name / p.name)


def _rows(kind: str) -> list[dict]:
    from dse.validate.h200_hf import rows_of

    return rows_of(FILES, kind)


def _family(model: str) -> str:
    return Path(str(model)).parent.name


def measurements():
    """The base rows of the three files as :class:`~dse.calibrate.measurements.Measurement`."""
    from dse.calibrate.measurements import read
    from dse.catalog import data_dir

    return [m for f in FILES for m in read(data_dir() / f, model_ref)]


def label(m) -> str:
    """``Qwen3-0.6B sdpa b4 s1024 rc-none``."""
    return f"{m.model.name.split('/')[-1]} {m.name.split(' ', 1)[1]}"


def _moe(m) -> bool:
    return bool(getattr(m.model, "experts", 0))


def time_cause(m, profiles: dict) -> str:
    """The documented reason the row's time misses, with its profile's numbers; "" for a row within tolerance."""
    kind = EXPECTED_TIME_MISSES.get(label(m))
    if kind is None:
        return ""
    plan = m.plan_data
    key = (label(m).split(" ")[0], {"flash": "sdpa", "math": "eager"}[plan["attention"]], plan["micro_batch"],
           plan["recompute"])
    p = profiles[key]
    dev = sum(p["device_s_by_category"].values())
    kernels = sum(p["kernels_by_category"].values())
    return CAUSES[kind].format(busy=dev / m.time_s, per_kernel=m.time_s / kernels * 1e6, kernels=kernels,
                               elementwise=p["device_s_by_category"].get("elementwise", 0.0) / dev)


def profiles() -> dict:
    """(family, attn, micro-batch, recompute) -> the row's ``kind: profile`` summary."""
    return {(_family(p["model"]), p["attn"], int(p["b"]), p["recompute"]): p for p in _rows("profile")}


def cases():
    prof = profiles()
    return measured_cases(measurements(), SYSTEM, SOURCE, lambda m: time_cause(m, prof), name=label,
                          quantity=lambda m: "moe " if _moe(m) else "")
