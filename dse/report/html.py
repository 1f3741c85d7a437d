"""HTML tables of an estimate and of a search, for Jupyter (``_repr_html_`` of the result objects).

Plain HTML tables (no scripts, no styles beyond a caption), the same numbers and units as the console report
(:func:`dse.units.fmt`). An estimate over arrays renders one row per scenario.
"""

from __future__ import annotations

from html import escape
from typing import Any

from dse.units import fmt

# (key in the time section, label): as the console report's rows (dse/report/console.py)
_TIME = (("compute", "compute"), ("recompute", "recompute"), ("tp_communication", "tensor-parallel communication"),
         ("cp_communication", "context-parallel exchange"), ("ep_communication", "expert-parallel all-to-all"),
         ("pp_communication", "pipeline point-to-point"),
         ("dp_communication", "data-parallel reduction (exposed)"),
         ("embedding_sync", "word-embedding sync"), ("bubble", "pipeline bubble"), ("optimizer", "optimizer step"),
         ("overhead", "host overhead"), ("io_exposed", "storage / host I/O (exposed)"))
_CLASSES = ("weights", "gradients", "optimizer", "activations", "buffers")


def _table(caption: str, header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (f"<table><caption style='text-align:left'><b>{escape(caption)}</b></caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _pct(x: float, total: float) -> str:
    return f"{100 * x / total:.1f}%" if total else "-"


def estimate_html(r: dict[str, Any]) -> str:
    """One estimate as HTML: the plan, defaults and warnings, then time, memory and throughput tables."""
    t = r.get("time", {})
    if hasattr(t.get("iteration"), "shape") and getattr(t["iteration"], "shape", ()) != ():
        return _array_estimate_html(r)
    p, par = r["plan"], r["parallelism"]
    parts = [f"<p><b>{escape(str(r['model']['name']))}</b> ({fmt(r['model']['params'], 'count')} parameters) on "
             f"<b>{escape(str(r['hardware']['name']))}</b>: {int(par['gpus'])} GPUs, tp {p['tp']} · "
             + (f"cp {p['cp']} · " if p.get("cp", 1) > 1 else "") + f"pp {p['pp']} · "
             f"dp {p['dp']} · micro-batch {p['micro_batch']} · global batch {p['global_batch']} · seq "
             f"{p['seq_len']} · recompute {escape(str(p['recompute']))} · ZeRO-{p['zero']} · "
             f"{escape(str(p['precision']))}</p>"]
    if r.get("defaults"):
        from dse.estimate.defaults import line

        parts.append(f"<p><i>{escape(line(r['defaults']))}</i></p>")
    for w in r.get("warnings", ()):
        parts.append(f"<p><b>warning:</b> {escape(w)}</p>")
    total = t["iteration"]
    rows = [[label, fmt(t[k], "s"), _pct(t[k], total)] for k, label in _TIME if t.get(k)]
    parts.append(_table("Time per iteration", ["component", "time", "share"],
                        rows + [["iteration", fmt(total, "s"), "100.0%"]]))
    mem = r["memory"]
    tiers = [k for k in ("gpu", "host", "cxl", "storage") if k in mem and (mem[k]["capacity"] or mem[k]["total"])]
    classes = list(_CLASSES) + sorted({k for tr in tiers for k in mem[tr]} - set(_CLASSES) - {"total", "capacity"})
    rows = [[c, *[fmt(mem[tr].get(c, 0.0), "bytes") for tr in tiers]] for c in classes
            if any(mem[tr].get(c, 0.0) for tr in tiers)]
    rows.append(["total", *[fmt(mem[tr]["total"], "bytes") for tr in tiers]])
    rows.append(["capacity", *[fmt(mem[tr]["capacity"], "bytes") for tr in tiers]])
    unit = "host" if "hosts" in r["parallelism"] else "node"   # a node of several hosts (GB200 NVL72)
    parts.append(_table(f"Memory (GPU: per GPU; host and storage: per {unit})", ["tensor class", *tiers], rows))
    th = r["throughput"]
    rows = [["tokens/s", f"{th['tokens_per_s']:,.0f}"], ["MFU", fmt(th["mfu"], "fraction")],
            ["HFU", fmt(th["hfu"], "fraction")], ["model FLOPs / iteration", fmt(r["flops"]["model_per_iteration"],
                                                                                 "flop")]]
    if r.get("cost"):
        rows.append(["cost per million tokens", fmt(r["cost"]["per_million_tokens_usd"], "USD")])
    parts.append(_table("Throughput", ["metric", "value"], rows))
    verdict = "feasible" if r["feasible"] else "infeasible"
    parts.append(f"<p><b>{verdict}</b>: {escape(str(r['bottleneck']))}</p>")
    if "checked_against" in r:
        from dse.validate.regimes import sentence

        parts.append(f"<p><b>checked against</b>: {escape(sentence(r['checked_against']))}</p>")
    return "<div>" + "".join(parts) + "</div>"


def _array_estimate_html(r: dict[str, Any]) -> str:
    """An estimate over arrays: one row per scenario (flattened), with the plan fields that vary."""
    import numpy as np

    it = np.asarray(r["time"]["iteration"])
    varying = [k for k, v in r["plan"].items() if np.ndim(v) > 0]
    cols = {k: np.broadcast_to(np.asarray(r["plan"][k]), it.shape).ravel() for k in varying}
    tok = np.broadcast_to(np.asarray(r["throughput"]["tokens_per_s"]), it.shape).ravel()
    mfu = np.broadcast_to(np.asarray(r["throughput"]["mfu"]), it.shape).ravel()
    gpu = np.broadcast_to(np.asarray(r["memory"]["gpu"]["total"]), it.shape).ravel()
    ok = np.broadcast_to(np.asarray(r["feasible"]), it.shape).ravel()
    rows = [[*(str(cols[k][i]) for k in varying), fmt(x, "s"), f"{tok[i]:,.0f}", fmt(mfu[i], "fraction"),
             fmt(gpu[i], "bytes"), "yes" if ok[i] else "no"] for i, x in enumerate(it.ravel())]
    return _table(f"{r['model']['name']} on {r['hardware']['name']}: {it.size} scenarios",
                  [*varying, "iteration", "tokens/s", "MFU", "GPU memory", "feasible"], rows)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def search_rows(out: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The ranked points of a search as flat rows: rank, parameters, objective values, metrics, bottleneck."""
    ranked = out.get("ranked", [])
    objectives = [o["name"] for o in out.get("objectives", [])]
    params = list(dict.fromkeys(k for e in ranked for k in e["params"]))
    metrics = list(dict.fromkeys(k for e in ranked for k in e.get("metrics", {})))
    rows = []
    for rank, e in enumerate(ranked, 1):
        row: dict[str, Any] = {"rank": rank, **{k: e["params"].get(k) for k in params}}
        values = e.get("values", [e.get("value")])
        row.update(zip(objectives, values))
        row.update({k: e.get("metrics", {}).get(k) for k in metrics if k not in row})
        row["bottleneck"] = e.get("bottleneck", "")
        row["command"] = e.get("command", "")
        rows.append(row)
    columns = ["rank", *params, *objectives, *(m for m in metrics if m not in objectives), "bottleneck", "command"]
    return columns, rows


def search_html(out: dict[str, Any]) -> str:
    """The ranked points (or the Pareto front) of a search as an HTML table."""
    columns, rows = search_rows(out)
    shown = [c for c in columns if c != "command"]
    kind = "Pareto front" if len(out.get("objectives", [])) > 1 else "best points"
    caption = (f"{kind}: {len(rows)} of {out.get('evaluated', 0):,} evaluated "
               f"({out.get('feasible', 0):,} feasible), engine {out.get('engine', '?')}")
    body = _table(caption, shown, [[_cell(row.get(c)) for c in shown] for row in rows])
    if not rows and out.get("no_feasible"):
        body += f"<p>{escape(str(out['no_feasible']))}</p>"
    return body
