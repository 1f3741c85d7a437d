"""Self-contained HTML reports: ``dse estimate --html FILE`` and ``dse search --html FILE``.

One file holds everything the page needs: styles, a few lines of vanilla JavaScript and the data (a JSON
``<script type="application/json">`` block). Nothing is fetched when the page is viewed (no CDN, no fonts, no
images), so it opens offline, from an e-mail attachment or a CI artifact. Charts are hand-written SVG drawn here:
the time of one iteration as a stacked bar, and each memory tier as a stacked bar against its capacity; hovering a
segment names it. The search page (:mod:`dse.report.page_search`) adds the Pareto front or the convergence curve,
one SVG ``circle.pt`` per point, whose tooltip lists the configuration, and the breakdowns of the best points.

Nothing here is imported unless ``--html`` is given (``dse estimate`` starts without it).
"""

from __future__ import annotations

import json
import os
from html import escape
from typing import Any

from dse.errors import InputError
from dse.report.html import _CLASSES, _TIME, _table, estimate_html
from dse.units import fmt

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#17becf", "#8c564b")

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.2em 2em;color:#222;max-width:1100px}
h1{font-size:1.35em;margin:.2em 0}h2{font-size:1.1em;margin:1.2em 0 .4em}
table{border-collapse:collapse;margin:.4em 0 1em}td,th{padding:2px 8px;border-bottom:1px solid #ddd;
text-align:left;font-variant-numeric:tabular-nums}caption{padding:4px 0}
svg text{font-size:11px;fill:#333}.axis line,.axis path{stroke:#888}.grid line{stroke:#eee}
.pt{cursor:pointer;stroke:#fff;stroke-width:.8}.pt.infeasible{fill:#fff;stroke:#aaa;stroke-width:1}
.pt.best{stroke:#000;stroke-width:1.2}.pt.sel{stroke:#000;stroke-width:3}.seg{cursor:default}
.seg:hover,.pt:hover{opacity:.75}
#tip{position:absolute;background:#fffff4;border:1px solid #999;padding:4px 8px;font-size:12px;
box-shadow:2px 2px 6px rgba(0,0,0,.2);pointer-events:none;max-width:460px;z-index:9}
#tip table{margin:0}#tip td{border:0;padding:0 6px 0 0}.muted{color:#777}.legend span{margin-right:1em}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
code{background:#f4f4f4;padding:1px 4px;white-space:pre-wrap;word-break:break-all}
"""

# Hover: any element with data-tip (a text) or data-i (an index into data.points, whose "rows" the tooltip lists).
# Click (or #point=N in the address) selects a point: the breakdown of a ranked point is shown below the chart.
JS = """
(function(){
var data=JSON.parse(document.getElementById('dse-data').textContent||'{}');
var tip=document.getElementById('tip');
function fill(head,rows){
  tip.textContent='';var b=document.createElement('b');b.textContent=head;tip.appendChild(b);
  if(!rows||!rows.length)return;var t=document.createElement('table');
  rows.forEach(function(r){var tr=t.insertRow();r.forEach(function(c){tr.insertCell().textContent=c;});});
  tip.appendChild(t);}
function place(el){var r=el.getBoundingClientRect();tip.hidden=false;
  var x=r.right+window.scrollX+8,w=tip.offsetWidth;
  if(x+w>document.documentElement.clientWidth+window.scrollX)x=Math.max(0,r.left+window.scrollX-w-8);
  tip.style.left=x+'px';tip.style.top=(r.top+window.scrollY)+'px';}
function show(el){
  if(el.hasAttribute('data-i')){var p=(data.points||[])[+el.getAttribute('data-i')];if(!p)return;fill(p.label,p.rows);}
  else fill(el.getAttribute('data-tip'),null);
  place(el);}
function select(i){
  var p=(data.points||[])[i];if(!p)return;
  document.querySelectorAll('.pt.sel').forEach(function(e){e.classList.remove('sel');});
  var el=document.querySelector('.pt[data-i="'+i+'"]');if(el)el.classList.add('sel');
  if(p.detail===undefined||p.detail===null)return;
  document.querySelectorAll('.detail').forEach(function(d){d.hidden=d.id!=='detail-'+p.detail;});}
document.querySelectorAll('[data-i],[data-tip]').forEach(function(el){
  el.addEventListener('mouseenter',function(){show(el);});
  el.addEventListener('mouseleave',function(){tip.hidden=true;});
  if(el.hasAttribute('data-i'))el.addEventListener('click',function(){select(+el.getAttribute('data-i'));});});
var m=/point=(\\d+)/.exec(location.hash);
if(m){var el=document.querySelector('.pt[data-i="'+m[1]+'"]');if(el){select(+m[1]);show(el);}}
})();
"""


# ----------------------------------------------------------------------------- files


def check_path(path: str, flag: str = "--html") -> None:
    """Fail now, in one line naming ``flag``, when ``path`` cannot be written (before any long computation)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise InputError(f"{flag} {path}: is a directory; give a file name, e.g. report.html")
    if not os.path.isdir(folder):
        raise InputError(f"{flag} {path}: directory {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise InputError(f"{flag} {path}: not writable")


def write(path: str, text: str, flag: str = "--html") -> str:
    """Write ``text`` to ``path`` (UTF-8); an OS error is one line naming ``flag``."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise InputError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
    return path


def page(title: str, body: str, data: dict[str, Any] | None = None) -> str:
    """A whole HTML document: ``body`` plus the styles, the data block and the script, all inline."""
    blob = json.dumps(data or {}, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<meta name='viewport' content='width=device-width,initial-scale=1'><style>{CSS}</style></head>"
            f"<body>{body}<div id='tip' hidden></div>"
            f"<script type='application/json' id='dse-data'>{blob}</script><script>{JS}</script></body></html>\n")


# ----------------------------------------------------------------------------- breakdown charts


def _num(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return 0.0
    return x if x == x and abs(x) != float("inf") else 0.0


def stacked_bar(parts: list[tuple[str, float, str]], total: float, width: int = 760, height: int = 26,
                label: str = "", unit: str = "s", capacity: float | None = None) -> str:
    """One horizontal stacked bar (SVG): ``parts`` = (name, value, colour); each segment is a ``rect.seg``
    whose ``data-tip`` gives its value and share of ``total``. ``capacity`` (memory) draws a limit line."""
    scale_to = max(total, capacity or 0.0) or 1.0
    left, bar_w = 130, width - 140
    out = [f"<svg class='bar' width='{width}' height='{height + 16}' role='img'>",
           f"<text x='0' y='{height / 2 + 4:.0f}'>{escape(label)}</text>"]
    x = float(left)
    for name, value, colour in parts:
        if value <= 0:
            continue
        w = bar_w * value / scale_to
        share = f"{100 * value / total:.1f}%" if total else "-"
        out.append(f"<rect class='seg' x='{x:.2f}' y='2' width='{max(w, 0.5):.2f}' height='{height - 4}' "
                   f"fill='{colour}' data-tip='{escape(f'{name}: {fmt(value, unit)} ({share})')}'></rect>")
        x += w
    if capacity:
        cx = left + bar_w * capacity / scale_to
        out.append(f"<line x1='{cx:.2f}' x2='{cx:.2f}' y1='0' y2='{height}' stroke='#000' stroke-dasharray='3,2'/>")
        out.append(f"<text x='{cx:.0f}' y='{height + 13}' text-anchor='end'>capacity {escape(fmt(capacity, unit))}"
                   "</text>")
    out.append(f"<text x='{left}' y='{height + 13}' class='muted'>total {escape(fmt(total, unit))}</text></svg>")
    return "".join(out)


def legend(parts: list[tuple[str, str]]) -> str:
    """(name, colour) pairs as a line of coloured swatches."""
    return "<div class='legend'>" + "".join(f"<span><i class='sw' style='background:{c}'></i>{escape(n)}</span>"
                                            for n, c in parts) + "</div>"


# A chiplet package's iteration: its phases (dse/report/chiplet.py's time table), which sum to the iteration.
_CHIPLET_TIME = (("forward", "forward"), ("backward", "backward"), ("optimizer", "optimizer step"))


def time_chart(r: dict[str, Any]) -> str:
    """The iteration time split into its components (as the console's time table)."""
    t = r.get("time", {})
    total = _num(t.get("iteration"))
    keys = _CHIPLET_TIME if r.get("kind") == "chiplet" else _TIME
    parts = [(label, _num(t.get(k)), PALETTE[i % len(PALETTE)]) for i, (k, label) in enumerate(keys)]
    shown = [p for p in parts if p[1] > 0]
    return (stacked_bar(shown, total, label="iteration") + legend([(p[0], p[2]) for p in shown])) if total else ""


def memory_chart(r: dict[str, Any]) -> str:
    """Each memory tier (GPU per GPU, host and storage per node, chiplet SRAM per die) by tensor class."""
    mem = r.get("memory", {})
    tiers = [k for k, v in mem.items() if isinstance(v, dict) and (_num(v.get("total")) or _num(v.get("capacity")))]
    classes = list(_CLASSES) + sorted({k for tr in tiers for k in mem[tr]} - set(_CLASSES) - {"total", "capacity"})
    colours = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(classes)}
    bars, used = [], []
    for tier in tiers:
        m = mem[tier]
        parts = [(c, _num(m.get(c)), colours[c]) for c in classes if _num(m.get(c)) > 0]
        used += [(p[0], p[2]) for p in parts if (p[0], p[2]) not in used]
        bars.append(stacked_bar(parts, _num(m.get("total")), label=tier, unit="bytes",
                                capacity=_num(m.get("capacity")) or None))
    return "".join(bars) + legend(used) if bars else ""


def breakdown(r: dict[str, Any]) -> str:
    """Charts then tables of one estimate: what the estimate page shows, and a search point's detail."""
    tables = _chiplet_tables(r) if r.get("kind") == "chiplet" else estimate_html(r)
    return ("<h2>Time per iteration</h2>" + time_chart(r) + "<h2>Memory</h2>" + memory_chart(r)
            + "<h2>Numbers</h2>" + tables)


def _chiplet_tables(r: dict[str, Any]) -> str:
    """A chiplet package's headline numbers (the console's tables are in :mod:`dse.report.chiplet`)."""
    rows = [(label, fmt(_num(v), unit)) for label, v, unit in (
        ("iteration", r["time"].get("iteration"), "s"), ("time per token", r["time"].get("per_token"), "s"),
        ("tokens/s", r["throughput"].get("tokens_per_s"), "count"), ("MFU", r["throughput"].get("mfu"), "fraction"),
        ("energy per token", r.get("energy", {}).get("per_token_j"), "J"),
        ("power", r.get("energy", {}).get("power_w"), "W"),
        ("package cost", r.get("cost", {}).get("capital_usd"), "USD"),
        ("cost per million tokens", r.get("cost", {}).get("per_million_tokens_usd"), "USD")) if v is not None]
    mem = [(f"{tier} {c}", fmt(_num(v), "bytes")) for tier, m in r.get("memory", {}).items() if isinstance(m, dict)
           for c, v in m.items()]
    return _table(f"{r['model']['name']} on {r['hardware']['name']}", ["quantity", "value"],
                  [list(x) for x in rows + mem])


# ----------------------------------------------------------------------------- dse estimate --html


def estimate_page(r: dict[str, Any], command: str = "") -> str:
    """The page of one estimate: header, time and memory charts (hover a segment), then the tables."""
    head = f"{r['model']['name']} on {r['hardware']['name']}"
    verdict = "feasible" if r.get("feasible") else "infeasible: " + "; ".join(map(str, r.get("violations", [])))
    body = (f"<h1>dse estimate: {escape(head)}</h1><p>{escape(verdict)}. {escape(str(r.get('bottleneck', '')))}</p>"
            + (f"<p class='muted'><code>{escape(command)}</code></p>" if command else "") + breakdown(r))
    return page(f"dse estimate: {head}", body)


def write_estimate(path: str, r: dict[str, Any], command: str = "") -> str:
    return write(path, estimate_page(r, command))
