"""Checking the model against measurements: ``dse validate``, ``dse calibrate``, ``dse measure``."""
# ruff: noqa: UP006, UP035, UP045
# (typer reads the annotations: Optional[...] and List[...] kept as they were in dse/cli.py)

from __future__ import annotations

from typing import List, Optional

import typer

from dse.commands.options import _console, _print_json


def validate(suites: List[str] = typer.Argument(None, help="suites to run (default: all)"),
             json_out: bool = typer.Option(False, "--json"),
             verbose: bool = typer.Option(False, "--verbose", "-v", help="print every case, not only misses"),
             allow_expected: bool = typer.Option(False, "--allow-expected-misses",
                                                 help="exit 0 when the only misses are documented expected misses")):
    """Run the validation cases: model vs reference vs error, with summary statistics.

    Exits 1 when a case misses its tolerance (documented expected misses included, unless
    --allow-expected-misses) or a suite misses an aggregate target.
    """
    from dse import validate as V

    names = suites or V.suite_names()
    for n in names:
        V.load(n)  # unknown names fail before any work
    results = [V.run_suite(n) for n in names]
    if json_out:
        _print_json([{"suite": r.name, "passed": r.passed, "accepted": r.accepted, "stats": r.stats,
                      "targets": r.targets, "expected_target_misses": r.target_misses,
                      "cases": [{"name": c.name, "reference": c.reference, "model": c.value, "error": c.error,
                                 "tolerance": c.tolerance, "passed": c.passed, "expected_miss": c.expected_miss,
                                 "source": c.source, "quantity": c.quantity, "note": c.note} for c in r.cases]}
                     for r in results])
    else:
        from dse.report.console import render_validation

        render_validation(_console(), results, verbose)
    if not all(r.accepted if allow_expected else r.passed for r in results):
        raise typer.Exit(1)


def calibrate(data: str = typer.Option(..., "--data",
                                       help="measured scenarios: dse measure / H100 JSONL, or generic CSV/JSONL"),
              hw: str = typer.Option(..., "--hw", help="hardware system whose GPU efficiency is fitted"),
              params: Optional[str] = typer.Option(None, "--params", help="fitted fields, comma-separated (default "
                                                   "gemm,attention,memory,gemm_overhead)"),
              folds: int = typer.Option(5, "--folds", min=0, help="k-fold cross-validation (0: none)"),
              out: Optional[str] = typer.Option(None, "--out", help="write the calibrated hardware YAML here"),
              json_out: bool = typer.Option(False, "--json")):
    """Fit a GPU's efficiency parameters to measured step times (scipy least squares); write a calibrated --hw YAML."""
    from dse.calibrate.command import run

    return run(data, hw, params, folds, out, json_out)


def measure(out: str = typer.Option("measured.jsonl", "--out",
                                    help="JSONL file to write (the format dse calibrate reads)"),
            device: str = typer.Option("cuda", "--device", help="cuda | cpu (cpu only with --smoke)"),
            smoke: bool = typer.Option(False, "--smoke", help="tiny shapes, a few seconds: checks the harness runs"),
            models: str = typer.Option("gpt2-medium,gpt2-xl", "--models", help="GPT-2-style catalog models to time"),
            batches: str = typer.Option("4,8", "--batches", help="micro-batch sizes"),
            seq_len: int = typer.Option(1024, "--seq-len", "-s", min=1, help="tokens per sequence"),
            impl: str = typer.Option("torch", "--impl", help="torch (plain torch.nn GPT) | hf (Transformers' "
                                     "GPT2LMHeadModel; needs transformers)"),
            profile: bool = typer.Option(False, "--profile", help="also profile one step of each configuration "
                                         "(kernels and operators by device time: kind profile rows)"),
            micro: bool = typer.Option(True, "--micro/--no-micro", help="the micro-benchmark row (GEMM, HBM, "
                                       "PCIe, AdamW rates) before the training steps"),
            moe: bool = typer.Option(False, "--moe", help="also time MoE expert GEMMs (per-expert loop, grouped, "
                                     "dense) and token permutation at published MoE shapes")):
    """Measure this machine's GPU (micro-benchmarks and timed training steps; needs the measure extra: torch)."""
    from dse.measure.command import run

    return run(out, device, smoke, models, batches, seq_len, impl, profile, moe, micro)
