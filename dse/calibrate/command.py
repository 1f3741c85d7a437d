"""``dse calibrate``: read measurements, fit, print the report, write the calibrated hardware YAML."""

from __future__ import annotations

from pathlib import Path

from dse.errors import InputError


def _measured_host(data: str, system) -> dict:
    """{scale: {before, measured}} from the file's micro row's ``host`` block (dse.calibrate.host); {} without one."""
    from dse.calibrate import host

    block = host.read_host(data)
    if block is None:
        return {}
    scales = host.host_scales(block, f"{data}: micro row's host")
    return {k: {"before": getattr(system.node.host, k), "measured": v} for k, v in scales.items()}


def run(data: str, hw: str, params: str | None, folds: int, out: str | None, json_out: bool) -> int:
    from dse.calibrate import fit, host, measurements
    from dse.catalog import is_chiplet_package, load_system

    if is_chiplet_package(hw):
        raise InputError(f"--hw {hw}: a chiplet package has no GPU efficiency to calibrate; give a GPU system "
                         f"(dse list hardware)")
    from dse._optional import require

    require("scipy.optimize", "calibrate", "dse calibrate")      # used by dse.calibrate.fit: fail before any work
    names = fit.parse_params(params) if params else fit.DEFAULT_PARAMS
    system = load_system(hw)
    ms = measurements.read(data)
    measured = _measured_host(data, system)
    if measured:
        system = host.with_host(system, {k: v["measured"] for k, v in measured.items()})
    result = fit.calibrate(ms, system, names, folds=folds)
    result["host"] = measured
    fitted = result["parameters"].get("dispatch_scale")
    speed = fitted["after"] / measured["dispatch_scale"]["measured"] if fitted and measured else 1.0
    for k, v in measured.items():    # the YAML carries the measured host scales (a fitted one is written over them;
        # a measured checkpointed scale moves with a fitted dispatch_scale: dse.calibrate.fit.with_efficiency)
        result["parameters"].setdefault(k, {"before": v["before"], "after": v["measured"] * speed, "sigma": 0.0,
                                            "at_bound": False, "measured": True})
    if out:
        stem = Path(out).stem
        text = fit.calibrated_yaml(hw, result, stem, data)
        try:
            Path(out).write_text(text)
        except OSError as exc:
            raise InputError(f"--out {out}: cannot write ({exc.strerror})") from None
        load_system(out)   # the file must load as --hw (round trip)
        result["written"] = out
    if json_out:
        from dse.report.jsonout import dumps

        print(dumps(result))
        return 0
    render(result)
    return 0


def render(result: dict) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    con = Console()
    tab = Table(title=f"calibrated {result['gpu']} ({result['system']}) on {result['points']} measured step times",
                box=box.SIMPLE_HEAVY, title_justify="left")
    for col in ("parameter", "before", "fitted", "± 1 sigma", ""):
        tab.add_column(col, justify="left" if not col or col == "parameter" else "right")
    for name, p in result["parameters"].items():
        if p.get("measured"):
            continue
        f = (lambda x: f"{x * 1e6:.3g} µs") if name.endswith("overhead") else (lambda x: f"{x:.3f}")
        tab.add_row(name, f(p["before"]), f(p["after"]), f(p["sigma"]), "at its bound" if p["at_bound"] else "")
    for name, v in (result.get("host") or {}).items():
        con.print(f"{name}: {v['measured']:.3f} measured by this host (its micro row's GPT2Block step; the spec's "
                  f"{v['before'] if v['before'] is not None else 'none'}) -- set before the fit, not fitted")
    con.print(tab)
    line = (f"time MAPE: {100 * result['mape_before']:.1f} % uncalibrated -> {100 * result['mape_fit']:.1f} % fitted "
            f"({result['loss']} loss)")
    cv = result["cross_validation"]
    if cv:
        line += f"; {cv['folds']}-fold cross-validated {100 * cv['mape']:.1f} % (held-out points, seed {cv['seed']})"
    con.print(line)
    mem = result["memory"]
    if mem:
        con.print(f"peak memory (not fitted: no efficiency field changes it): MAPE {100 * mem['mape']:.1f} % "
                  f"(mean {100 * mem['mean_signed_error']:+.1f} %) over {mem['points']} measured peaks")
    if result.get("written"):
        con.print(f"written to {result['written']} (use it as --hw {result['written']})")
