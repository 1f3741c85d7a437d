"""Fit a GPU's efficiency parameters and its host's launch speed to measured step times (``dse calibrate``).

The model: ``dse``'s own estimate, as a function of the chosen fields of
:class:`~dse.specs.hardware.GPUEfficiency` (``gemm``, ``attention``, ``memory`` in (0, 1];
``gemm_overhead``, ``layer_overhead``, ``microbatch_overhead`` >= 0 seconds) and of the host's
``dispatch_scale`` (:class:`~dse.specs.hardware.HostSpec`: its host time per launched kernel relative to
the reference host a software stack's ``dispatch`` was measured on; it sets the launch floor of steps whose
kernels are short, :func:`dse.estimate.passes.layer_passes`). Residual of a
scenario: predicted / measured time - 1 (relative, so short and long steps weigh alike),
minimised with ``scipy.optimize.least_squares`` (trust-region reflective within the bounds,
robust ``soft_l1`` loss with a 5 % scale, so one odd measurement does not drag the fit). The
uncertainty is the linearised one: ``sqrt(diag((J^T J)^-1) * sum(r^2) / (n - k))``.

Refused, with a one-line :class:`~dse.errors.InputError`: fewer than ``k + 2`` measured times
for ``k`` parameters, and a parameter the data cannot determine (its Jacobian column is zero at
the start or at the fit, or it is a linear combination of the others: rank-deficient Jacobian).
scipy is imported only here: ``dse estimate`` never loads it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dse.errors import InputError

#: Fields that may be fitted, their scale inside the optimiser (the fit works in units of it) and bounds.
PARAMETERS = {
    "gemm": (1.0, (1e-3, 1.0)),
    "attention": (1.0, (1e-3, 1.0)),
    "memory": (1.0, (1e-3, 1.0)),
    "gemm_overhead": (1e-6, (0.0, math.inf)),
    "layer_overhead": (1e-6, (0.0, math.inf)),
    "microbatch_overhead": (1e-6, (0.0, math.inf)),
    "dispatch_scale": (1.0, (0.05, 100.0)),
}
#: Fitted fields that belong to the host (the others are the GPU's efficiency fields).
HOST_PARAMETERS = frozenset({"dispatch_scale"})
#: Host fields a calibrated YAML may carry: the fitted ones and those a micro row's host measurement sets
#: (:mod:`dse.calibrate.host`).
HOST_FIELDS = HOST_PARAMETERS | {"checkpoint_dispatch_scale"}
DEFAULT_PARAMS = ("gemm", "attention", "memory", "gemm_overhead")
LOSS, F_SCALE = "soft_l1", 0.05
# Step used to probe each parameter's effect before fitting: 5 % of its value, at least this (in fit units).
_PROBE = 0.05


def parse_params(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [n for n in names if n not in PARAMETERS]
    if bad or not names:
        from dse.errors import suggest

        what = repr(bad[0]) + suggest(bad[0], PARAMETERS) if bad else "nothing"
        raise InputError(f"--params {text!r}: {what} is not a fitted parameter; allowed: {', '.join(PARAMETERS)}")
    return names


def with_efficiency(system, values: dict):
    """``system`` with its GPU's efficiency fields (and its host's, :data:`HOST_PARAMETERS`) replaced by ``values``.

    A fitted ``dispatch_scale`` is the host's speed: where the host has measured its own
    ``checkpoint_dispatch_scale`` it moves in the same proportion (their ratio, what torch.utils.checkpoint adds to
    a layer's host time, is the checkpoint code's: 1.414 and 1.395 on the two measured VM hosts, stacks/pytorch.yaml
    ``checkpoint_dispatch``)."""
    node = system.node
    host = {k: v for k, v in values.items() if k in HOST_PARAMETERS}
    ckpt = node.host.checkpoint_dispatch_scale
    if "dispatch_scale" in host and ckpt is not None:   # one host speed: its checkpointed step scales alike
        host["checkpoint_dispatch_scale"] = ckpt * host["dispatch_scale"] / node.host.dispatch_scale
    eff = dataclasses.replace(node.gpu.efficiency, **{k: v for k, v in values.items() if k not in HOST_PARAMETERS})
    gpu = dataclasses.replace(node.gpu, efficiency=eff)
    node = dataclasses.replace(node, gpu=gpu, **({"host": dataclasses.replace(node.host, **host)} if host else {}))
    return dataclasses.replace(system, node=node)


def current(system, name: str) -> float:
    """The value of a fitted parameter in ``system``: a GPU efficiency field or a host field."""
    return getattr(system.node.host if name in HOST_PARAMETERS else system.node.gpu.efficiency, name)


class Problem:
    """Measured times, their resolved plans, and the prediction as a function of the fitted parameters."""

    def __init__(self, measurements, system, names):
        from dse.calibrate.measurements import plan_for

        self.all = list(measurements)
        self.timed = [m for m in self.all if m.time_s]
        self.system, self.names = system, tuple(names)
        self.plans = [plan_for(m, system) for m in self.timed]
        self.start = np.array([current(system, n) / PARAMETERS[n][0] for n in self.names])   # the spec's values
        self.z0 = self.start                                                                   # where fits start

    def values(self, z) -> dict:
        return {n: float(zi) * PARAMETERS[n][0] for n, zi in zip(self.names, z)}

    def predict(self, z, idx) -> np.ndarray:
        from dse.calibrate.measurements import predict

        sys_ = with_efficiency(self.system, self.values(z))
        return np.array([predict(self.timed[i], sys_, self.plans[i])[0] for i in idx])

    def residuals(self, z, idx) -> np.ndarray:
        return self.predict(z, idx) / np.array([self.timed[i].time_s for i in idx]) - 1.0

    def jacobian(self, z, idx, rel: float = _PROBE) -> np.ndarray:
        """Forward differences; the default step (5 %, >= 0.05 fit units) is a probe large enough to see a
        max() switch on; a small ``rel`` gives the local slope (for the uncertainty)."""
        r0 = self.residuals(z, idx)
        cols = []
        for k in range(len(z)):
            lo, hi = (b / PARAMETERS[self.names[k]][0] for b in PARAMETERS[self.names[k]][1])
            step = max(rel * abs(z[k]), rel)
            step = step if z[k] + step <= hi else -step
            zz = np.array(z, dtype=float)
            zz[k] = min(max(zz[k] + step, lo), hi)
            cols.append((self.residuals(zz, idx) - r0) / (zz[k] - z[k]))
        return np.column_stack(cols)


def check_identifiable(jac: np.ndarray, names, where: str) -> None:
    """Refuse a zero column or a rank-deficient Jacobian, naming the parameter."""
    from dse._optional import require

    scipy_linalg = require("scipy.linalg", "calibrate", "dse calibrate")
    norms = np.linalg.norm(jac, axis=0)
    for n, v in zip(names, norms):
        if not v > 1e-9:
            raise InputError(f"--params {n}: not identifiable from this data ({where}, no measured time changes with "
                             f"it, e.g. a host overhead hidden behind GPU time); drop it from --params")
    scaled = jac / norms
    _, r, piv = scipy_linalg.qr(scaled, mode="economic", pivoting=True)
    diag = np.abs(np.diag(r))
    if diag[-1] < 1e-6 * diag[0]:
        worst = names[piv[-1]]
        raise InputError(f"--params {worst}: not identifiable from this data ({where}, rank-deficient Jacobian: its "
                         f"effect is a combination of the others'); drop it or add varied measurements")


#: Values a host parameter starts from (the best of them, :func:`grid_start`): a launch floor hides behind GPU time
#: until it is large enough to set a step's time, so a local probe from the spec's value may see no effect.
HOST_GRID = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def grid_start(problem: Problem, idx) -> np.ndarray:
    """The starting point: the spec's values, with each host parameter moved to the best of :data:`HOST_GRID`
    and of its spec value (robust cost, as the fit's) when that is better. ``max(GPU, host)`` is flat in the
    host's scale wherever every step is GPU-bound: the trust-region fit cannot leave such a start."""
    z = np.array(problem.start, dtype=float)
    for k, name in enumerate(problem.names):
        if name not in HOST_PARAMETERS:
            continue
        def cost(v, k=k):
            zz = z.copy()
            zz[k] = v
            r = problem.residuals(zz, idx) / F_SCALE
            return float(np.sum(2 * (np.sqrt(1 + r * r) - 1)))       # soft_l1, as least_squares
        z[k] = min((z[k], *HOST_GRID), key=cost)
    return z


def _solve(problem: Problem, idx):
    from dse._optional import require

    least_squares = require("scipy.optimize", "calibrate", "dse calibrate").least_squares

    lo = [PARAMETERS[n][1][0] / PARAMETERS[n][0] for n in problem.names]
    hi = [PARAMETERS[n][1][1] / PARAMETERS[n][0] for n in problem.names]
    z0 = np.clip(problem.z0, lo, hi)
    return least_squares(problem.residuals, z0, bounds=(lo, hi), loss=LOSS, f_scale=F_SCALE, args=(idx,),
                         method="trf", x_scale="jac")


def mape(errors) -> float:
    return float(np.mean(np.abs(errors))) if len(errors) else float("nan")


def calibrate(measurements, system, names=DEFAULT_PARAMS, folds: int = 5, seed: int = 0) -> dict:
    """Fit ``names`` to every measured time; report the fit, the linearised uncertainty and a k-fold CV error."""
    problem = Problem(measurements, system, names)
    n, k = len(problem.timed), len(problem.names)
    if n < k + 2:
        raise InputError(f"--data: {n} measured times for {k} parameters ({', '.join(problem.names)}); "
                         f"need at least {k + 2}: measure more scenarios or fit fewer --params")
    everything = list(range(n))
    problem.z0 = grid_start(problem, everything)
    check_identifiable(problem.jacobian(problem.z0, everything), problem.names, "at the starting values")
    res = _solve(problem, everything)
    check_identifiable(problem.jacobian(res.x, everything), problem.names, "at the fitted values")
    r = problem.residuals(res.x, everything)
    jac = problem.jacobian(res.x, everything, rel=1e-4)
    dof = max(n - k, 1)
    try:
        cov = np.linalg.inv(jac.T @ jac) * float(r @ r) / dof
        sigma = np.sqrt(np.maximum(np.diag(cov), 0.0))
    except np.linalg.LinAlgError:  # pragma: no cover - excluded by the rank check
        sigma = np.full(k, np.nan)
    before = problem.residuals(problem.start, everything)
    fitted = problem.values(res.x)
    params = {nm: {"before": current(system, nm), "after": fitted[nm], "sigma": float(s) * PARAMETERS[nm][0],
                   "at_bound": bool(np.isclose(res.x[i], PARAMETERS[nm][1][0] / PARAMETERS[nm][0])
                                    or np.isclose(res.x[i], PARAMETERS[nm][1][1] / PARAMETERS[nm][0]))}
              for i, (nm, s) in enumerate(zip(problem.names, sigma))}
    return {"system": system.name, "gpu": system.node.gpu.name, "points": n, "parameters": params,
            "loss": LOSS, "mape_before": mape(before), "mape_fit": mape(r), "memory": memory_error(problem),
            "cross_validation": cross_validate(problem, folds, seed) if folds else None,
            "points_table": [{"name": m.name, "measured_s": m.time_s, "before_s": float(m.time_s * (1 + b)),
                              "fit_s": float(m.time_s * (1 + a))} for m, b, a in zip(problem.timed, before, r)]}


def memory_error(problem: Problem) -> dict | None:
    """Peak-memory error of the spec on the points that measured it (no efficiency field changes memory)."""
    from dse.calibrate.measurements import plan_for, predict

    pts = [m for m in problem.all if m.peak_bytes]
    if not pts:
        return None
    errs = [predict(m, problem.system, plan_for(m, problem.system))[1] / m.peak_bytes - 1 for m in pts]
    return {"points": len(pts), "mape": mape(errs), "mean_signed_error": float(np.mean(errs))}


def cross_validate(problem: Problem, folds: int, seed: int = 0) -> dict:
    """k-fold cross-validated MAPE: fit on k-1 folds, predict the held-out one (seeded shuffle); 0 folds: none."""
    n, k = len(problem.timed), len(problem.names)
    if folds < 2:
        raise InputError(f"--folds {folds}: need at least 2")
    folds = min(folds, n)
    order = np.random.default_rng(seed).permutation(n)
    parts = [sorted(order[i::folds].tolist()) for i in range(folds)]
    smallest = n - max(len(p) for p in parts)
    if smallest < k + 2:
        raise InputError(f"--folds {folds}: a fit would see only {smallest} of {n} points for {k} parameters "
                         f"(need {k + 2}); use fewer folds")
    held = []
    for part in parts:
        train = [i for i in range(n) if i not in part]
        problem.z0 = grid_start(problem, train)          # from the training folds only
        res = _solve(problem, train)
        held.extend(problem.residuals(res.x, part).tolist())
    return {"folds": folds, "seed": seed, "mape": mape(held)}


def calibrated_yaml(hw: str, result: dict, name: str, data_file: str) -> str:
    """The hardware system ``hw`` as YAML with the fitted efficiency (and host) fields (components inlined)."""
    import yaml

    from dse.catalog import system_data

    data, where = system_data(hw)
    data = dict(data, name=name)
    gpu, host = data["node"]["gpu"], data["node"]["host"]
    fitted = {nm: float(f"{p['after']:.6g}") for nm, p in result["parameters"].items()}
    gpu["efficiency"] = {**gpu.get("efficiency", {}), **{k: v for k, v in fitted.items() if k not in HOST_FIELDS}}
    host.update({k: v for k, v in fitted.items() if k in HOST_FIELDS})
    if "dispatch_scale" in fitted:   # the launch speed's basis: this host's own micro row, or a fit to its steps
        host["dispatch_basis"] = "measured" if result["parameters"]["dispatch_scale"].get("measured") else "calibrated"
    cv = result["cross_validation"]
    cv_text = f"{cv['folds']}-fold cross-validated {100 * cv['mape']:.1f} %" if cv else "not cross-validated"
    head = [f"# {name}: {where} with GPU efficiency / host fields fitted by `dse calibrate` to {data_file}",
            (f"# ({result['points']} measured step times; MAPE {100 * result['mape_before']:.1f} % before, "
             f"{100 * result['mape_fit']:.1f} % fitted, {cv_text})."),
            *(f"#   {nm}: {p['before'] if p['before'] is None else format(p['before'], '.4g')} -> {p['after']:.4g} "
              + ("(measured by the host: its micro row)" if p.get("measured") else f"+- {p['sigma']:.2g}")
              for nm, p in result["parameters"].items())]
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
