"""What an estimate has been checked against: the measured runs nearest to its plan, and how far off dse was there.

Every estimate names the validation suites whose measurements resemble it (:data:`REGIMES`: the software stack,
experts or not, the GPU generation, the technique) with dse's error on them, in the direction that matters to a
user: **optimism**, how much faster (or leaner) dse said the run would be than it measured, as a share of the
measurement. For a suite measured in time, memory or cost (smaller is better) optimism is ``1 - model /
reference`` (minus the case's relative error); for one measured in a rate (tokens/s, TFLOP/s: larger is better)
``model / reference - 1`` (the error); a suite that mixes quantities (the papers' bytes, speedups, endurance) gives
its mean absolute error only. Positive: dse was optimistic there.

The numbers are ``dse validate``'s, stored in ``checked.json`` beside this module so that an estimate does not
run the suites (``scripts/gen_checked.py`` writes it; ``tests/test_regimes.py`` fails when it differs from a
fresh run). A plan no regime covers says so: nothing measured resembles it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("checked.json")

#: sense of a suite part's reference: "time" (smaller is better: time, memory, GPU-hours), "rate" (larger is
#: better), "" (mixed quantities: no direction)
SENSES = ("time", "rate", "")


@dataclass(frozen=True)
class Part:
    """The cases of one suite that a regime reads: ``quantity`` "" for all of them."""

    suite: str
    quantity: str = ""
    sense: str = "time"
    what: str = ""                        # what the cases are, for the report


@dataclass(frozen=True)
class Regime:
    name: str
    parts: tuple[Part, ...]
    applies: Callable[[Any, Any, Any], bool]   # (model, system, plan) -> bool
    measured_on: tuple[str, ...] = ()          # the GPUs its suites ran on (name prefixes); () for any
    one_gpu: bool = False                      # its suites ran one GPU each


def _gpu(system: Any) -> str:
    node = getattr(system, "node", None)
    return str(getattr(getattr(node, "gpu", None), "name", "")).lower()


def _moe(model: Any) -> bool:
    return bool(getattr(model, "experts", 0))


def _stack(plan: Any) -> str:
    return str(getattr(plan, "stack", "megatron"))


def _chiplet(system: Any) -> bool:
    return getattr(system, "kind", "gpu-system") != "gpu-system"


#: Base regimes (the first that applies) and technique regimes (every one that applies), in report order.
BASE = (
    Regime("chiplet package", (Part("chiplet", sense="", what="Hecaton's published tables"),),
           lambda m, s, p: _chiplet(s)),
    Regime("MoE on Megatron-Core", (
        Part("megatron-bridge", "moe", "rate", "Megatron-Bridge's published MoE throughput, H100"),
        Part("moe-h100", sense="rate", what="Megatron-Core MoE's published Mixtral TFLOP/s, H100"),
        Part("deepseek-v3", what="DeepSeek-V3's published H800 GPU-hours")),
        lambda m, s, p: _moe(m) and _stack(p) == "megatron", ("h100", "h800")),
    Regime("MoE in eager PyTorch (Hugging Face Transformers) on one GPU", (
        Part("h200-holdout", "moe time", what="step time, OLMoE and Granite MoE on one H200 (held out)"),
        Part("h200-holdout", "moe memory", what="peak allocated memory, the same")),
        lambda m, s, p: _moe(m) and _stack(p) == "pytorch", ("h200",), one_gpu=True),
    Regime("eager PyTorch (Hugging Face Transformers) on one GPU", (
        Part("h100-hf", "time", what="step time, GPT-2 on one H100 (the shared file)"),
        Part("h200-hf", "time", what="step time, five families on one H200 and its VM host"),
        Part("h100-hf", "memory", what="peak allocated memory, one H100"),
        Part("h200-hf", "memory", what="peak allocated memory, one H200"),
        Part("h200-holdout", "time", what="step time, sixteen families on a second H200 VM (held out)"),
        Part("h200-holdout", "memory", what="peak allocated memory, the same")),
        lambda m, s, p: _stack(p) == "pytorch", ("h100", "h200"), one_gpu=True),
    Regime("dense Megatron on A100", (
        Part("megatron-a100", what="iteration time, GPT 3.6-39.1B on 64-512 A100s"),
        Part("megatron-a100-single", what="iteration time, small GPTs on 2-8 A100s"),
        Part("megatron-a100-175b", what="iteration time, GPT-3 175B on 512 A100s (held out)"),
        Part("megatron-selene", "time", what="iteration time, NVIDIA's GPT 22B-1T runs on 8-512 A100s of Selene "
             "(Korthikanti et al. 2022 Table 5, held out)"),
        Part("megatron-selene", "tflops", "rate", "achieved TFLOP/s per GPU, NVIDIA's GPT 1.7B-1T weak-scaling runs "
             "on 32-3,072 A100s of Selene (Narayanan et al. 2021 Table 1, held out)")),
        lambda m, s, p: not _moe(m) and _stack(p) == "megatron" and "a100" in _gpu(s)),
    Regime("dense Megatron beyond the A100", (
        Part("megatron-bridge", "dense", "rate", "Megatron-Bridge's published dense throughput"),
        Part("llama3-405b", "palm", "rate", "Llama 3 405B's published TFLOP/s on 8K-16K H100s, 8K and 128K tokens "
             "(PaLM's FLOP counting)"),
        Part("llama3-405b", "causal", "rate", "the same in the executed (causal) FLOP counting")),
        lambda m, s, p: not _moe(m) and _stack(p) == "megatron", ("h100", "b200", "gb200")),
)
TECHNIQUES = (
    Regime("storage offload (ZeRO-Infinity, Smart-Infinity)", (
        Part("smart-infinity", sense="", what="Smart-Infinity's published figures"),),
        lambda m, s, p: getattr(p, "offload_optimizer", "none") in ("nvme", "csd")
        or getattr(p, "offload_params", "none") == "nvme"),
    Regime("activation offload to SSDs (SSDTrain)", (Part("ssdtrain", sense="", what="SSDTrain's published figures"),),
           lambda m, s, p: getattr(p, "offload_activations", "none") == "ssd"),
)


def parts() -> tuple[Part, ...]:
    """Every suite part a regime reads (each once)."""
    seen: dict[tuple[str, str], Part] = {}
    for r in BASE + TECHNIQUES:
        for part in r.parts:
            seen.setdefault((part.suite, part.quantity), part)
    return tuple(seen.values())


def optimism(case: Any, sense: str) -> float:
    """How much faster/leaner/higher-rate dse was than the reference (positive: optimistic; 0 for sense "")."""
    if sense == "time":
        return -case.error
    if sense == "rate":
        return case.error
    return 0.0


def measure() -> dict[str, dict]:
    """``{"suite[:quantity]": stats}`` from a fresh run of every part's suite (what ``checked.json`` holds)."""
    from dse.validate import run_suite

    out: dict[str, dict] = {}
    runs: dict[str, Any] = {}
    for part in parts():
        r = runs.setdefault(part.suite, run_suite(part.suite))
        cases = [c for c in r.cases if not part.quantity or c.quantity == part.quantity]
        rel = [c for c in cases if c.kind == "relative"]
        stats: dict[str, Any] = {"cases": len(cases), "mape": round(sum(abs(c.error) for c in rel) / len(rel), 4)}
        if part.sense:
            o = [optimism(c, part.sense) for c in rel]
            mean = sum(o) / len(o)
            stats.update(bias=round(abs(mean), 4), lean="optimistic" if mean > 0 else "pessimistic",
                         worst_optimistic=round(max(0.0, max(o)), 4), worst_pessimistic=round(max(0.0, -min(o)), 4))
        out[_key(part)] = stats
    return out


def _key(part: Part) -> str:
    return f"{part.suite}:{part.quantity}" if part.quantity else part.suite


@lru_cache(maxsize=1)
def stored() -> dict[str, dict]:
    """The stats of ``checked.json``."""
    return json.loads(FILE.read_text(encoding="utf-8"))["parts"]


def checked_against(model: Any, system: Any, plan: Any) -> list[dict]:
    """The regimes that apply to a plan, each ``{"regime", "parts": [{"suite", "quantity", "what", "cases", "mape",
    "bias", "lean", "worst_optimistic", "worst_pessimistic"}], "caveats": [...]}`` ([] when no measured regime
    resembles it; ``caveats``: :func:`caveats`, how the plan differs from the measured runs): ``bias``
    the mean optimism's size and ``lean`` its direction, the worst cases each way as shares of the measurement
    (the last four only for a suite with a direction)."""
    out = []
    base = next((r for r in BASE if r.applies(model, system, plan)), None)
    chosen = ([base] if base else []) + [r for r in TECHNIQUES if r.applies(model, system, plan)]
    table = stored()
    for r in chosen:
        rows = [{"suite": p.suite, "quantity": p.quantity, "what": p.what, **table.get(_key(p), {})}
                for p in r.parts]
        out.append({"regime": r.name, "parts": rows, "caveats": caveats(r, system, plan)})
    return out


def caveats(regime: Regime, system: Any, plan: Any) -> list[str]:
    """How the plan differs from every run the regime's suites measured: another GPU, or several GPUs where they
    ran one."""
    out = []
    gpu = _gpu(system)
    if regime.measured_on and gpu and not gpu.startswith(regime.measured_on):
        out.append(f"measured on {', '.join(g.upper() for g in regime.measured_on)} only, not {gpu}")
    gpus = 1
    for field in ("tp", "pp", "dp", "cp"):
        gpus *= int(getattr(plan, field, 1) or 1)
    if regime.one_gpu and gpus > 1:
        out.append(f"measured on one GPU, this plan runs {gpus}")
    return out


def sentence(regimes: list[dict]) -> str:
    """One line for the console: each regime's parts, with their cases, MAPE, mean optimism and its range."""
    if not regimes:
        return "no measured run resembles this plan (no dse validate suite covers it): an unchecked estimate"
    out = []
    for r in regimes:
        bits = []
        for p in r["parts"]:
            name = p["suite"] + (f" {p['quantity']}" if p["quantity"] else "")
            n = p["cases"]
            text = f"{name} ({n} case{'s' if n != 1 else ''}): MAPE {100 * p['mape']:.1f} %"
            if "lean" in p:
                text += f", {100 * p['bias']:.1f} % {p['lean']} on average"
                if n > 1:
                    text += (f" (worst {100 * p['worst_optimistic']:.0f} % optimistic, "
                             f"{100 * p['worst_pessimistic']:.0f} % pessimistic)")
            bits.append(text)
        warn = f" ({'; '.join(r['caveats'])})" if r.get("caveats") else ""
        out.append(f"{r['regime']}{warn}: " + ", ".join(bits))
    return "; ".join(out) + " (optimistic: dse said faster or leaner than measured)"
