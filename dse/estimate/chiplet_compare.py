"""The 2D weight-stationary scheme against Megatron 1D on one chiplet package (``dse chiplet-compare``).

Hecaton (arXiv 2407.05784v1 abstract) reports 4.98x performance and 2.35x energy reduction over Megatron
tensor parallelism for Llama2-70B on hardware its abstract does not state. This module puts the two
schemes side by side on a package the user names, with every assumption a parameter of the package file,
the plan or ``--set``:

- Megatron 1D: ``megatron-1d`` with Megatron's micro-batch-major gradient accumulation (``microbatch``);
- 2D: ``hecaton-2d`` with the layer-major ``minibatch`` schedule, its mini-batch size (``chiplet_minibatch``)
  tuned: the divisor of the iteration's micro-batches with the shortest feasible iteration (the knob the
  search tunes; a larger mini-batch fetches weights less often but holds more activations in DRAM and pays
  more for every block it spills);

and sweeps the die's SRAM and the DRAM bandwidth per device, the two hardware numbers the paper's
"SRAM capacity" and "DRAM accesses" claims turn on. The factors are Megatron over 2D: time per iteration,
energy per iteration.
"""

from __future__ import annotations

from typing import Any

BASELINE: dict[str, Any] = {"chiplet_scheme": "megatron-1d", "chiplet_schedule": "microbatch"}
TWO_D: dict[str, Any] = {"chiplet_scheme": "hecaton-2d", "chiplet_schedule": "minibatch"}
#: Hecaton v1 abstract (arXiv 2407.05784v1; research note chiplet.md §3a): Megatron TP over Hecaton, Llama2-70B.
PUBLISHED = {"time_factor": 4.98, "energy_factor": 2.35}
DRAM_CLASSES = ("weights", "gradients", "activations", "boundary", "optimizer", "spill")


def summary(r: Any) -> dict[str, Any]:
    """The numbers of one estimate that explain a factor: phases, NoP split, energy, traffic, SRAM."""
    t, tr, ch = r["time"], r["traffic"], r["chiplet"]
    phases = {p: {**t[f"phase_{p}"], "time": t[p]} for p in ("forward", "backward")}
    return {"feasible": r["feasible"], "minibatch": r["chiplet"]["minibatch"], "time_s": t["iteration"],
            "energy_j": r["energy"]["iteration_j"], "phases": phases, "optimizer_s": t["optimizer"],
            "compute_s": t["compute"], "nop_collectives_s": t["nop_collectives"], "nop_dram_s": t["nop_dram"],
            "dram_s": t["dram"], "energy": dict(r["energy"]["components"]),
            "nop_bytes_per_die": tr["nop_bytes_per_die"], "dram_bytes": {k: tr[f"dram_{k}"] for k in DRAM_CLASSES},
            "sram_working_set": ch["sram_working_set"], "sram_spilled": sum(ch["sram_spilled"].values()),
            "bottleneck": r["bottleneck"].split(":")[0], "violations": list(r["violations"])}


def pair(model: str, hw: str, plan: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Megatron 1D and the 2D scheme (mini-batch tuned) on one package; their factors and what drives them."""
    from dse.estimate import estimate

    meg = estimate(model, hw, overrides=overrides, **BASELINE, **plan)
    m = plan["global_batch"] // plan["micro_batch"]
    tried = [estimate(model, hw, overrides=overrides, chiplet_minibatch=k, **TWO_D, **plan)
             for k in range(1, m + 1) if m % k == 0]
    best = min([r for r in tried if r["feasible"]] or tried, key=lambda r: r["time"]["iteration"])
    a, b = summary(meg), summary(best)
    drivers = {"time_s": {p: a["phases"][p]["time"] - b["phases"][p]["time"] for p in ("forward", "backward")},
               "energy_j": {k: a["energy"][k] - b["energy"].get(k, 0.0) for k in a["energy"]}}
    drivers["time_s"]["optimizer"] = a["optimizer_s"] - b["optimizer_s"]
    return {"megatron-1d": a, "hecaton-2d": b, "time_factor": a["time_s"] / b["time_s"],
            "energy_factor": a["energy_j"] / b["energy_j"], "drivers": drivers,
            "minibatches_tried": {int(r["chiplet"]["minibatch"]): (r["time"]["iteration"] if r["feasible"] else None)
                                  for r in tried}}


def compare(model: str = "llama2-70b", hw: str = "chiplet-train-8x8", *, srams: list[float] | None = None,
            dram_bandwidths: list[float] | None = None, overrides: list[str] | None = None,
            **plan: Any) -> dict[str, Any]:
    """The base point (the package as given) and a grid over SRAM per die x DRAM bandwidth per device.

    ``plan``: ``global_batch``, ``micro_batch``, ``seq_len``, ``recompute`` (and any other plan field).
    ``srams`` in bytes, ``dram_bandwidths`` in bytes/s (None: the package's value only).
    """
    from dse.errors import InputError
    from dse.estimate import load
    from dse.specs.chiplet import ChipletPackageSpec

    overrides = list(overrides or [])
    package = load(model, hw, None, overrides)[1]
    if not isinstance(package, ChipletPackageSpec):
        raise InputError(f"--hw {hw}: not a chiplet package but a {package.kind} (see `dse list hardware`: names "
                         "with 'chiplet')")
    base = pair(model, hw, plan, overrides)
    grid = []
    for s in srams or [package.die.sram]:
        for bw in dram_bandwidths or [package.dram.bandwidth]:
            p = pair(model, hw, plan, [*overrides, f"hardware.die.sram={s!r} B", f"hardware.dram.bandwidth={bw!r} B/s"])
            a, b = p["megatron-1d"], p["hecaton-2d"]
            grid.append({"sram": s, "dram_bandwidth": bw, "time_factor": p["time_factor"],
                         "energy_factor": p["energy_factor"], "minibatch": b["minibatch"],
                         "megatron_time_s": a["time_s"], "hecaton_time_s": b["time_s"],
                         "megatron_spilled": a["sram_spilled"], "hecaton_spilled": b["sram_spilled"],
                         "megatron_bound": a["bottleneck"], "hecaton_bound": b["bottleneck"],
                         "feasible": a["feasible"] and b["feasible"]})
    return {"model": model, "hardware": package.name, "plan": plan, "sram_per_die": package.die.sram,
            "dram_bandwidth": package.dram.bandwidth, "published": PUBLISHED, "base": base, "grid": grid}
