"""Speed of the chiplet-package estimate: one scenario, and a vectorised sweep over hardware arrays.

    .venv/bin/python benchmarks/chiplet_speed.py

Prints microseconds per scalar estimate (``compose`` and ``run``) and nanoseconds per scenario
when link bandwidth, die peak and DRAM bandwidth are numpy arrays (the search's path).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from dse.estimate import chiplet, resolve


def per_call(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main() -> None:
    model, pkg, plan = resolve("llama2-70b", "chiplet-train-8x8", micro_batch=1, global_batch=16, seq_len=4096,
                               chiplet_minibatch=4)
    print(f"compose, one scenario: {per_call(lambda: chiplet.compose(model, pkg, plan), 500) * 1e6:8.1f} us")
    print(f"run (with feasibility text): {per_call(lambda: chiplet.run(model, pkg, plan), 500) * 1e6:8.1f} us")
    n = 100_000
    rng = np.random.default_rng(0)
    arr = dataclasses.replace(
        pkg,
        nop=dataclasses.replace(pkg.nop, link_bandwidth=rng.uniform(8e9, 512e9, n)),
        die=dataclasses.replace(pkg.die, peak_flops=rng.uniform(25e12, 400e12, n)),
        dram=dataclasses.replace(pkg.dram, bandwidth=rng.uniform(100e9, 1600e9, n)))
    dt = per_call(lambda: chiplet.compose(model, arr, plan), 5)
    print(f"compose, {n:,} scenarios as arrays: {dt * 1e3:8.1f} ms ({dt / n * 1e9:.0f} ns per scenario)")


if __name__ == "__main__":
    main()
