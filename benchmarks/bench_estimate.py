"""Speed of one estimate: in-process and as a cold `dse estimate` process, optionally against a baseline.

Targets (issues 2 and 13): one estimate in-process <= 100 us; `dse estimate --json` as a whole cold
process <= 0.35 s, without optuna, scipy, matplotlib or torch. Baselines measured in the same run:
the Python interpreter alone, `import numpy`, optionally an earlier version of dse (``--baseline
REF``: a git ref of this repository, extracted to a temporary directory and measured alternately
with this tree, so that both see the same machine load) and — when it is installed
(`pip install llm-analysis==0.2.2`, or `PEER_PYTHON=/path/to/python` of a venv that has it) — the
peer tool llm-analysis, in-process (`llm_analysis.analysis.train`) and as a CLI.

On a shared machine the timings are noisy, so every number is the *minimum* over repeats (what
the code costs when nothing else runs; the median is in the JSON). A cold process is measured
as installed — bytecode compiled once (in a temporary PYTHONPYCACHEPREFIX, the tree is not
touched), as ``pip install`` does — and also compiling dse's modules from source (what a checkout
run with PYTHONDONTWRITEBYTECODE=1 and no ``__pycache__`` pays on every start); both as wall time
and as the child's CPU time (user + sys), which waiting for a busy CPU does not inflate.

Usage: python benchmarks/bench_estimate.py [--runs 15] [--baseline REF] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

IN_PROCESS = """
import json, statistics, sys, timeit
sys.path.insert(0, sys.argv[1])
import dse
from dse.estimate import resolve, run

def per_call(fn, number=20, repeat=int(sys.argv[2])):
    fn()
    t = [x / number for x in timeit.repeat(fn, number=number, repeat=repeat)]
    return min(t) * 1e6, statistics.median(t) * 1e6

m, s, p = resolve("llama2-7b", "a100-cluster-800g", dp=8, micro_batch=2, recompute="selective")
out = {}
out["in_process_us"], out["in_process_median_us"] = per_call(lambda: run(m, s, p))
out["resolve_and_run_us"], _ = per_call(lambda: run(*resolve("gpt2-xl", "a100-cluster-800g", dp=8)))
out["public_estimate_us"], out["public_estimate_median_us"] = per_call(
    lambda: dse.estimate("gpt2-xl", "a100-cluster-800g", dp=8))
batches = iter(range(8, 10**9, 8))      # a plan never seen before on every call: nothing memoised
out["public_estimate_new_plan_us"], _ = per_call(
    lambda: dse.estimate("gpt2-xl", "a100-cluster-800g", dp=8, global_batch=next(batches)))
print(json.dumps(out))
"""

HEAVY = ("optuna", "scipy", "matplotlib", "torch")
PEER_SCRIPT = """
import sys, timeit, statistics, logging
from llm_analysis.analysis import train
kw = dict(model_name='facebook_opt-1.3b', gpu_name='a100-sxm-80gb', dtype_name='w16a16e16', log_level='ERROR',
          batch_size_per_gpu=4, seq_len=2048, tp_size=1, pp_size=1, total_num_gpus=8, flops_efficiency=0.5,
          output_dir=None, activation_recomputation=0)
train(**kw)
n = 50
print(min(timeit.repeat(lambda: train(**kw), number=n, repeat=5)) / n)
"""


def in_process(tree: Path, repeat: int) -> dict:
    """The in-process timings of the dse in ``tree``, in a fresh interpreter."""
    res = subprocess.run([sys.executable, "-c", IN_PROCESS, str(tree), str(repeat)], capture_output=True, text=True,
                         check=True, cwd=tree)
    return json.loads(res.stdout)


def cold(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def cold_starts(trees: dict[str, Path], runs: int, cache: Path) -> dict:
    """Cold `dse estimate --json` of every tree, alternating, bytecode cached and not; plus bare Python."""
    cases = {}
    for name, tree in trees.items():
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPATH"] = str(tree)
        cached = {**env, "PYTHONPYCACHEPREFIX": str(cache / name)}
        source = {**env, "PYTHONDONTWRITEBYTECODE": "1"}   # site-packages keep their bytecode
        cmd = [sys.executable, "-m", "dse", "estimate", "--json"]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, env=cached, cwd=tree, check=True)   # compile once
        cases[f"{name}:cli_json"] = (cmd, tree, cached)
        cases[f"{name}:cli_json_from_source"] = (cmd, tree, source)
        cases[f"{name}:cli_table"] = (cmd[:-1], tree, cached)
    cases["python_startup"] = ([sys.executable, "-c", "pass"], ROOT, dict(os.environ))
    cases["import_numpy"] = ([sys.executable, "-c", "import numpy"], ROOT, dict(os.environ))
    times: dict[str, list] = {k: [] for k in cases}
    for _ in range(runs):
        for k, (cmd, cwd, env) in cases.items():
            times[k].append(cold(cmd, cwd, env))
    out = {}
    for k, ts in times.items():
        out[f"{k}_s"] = min(w for w, _ in ts)
        out[f"{k}_cpu_s"] = min(c for _, c in ts)
        out[f"{k}_median_s"] = statistics.median(w for w, _ in ts)
    return out


def heavy_imports(tree: Path) -> list[str]:
    """The heavy packages a `dse estimate --json` process imports (should be none)."""
    code = ("import io, contextlib, runpy, sys\nsys.argv = ['dse', 'estimate', '--json']\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n"
            "        runpy.run_module('dse', run_name='__main__')"
            "\n    except SystemExit:\n        pass\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tree,
                         env={**os.environ, "PYTHONPATH": str(tree)})
    return json.loads(res.stdout.strip().replace("'", '"'))


def peer(runs: int) -> dict:
    py = os.environ.get("PEER_PYTHON")
    if not py:
        try:
            import llm_analysis  # noqa: F401
        except ImportError:
            return {}
        py = sys.executable
    res = subprocess.run([py, "-c", PEER_SCRIPT], capture_output=True, text=True)
    if res.returncode != 0:
        return {}
    cmd = [py, "-m", "llm_analysis.analysis", "train", "--model_name", "facebook_opt-1.3b", "--gpu_name",
           "a100-sxm-80gb", "--total_num_gpus", "8", "--batch_size_per_gpu", "4", "--seq_len", "2048",
           "--flops_efficiency", "0.5", "--log_level", "ERROR"]
    return {"peer_in_process_us": float(res.stdout.strip().splitlines()[-1]) * 1e6,
            "peer_cli_s": min(cold(cmd, ROOT, dict(os.environ))[0] for _ in range(max(3, runs // 3)))}


def extract(ref: str, into: Path) -> Path:
    """The tree of git ref ``ref`` of this repository, extracted under ``into``."""
    tree = into / "baseline"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def report(out: dict, trees: list[str]) -> None:
    for name in trees:
        r = out[name]
        print(f"[{name}]")
        print(f"  one estimate in-process:        {r['in_process_us']:8.1f} us   (target <= 100 us; min of repeats)")
        print(f"    resolve specs + estimate:     {r['resolve_and_run_us']:8.1f} us")
        print(f"    dse.estimate(name, name, ..): {r['public_estimate_us']:8.1f} us   "
              "(the public call: checks, verdict)")
        if "public_estimate_new_plan_us" in r:
            print(f"      a new plan every call:      {r['public_estimate_new_plan_us']:8.1f} us   "
                  "(plan validation not memoised)")
        print(f"  `dse estimate --json`, cold:    {r['cli_json_s']:8.3f} s    "
              f"(target <= 0.35 s; CPU {r['cli_json_cpu_s']:.3f} s)")
        print(f"    compiling from source:        {r['cli_json_from_source_s']:8.3f} s    "
              f"(CPU {r['cli_json_from_source_cpu_s']:.3f} s)")
        print(f"  `dse estimate` (tables), cold:  {r['cli_table_s']:8.3f} s")
        print(f"  heavy imports:                  {', '.join(r['heavy_imports']) or 'none'}")
    if "baseline" in out:
        a, b = out["this"], out["baseline"]
        print(f"this / baseline ({out['baseline_ref']}):")
        for k in ("in_process_us", "public_estimate_us", "public_estimate_new_plan_us", "cli_json_s", "cli_json_cpu_s",
                  "cli_json_from_source_cpu_s"):
            if k in a and k in b:   # a baseline older than a row has none
                print(f"  {k:28s} {a[k] / b[k]:6.2f}")
    print(f"python -c pass:                   {out['python_startup_s']:8.3f} s")
    print(f"python -c 'import numpy':         {out['import_numpy_s']:8.3f} s")
    if "peer_in_process_us" in out:
        print(f"llm-analysis train():             {out['peer_in_process_us']:8.1f} us   "
              f"-> dse is {out['peer_in_process_us'] / out['this']['in_process_us']:.0f}x faster")
        print(f"llm-analysis CLI, cold:           {out['peer_cli_s']:8.3f} s   "
              f"-> dse is {out['peer_cli_s'] / out['this']['cli_table_s']:.1f}x faster")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15, help="cold-process runs per command")
    ap.add_argument("--repeat", type=int, default=600, help="in-process repeats (of 20 calls) per timing")
    ap.add_argument("--baseline", metavar="REF", help="git ref of an earlier dse to measure alternately with this tree")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
        trees = {"this": ROOT}
        if args.baseline:
            trees["baseline"] = extract(args.baseline, Path(tmp))
        out: dict = {name: {} for name in trees}
        for _ in range(5):   # alternate: both trees see the same load
            for name, tree in trees.items():
                for k, v in in_process(tree, args.repeat // 5).items():
                    out[name][k] = min(v, out[name].get(k, float("inf")))
        flat = cold_starts(trees, args.runs, Path(tmp) / "pycache")
        for name, tree in trees.items():
            out[name].update({k.split(":", 1)[1]: v for k, v in flat.items() if k.startswith(name + ":")})
            out[name]["heavy_imports"] = heavy_imports(tree)
        out.update({k: v for k, v in flat.items() if ":" not in k})
        if args.baseline:
            out["baseline_ref"] = args.baseline
        out.update(peer(args.runs))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        report(out, list(trees))


if __name__ == "__main__":
    main()
