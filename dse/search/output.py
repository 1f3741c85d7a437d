"""What a search prints and writes: progress bar, result tables, JSON/CSV exports.

Tables go to stdout; the progress bar to stderr. ``--json FILE`` and ``--csv FILE``
(``-`` for stdout) stream every evaluated point, so an exhaustive sweep of
millions of points is exported without holding it in memory. ``--plot FILE`` is
drawn by :func:`dse.report.plots.search_result`.
"""

from __future__ import annotations

import csv
import json
import math
import sys

from dse.errors import InputError
from dse.report.jsonout import plain
from dse.units import fmt

# metric -> (column header, fmt kind)
COLUMNS = {
    "time.iteration": ("time/iter", "s"),
    "throughput.tokens_per_s": ("tokens/s", "count"),
    "throughput.mfu": ("MFU", "fraction"),
    "memory.gpu.total": ("GPU mem", "bytes"),
    "memory.sram.total": ("SRAM/die", "bytes"),
    "cost.capital_usd": ("capital", "USD"),
    "cost.per_million_tokens_usd": ("$/M tok", "USD"),
    "energy.per_token_j": ("J/token", "J"),
    "energy.power_w": ("power", "W"),
    "gpus": ("GPUs", "count"),
}


TABLE_METRICS = ("time.iteration", "throughput.tokens_per_s", "throughput.mfu", "memory.gpu.total",
                 "cost.per_million_tokens_usd")


def fmt_metric(metric: str, v, unit: str | None = None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    kind = unit if unit is not None else COLUMNS.get(metric, ("", ""))[1]
    if metric == "gpus":
        return f"{v:.0f}"
    if metric == "cost.per_million_tokens_usd":
        return f"${v:,.3f}"
    return fmt(v, kind) if kind else f"{v:.4g}"


def fmt_param(p, v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and p is not None and p.unit and p.unit not in ("count", "fraction"):
        return fmt(v, p.unit)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def short(path: str) -> str:
    return path.split(".", 1)[1] if "." in path else path


# ----------------------------------------------------------------------------- progress


class Progress:
    """A rich progress bar on stderr that shows the best value found so far."""

    def __init__(self, space, engine: str, enabled: bool = True):
        self.enabled = enabled
        self.space = space
        self.single = len(space.objectives) == 1
        self._bar = None
        self._task = None
        self.engine = engine

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RP, TextColumn, TimeElapsedColumn

            self._bar = RP(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TextColumn("{task.fields[best]}"),
                           console=Console(stderr=True), transient=False, refresh_per_second=8)
            self._bar.__enter__()
            what = "points" if self.engine == "exhaustive" else "trials"
            self._task = self._bar.add_task(f"{self.engine} ({what})", total=None, best="")
        return self

    def __call__(self, done: int, total: int, best) -> None:
        if self._bar is None:
            return
        if best is None:
            text = "no feasible point yet" if self.single else ""
        elif self.single:
            o = self.space.objectives[0]
            text = f"best {o.label}: {fmt_metric(o.metric, best, o.unit)}"
        else:
            text = f"Pareto front: {best} points" if self.engine == "exhaustive" else ""
        self._bar.update(self._task, completed=done, total=total, best=text)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)


# ----------------------------------------------------------------------------- tables


def render(con, space, out: dict) -> None:
    eng = out["engine"]
    head = f"[bold]{space.name}[/] — {eng}"
    if out.get("engine_reason"):
        head += f" ({out['engine_reason']})"
    con.print(head)
    if eng == "exhaustive":
        rate = out["points"] / out["elapsed"] if out["elapsed"] > 0 else float("inf")
        rest = " (the rest broke plan rules)" if out["evaluated"] < out["points"] else ""
        con.print(f"{out['points']:,} points, {out['evaluated']:,} evaluated{rest}, "
                  f"{out['feasible']:,} feasible, in {out['elapsed']:.2f} s ({rate:,.0f} points/s)")
    else:
        con.print(f"study [bold]{out['study']}[/] in {out['storage']}: {out['evaluated']:,} completed trials, "
                  f"{out['feasible']:,} feasible, {out['invalid_samples']:,} invalid samples skipped; "
                  f"{out['elapsed']:.1f} s")
    for n in out["notes"]:
        con.print(f"[yellow]note:[/] {n}")
    if out["excluded"]:
        worst = sorted(out["excluded"].items(), key=lambda kv: -kv[1])[:4]
        con.print("excluded: " + "; ".join(f"{k} ({v:,})" for k, v in worst))
    if not out["ranked"]:
        con.print(f"[bold red]{out['no_feasible']}[/]")
        return
    multi = len(space.objectives) > 1
    varied = [p for p in space.params if not p.discrete or len(p.values) > 1]
    title = (f"Pareto front ({len(out['ranked'])} configurations)" if multi
             else f"Top {len(out['ranked'])} configurations")
    obj_metrics = [o.metric for o in space.objectives]
    extra = [m for m in TABLE_METRICS if m not in obj_metrics]
    if not any("memory.gpu.total" in e["metrics"] for e in out["ranked"]) and \
            any("memory.sram.total" in e["metrics"] for e in out["ranked"]):   # chiplet packages: SRAM per die
        extra = [("memory.sram.total" if m == "memory.gpu.total" else m) for m in extra]
    while True:   # drop metric columns (right to left) until the table fits the console
        tab = _table(title, out["ranked"], space, varied, extra)
        if not extra or con.measure(tab, options=con.options.update(max_width=100_000)).maximum <= con.width:
            break
        extra = extra[:-1]
    con.print(tab)
    best = out["ranked"][0]
    if not multi:
        con.print(f"best: {best['bottleneck']}")
        con.print("re-run the best configuration with:")
    else:
        con.print("re-run front point #1 with (--json lists the command of every point):")
    con.print(best["command"], soft_wrap=True, markup=False, highlight=False)
    if "emit" in out:
        e = out["emit"]
        con.print(f"as a {e['framework']} config (add --emit {e['framework']} to the command above for it alone):")
        con.print(e["config"].rstrip("\n"), soft_wrap=True, markup=False, highlight=False)
        if e["framework"] == "deepspeed":
            for w in e["warnings"]:
                con.print(f"warning: {w}", soft_wrap=True, markup=False, highlight=False)


def _table(title, ranked, space, varied, extra):
    from rich import box
    from rich.table import Table

    tab = Table(title=title, box=box.SIMPLE_HEAVY, title_justify="left")
    tab.add_column("#", justify="right")
    for p in varied:
        tab.add_column(short(p.path), justify="right")
    for o in space.objectives:
        tab.add_column(f"[bold]{o.label}[/]", justify="right")
    train = next((c.tokens for c in space.constraints if c.tokens), None)   # max_train_time: hours to train
    if train:
        tab.add_column(f"train {fmt(train, 'count')} tok", justify="right")
    for m in extra:
        tab.add_column(COLUMNS[m][0], justify="right")
    tab.add_column("bottleneck")
    for i, e in enumerate(ranked, 1):
        cells = [str(i)] + [fmt_param(p, e["params"].get(p.path)) for p in varied]
        cells += [fmt_metric(o.metric, v, o.unit) for o, v in zip(space.objectives, e["values"])]
        met = e["metrics"]
        if train:
            tps = met.get("throughput.tokens_per_s")
            cells.append(fmt(train / tps, "s") if tps else "-")
        for m in extra:
            cap = m.rsplit(".", 1)[0] + ".capacity"
            if m in ("memory.gpu.total", "memory.sram.total") and m in met and cap in met:
                cells.append(f"{fmt(met[m], 'bytes')} ({100 * met[m] / met[cap]:.0f}%)")
            else:
                cells.append(fmt_metric(m, met.get(m)))
        cells.append(e["bottleneck"].split(":")[0])
        tab.add_row(*cells)
    return tab


# ----------------------------------------------------------------------------- exports


def _open(path: str):
    if path == "-":
        return sys.stdout, False
    try:
        return open(path, "w", newline=""), True
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror})") from None


class Exporter:
    """Streams every evaluated point to a CSV and/or JSON file."""

    def __init__(self, space, json_path: str | None, csv_path: str | None):
        self.space = space
        self.params = [p.path for p in space.params]
        self.metrics = None
        self.json_f = self.csv_f = None
        self._first = True
        if json_path:
            self.json_f, self._close_json = _open(json_path)
            self.json_f.write('{"trials": [\n')
        if csv_path:
            self.csv_f, self._close_csv = _open(csv_path)
            self.csv_w = csv.writer(self.csv_f)

    @property
    def active(self) -> bool:
        return self.json_f is not None or self.csv_f is not None

    def _header(self, metrics):
        if self.metrics is None:
            self.metrics = list(metrics)
            if self.csv_f is not None:
                taken = {"id", "state", "feasible", "status", *self.params}   # a metric named like a parameter (gpus)
                self.csv_w.writerow(["id", "state"] + self.params + ["feasible", "status"]
                                    + [f"metrics.{m}" if m in taken else m for m in self.metrics])

    def points(self, batch: dict) -> None:
        """An exhaustive block: index, params (arrays), status (list), metrics (arrays)."""
        import numpy as np

        idx = batch["index"].tolist()
        if not idx:
            return
        self._header(batch["metrics"])
        pcols = [batch["params"][p].tolist() for p in self.params]
        mcols = [np.asarray(batch["metrics"].get(m, np.full(len(idx), np.nan))).tolist() for m in self.metrics]
        status = batch["status"]
        if self.csv_f is not None:
            rows = zip(idx, ["evaluated"] * len(idx), *pcols, [s == "feasible" for s in status], status, *mcols)
            self.csv_w.writerows(rows)
        if self.json_f is not None:
            for k, i in enumerate(idx):
                obj = {"id": i, "params": {p: c[k] for p, c in zip(self.params, pcols)},
                       "feasible": status[k] == "feasible",
                       "status": status[k], "metrics": {m: c[k] for m, c in zip(self.metrics, mcols)}}
                self._json(obj)

    def trials(self, rows: list) -> None:
        """optuna trials (dicts from :func:`dse.search.runner.trial_rows`)."""
        ms = []
        for r in rows:
            for m in r["metrics"]:
                if m not in ms:
                    ms.append(m)
        self._header(ms)
        for r in rows:
            status = r["reason"] if r["state"] == "PRUNED" else (
                "feasible" if r["feasible"] else "; ".join(r["violations"]) or "infeasible")
            if self.csv_f is not None:
                self.csv_w.writerow([r["trial"], r["state"]] + [r["params"].get(p, "") for p in self.params]
                                    + [r["feasible"], status] + [r["metrics"].get(m, "") for m in self.metrics])
            if self.json_f is not None:
                self._json({"id": r["trial"], "state": r["state"], "params": r["params"], "values": r["values"],
                            "feasible": r["feasible"], "status": status, "metrics": r["metrics"],
                            "constraints": r["constraints"], "worker": r["worker"]})

    def _json(self, obj) -> None:
        if not self._first:
            self.json_f.write(",\n")
        self._first = False
        self.json_f.write(json.dumps(plain(obj)))

    def close(self, out: dict | None) -> None:
        if self.csv_f is not None:
            self.csv_f.flush()
            if self._close_csv:
                self.csv_f.close()
        if self.json_f is not None:
            self.json_f.write("\n]")
            if out is not None:
                for k, v in summary(out).items():
                    self.json_f.write(f",\n{json.dumps(k)}: {json.dumps(plain(v), indent=1)}")
            self.json_f.write("}\n")
            self.json_f.flush()
            if self._close_json:
                self.json_f.close()


def summary(out: dict) -> dict:
    """The JSON object of a search (without the trial list, which is streamed)."""
    keys = ("engine", "engine_reason", "space", "objectives", "constraints", "study", "storage", "points",
            "evaluated", "feasible", "invalid_samples", "excluded", "elapsed", "notes", "no_feasible")
    s = {k: out[k] for k in keys if k in out}
    ranked = [{k: e[k] for k in ("params", "values", "metrics", "bottleneck", "command")} for e in out["ranked"]]
    if len(out["objectives"]) == 1:
        s["best"] = ({"params": ranked[0]["params"], "value": ranked[0]["values"][0], "metrics": ranked[0]["metrics"],
                      "bottleneck": ranked[0]["bottleneck"], "command": ranked[0]["command"]} if ranked else None)
        s["top"] = ranked
    else:
        s["pareto_front"] = ranked
    s["history"] = [[a, b] for a, b in out.get("history", [])]
    if "emit" in out:
        s["emit"] = out["emit"]
    return s

