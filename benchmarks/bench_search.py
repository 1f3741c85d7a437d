"""Speed of the search: vectorised estimate vs the scalar loop, and a 10-million-point sweep.

    python benchmarks/bench_search.py            # everything (about a minute)
    python benchmarks/bench_search.py --quick    # shorter timings, no 10M sweep

Measures, on one core (numpy element-wise work is single-threaded):

1. the composed estimate (``compose`` + cost/energy) on numpy arrays, in the two
   layouts the search uses: a *grid block* (each parameter an axis that broadcasts,
   as the exhaustive engine evaluates) and *flat columns* (every scenario its own
   row: random scenarios, no shared terms; the layout of the points that pass the
   memory check), with the allocator setting the search makes
   (:func:`dse._process.tune_allocator`) and, for flat columns, without;
2. the same scenarios one at a time through the scalar estimate
   (``dse.estimate.run``, what ``dse estimate`` and optuna trials call) and through
   ``compose`` alone; the ratio vectorised / scalar;
3. the search's block path (:meth:`dse.search.evaluate.Evaluator.block`: plan rules, memory
   with every technique's memory half, time only for the points that fit) over technique
   spaces: benchmarks/spaces/storage-offload-sweep.yaml (504,000 points),
   activation-offload-sweep.yaml (250,880), moe-long-context-sweep.yaml (an MoE model with expert, expert tensor
   and context parallelism, 518,400), cp-comm-sweep.yaml (the four context-parallel communication types, 61,440)
   and the two technique examples; scenarios/s and the
   share of valid points whose time was composed (memory-first pruning);
4. ``dse search --engine exhaustive`` over benchmarks/spaces/ten-million.yaml
   (11.3M points) in a subprocess: wall time and peak resident memory.

Scenario: Llama-2-70B on the A100 cluster, 4096-token sequences, selective recompute.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dse._process import tune_allocator  # noqa: E402
from dse.estimate import base, economics, resolve, run  # noqa: E402

AXES = {  # the numeric axes of the grid block (131,072 points at most per block in the engine)
    "tp": [1, 2, 4, 8],
    "pp": [1, 2, 4, 8, 16, 32, 64],
    "dp": [1, 2, 4, 8, 16, 32, 64],
    "micro_batch": [1, 2, 4, 8, 16, 32],
    "zero": [0, 1, 2, 3],
    "global_batch": [256, 512, 1024, 2048],
}
NET = np.linspace(25e9, 250e9, 10)   # hardware.node.network.bandwidth axis (bytes/s)


def specs():
    return resolve("llama2-70b", "a100-cluster-800g", None, [], tp=1, pp=1, dp=1, micro_batch=1, global_batch=1024,
                   seq_len=4096, recompute="selective", sequence_parallel=True)


def with_network(system, bw):
    return dataclasses.replace(system, node=dataclasses.replace(
        system.node, network=dataclasses.replace(system.node.network, bandwidth=bw)))


def composed(model, system, plan):
    c = base.compose(model, system, plan)
    economics.apply(c, model, system, plan)
    return c


def timed(fn, min_seconds):
    """CPU seconds per call (process time: this core only), best of repeated runs."""
    fn()
    best, total, n = float("inf"), 0.0, 0
    while total < min_seconds or n < 3:
        t0 = time.process_time()
        fn()
        dt = time.process_time() - t0
        best = min(best, dt)
        total += dt
        n += 1
    return best


def grid_block(model, system, plan):
    names = list(AXES)
    nd = len(names) + 1
    fields = {}
    for k, name in enumerate(names):
        shape = [1] * nd
        shape[k] = len(AXES[name])
        fields[name] = np.asarray(AXES[name], dtype=float).reshape(shape)
    shape = [1] * nd
    shape[-1] = len(NET)
    n = int(np.prod([len(v) for v in AXES.values()])) * len(NET)
    return n, dataclasses.replace(plan, **fields), with_network(system, NET.reshape(shape))


def flat_columns(model, system, plan, n, rng):
    cols = {name: np.asarray(vals, dtype=float)[rng.integers(0, len(vals), n)] for name, vals in AXES.items()}
    return dataclasses.replace(plan, **cols), with_network(system, NET[rng.integers(0, len(NET), n)]), cols


TECHNIQUE_SPACES = ["benchmarks/spaces/storage-offload-sweep.yaml", "benchmarks/spaces/activation-offload-sweep.yaml",
                    "benchmarks/spaces/moe-long-context-sweep.yaml", "benchmarks/spaces/cp-comm-sweep.yaml",
                    "examples/spaces/zero-infinity-offload.yaml", "examples/spaces/activation-offload.yaml"]


def technique_spaces(secs: float) -> None:
    """Scenarios/s of the search's block path over technique spaces (one core, process CPU time)."""
    from dse.search.evaluate import Evaluator
    from dse.search.grid import Grid
    from dse.search.runner import DEFAULT_CHUNK, split_params
    from dse.search.space import load

    print("\nTechnique spaces through the search's block path (rules, memory first, time for what fits):")
    for rel in TECHNIQUE_SPACES:
        space = load(str(ROOT / rel))
        group, vector = split_params(space)
        counts = {}

        def sweep(space=space, group=group, vector=vector, counts=counts):
            ev = Evaluator(space)
            grid = Grid(group, vector, chunk=DEFAULT_CHUNK)
            with np.errstate(all="ignore"):
                valid, feasible = ev.sweep(grid)
            counts.update(n=grid.n_groups * grid.n_vector, valid=valid, feasible=feasible,
                          timed=getattr(ev, "timed_points", None))
        t = timed(sweep, secs)
        n = counts["n"]
        share = "n/a" if counts["timed"] is None else f"{100 * counts['timed'] / max(counts['valid'], 1):.0f}%"
        print(f"  {Path(rel).stem:<28} {n:>9,} points  {n / t:>14,.0f} scenarios/s  "
              f"(valid {counts['valid']:,}, feasible {counts['feasible']:,}, time composed for {share} of valid)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter timings and no 10M-point sweep")
    args = ap.parse_args(argv)
    secs = 0.5 if args.quick else 3.0
    model, system, plan = specs()
    rng = np.random.default_rng(0)

    n_flat = 1 << 17
    p_flat, s_flat, cols = flat_columns(model, system, plan, n_flat, rng)
    n_grid, p_grid, s_grid = grid_block(model, system, plan)
    with np.errstate(all="ignore"):
        t_flat_default = timed(lambda: composed(model, s_flat, p_flat), secs)   # glibc's default allocator settings
        tuned = tune_allocator()                                                # what dse search does
        t_grid = timed(lambda: composed(model, s_grid, p_grid), secs)
        t_flat = timed(lambda: composed(model, s_flat, p_flat), secs)

    # the scalar loop over (the first of) the same flat scenarios
    n_scalar = 300 if args.quick else 2000
    scen = []
    for i in range(n_scalar):
        p = dataclasses.replace(plan, **{k: int(v[i]) for k, v in cols.items()})
        scen.append((p, with_network(system, float(s_flat.node.network.bandwidth[i]))))

    def loop_run():
        for p, s in scen:
            run(model, s, p)

    def loop_compose():
        for p, s in scen:
            composed(model, s, p)
    t_run = timed(loop_run, secs) / n_scalar
    t_comp = timed(loop_compose, secs) / n_scalar

    r_grid, r_flat = n_grid / t_grid, n_flat / t_flat
    r_run, r_comp = 1 / t_run, 1 / t_comp
    print("Composed estimate (compose + cost/energy), one core (process CPU time):")
    print(f"  vectorised, grid block   {n_grid:>9,} scenarios  {r_grid:>14,.0f} scenarios/s")
    print(f"  vectorised, flat columns {n_flat:>9,} scenarios  {r_flat:>14,.0f} scenarios/s")
    print(f"  (flat columns before tune_allocator: {n_flat / t_flat_default:,.0f} scenarios/s; "
          f"allocator tuned: {tuned})")
    print(f"  scalar dse.estimate.run  {n_scalar:>9,} scenarios  {r_run:>14,.0f} scenarios/s")
    print(f"  scalar compose only      {n_scalar:>9,} scenarios  {r_comp:>14,.0f} scenarios/s")
    print(f"  ratio vs scalar run loop: grid block {r_grid / r_run:,.0f}x, flat columns {r_flat / r_run:,.0f}x")
    print(f"  ratio vs scalar compose loop: grid block {r_grid / r_comp:,.0f}x, flat columns {r_flat / r_comp:,.0f}x")
    ok = min(r_grid, r_flat) >= 1e6
    print(f"  target >= 1,000,000 scenarios/s/core: {'met' if ok else 'MISSED'}")
    technique_spaces(secs)

    if not args.quick:
        space = ROOT / "benchmarks" / "spaces" / "ten-million.yaml"
        code = ("import resource, sys, time; from dse.cli import main; t0 = time.perf_counter(); "
                f"rc = main(['search', '--space', {str(space)!r}, '--engine', 'exhaustive', '-q', '--top', '3']); "
                "print(f'WALL {time.perf_counter() - t0:.2f}'); "
                "print(f'RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}'); sys.exit(rc)")
        env = {**os.environ, "COLUMNS": "200"}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stdout, proc.stderr)
            return 1
        lines = proc.stdout.splitlines()
        inner = float(next(x for x in lines if x.startswith("WALL")).split()[1])
        rss_kib = int(next(x for x in lines if x.startswith("RSS")).split()[1])
        summary = next((x for x in lines if "points," in x), "")
        print("\n10-million-point sweep (benchmarks/spaces/ten-million.yaml, exhaustive):")
        print(f"  {summary.strip()}")
        print(f"  dse search wall time {inner:.1f} s (process incl. start-up {wall:.1f} s), "
              f"peak RSS {rss_kib / 1024:.0f} MiB; target < 60 s: {'met' if inner < 60 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
