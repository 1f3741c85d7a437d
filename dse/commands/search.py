"""``dse search``: flags -> :func:`dse.search.command.run` (exhaustive or optuna over a space)."""
# ruff: noqa: UP006, UP035, UP045
# (typer reads the annotations: Optional[...] and List[...] kept as they were in dse/cli.py)

from __future__ import annotations

from typing import List, Optional

import typer

from dse.commands.options import flag


def search(
    space: Optional[str] = typer.Option(None, "--space", help="search space file (YAML; see examples/spaces/)"),
    model: Optional[str] = typer.Option(None, "--model", "-m",
                                        help="model (as --model of dse estimate); overrides the space's"),
    hw: Optional[str] = typer.Option(None, "--hw", help="hardware system; overrides the space's"),
    gpus: Optional[int] = typer.Option(None, "--gpus", min=1, help="total GPUs; dp = gpus / (tp x pp x cp)"),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", "-B", min=1,
                                               help="sequences per iteration (flag space default: >= 512, a "
                                                    "multiple of --gpus)"),
    seq_len: Optional[int] = flag.seq_len(),
    objective: List[str] = typer.Option([], "--objective", "-o", help="time | throughput | cost | cost_per_token | "
                                        "energy | ssd_lifetime (repeat for a Pareto front)"),
    budget: Optional[str] = typer.Option(None, "--budget", help="maximum capital cost, e.g. '$5M' or 5000000"),
    power_cap: Optional[str] = typer.Option(None, "--power-cap", help="maximum power at the wall, e.g. '500 kW'"),
    min_ssd_lifetime: Optional[str] = typer.Option(None, "--min-ssd-lifetime",
                                                   help="minimum SSD lifetime, e.g. '3 years'"),
    param: List[str] = typer.Option([], "--param", help="add/replace a parameter: PATH=VALUES, e.g. plan.zero=[0,1]"),
    set_: List[str] = typer.Option([], "--set", help="fix a field for every point: PATH=VALUE"),
    engine: Optional[str] = typer.Option(None, "--engine", help="auto | optuna | exhaustive (default auto)"),
    trials: Optional[int] = typer.Option(None, "--trials",
                                         help="completed optuna trials the study should hold (default 300)"),
    sampler: Optional[str] = typer.Option(None, "--sampler", help="optuna sampler: ga+tpe (default, one objective), "
                                          "nsga2 (default, several: population 20), nsga3, tpe"),
    seed: Optional[int] = typer.Option(None, "--seed", help="sampler seed (default 0)"),
    storage: Optional[str] = typer.Option(None, "--storage", help="optuna storage: sqlite:///FILE (default "
                                          "sqlite:///dse-search.db), postgresql://..., journal:FILE, memory"),
    study: Optional[str] = typer.Option(None, "--study", help="study name: resume it, or share it between workers"),
    top: Optional[int] = typer.Option(None, "--top", help="configurations to list (default 10)"),
    json_path: Optional[str] = typer.Option(None, "--json",
                                            help="write the result and every trial as JSON (- = stdout)"),
    csv_path: Optional[str] = typer.Option(None, "--csv", help="write every trial as CSV (- = stdout)"),
    plot_path: Optional[str] = typer.Option(None, "--plot",
                                            help="write a PNG: Pareto front or convergence (needs matplotlib)"),
    chunk: Optional[int] = typer.Option(None, "--chunk",
                                        help="points per vectorised block (bounds memory; default 131072)"),
    html: Optional[str] = typer.Option(None, "--html", help="write a self-contained HTML page: Pareto front or "
                                       "convergence (hover a point for its configuration), breakdowns of the best"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    emit: Optional[str] = typer.Option(None, "--emit", help="also print the best configuration (front point #1) as "
                                       "megatron launch arguments | deepspeed ds_config.json | torchtitan TOML"),
):
    """Find the best hardware and parallelism: exhaustive (numpy) or optuna search over a space."""
    from dse.search.command import run as run_search

    return run_search(space_file=space, model=model, hw=hw, gpus=gpus, global_batch=global_batch, seq_len=seq_len,
                      objectives=objective, budget=budget, power_cap=power_cap, min_ssd_lifetime=min_ssd_lifetime,
                      params=param, sets=set_, engine=engine, trials=trials, sampler=sampler, seed=seed,
                      storage=storage, study=study,
                      top=top, json_path=json_path, csv_path=csv_path, plot_path=plot_path, chunk=chunk, quiet=quiet,
                      emit=emit, html=html)
