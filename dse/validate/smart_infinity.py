"""Smart-Infinity (HPCA'24) and ZeRO-Infinity: published traffic and times vs the model.

Reference numbers: ``data/published/smart_infinity.yaml``, collected in the research note
``docs/reference/storage_offload.md`` (Jang et al., arXiv 2403.06664). Bar
segments and speedups of Figs. 3 and 9 were read from the PDF's vector drawing (note's [F]
tag, reading error ~0.3 % of full scale); the 2.11x and 75.57 % are printed in the text.

Scenario of every published run (Sec. VII-A and the released scripts): one GPU, Adam, fp16
mixed precision, ZeRO-3, batch 4, sequence 1024 (repo scripts), full activation
checkpointing, Megatron math attention (fused softmax), fp16 params in host DRAM; the
baseline (BASE) keeps optimizer state and fp32 gradients on a RAID0 of N SmartSSD NVMe
drives with DeepSpeed's CPU Adam; SU / SU+O / SU+O+C run the update on the SmartSSDs'
FPGAs (naive, with the transfer handler, plus top-k compression at 2 %) and exchange fp32
gradients and parameters, as the paper's times do. Model shapes are reconstructed from the
parameter counts (``models/smart-infinity-*.yaml``; the paper does not list them).

One calibrated set of hardware numbers serves every case (``hwspecs/``): see
``benchmarks/calibrate_offload.py``, which fits five numbers on the GPT-2 cases and Fig. 3(b)
and reports the held-out error on the BERT and A100 cases. Tolerances: iteration time 15 %,
speedup over BASE 10 % (the issue's acceptance bar); the update segment, which is the
storage model proper, 15 %; the backward + gradient offload segment (the GPU<->host gradient round
trip of ZeRO-3, issue 17) 15 %; the Fig. 3(a) update share +-6 points (absolute).
"""

from __future__ import annotations

from functools import cache

from dse.validate.published import load as load_published

TARGETS: dict = {}
SRC = "Smart-Infinity (Jang et al., HPCA'24, arXiv 2403.06664)"
SEQ, BATCH = 1024, 4
MODELS = {"gpt2-4.0b": "smart-infinity-gpt2-4.0b", "gpt2-8.4b": "smart-infinity-gpt2-8.4b",
          "bert-4.0b": "smart-infinity-bert-4.0b", "bert-8.3b": "smart-infinity-bert-8.3b"}
VARIANTS = {  # label -> plan fields
    "BASE": dict(offload_optimizer="nvme"),
    "SU": dict(offload_optimizer="csd", transfer_overlap=False),
    "SU+O": dict(offload_optimizer="csd", transfer_overlap=True),
    "SU+O+C": dict(offload_optimizer="csd", transfer_overlap=True, gradient_compression=0.02),
}

# DeepSpeed aio section of the released config (DeepSpeedExample/examples/ds_zero_stage_infinity-nvme.json): 64 MiB
# in flight, 6.7 MB per drive at 10 drives, far above a drive's bandwidth-delay product (3 GB/s x 0.26 ms = 0.8 MB).
AIO = dict(aio_block_size=1048576, aio_queue_depth=16, aio_thread_count=4, aio_overlap_events=True)

# The published numbers: data/published/smart_infinity.yaml (each table with its figure and how it was read).
_PUB = load_published("smart_infinity")
# Fig. 9 (A5000, batch 4): (model, drives) -> variant -> (forward, backward', update, total) [s];
# None where the note gives only the total. Speedups over BASE (SU, SU+O, SU+O+C) from the plotted line.
FIG9 = {(m, n): v for m, by_n in _PUB.values("fig9_segments").items() for n, v in by_n.items()}
FIG9_SPEEDUP = {(m, n): v for m, by_n in _PUB.values("fig9_speedup").items() for n, v in by_n.items()}
# Fig. 11(b) (A100 40GB, GPT-2 4.0B, 10 drives): totals [F]; 2.11x printed in the abstract [T].
FIG11_A100 = _PUB.values("fig11_a100")
FIG11_A100_SPEEDUP = _PUB.values("fig11_a100_speedup")
# Fig. 3(b): BASE (RAID0) speedup over one drive; the model is not stated, GPT-2 4.0B assumed.
FIG3B = _PUB.values("fig3b_raid_speedup")
# Fig. 3(a): share of the update segment, ZeRO-Infinity on one NVMe SSD (GPT-2 2.5B/8.3B/20.5B).
# The drive is assumed to be one of the server's (a SmartSSD's NVMe part).
FIG3A = _PUB.values("fig3a_update_share")    # layers at hidden 2560 -> 2.49B, 8.31B, 20.51B
FIG3A_TOLERANCE = 0.06
TABLE1 = _PUB.values("table1_bytes_per_param")   # shared-link bytes per parameter

# Published points no per-parameter model can match, with the reason (still in every statistic).
_COMP = ("Fig. 9's compressed update segments imply 12.8-13.6 ns of drive time per parameter and CSD for the 4.0B "
         "models but 13.9-15.3 for the 8.xB models on the same drives and kernel; the model charges one cost from "
         "the measured rates of Fig. 14 (15.7), so it is high for the 4.0B runs. Their iteration times are within "
         "tolerance.")
EXPECTED_MISSES = {
    "Fig. 9 gpt2-4.0b 6 drives SU+O+C: update segment": _COMP,
    "Fig. 9 bert-4.0b 10 drives SU+O+C: update segment": _COMP,
    "Fig. 3(a) update share, 1 drive, GPT-2 h2560 x 30 layers": (
        "the published one-drive update share falls with model size (88, 86, 83 %) while every term of the model "
        "scales with the parameter count, so its share is the same for every size (80.8 %); Fig. 3(a)'s drive and "
        "batch are not stated."),
}

# Which cases the calibration may see (benchmarks/calibrate_offload.py); the rest are held out.
FIT_MODELS = ("gpt2-4.0b", "gpt2-8.4b")


def plan_for(variant: str, drives: int, **extra):
    from dse.specs.plan import Plan

    return Plan(micro_batch=BATCH, global_batch=BATCH, seq_len=SEQ, recompute="full", attention="math", zero=3,
                precision="fp16", grad_dtype="fp32", offload_params="cpu", ssds=drives, sub_group_size=4e7,
                **{**AIO, **VARIANTS[variant], **extra})


@cache
def model(key: str):
    from dse.catalog import load_model

    return load_model(MODELS[key])


def gpt2_2560(layers: int):
    """GPT-2 with hidden 2560 and ``layers`` layers (the Fig. 3(a) sizes)."""
    import dataclasses

    return dataclasses.replace(model("gpt2-4.0b"), name=f"gpt2-h2560-l{layers}", layers=layers)


@cache
def system(name: str):
    from dse.catalog import load_system

    return load_system(name)


def estimate(model_spec, variant: str, drives: int, hw: str = "smart-infinity-a5000", systems=None, **extra) -> dict:
    """The model's estimate for one published configuration (``systems`` maps hw names to spec objects)."""
    from dse.estimate import run
    from dse.specs.plan import check_plan

    sysm = (systems or {}).get(hw) or system(hw)
    plan = plan_for(variant, drives, **extra).resolved(model_spec)
    check_plan(plan, model_spec, system=sysm)
    return run(model_spec, sysm, plan)


def phases(r: dict) -> tuple:
    t = r["time"]
    return t["phase_forward"], t["phase_backward"], t["phase_update"], t["iteration"]


def table1_ratio(mode: str, compression: float = 1.0) -> float:
    """Shared-link bytes per iteration / P from the full estimate of GPT-2 4.0B, 10 drives."""
    variant = "BASE" if mode == "baseline" else ("SU+O+C" if compression < 1 else "SU+O")
    m = model("gpt2-4.0b")
    r = estimate(m, variant, 10, **({"gradient_compression": compression} if compression < 1 else {}))
    storage_bytes = r["traffic"]["host_switch"]
    return storage_bytes / r["model"]["params"]


def fig3b_speedup(drives: int, systems=None) -> float:
    m = model("gpt2-4.0b")
    one = estimate(m, "BASE", 1, systems=systems)["time"]["iteration"]
    return one / estimate(m, "BASE", drives, systems=systems)["time"]["iteration"]


def fig3a_share(layers: int, systems=None) -> float:
    r = estimate(gpt2_2560(layers), "BASE", 1, systems=systems)
    return r["time"]["phase_update"] / r["time"]["iteration"]


def one_drive_slowdown(systems=None) -> float:
    """SmartUpdate (SU+O) on one CSD over BASE on one drive; < 1 means SmartUpdate is slower."""
    m = model("gpt2-4.0b")
    base = estimate(m, "BASE", 1, systems=systems)["time"]["iteration"]
    return base / estimate(m, "SU+O", 1, systems=systems)["time"]["iteration"]


def segment_errors(systems=None) -> dict:
    """Relative errors of the forward, backward and forward + backward segments where Fig. 9 gives them.

    Not validation cases: the A5000's GEMM efficiency is calibrated on whole iterations, and the
    split between the two GPU segments is where the model is weakest (see hwspecs/gpus/rtx-a5000.yaml).
    """
    out = {"forward": [], "backward": [], "forward+backward": []}
    for (mk, n), variants in FIG9.items():
        for v, (fw, bw, _upd, _tot) in variants.items():
            if fw is None:
                continue
            f, b, _u, _t = phases(estimate(model(mk), v, n, systems=systems))
            out["forward"].append(f / fw - 1)
            out["backward"].append(b / bw - 1)
            out["forward+backward"].append((f + b) / (fw + bw) - 1)
    return out


def published_points():
    """Every published (case name, reference, compute(systems) -> value, kind, tolerance, unit) the suite checks.

    Shared by the suite and the calibration script, so both see the same numbers.
    """
    pts = []
    for (mk, n), variants in FIG9.items():
        for v, (_fw, bw, upd, tot) in variants.items():
            f = (lambda systems=None, mk=mk, n=n, v=v: phases(estimate(model(mk), v, n, systems=systems)))
            name = f"Fig. 9 {mk} {n} drives {v}"
            pts.append((f"{name}: iteration", tot, lambda s=None, f=f: f(s)[3], "relative", 0.15, "s", mk))
            if bw is not None:   # backward + gradient offload: where ZeRO-3's gradient round trip is paid
                pts.append((f"{name}: backward segment", bw, lambda s=None, f=f: f(s)[1], "relative", 0.15, "s",
                            mk))
            if upd is not None:
                pts.append((f"{name}: update segment", upd, lambda s=None, f=f: f(s)[2], "relative", 0.15, "s", mk))
        base_f = (lambda systems=None, mk=mk, n=n: estimate(model(mk), "BASE", n, systems=systems)["time"]["iteration"])
        for v, ref in zip(("SU", "SU+O", "SU+O+C"), FIG9_SPEEDUP[(mk, n)]):
            g = (lambda systems=None, mk=mk, n=n, v=v, base_f=base_f:
                 base_f(systems) / estimate(model(mk), v, n, systems=systems)["time"]["iteration"])
            pts.append((f"Fig. 9 {mk} {n} drives: speedup {v}", ref, g, "relative", 0.10, "count", mk))
    a100 = "smart-infinity-a100"
    for v, ref in FIG11_A100.items():
        f = (lambda systems=None, v=v:
             estimate(model("gpt2-4.0b"), v, 10, hw=a100, systems=systems)["time"]["iteration"])
        pts.append((f"Fig. 11 A100 gpt2-4.0b 10 drives {v}: iteration", ref, f, "relative", 0.15, "s", "a100"))
    for v, ref in FIG11_A100_SPEEDUP.items():
        g = (lambda systems=None, v=v:
             estimate(model("gpt2-4.0b"), "BASE", 10, hw=a100, systems=systems)["time"]["iteration"]
             / estimate(model("gpt2-4.0b"), v, 10, hw=a100, systems=systems)["time"]["iteration"])
        pts.append((f"Fig. 11 A100 gpt2-4.0b 10 drives: speedup {v} (abstract: 2.11x)", ref, g, "relative", 0.10,
                    "count", "a100"))
    for n, ref in FIG3B.items():
        if n == 1:
            continue
        pts.append((f"Fig. 3(b) RAID0 baseline speedup, {n} drives over 1", ref,
                    lambda s=None, n=n: fig3b_speedup(n, s), "relative", 0.10, "count", "fig3b"))
    for layers, ref in FIG3A.items():
        pts.append((f"Fig. 3(a) update share, 1 drive, GPT-2 h2560 x {layers} layers", ref,
                    lambda s=None, layers=layers: fig3a_share(layers, s), "absolute", FIG3A_TOLERANCE, "fraction",
                    "fig3a"))
    return pts


def cases():
    from dse.validate import Case

    out = [
        Case("Table I: baseline shared-link bytes / P (= 32: 16M)", TABLE1["baseline"],
             lambda: table1_ratio("baseline"), 1e-9, f"{SRC}, Table I", "count"),
        Case("Table I: SmartUpdate shared-link bytes / P (= 8: 4M, 4x less)", TABLE1["smartupdate"],
             lambda: table1_ratio("smartupdate"), 1e-9, f"{SRC}, Table I", "count"),
        Case("Table I: SmartUpdate + 2% compression bytes / P (= 4(1+c) = 4.08, ~8x less)",
             TABLE1["smartupdate_topk_2pct"], lambda: table1_ratio("smartupdate", 0.02), 1e-9,
             f"{SRC}, Table I; poster", "count"),
        Case("SmartUpdate on 1 drive is slower than the baseline on 1 drive (indicator, 1 = slower)", 1.0,
             lambda: float(one_drive_slowdown() < 1.0), 0.0,
             f"{SRC}: scalability over the CSD count (Sec. VII-E), as stated in issue 3; no value in the note", "count",
             kind="absolute",
             note="the speedup itself is printed by tests/test_smart_infinity_validation.py"),
    ]
    for name, ref, f, kind, tol, unit, _group in published_points():
        source = f"{SRC}, {' '.join(name.split(' ')[:2])} (read from the figure's vector drawing; note section 2)"
        out.append(Case(name, ref, f, tol, source, unit, kind=kind, expected_miss=EXPECTED_MISSES.get(name, "")))
    return out
