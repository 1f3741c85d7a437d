"""Every PNG the CLI writes with ``--plot``: one function per figure, called from :mod:`dse.cli`.

The model modules (:mod:`dse.estimate`, :mod:`dse.search`) return numbers only; the
figures are drawn here from those results. matplotlib is an extra (``pip install
'dse[plot]'``) imported through :func:`dse._optional.require` when a figure is asked
for; without it ``--plot`` fails with one line before any work is done
(:func:`check`), and a file that cannot be written fails with one line naming it.
"""

from __future__ import annotations

from contextlib import contextmanager

from dse._optional import require
from dse.errors import InputError


def pyplot(needed_by: str = "--plot"):
    """``matplotlib.pyplot`` on the file-only Agg backend, or a one-line :class:`InputError`."""
    matplotlib = require("matplotlib", "plot", needed_by)
    matplotlib.use("Agg")
    return require("matplotlib.pyplot", "plot", needed_by)


def check(path: str | None) -> None:
    """Fail now (one line) when ``--plot`` is given and matplotlib is missing, or the file's extension is not an image
    format matplotlib writes, before a long computation."""
    if path:
        pyplot()
        from pathlib import Path

        suffix = Path(path).suffix.lstrip(".").lower()
        formats = require("matplotlib.backend_bases", "plot", "--plot").FigureCanvasBase.get_supported_filetypes()
        if suffix and suffix not in formats:
            raise InputError(f"--plot {path}: .{suffix} is not an image format matplotlib writes; allowed: "
                             f"{', '.join(sorted(formats))}")


@contextmanager
def figure(path: str, **subplots):
    """``(fig, axes)`` of a new figure, saved to ``path`` and closed on leaving the block."""
    plt = pyplot()
    save = subplots.pop("savefig", {})
    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        try:
            fig.savefig(path, **save)
        except OSError as exc:
            raise InputError(f"--plot {path}: cannot write ({exc.strerror or exc})") from None
        except ValueError as exc:           # an extension that is not an image format
            raise InputError(f"--plot {path}: cannot write ({exc})") from None
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------- dse offload-compare


def offload_scaling(result: dict, path: str) -> str:
    """Iteration time and speedup over ZeRO-Infinity against the drive count (``dse offload-compare --plot``)."""
    sc = result["scaling"]
    n = sc["drives"]
    with figure(path, ncols=2, figsize=(10, 4), savefig={"dpi": 120}) as (fig, (ax1, ax2)):
        base = sc["iteration"][sc["labels"][0]]
        for label in sc["labels"]:
            t = sc["iteration"][label]
            ax1.plot(n, t, marker="o", label=label)
            ax2.plot(n, [b / x for b, x in zip(base, t)], marker="o", label=label)
        ax1.set_xlabel("drives behind the shared switch")
        ax1.set_ylabel("iteration time (s)")
        ax1.set_ylim(bottom=0)
        ax2.set_xlabel("drives behind the shared switch")
        ax2.set_ylabel("speedup over ZeRO-Infinity")
        ax2.axhline(1.0, color="grey", linewidth=0.8)
        ax1.legend(fontsize=8)
        fig.suptitle(f"{result['model']} on {result['hw']}")
        fig.tight_layout()
    return path


# ----------------------------------------------------------------------------- dse rok


def rok_curve(res: dict, path: str) -> str:
    """GPU activation memory (x) against throughput (y), one line per strategy, points = micro-batches (``dse rok``)."""
    from dse.estimate.rok import STRATEGIES

    with figure(path, figsize=(6.4, 4.4), savefig={"dpi": 120, "bbox_inches": "tight"}) as (fig, ax):
        for strategy in STRATEGIES:
            pts = [r for r in res["rows"] if r["strategy"] == strategy]
            xs = [r["gpu_activations"] / 1e9 for r in pts]
            ys = [r["tokens_per_s"] for r in pts]
            ax.plot(xs, ys, marker="o", label=strategy)
            for r, x, y in zip(pts, xs, ys):
                ax.annotate(f"b={r['micro_batch']}" + ("" if r["fits"] else " (OOM)"), (x, y), fontsize=7,
                            textcoords="offset points", xytext=(3, 3))
        ax.set_xlabel("GPU activation memory per GPU (GB)")
        ax.set_ylabel("tokens/s")
        ax.set_title(f"Recompute-offload-keep: {res['model']} on {res['hardware']}")
        ax.legend()
        ax.grid(alpha=0.3)
    return path


# ----------------------------------------------------------------------------- dse chiplet-scaling


def chiplet_scaling(rows: list[dict], path: str) -> str:
    """Compute/communication ratio and time per token against die count, one line per scheme."""
    with figure(path, ncols=2, figsize=(10, 4), savefig={"dpi": 120}) as (fig, (a1, a2)):
        for sch in dict.fromkeys(r["scheme"] for r in rows):
            pts = [r for r in rows if r["scheme"] == sch and r.get("ratio") is not None]
            if not pts:
                continue
            a1.plot([p["dies"] for p in pts], [p["ratio"] for p in pts], marker="o", label=sch)
            ok = [p for p in pts if p.get("time_per_token") is not None]
            a2.plot([p["dies"] for p in ok], [p["time_per_token"] * 1e3 for p in ok], marker="o", label=sch)
            bad = [p for p in ok if not p["feasible"]]
            if bad:
                a2.scatter([p["dies"] for p in bad], [p["time_per_token"] * 1e3 for p in bad], marker="x", color="red")
        a1.set_xlabel("dies")
        a1.set_ylabel("FLOP per NoP byte per die")
        a1.set_title("compute / communication")
        a2.set_xlabel("dies")
        a2.set_ylabel("time per token (ms)")
        a2.set_title("time per token (x: infeasible)")
        a1.legend()
        a1.grid(alpha=0.3)
        a2.grid(alpha=0.3)
        fig.tight_layout()
    return path


def chiplet_compare(out: dict, path: str) -> str:
    """Megatron 1D over the 2D scheme, time and energy factors against SRAM per die, one line per DRAM bandwidth."""
    with figure(path, ncols=2, figsize=(10, 4), savefig={"dpi": 120}) as (fig, axes):
        bws = list(dict.fromkeys(g["dram_bandwidth"] for g in out["grid"]))
        for key, ax, title in (("time_factor", axes[0], "time"), ("energy_factor", axes[1], "energy")):
            for i, bw in enumerate(bws):      # lines that coincide: DRAM bandwidth is not what limits
                pts = sorted((g for g in out["grid"] if g["dram_bandwidth"] == bw), key=lambda g: g["sram"])
                ax.plot([g["sram"] / 2**20 for g in pts], [g[key] for g in pts], marker="os^Dv"[i % 5],
                        markersize=8 - 2 * (i % 3), linestyle=("-", "--", ":")[i % 3],
                        label=f"DRAM {bw / 1e9:g} GB/s per device")
            srams = sorted({g["sram"] / 2**20 for g in out["grid"]})
            ax.axhline(out["published"][key], color="black", linestyle="--", linewidth=1,
                       label=f"Hecaton v1 abstract {out['published'][key]}x (hardware not stated)")
            ax.axvline(out["sram_per_die"] / 2**20, color="0.6", linestyle=":", linewidth=1,
                       label=f"{out['hardware']} SRAM")
            ax.set_xscale("log", base=2)
            ax.set_xticks(srams, [f"{x:g}" for x in srams])
            ax.set_xlabel("SRAM per die (MiB)")
            ax.set_ylabel(f"{title}: Megatron 1D / 2D (x)")
            ax.set_title(f"{title} factor, {out['model']}")
            ax.set_ylim(0, None)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        fig.tight_layout()
    return path


# ----------------------------------------------------------------------------- dse search


def search_result(path: str, space, out: dict) -> str:
    """The Pareto front (several objectives) or the convergence curve (one) of ``dse search``."""
    with figure(path, figsize=(6.4, 4.4), dpi=120) as (fig, ax):
        objs = space.objectives
        if len(objs) > 1:
            o1, o2 = objs[0], objs[1]
            if out.get("trials"):
                pts = [r for r in out["trials"] if r["state"] == "COMPLETE" and r["feasible"]]
                ax.scatter([r["values"][0] for r in pts], [r["values"][1] for r in pts], s=8, c="0.7",
                           label="feasible trials")
            front = sorted(out["ranked"], key=lambda e: e["values"][0])
            ax.plot([e["values"][0] for e in front], [e["values"][1] for e in front], "o-", c="C3", ms=4,
                    label="Pareto front")
            ax.set_xlabel(f"{o1.label} ({o1.metric})")
            ax.set_ylabel(f"{o2.label} ({o2.metric})")
            ax.set_title(f"{space.name}: Pareto front ({out['engine']})")
        else:
            o = objs[0]
            hist = [(a, b) for a, b in out.get("history", []) if b is not None]
            if out.get("trials"):
                pts = [r for r in out["trials"] if r["state"] == "COMPLETE" and r["feasible"]]
                ax.scatter([r["trial"] for r in pts], [r["values"][0] for r in pts], s=8, c="0.7",
                           label="feasible trials")
            if hist:
                ax.step([a for a, _ in hist], [b for _, b in hist], where="post", c="C0", label="best so far")
            ax.set_xlabel("trial" if out["engine"] == "optuna" else "points evaluated")
            ax.set_ylabel(f"{o.label} ({o.metric})")
            ax.set_title(f"{space.name}: convergence ({out['engine']})")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
    return path
