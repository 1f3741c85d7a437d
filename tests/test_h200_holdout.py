"""The held-out H200 measurements (data/h200/vm2/, dse.validate.h200_holdout): what they show about the model and
about the measurement itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse.catalog import data_dir, load_model
from dse.estimate.parameters import model_parameters
from dse.validate import h200_holdout as H, run_suite


def _rows(path: str, kind: str) -> dict:
    out = {}
    with open(data_dir() / path) as f:
        for r in map(json.loads, filter(str.strip, f)):
            if r.get("kind") == kind:
                out[(Path(r["model"]).parent.name, r["attn"], int(r["b"]), r["recompute"])] = r
    return out


@pytest.fixture(scope="module")
def suite():
    return run_suite("h200-holdout")


def test_expected_misses_are_exactly_the_rows_outside_tolerance(suite):
    outside = {c.name[: -len(" time")] for c in suite.cases if c.quantity.endswith("time") and not c.within}
    assert outside == set(H.EXPECTED_TIME_MISSES), (
        f"not excused: {sorted(outside - set(H.EXPECTED_TIME_MISSES))}; "
        f"excused but inside: {sorted(set(H.EXPECTED_TIME_MISSES) - outside)}")
    for c in suite.cases:
        assert bool(c.expected_miss) == (c.quantity.endswith("time") and c.name[: -len(" time")] in outside)


def test_every_dense_miss_is_host_bound_by_its_own_profile():
    """A cause is read off the row's profile, not chosen: a dense row excused as host-bound has its GPU busy less than
    HOST_BOUND of the measured step, and a MoE row is one."""
    prof = H.profiles()
    for m in H.measurements():
        kind = H.EXPECTED_TIME_MISSES.get(H.label(m))
        if kind is None:
            continue
        fam, attn, b, _s, rc = H.label(m).split(" ")
        p = prof[(fam, attn, int(b[1:]), rc[3:])]
        busy = sum(p["device_s_by_category"].values()) / m.time_s
        if kind == "moe":
            assert m.model.experts > 0
        else:
            assert (busy < H.HOST_BOUND) == (kind == "host"), (H.label(m), busy)


def test_memory_within_tolerance_out_of_sample(suite):
    mem = [c for c in suite.cases if c.quantity.endswith("memory")]
    assert len(mem) == 79 and all(c.within for c in mem)
    assert sum(abs(c.error) for c in mem) / len(mem) < 0.02


def test_parameter_counts_equal_what_transformers_built():
    """Each row's ``params`` is what Transformers built on the GPU; dse's count of the same config is equal."""
    rows = [r for f in H.FILES for r in _rows(f, "base").values()]
    assert len(rows) == 79
    for row in rows:
        assert int(model_parameters(load_model(H.model_ref(row["model"])))[0]) == row["params"], row["model"]


def test_repeated_rows_same_device_time_different_host():
    """The four families measured again on this VM: the GPU's work reproduces within 1 %, the step time of the rows
    the host bounds does not (up to 1.84x): a host-bound row's time is a property of the VM's host, not the model."""
    first = _rows("h200/hf_families.jsonl", "profile")
    again = _rows("h200/vm2/repeat_families.jsonl", "profile")
    base1 = _rows("h200/hf_families.jsonl", "base")
    base2 = _rows("h200/vm2/repeat_families.jsonl", "base")
    assert len(again) == 24 and set(again) <= set(first)
    ratios = []
    for k, p in again.items():
        d1, d2 = (sum(x["device_s_by_category"].values()) for x in (first[k], p))
        assert abs(d2 / d1 - 1) < 0.01, k
        ratios.append(base2[k]["step_s"] / base1[k]["step_s"])
    assert max(ratios) > 1.8 and min(ratios) < 0.8


def test_second_vm_micro_benchmarks_reproduce_the_first():
    """The same GPU kind, measured a day apart: GEMM rates within 8 %, HBM copy, pinned PCIe and AdamW within 2 %."""
    a = json.loads((data_dir() / "h200/micro.jsonl").read_text().splitlines()[0])
    b = json.loads((data_dir() / "h200/vm2/micro.jsonl").read_text().splitlines()[0])
    for shape, rate in a["gemm_tflops"].items():
        assert abs(b["gemm_tflops"][shape] / rate - 1) < 0.08, shape
    for k in ("hbm_copy_GBps_rw", "pinned_h2d_GBps", "pinned_d2h_GBps", "pinned_bidir_GBps_total"):
        assert abs(b[k] / a[k] - 1) < 0.02, k
    for n, t in a["adamw_fused_fp32_step_s"].items():
        assert abs(b["adamw_fused_fp32_step_s"][n] / t - 1) < 0.02, n


@pytest.mark.parametrize("half", [0, 1])
def test_this_vms_host_speed_fitted_on_half_its_rows_predicts_the_other_half(half):
    """``dse calibrate --params dispatch_scale`` on half of this VM's dense rows (every other row: each half holds
    every family), the other half held out: the host speed is what the first VM's spec gets wrong here. Fitted
    6.3-6.5 against h200-vm's measured 4.58 (the VM's host ~1.4x slower; its checkpointed scale moves in proportion,
    dse.calibrate.fit.with_efficiency); the held-out time MAPE 17.9 -> 8.3 % and 13.2 -> 7.3 %. Not shipped as a
    host spec: it would be fitted to the held-out set (docs/calibration.md)."""
    from dse.calibrate import fit, measurements
    from dse.catalog import load_system

    ms = [m for m in H.measurements() if not getattr(m.model, "experts", 0)]
    train = [m for i, m in enumerate(ms) if i % 2 == half]
    test = [m for i, m in enumerate(ms) if i % 2 != half]
    system = load_system(H.SYSTEM)
    r = fit.calibrate(train, system, ("dispatch_scale",), folds=0)
    scale = r["parameters"]["dispatch_scale"]["after"]
    cal = fit.with_efficiency(system, {"dispatch_scale": scale})
    assert cal.node.host.checkpoint_dispatch_scale == pytest.approx(6.474 * scale / 4.58, rel=1e-3)
    before = fit.mape([measurements.predict(m, system)[0] / m.time_s - 1 for m in test])
    after = fit.mape([measurements.predict(m, cal)[0] / m.time_s - 1 for m in test])
    assert 1.2 < scale / system.node.host.dispatch_scale < 1.6
    assert after < 0.65 * before and after < 0.1, (before, after)


def test_starcoder2_rows_are_priced_with_the_dropout_that_ran(tmp_path):
    """StarCoder2's rows ran with its config's residual_dropout 0.1 (the profiles: native_dropout 60 = 2 a layer x 30,
    native_dropout_backward 60; aten::dropout 61 and, eager, 91 calls: the embedding's and the scores' at p 0 launch
    nothing). The rows say so (``dropout``, ``attention_dropout`` false, ``embedding_dropout`` false): the branch
    dropout row is priced, the eager scores' dropout and the embedding's mask are not."""
    from dse.calibrate.measurements import plan_for, read
    from dse.catalog import load_system
    from dse.errors import InputError
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.precision import recipe_of

    system = load_system("h200-vm")
    rows = [m for m in H.measurements() if "starcoder2" in m.name]
    assert len(rows) == 3
    for m in rows:
        assert (m.model.dropout, m.model.attention_dropout, m.model.embedding_dropout) == (0.1, False, False)
        plan = plan_for(m, system)
        t = kernel_tables(m.model, plan, recipe_of(plan))
        layer = t["layer"]
        assert (layer["dropout"]["kernels"], layer["dropout"]["kernels_backward"]) == (2, 2)
        assert "attn_dropout" not in layer
        assert t["embedding"]["embedding"]["saved"] == 4 * 1024 * 8     # the int64 token ids only: no mask
    others = [m for m in H.measurements() if "starcoder2" not in m.name]
    assert all(m.model.dropout == 0 for m in others)
    row = {"kind": "base", "model": "gpt2-small", "attn": "sdpa", "b": 1, "s": 128, "step_s": 0.1, "dropout": 1.5}
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError, match="dropout = 1.5; expected a probability"):
        read(f)
    f.write_text(json.dumps({**row, "dropout": 0.1, "attention_dropout": "maybe"}) + "\n")
    with pytest.raises(InputError, match="attention_dropout = 'maybe'; allowed: true, false"):
        read(f)


def test_kernel_launches_of_the_bias_and_dropout_families_are_the_profiles():
    """The element-wise and attention kernels of each profiled Phi-2 and StarCoder2 step (exact counts,
    kernels_by_category) against the launches dse prices for them (scripts/launch_counts.py), GEMMs apart: dse prices
    the three q, k, v projections (Transformers' q_proj, k_proj, v_proj) as one GEMM row, one launch each pass. Their
    six bias gradients (stacks/pytorch.yaml bias_grads separate), a gradient-accumulation add per parameter tensor (14,
    16: ModelSpec.layer_param_tensors) and StarCoder2's branch dropout bring both within 4 % (were 0.93-0.98 and
    0.87-0.90, StarCoder2 priced with dropout 0)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from launch_counts import rows

    seen = 0
    for fam, _attn, _b, _rc, _tag, meas, d in rows((("h200/vm2/dense_families.jsonl", "h200-holdout"),)):
        if fam not in ("phi-2", "starcoder2-3b"):
            continue
        assert 0.96 <= (d["total"] - d["gemm"]) / (meas[1] - meas[2]) <= 1.04, (fam, meas, d)
        seen += 1
    assert seen == 7
