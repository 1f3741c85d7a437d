"""A GPU's efficiency parameters from its measured micro-benchmarks (``kind: micro`` rows, as ``dse measure`` writes).

GEMMs: the measured TFLOP/s of dense GEMMs at several (m x n x k) shapes are fitted with the kernel
table's GEMM model, ``t = 2 m k n / (peak eta) (1 + k0 / k) + t0`` (:func:`dse.formulas.compute.gemm_time`),
by ``scipy.optimize.least_squares`` on the relative time error; ``k0`` is dropped (set to 0) when the
shapes do not vary ``k``. HBM: the measured copy rate (read + write bytes per second) over the
nominal bandwidth. These are the H100's numbers in ``hwspecs/gpus/h100-sxm-80gb.yaml``
(tests/test_h100_micro.py refits them from ``data/h100_hf_training.jsonl``).
"""

from __future__ import annotations

from dse.errors import InputError


def gemm_shapes(gemm_tflops: dict) -> list[tuple[int, int, int, float]]:
    """(m, n, k, measured FLOP/s) of a micro row's ``gemm_tflops`` mapping (``"m x n x k": TFLOP/s``)."""
    out = []
    for key, rate in gemm_tflops.items():
        try:
            m, n, k = (int(x) for x in str(key).lower().split("x"))
        except ValueError:
            raise InputError(f"gemm_tflops: shape {key!r} is not MxNxK (three integers)") from None
        if not (isinstance(rate, (int, float)) and rate > 0):
            raise InputError(f"gemm_tflops.{key}: expected TFLOP/s > 0, got {rate!r}")
        out.append((m, n, k, float(rate) * 1e12))
    return out


def fit_gemm(gemm_tflops: dict, peak: float) -> dict:
    """Fit eta (``gemm``), k0 (``gemm_depth``) and t0 (``gemm_overhead``, seconds) to measured GEMM rates.

    Returns the three parameters and ``errors``: predicted / measured time - 1 per shape, in the input's order.
    Refuses fewer shapes than parameters + 1.
    """
    import numpy as np

    from dse._optional import require

    optimize = require("scipy.optimize", "calibrate")
    shapes = gemm_shapes(gemm_tflops)
    deep = len({k for _, _, k, _ in shapes}) > 1          # k0 is identifiable only if k varies
    nparam = 3 if deep else 2
    if len(shapes) < nparam + 1:
        raise InputError(f"gemm_tflops: {len(shapes)} shapes cannot determine {nparam} parameters; "
                         f"measure at least {nparam + 1}")
    m, n, k, rate = (np.array(c, dtype=float) for c in zip(*shapes))
    flops = 2 * m * n * k
    measured = flops / rate

    def model(p):
        eta, t0_us = p[0], p[-1]
        k0 = p[1] if deep else 0.0
        return flops / (peak * eta) * (1 + k0 / k) + t0_us * 1e-6

    x0 = [0.8, 50.0, 2.0] if deep else [0.8, 2.0]
    lo = [1e-3, 0.0, 0.0] if deep else [1e-3, 0.0]
    hi = [1.0, 1e4, 1e3] if deep else [1.0, 1e3]
    fit = optimize.least_squares(lambda p: model(p) / measured - 1, x0, bounds=(lo, hi))
    p = fit.x
    return {"gemm": float(p[0]), "gemm_depth": float(p[1]) if deep else 0.0, "gemm_overhead": float(p[-1]) * 1e-6,
            "errors": [float(x) for x in model(p) / measured - 1]}


def memory_efficiency(copy_bytes_per_s: float, hbm_bandwidth: float) -> float:
    """``memory``: the measured HBM copy rate (read + write) over the nominal bandwidth, at most 1."""
    if not copy_bytes_per_s > 0 or not hbm_bandwidth > 0:
        raise InputError("hbm copy rate and bandwidth must be > 0")
    return min(1.0, copy_bytes_per_s / hbm_bandwidth)
