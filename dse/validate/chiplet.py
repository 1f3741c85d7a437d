"""Chiplet packages: weak scaling, the Hecaton headline direction, and the Chiplet Actuary cost model.

The numbers: ``data/published/chiplet.yaml``. Sources: the research note ``docs/reference/chiplet.md``
(§2d worked table, §3a headline, §4a reference outputs, V3/V7/V8) and the Hecaton v1 abstract (arXiv 2407.05784v1: 4.98x
performance and 2.35x energy reduction on Llama2-70B against Megatron tensor parallelism).

Headline scenario (fixed by rules, not fitted): Llama2-70B, sequences of 4,096 tokens, one
sequence per micro-batch, 16 sequences per package per iteration (a 64-way data-parallel share
of Llama 2's 4M-token batch, Touvron et al. 2023 §2.2), no recompute, on the catalog package
``chiplet-train-8x8``. Megatron TP = ``megatron-1d`` with Megatron's micro-batch-major gradient
accumulation; Hecaton-style = ``hecaton-2d`` with the mini-batch schedule and the largest
mini-batch (a divisor of the 16 micro-batches) whose stored activations fit the package's DRAM.

What the model says drives the factor: Megatron is NoP-bound, its busiest links carry the
N-independent 1D collectives plus the edge-DRAM traffic of re-fetching weights and
read-modify-writing fp32 gradients every micro-batch, which must cross the NoP from the
package edge; the 2D scheme's collectives shrink as 1/sqrt(N) and its schedule fetches weights
once per mini-batch. When both are NoP-bound the time factor is the ratio of busiest-link
bytes, independent of the link bandwidth, so on 64 dies it stays below ~2x; it grows with the
die count (Llama3.1-405B on 240 dies: ~2.7-3.3x, where Megatron's working set exceeds SRAM and spills). The
paper's 4.98x cannot be checked without its hardware table (note §1b), which is why that case
is a documented expected miss.
"""

from __future__ import annotations

from functools import lru_cache

from dse.validate.published import load as load_published

TARGETS: dict = {}

NOTE = "reference/chiplet.md"
ACTUARY = "Chiplet Actuary (Feng & Ma, DAC'22), Yinxiao-Feng/chiplet-actuary, run by the note (§4a)"
HECATON_V1 = "Hecaton v1 abstract (arXiv 2407.05784v1; note §3a)"
PACKAGE = "chiplet-train-8x8"
# The note's worked table, the Hecaton headline and Chiplet Actuary's outputs: data/published/chiplet.yaml.
PUB = load_published("chiplet")

LLAMA2_70B = dict(layer_params=855_638_016, h=8192, ffn=28672, group=8)
LLAMA31_405B = dict(layer_params=3_187_671_040, h=16384, ffn=53248, group=16)
HEADLINE_PLAN = dict(micro_batch=1, global_batch=16, seq_len=4096, recompute="none")


def _ratio(model: str, scheme: str, rows: int, cols: int) -> float:
    from dse.catalog import load_model
    from dse.formulas import chiplet

    m = load_model(model)
    return chiplet.compute_to_communication(scheme, 4096, 1, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden,
                                            m.ffn_type, rows, cols)


def _sram_fits(model: str, scheme: str, rows: int, cols: int) -> float:
    from dse.catalog import load_chiplet_package, load_model
    from dse.formulas import chiplet

    m = load_model(model)
    need = chiplet.sram_per_die(scheme, 4096, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.ffn_type,
                                rows, cols)["total"]
    return float(need <= load_chiplet_package(PACKAGE).die.sram)


def largest_fitting_minibatch(model: str = "llama2-70b", package: str = PACKAGE, plan: dict = HEADLINE_PLAN) -> int:
    """The largest mini-batch (a divisor of the iteration's micro-batches) whose DRAM footprint fits."""
    from dse.estimate import estimate

    m = plan["global_batch"] // plan["micro_batch"]
    best = 1
    for k in range(1, m + 1):
        if m % k == 0 and estimate(model, package, chiplet_scheme="hecaton-2d", chiplet_schedule="minibatch",
                                   chiplet_minibatch=k, **plan)["feasible"]:
            best = k
    return best


@lru_cache(maxsize=1)
def headline() -> dict:
    """Megatron TP and Hecaton-style estimates of the headline scenario, and their ratios."""
    from dse.estimate import estimate

    k = largest_fitting_minibatch()
    meg = estimate("llama2-70b", PACKAGE, chiplet_scheme="megatron-1d", **HEADLINE_PLAN)
    hec = estimate("llama2-70b", PACKAGE, chiplet_scheme="hecaton-2d", chiplet_schedule="minibatch",
                   chiplet_minibatch=k, **HEADLINE_PLAN)
    return {"minibatch": k, "megatron": meg, "hecaton": hec,
            "time": meg["time"]["iteration"] / hec["time"]["iteration"],
            "energy": meg["energy"]["iteration_j"] / hec["energy"]["iteration_j"],
            "feasible": meg["feasible"] and hec["feasible"]}


def _simba_spills() -> float:
    from dse.estimate import estimate

    r = estimate("llama2-70b", "chiplet-simba-6x6", chiplet_scheme="megatron-1d", **HEADLINE_PLAN)
    return float(r["chiplet"]["sram_working_set"] > 100 * r["memory"]["sram"]["capacity"]
                 and r["traffic"]["dram_spill"] > 0
                 and not any(v.startswith("SRAM") for v in r["violations"]))


def _factor_on(mesh: str) -> float:
    """Megatron TP over the 2D scheme (mini-batch tuned) for the headline scenario on a package of R x C such dies."""
    from dse.estimate.chiplet_compare import pair
    from dse.specs.chiplet import parse_mesh

    r, c = parse_mesh(mesh)
    return float(pair("llama2-70b", PACKAGE, HEADLINE_PLAN, [f"hardware.rows={r}", f"hardware.cols={c}"])
                 ["time_factor"])


def cases():
    from dse.formulas import chiplet, package_cost as pc
    from dse.validate import Case

    out = []
    # ------------------------------------------------------------ the note's worked table (§2d)
    worked = PUB.values("worked_ratio")        # model -> dies -> (megatron-1d, hecaton-2d)
    shapes = {"Llama2-70B": LLAMA2_70B, "Llama3.1-405B": LLAMA31_405B}
    table = [(name, shapes[name], n, one_d, two_d)
             for name, by_n in worked.items() for n, (one_d, two_d) in by_n.items()]
    for name, m, n, one_d, two_d in table:
        for scheme, ref in (("megatron-1d", one_d), ("hecaton-2d", two_d)):
            out.append(Case(f"worked table, {name}, N={n}, {scheme} (FLOP per NoP byte per die)", ref,
                            lambda s=scheme, m=m, n=n: chiplet.worked_check_ratio(s, m["layer_params"], m["h"],
                                                                                   m["ffn"], m["group"], n),
                            1e-3, f"{NOTE} §2d worked check (its conventions: bwd = 2 x fwd for 2D, large-N volume)",
                            note="tolerance: the note prints 4 significant digits"))
    # ------------------------------------------------------------ weak scaling with the exact collectives
    out += [
        Case("weak scaling: hecaton-2d FLOP/NoP byte, Llama3.1-405B on 15x16 over Llama2-70B on 8x8 (stays within 10%)",
             1.0, lambda: _ratio("llama3.1-405b", "hecaton-2d", 15, 16) / _ratio("llama2-70b", "hecaton-2d", 8, 8),
             0.10, f"Hecaton abstract: ratio 'remains nearly constant' (note V3); {NOTE} §2d",
             note="exact per-collective volumes, (R-1)/R factors and the backward re-gather included"),
        Case("weak scaling: megatron-1d FLOP/NoP byte, same two points (falls to about half: note 306.6/621.7)",
             worked["Llama3.1-405B"][239][0] / worked["Llama2-70B"][64][0],
             lambda: _ratio("llama3.1-405b", "megatron-1d", 15, 16) / _ratio("llama2-70b", "megatron-1d", 8, 8),
             0.05, f"{NOTE} §2d worked check"),
        Case("SRAM: hecaton-2d fits Llama3.1-405B on the weak-scaled 15x16 package (1 = fits)", 1.0,
             lambda: _sram_fits("llama3.1-405b", "hecaton-2d", 15, 16), 0.0,
             "Hecaton abstract: the method 'relieves constraints on SRAM capacity' (note §1a)", kind="absolute"),
        Case("SRAM: megatron-1d does not fit it (0 = does not fit; its activations grow with h)", 0.0,
             lambda: _sram_fits("llama3.1-405b", "megatron-1d", 15, 16), 0.0,
             "Hecaton abstract (note §1a): porting designs 'make state-of-the-art chiplet designs fail'",
             kind="absolute"),
    ]
    # ------------------------------------------------------------ headline direction and factors
    paper = PUB.values("hecaton_headline")
    miss = ("Hecaton's chiplet count, links and DRAM are unknown (note §1b). On the stand-in package both runs are "
            "NoP-bound, so the factor is a ratio of busiest-link NoP time, independent of link bandwidth: collectives "
            "1.48x, edge-DRAM traffic crossing the mesh 2.51x (Megatron re-fetches weights and read-modify-writes fp32 "
            "gradients every micro-batch); DRAM bandwidth per stack does not move it (the mesh's inward links limit "
            "edge DRAM), SRAM only below the working sets. It grows with the die count (16x16 of the same dies: "
            "2.89x time, 2.15x energy). `dse chiplet-compare` shows the breakdown and the sweeps.")
    out += [
        Case("headline: both runs feasible on chiplet-train-8x8 (1 = yes)", 1.0, lambda: float(headline()["feasible"]),
             0.0, "scenario rules in this module's docstring", kind="absolute"),
        Case("headline direction: Hecaton-style faster than Megatron TP on the same package (1 = yes)", 1.0,
             lambda: float(headline()["time"] > 1.0), 0.0, HECATON_V1, kind="absolute"),
        Case("headline direction: Hecaton-style uses less energy than Megatron TP (1 = yes)", 1.0,
             lambda: float(headline()["energy"] > 1.0), 0.0, HECATON_V1, kind="absolute"),
        Case("headline: time factor Megatron / Hecaton-style, Llama2-70B (paper 4.98x)", paper["time"],
             lambda: headline()["time"], 0.5, HECATON_V1,
             note="tolerance: same order, within 2x below; no tighter band is defensible without the paper's hardware",
             expected_miss=miss),
        Case("headline: energy factor Megatron / Hecaton-style, Llama2-70B (paper 2.35x)", paper["energy"],
             lambda: headline()["energy"], 0.5, HECATON_V1,
             note="dynamic energy only (Gemini-style accounting); static power 0 in the catalog package"),
    ]
    # ------------------------------------------------------------ Chiplet Actuary reference outputs
    c7, c5 = pc.node_constants("7"), pc.node_constants("5")
    tol = 5e-4   # the note prints 4-5 significant digits
    src = f"{ACTUARY}; {NOTE} §4a (V7, V8)"
    die, pkg = PUB.values("actuary_die"), PUB.values("actuary_package")
    out += [
        Case("7 nm, 100 mm^2: die yield", die["7nm_100mm2"]["die_yield"],
             lambda: pc.die_yield(100, c7["defect_density"]), tol, src),
        Case("7 nm, 100 mm^2: dies per wafer", die["7nm_100mm2"]["dies_per_wafer"], lambda: pc.dies_per_wafer(100), tol,
             src),
        Case("7 nm, 100 mm^2: raw die cost", die["7nm_100mm2"]["raw_die_cost"],
             lambda: pc.raw_die_cost(100, c7["wafer_cost"]), tol, src, "USD"),
        Case("7 nm, 100 mm^2: known-good-die cost", die["7nm_100mm2"]["known_good_die_cost"],
             lambda: pc.known_good_die_cost(100, c7["wafer_cost"], c7["defect_density"]), tol, src, "USD"),
        Case("7 nm, 400 mm^2: die yield", die["7nm_400mm2"]["die_yield"],
             lambda: pc.die_yield(400, c7["defect_density"]), tol, src),
        Case("7 nm, 400 mm^2: known-good-die cost", die["7nm_400mm2"]["known_good_die_cost"],
             lambda: pc.known_good_die_cost(400, c7["wafer_cost"], c7["defect_density"]), tol, src, "USD"),
        Case("7 nm, 800 mm^2: die yield", die["7nm_800mm2"]["die_yield"],
             lambda: pc.die_yield(800, c7["defect_density"]), tol, src),
        Case("7 nm, 800 mm^2: known-good-die cost", die["7nm_800mm2"]["known_good_die_cost"],
             lambda: pc.known_good_die_cost(800, c7["wafer_cost"], c7["defect_density"]), tol, src, "USD"),
        Case("5 nm, 100 mm^2: known-good-die cost", die["5nm_100mm2"]["known_good_die_cost"],
             lambda: pc.known_good_die_cost(100, c5["wafer_cost"], c5["defect_density"]), tol, src, "USD"),
        Case("5 nm, 800 mm^2: known-good-die cost", die["5nm_800mm2"]["known_good_die_cost"],
             lambda: pc.known_good_die_cost(800, c5["wafer_cost"], c5["defect_density"]), tol, src, "USD"),
        Case("800 mm^2 of 7 nm logic as one SoC, organic substrate", pkg["soc_organic"],
             lambda: pc.package_re_cost(1, 800, "7", "organic")["total"], tol, src, "USD"),
    ]
    split = {tech: pkg[tech] for tech in ("organic", "fanout", "interposer")}
    for tech, refs in split.items():
        for n, ref in zip((2, 4, 8, 16), refs):
            out.append(Case(f"800 mm^2 of 7 nm logic as {n} chiplets (+10% D2D area each), {tech}", ref,
                            lambda n=n, tech=tech: pc.package_re_cost(n, pc.split_die_area(800, n), "7", tech)["total"],
                            tol, src, "USD"))
    # ------------------------------------------------------------ SRAM overflow and the die count (issue 17; last,
    # so that the earlier cases keep their order)
    porting = "Hecaton abstract (note §1a): porting inference chiplet designs to training 'introduces significantly " \
              "large quantities of DRAM access and network-on-package (NoP) overheads'"
    out += [
        Case("porting: Llama2-70B on the Simba-class package spills its layers through DRAM instead of failing on "
             "SRAM (1 = yes)", 1.0, _simba_spills, 0.0, porting, kind="absolute",
             note="working set over 100x its 752 KiB per die; extra DRAM bytes > 0; no SRAM violation"),
        Case("headline scenario on 16x16 of the same dies: the time factor grows with the die count (1 = yes)", 1.0,
             lambda: float(_factor_on("16x16") > headline()["time"]), 0.0,
             f"{NOTE} §2d: 1D's FLOP per NoP byte falls as 1/N, 2D's as 1/sqrt(N): the paper's 4.98x 'must come from "
             "larger N and/or from DRAM savings'", kind="absolute",
             note="dse chiplet-compare --set hardware.rows=16 --set hardware.cols=16: 2.89x time, 2.15x energy"),
    ]
    return out
