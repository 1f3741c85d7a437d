"""SRAM overflow on a chiplet die: eviction order, closed-form special cases, a brute-force count of the
schedule's weight and gradient DRAM bytes, and what the estimate does with it."""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.formulas import chiplet as C

MiB = 2**20


def spill(S, W=25.5 * MiB, G=51 * MiB, ops=(64 * MiB, 40 * MiB), r=1 * MiB, floor=0.0):
    return C.sram_spill(S, W, G, ops, r, 2, floor)


def test_fits_means_nothing_spills():
    s = spill(200 * MiB)
    assert s["working_set"] == pytest.approx(2 * 25.5 * MiB + 51 * MiB + 64 * MiB + MiB)
    assert s["resident"] == s["working_set"]
    assert s["prefetch"] == s["weights"] == s["gradients"] == s["activations"] == 0
    t = C.spill_dram_traffic(s, 16, 16, 80, 64)
    assert t["total"] == 0


def test_eviction_order_prefetch_weights_gradients_then_operands():
    ws = 2 * 25.5 * MiB + 51 * MiB + 65 * MiB
    s = spill(ws - 10 * MiB)                       # 10 MiB over: only the prefetch buffer goes
    assert (s["prefetch"], s["weights"], s["gradients"], s["activations"]) == (10 * MiB, 0, 0, 0)
    s = spill(ws - 40 * MiB)                       # prefetch (25.5) then 14.5 MiB of the weight block
    assert s["prefetch"] == 25.5 * MiB and s["weights"] == pytest.approx(14.5 * MiB) and s["gradients"] == 0
    s = spill(ws - 100 * MiB)                      # weights gone, 49 of the 51 MiB of gradients
    assert s["weights"] == 25.5 * MiB and s["gradients"] == pytest.approx(49 * MiB) and s["activations"] == 0
    s = spill(40 * MiB)                            # all weights and gradients gone; 40 - 1 MiB left for operands
    assert s["gradients"] == 51 * MiB
    assert s["activations"] == pytest.approx((64 - 39) * MiB + (40 - 39) * MiB)   # each GEMM's excess
    assert s["resident"] == 40 * MiB and bool(s["runs"])


def test_runs_only_while_the_tiles_fit():
    floor = C.min_tile_sram(128)
    assert bool(spill(floor, floor=floor)["runs"])
    below = spill(floor - 1, floor=floor)
    assert not bool(below["runs"]) and below["resident"] > floor - 1   # reported over capacity: infeasible


def test_micro_batch_major_streams_weights_and_gradients_for_free():
    s = spill(40 * MiB)
    t1 = C.spill_dram_traffic(s, 16, 1, 80, 64)    # k = 1: every block streams anyway
    assert t1["weights"] == 0 and t1["gradients"] == 0
    assert t1["activations"] == pytest.approx(5 * 16 * 80 * 64 * s["activations"])
    tr = C.spill_dram_traffic(s, 16, 1, 80, 64, recompute=True)
    assert tr["activations"] == pytest.approx(7 * 16 * 80 * 64 * s["activations"])


def brute_force_weight_gradient_bytes(m, k, W, G, e_w, e_g):
    """Walk the layer-major schedule of one layer element class by class: resident elements are fetched once
    per mini-batch and pass, evicted ones every micro-batch; resident gradient partial sums are written once
    per mini-batch (read first unless it is the first), evicted ones read-modified-written every micro-batch."""
    reads_w = grads = 0
    for mb in range(m // k):
        for _pass in ("forward", "backward"):
            reads_w += (W - e_w)                   # the resident part, once per mini-batch
            reads_w += k * e_w                     # the evicted part, every micro-batch
        grads += (G - e_g) * (1 if mb == 0 else 2)  # resident partial sums: (read +) write per mini-batch
        for u in range(k):
            first = mb == 0 and u == 0
            grads += e_g * (1 if first else 2)      # evicted: read-modify-write every micro-batch
    return reads_w, grads


@pytest.mark.parametrize("m, k", [(16, 16), (16, 4), (16, 1), (8, 2)])
def test_weight_and_gradient_bytes_match_a_walk_of_the_schedule(m, k):
    W, G, e_w, e_g = 1000.0, 2000.0, 300.0, 700.0
    L, N = 1, 1
    base = C.dram_traffic(m, k, L, W, 0, 0, 1, 1, bytes_per_element=1, grad_bytes=2)   # W e = 1000, G = 2000
    extra = C.spill_dram_traffic({"weights": e_w, "gradients": e_g, "activations": 0.0}, m, k, L, N)
    reads_w, grads = brute_force_weight_gradient_bytes(m, k, W, G, e_w, e_g)
    assert base["weights"] + extra["weights"] == pytest.approx(reads_w)
    assert base["gradients"] + extra["gradients"] == pytest.approx(grads)


def test_spill_broadcasts():
    S = np.array([40.0, 128.0, 256.0]) * MiB
    s = spill(S)
    scalar = [spill(float(x)) for x in S]
    for key in ("resident", "prefetch", "weights", "gradients", "activations"):
        np.testing.assert_allclose(s[key], [d[key] for d in scalar])


PLAN = dict(global_batch=16, seq_len=4096, micro_batch=1, recompute="none")


def run(scheme, sram, **kw):
    return dse.estimate("llama2-70b", "chiplet-train-8x8", overrides=[f"hardware.die.sram={sram}"],
                        chiplet_scheme=scheme, **{**PLAN, **kw})


@pytest.mark.parametrize("scheme, extra", [("megatron-1d", {}),
                                           ("hecaton-2d", dict(chiplet_schedule="minibatch", chiplet_minibatch=4))])
def test_estimate_spills_instead_of_failing_and_time_falls_with_sram(scheme, extra):
    res = [run(scheme, f"{s} MiB", **extra) for s in (32, 64, 128, 192, 256)]
    assert all(r["feasible"] for r in res)
    t = [r["time"]["iteration"] for r in res]
    assert all(a >= b - 1e-12 for a, b in zip(t, t[1:]))          # more SRAM never slower
    assert t[0] > 1.1 * t[-1]                                      # and a small die pays for its spills
    small, big = res[0], res[-1]
    assert small["memory"]["sram"]["total"] == pytest.approx(32 * MiB)
    assert big["traffic"]["dram_spill"] == 0
    # the spilled bytes are DRAM traffic: they add to the DRAM total, its energy and the edge NoP injection
    assert small["traffic"]["dram_bytes"] - big["traffic"]["dram_bytes"] == pytest.approx(
        small["traffic"]["dram_spill"], rel=1e-9)
    assert small["energy"]["components"]["dram_j"] > big["energy"]["components"]["dram_j"]
