"""``dse validate h100-hf-vm``: the shared H100 file on the VM kind that measured it (its host measured)."""

from __future__ import annotations

import json

import pytest

from dse import catalog
from dse.catalog import data_dir, load_system
from dse.formulas.kernels import step_host_time
from dse.specs.stack import load as stack_spec
from dse.validate import run_suite


def test_the_h100_vm_host_scales_are_its_measured_step_over_the_priced_step():
    gpt2 = json.loads((data_dir() / "h100" / "host_dispatch_cuda.json").read_text())["gpt2_block"]
    spec = stack_spec("pytorch")
    host = catalog.find_hardware("firecracker-xeon-vm-h100")[1]
    # (20, 50) launches: dse's count for one GPT2Block (tests/test_h200_hf.py), priced L d + D per pass
    for recompute, step in (("none", gpt2["step_us"]), ("full", gpt2["checkpointed_step_us"])):
        ref = step_host_time((20, 50), spec.dispatch, spec.layer_dispatch, recompute)
        scale = host.dispatch_scale if recompute == "none" else host.checkpoint_dispatch_scale
        assert scale == pytest.approx(step * 1e-6 / ref, rel=1e-3)
    # what dse calibrate derives from a measure file's host block (the same fields): the shipped scales
    from dse.calibrate.host import host_scales

    assert host_scales({"gpt2_block": gpt2}) == pytest.approx(
        {"dispatch_scale": host.dispatch_scale, "checkpoint_dispatch_scale": host.checkpoint_dispatch_scale}, rel=1e-3)
    assert load_system("h100-vm").node.host == host
    assert load_system("h100-vm").node.gpu == load_system("dgx-h100").node.gpu


def test_the_suite_meets_both_targets_on_the_measured_host():
    r = run_suite("h100-hf-vm")
    by = r.stats["by_quantity"]
    assert len(r.cases) == 32
    assert by["time"]["mape"] <= 0.08 and by["memory"]["mape"] <= 0.06
    # only the rows outside their tolerance carry an expected miss (the host-bound row the VM's host overprices)
    from dse.validate import h100_hf_vm

    times = [c for c in r.cases if c.quantity == "time"]
    missed = {c.name.removesuffix(" time") for c in times if not c.within}
    assert missed == set(h100_hf_vm.EXPECTED_TIME_MISSES)
    assert {c.name.removesuffix(" time") for c in times if c.expected_miss} == missed
    assert r.accepted and not r.passed
    # the shipped DGX host carries the VM's measured scale (hwspecs/hosts/dgx-h100-host.yaml: transferred), so the
    # same cases priced on dgx-h100 differ only by the checkpointed scale (the stack's 1.40 x 4.17 = 5.84 against the
    # VM's measured 5.81)
    dgx = run_suite("h100-hf").stats["by_quantity"]["time"]
    assert abs(dgx["mean_signed_error"] - by["time"]["mean_signed_error"]) < 0.005
    assert abs(dgx["mape"] - by["time"]["mape"]) < 0.005
