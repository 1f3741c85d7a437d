"""How often the optuna engine meets its target over many seeds (tests/test_search_optuna.py's criterion).

For each space: the exact answer once (exhaustive engine), then one 300-trial optuna search
per seed; a run "hits" when its best is within 2 % of the exact optimum (one objective) or its
front covers >= 98 % of the exact front's hypervolume (two objectives; objectives scaled to the
exact front's range, reference point 1.1). One JSON line per run is appended to ``--out``
(space, seed, sampler, score, hit, seconds), so a long run can be read while it goes on.

    nice python scripts/optuna_seed_rates.py --spaces cost-time-pareto --seeds 0-39 \
        --sampler '{"multi": "nsga2"}' --out rates.jsonl
    python scripts/optuna_seed_rates.py --summary rates.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dse.search import load_space, search  # noqa: E402
from tests.test_search_optuna import target_score  # noqa: E402


def seeds(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def summary(path: str) -> None:
    runs = defaultdict(list)
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        runs[(r["space"], r["sampler"])].append(r)
    for (space, sampler), rs in sorted(runs.items()):
        misses = [f"{r['seed']}:{r['score']:.3f}" for r in rs if not r["hit"]]
        # the worst run: the largest gap (one objective) or the smallest hypervolume ratio (two)
        worst = max(rs, key=lambda r: abs(r["score"] - (1.0 if r["score"] > 0.5 else 0.0)))["score"]
        print(f"{space:28s} {sampler:60s} {sum(r['hit'] for r in rs):3d}/{len(rs):<3d} "
              f"{np.mean([r['seconds'] for r in rs]):5.1f} s/search  worst {worst:.3f}  "
              f"misses {' '.join(misses) or '-'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spaces", default="", help="space stems, comma-separated (default: every shipped space)")
    ap.add_argument("--seeds", default="0-39")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--sampler", default="{}", help="JSON settings for the engine's SAMPLER (default: as shipped)")
    ap.add_argument("--out", default="optuna_seed_rates.jsonl")
    ap.add_argument("--summary", metavar="JSONL", help="print hit rates from a results file and exit")
    a = ap.parse_args()
    if a.summary:
        summary(a.summary)
        return
    stems = [s for s in a.spaces.split(",") if s]
    paths = [p for p in sorted((ROOT / "examples" / "spaces").glob("*.yaml")) if not stems or p.stem in stems]
    sampler = json.loads(a.sampler)
    label = json.dumps(sampler, sort_keys=True)
    with open(a.out, "a") as out:
        for path in paths:
            exact = search(load_space(str(path)), engine="exhaustive")
            for seed in seeds(a.seeds):
                t0 = time.perf_counter()
                found = search(load_space(str(path)), engine="optuna", trials=a.trials, seed=seed,
                               storage="memory", sampler=sampler or None)
                value, hit = target_score(exact, found)
                out.write(json.dumps({"space": path.stem, "seed": seed, "sampler": label, "score": value,
                                      "hit": bool(hit), "seconds": round(time.perf_counter() - t0, 2)}) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
