"""The page of ``dse search --html FILE`` (see :mod:`dse.report.page` for what every page holds).

- Several objectives: the Pareto front on the first two (x, y), one ``circle.pt`` per front point; an optuna
  search also draws every other completed trial (hollow when infeasible).
- One objective: the convergence, best value so far against trials (optuna: one ``circle.pt`` per completed
  trial) or points evaluated (exhaustive: a step line, and the top configurations as points, x = rank).

Hovering a point lists its configuration (the varied parameters), objective values and key metrics; clicking a
ranked point (or opening the page at ``#point=N``) shows its time and memory breakdown, re-estimated with the
scalar estimate, below the chart. The best point is selected when the page opens.
"""

from __future__ import annotations

import math
from html import escape

from dse.report.html import search_html
from dse.report.page import PALETTE, breakdown, page, write

DETAILS = 50            # ranked points whose full breakdown the page carries (each ~10 kB)
MAX_POINTS = 5_000      # optuna trials drawn at most, ~1 kB each (the rest are counted in a note)
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 760, 420, 110, 30, 16, 46


def _finite(vals) -> bool:
    return vals is not None and all(isinstance(v, (int, float)) and math.isfinite(v) and abs(v) < 1e299
                                    for v in vals)


def _ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """Round tick values covering [lo, hi] (1-2-5 steps)."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    first = math.floor(lo / step) * step
    return [first + i * step for i in range(int(math.ceil((hi - first) / step)) + 1)]


class Axes:
    """Linear x/y scales over the data, and the SVG of the axes, ticks and labels."""

    def __init__(self, xs: list[float], ys: list[float], xlabel: str, ylabel: str, xfmt, yfmt):
        self.xt = _ticks(min(xs, default=0.0), max(xs, default=1.0))
        self.yt = _ticks(min(ys, default=0.0), max(ys, default=1.0))
        self.xlabel, self.ylabel, self.xfmt, self.yfmt = xlabel, ylabel, xfmt, yfmt

    def x(self, v: float) -> float:
        lo, hi = self.xt[0], self.xt[-1]
        return PAD_L + (W - PAD_L - PAD_R) * (v - lo) / ((hi - lo) or 1.0)

    def y(self, v: float) -> float:
        lo, hi = self.yt[0], self.yt[-1]
        return H - PAD_B - (H - PAD_T - PAD_B) * (v - lo) / ((hi - lo) or 1.0)

    def svg(self) -> str:
        out = ["<g class='grid'>"]
        out += [f"<line x1='{self.x(t):.1f}' x2='{self.x(t):.1f}' y1='{PAD_T}' y2='{H - PAD_B}'/>" for t in self.xt]
        out += [f"<line x1='{PAD_L}' x2='{W - PAD_R}' y1='{self.y(t):.1f}' y2='{self.y(t):.1f}'/>" for t in self.yt]
        out.append("</g><g class='axis'>")
        out.append(f"<path d='M{PAD_L},{PAD_T}V{H - PAD_B}H{W - PAD_R}' fill='none'/>")
        out += [f"<text x='{self.x(t):.1f}' y='{H - PAD_B + 14}' text-anchor='middle'>{escape(self.xfmt(t))}</text>"
                for t in self.xt]
        out += [f"<text x='{PAD_L - 4}' y='{self.y(t) + 4:.1f}' text-anchor='end'>{escape(self.yfmt(t))}</text>"
                for t in self.yt]
        out.append(f"<text x='{(PAD_L + W - PAD_R) / 2:.0f}' y='{H - 8}' text-anchor='middle'>"
                   f"{escape(self.xlabel)}</text>")
        out.append(f"<text transform='translate(12,{(PAD_T + H - PAD_B) / 2:.0f}) rotate(-90)' "
                   f"text-anchor='middle'>{escape(self.ylabel)}</text></g>")
        return "".join(out)


def _rows(space, entry: dict, values, objectives) -> list[list[str]]:
    """Tooltip rows of one point: varied parameters, objective values, key metrics, feasibility."""
    from dse.search.output import COLUMNS, fmt_metric, fmt_param, short

    params = {p.path: p for p in space.params}
    rows = [[short(k) if k.startswith("plan.") else k, fmt_param(params.get(k), v)]
            for k, v in entry["params"].items()]
    shown = set()
    for o, v in zip(objectives, values or []):
        rows.append([o.label, fmt_metric(o.metric, v, o.unit)])
        shown.add(o.metric)
    metrics = entry.get("metrics", {})
    for m, (head, _) in COLUMNS.items():
        if m in metrics and m not in shown and m != "gpus":
            rows.append([head, fmt_metric(m, metrics[m])])
    if "feasible" in entry:
        rows.append(["feasible", "yes" if entry["feasible"] else "no: " + "; ".join(entry.get("violations", []))])
    if entry.get("bottleneck"):
        rows.append(["bottleneck", str(entry["bottleneck"])])
    return rows


def _points(space, out: dict) -> tuple[list[dict], str]:
    """(points to draw, note): each {x, y, cls, label, rows, detail}, and what was left out."""
    objs = space.objectives
    multi = len(objs) > 1
    rank_of = {e.get("key"): i for i, e in enumerate(out.get("ranked", []))}
    pts, skipped = [], 0
    if out.get("trials") is not None:                       # optuna: every completed trial
        for r in out["trials"]:
            if r["state"] != "COMPLETE":
                continue
            if not _finite(r["values"]) or (len(pts) >= MAX_POINTS and r["trial"] not in rank_of):   # keep ranked
                skipped += 1
                continue
            rank = rank_of.get(r["trial"])
            x, y = (r["values"][0], r["values"][1]) if multi else (r["trial"], r["values"][0])
            pts.append({"x": x, "y": y, "rank": rank, "feasible": r["feasible"],
                        "label": f"trial {r['trial']}" + (f" (#{rank + 1})" if rank is not None else ""),
                        "rows": _rows(space, r, r["values"], objs)})
    else:                                                    # exhaustive: the front / top configurations
        for i, e in enumerate(out.get("ranked", [])):
            if not _finite(e["values"]):
                skipped += 1
                continue
            x, y = (e["values"][0], e["values"][1]) if multi else (i + 1, e["values"][0])
            pts.append({"x": x, "y": y, "rank": i, "feasible": True, "label": f"#{i + 1}",
                        "rows": _rows(space, e, e["values"], objs)})
    note = f"{skipped:,} points not drawn (no finite objective value, or over {MAX_POINTS:,})" if skipped else ""
    return pts, note


def _chart(space, out: dict, pts: list[dict]) -> str:
    """The SVG of the Pareto front or the convergence, with one ``circle.pt`` per point."""
    from dse.search.output import fmt_metric

    objs = space.objectives
    multi = len(objs) > 1
    hist = [(a, b) for a, b in out.get("history", []) if b is not None and math.isfinite(b)]
    exhaustive_single = not multi and out.get("trials") is None
    o0 = objs[0]
    count = (lambda v: f"{v:,.0f}")
    if multi:
        ax = Axes([p["x"] for p in pts], [p["y"] for p in pts], f"{o0.label} ({o0.metric})",
                  f"{objs[1].label} ({objs[1].metric})", lambda v: fmt_metric(o0.metric, v, o0.unit),
                  lambda v: fmt_metric(objs[1].metric, v, objs[1].unit))
    else:
        xl = "rank (top configurations)" if exhaustive_single else "trial"
        ys = [p["y"] for p in pts] + ([b for _, b in hist] if not exhaustive_single else [])
        ax = Axes([p["x"] for p in pts], ys, xl, f"{o0.label} ({o0.metric})", count,
                  lambda v: fmt_metric(o0.metric, v, o0.unit))
    svg = [f"<svg id='chart' width='{W}' height='{H}' role='img'>", ax.svg()]
    if multi:
        front = sorted((p for p in pts if p["rank"] is not None), key=lambda p: p["x"])
        if len(front) > 1:
            d = "".join(f"{'M' if i == 0 else 'L'}{ax.x(p['x']):.1f},{ax.y(p['y']):.1f}" for i, p in enumerate(front))
            svg.append(f"<path d='{d}' fill='none' stroke='{PALETTE[2]}' stroke-width='1.2'/>")
    elif not exhaustive_single and hist:
        svg.append(_step(ax, hist))
    for i, p in sorted(enumerate(pts), key=lambda ip: ip[1]["rank"] is not None):   # ranked on top
        cls = "pt" + (" best" if p["rank"] is not None else "") + ("" if p["feasible"] else " infeasible")
        colour = PALETTE[2] if p["rank"] is not None else ("#9aa9c3" if p["feasible"] else "#fff")
        r = 5 if p["rank"] is not None else 3.5
        svg.append(f"<circle class='{cls}' data-i='{i}' cx='{ax.x(p['x']):.1f}' cy='{ax.y(p['y']):.1f}' r='{r}' "
                   f"fill='{colour}'></circle>")
    svg.append("</svg>")
    parts = ["".join(svg)]
    if exhaustive_single and len(hist) > 1:
        parts.append(_convergence(hist, o0, out))
    return "".join(parts)


def _convergence(hist, o, out: dict) -> str:
    """Exhaustive, one objective: best value so far against points evaluated (a step line, no points)."""
    from dse.search.output import fmt_metric

    ax = Axes([a for a, _ in hist], [b for _, b in hist], "points evaluated", f"best {o.label}",
              lambda v: f"{v:,.0f}", lambda v: fmt_metric(o.metric, v, o.unit))
    return (f"<h2>Convergence ({out.get('engine')})</h2><svg width='{W}' height='{H}' role='img'>{ax.svg()}"
            f"{_step(ax, hist)}</svg>")


def _step(ax: Axes, hist) -> str:
    """Best value so far as a step line (SVG path)."""
    d = "".join(f"M{ax.x(a):.1f},{ax.y(b):.1f}" if i == 0 else f"H{ax.x(a):.1f}V{ax.y(b):.1f}"
                for i, (a, b) in enumerate(hist))
    return f"<path d='{d}' fill='none' stroke='{PALETTE[0]}' stroke-width='1.5'/>"


def _details(space, out: dict) -> list[str]:
    """The breakdown (charts and tables) of each of the first :data:`DETAILS` ranked points."""
    from dse.estimate import run
    from dse.search.runner import resolve_point

    divs = []
    for i, e in enumerate(out.get("ranked", [])[:DETAILS]):
        r = run(*resolve_point(space, e["params"]))
        cmd = e.get("command", "")
        divs.append(f"<div class='detail' id='detail-{i}'{'' if i == 0 else ' hidden'}>"
                    f"<h2>Configuration #{i + 1}</h2><p>{escape(str(e.get('bottleneck', '')))}</p>"
                    + (f"<p><code>{escape(cmd)}</code></p>" if cmd else "") + breakdown(r) + "</div>")
    return divs


def search_page(space, out: dict) -> str:
    """The whole page of one search (see the module docstring)."""
    pts, note = _points(space, out)
    multi = len(space.objectives) > 1
    kind = "Pareto front" if multi else ("Convergence" if out.get("trials") is not None else "Top configurations")
    head = (f"{out.get('evaluated', 0):,} evaluated, {out.get('feasible', 0):,} feasible, engine "
            f"{out.get('engine', '?')}, {len(out.get('ranked', []))} {'front points' if multi else 'ranked'}; "
            f"hover a point for its configuration, click a ranked (outlined) point for its breakdown")
    body = [f"<h1>dse search: {escape(space.name)}</h1><p>{escape(head)}</p>"]
    body += [f"<p class='muted'>note: {escape(str(n))}</p>" for n in ([note] if note else []) + out.get("notes", [])]
    if len(space.objectives) > 2:
        body.append("<p class='muted'>the chart shows the first two objectives; the table lists them all</p>")
    body.append(f"<h2>{kind}</h2>")
    if pts:
        body.append(_chart(space, out, pts))
        body.append("<p class='muted'>red: " + ("front" if multi else "ranked") + " points"
                    + ("; blue: other feasible trials; hollow: infeasible trials" if out.get("trials") is not None
                       else "") + "</p>")
    else:
        body.append(f"<p>{escape(str(out.get('no_feasible', 'no point to draw')))}</p>")
    body += _details(space, out)
    body.append("<h2>Ranked configurations</h2>" + search_html(out))
    data = {"points": [{"label": p["label"], "rows": p["rows"], "detail": p["rank"] if p["rank"] is not None
                        and p["rank"] < DETAILS else None} for p in pts]}
    return page(f"dse search: {space.name}", "".join(body), data)


def write_search(path: str, space, out: dict) -> str:
    return write(path, search_page(space, out))
