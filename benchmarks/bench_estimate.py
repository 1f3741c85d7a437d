"""Speed of one estimate: in-process and as a cold `dse estimate` process.

Targets (issue 2): one estimate in-process <= 100 us; `dse estimate` as a whole cold
process <= 0.35 s. Baselines measured in the same run: the Python interpreter alone,
`import numpy`, and — when it is installed (`pip install llm-analysis==0.2.2`, or
`PEER_PYTHON=/path/to/python` of a venv that has it) — the peer tool llm-analysis,
in-process (`llm_analysis.analysis.train`) and as a CLI.

Usage: python benchmarks/bench_estimate.py [--runs 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def per_call(fn, min_time=1.0) -> float:
    """Median seconds per call over repeated timeit batches."""
    n = 1
    while timeit.timeit(fn, number=n) < 0.2:
        n *= 2
    reps = max(3, int(min_time / max(timeit.timeit(fn, number=n), 1e-9)))
    return statistics.median(t / n for t in timeit.repeat(fn, number=n, repeat=min(reps, 15)))


def wall(cmd: list[str], runs: int, env=None) -> float:
    """Median wall time of a whole process (cold start: a fresh interpreter each run)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def dse_cmd() -> list[str]:
    exe = shutil.which("dse")
    return [exe] if exe else [sys.executable, "-m", "dse"]


PEER_SCRIPT = """
import sys, timeit, statistics, logging
from llm_analysis.analysis import train
kw = dict(model_name='facebook_opt-1.3b', gpu_name='a100-sxm-80gb', dtype_name='w16a16e16', log_level='ERROR',
          batch_size_per_gpu=4, seq_len=2048, tp_size=1, pp_size=1, total_num_gpus=8, flops_efficiency=0.5,
          output_dir=None, activation_recomputation=0)
train(**kw)
n = 50
print(statistics.median(t / n for t in timeit.repeat(lambda: train(**kw), number=n, repeat=5)))
"""


def peer_python() -> str | None:
    cand = os.environ.get("PEER_PYTHON")
    if cand:
        return cand
    try:
        import llm_analysis  # noqa: F401

        return sys.executable
    except ImportError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15, help="cold-process runs per command")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from dse.estimate import resolve, run

    m, s, p = resolve("llama2-7b" if (ROOT / "models" / "llama2-7b.yaml").exists() else "gpt2-xl",
                      "a100-cluster-800g", dp=8, micro_batch=2, recompute="selective")
    out = {"in_process_us": per_call(lambda: run(m, s, p)) * 1e6}
    out["resolve_and_run_us"] = per_call(lambda: run(*resolve("gpt2-xl", "a100-cluster-800g", dp=8))) * 1e6
    import dse

    out["public_estimate_us"] = per_call(lambda: dse.estimate("gpt2-xl", "a100-cluster-800g", dp=8)) * 1e6

    cmd = dse_cmd()
    out["python_startup_s"] = wall([sys.executable, "-c", "pass"], args.runs)
    out["import_numpy_s"] = wall([sys.executable, "-c", "import numpy"], args.runs)
    out["cli_json_s"] = wall(cmd + ["estimate", "--json"], args.runs)
    out["cli_table_s"] = wall(cmd + ["estimate"], args.runs)

    py = peer_python()
    if py:
        res = subprocess.run([py, "-c", PEER_SCRIPT], capture_output=True, text=True)
        if res.returncode == 0:
            out["peer_in_process_us"] = float(res.stdout.strip().splitlines()[-1]) * 1e6
            out["peer_cli_s"] = wall([py, "-m", "llm_analysis.analysis", "train", "--model_name", "facebook_opt-1.3b",
                                      "--gpu_name", "a100-sxm-80gb", "--total_num_gpus", "8", "--batch_size_per_gpu", "4",
                                      "--seq_len", "2048", "--flops_efficiency", "0.5", "--log_level", "ERROR"],
                                     max(3, args.runs // 3))

    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"one estimate in-process:        {out['in_process_us']:8.1f} us   (target <= 100 us)")
    print(f"  resolve specs + estimate:     {out['resolve_and_run_us']:8.1f} us")
    print(f"  dse.estimate(name, name, ..): {out['public_estimate_us']:8.1f} us   (the public call: checks, verdict)")
    if "peer_in_process_us" in out:
        print(f"  llm-analysis train():         {out['peer_in_process_us']:8.1f} us   "
              f"-> dse is {out['peer_in_process_us'] / out['in_process_us']:.0f}x faster")
    print(f"`dse estimate --json`, cold:    {out['cli_json_s']:8.3f} s    (target <= 0.35 s)")
    print(f"`dse estimate` (tables), cold:  {out['cli_table_s']:8.3f} s")
    print(f"  python -c pass:               {out['python_startup_s']:8.3f} s")
    print(f"  python -c 'import numpy':     {out['import_numpy_s']:8.3f} s")
    if "peer_cli_s" in out:
        print(f"  llm-analysis CLI, cold:       {out['peer_cli_s']:8.3f} s   "
              f"-> dse is {out['peer_cli_s'] / out['cli_table_s']:.1f}x faster")


if __name__ == "__main__":
    main()
