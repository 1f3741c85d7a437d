"""The h200-hf validation suite (data/h200/, issue 14) and the host's measured dispatch (hwspecs/hosts/).

The VM host's dispatch scales are recomputed from the file they were measured in, every shipped host other than
the measured VM keeps the reference (1: the stacks' dispatch unchanged), and the scale reaches the host floor.
"""

from __future__ import annotations

import json

import pytest

import dse
from dse import catalog
from dse.catalog import data_dir, load_system, names, root
from dse.specs.stack import load as stack_spec
from dse.validate import h200_hf, run_suite


def component(name):
    return catalog.find_hardware(name)[1]


def _host_file():
    return json.loads((data_dir() / "h200" / "host_dispatch_cuda.json").read_text())


def test_the_vm_hosts_dispatch_scales_are_its_measured_step_over_the_priced_step():
    from dse.calibrate.host import gpt2_block_launches, gpt2_block_reference, host_scales

    gpt2 = _host_file()["gpt2_block"]
    host = component("firecracker-xeon-vm")
    assert gpt2_block_launches() == (20, 50)
    # the reference GPT2Block step is 70 launches x 7.7 us, as the stack's single time per launch priced it
    assert gpt2_block_reference("none") == pytest.approx(70 * 7.7e-6, rel=2e-3)
    assert host.dispatch_scale == pytest.approx(gpt2["step_us"] * 1e-6 / gpt2_block_reference("none"), rel=1e-3)
    assert host.checkpoint_dispatch_scale == pytest.approx(
        gpt2["checkpointed_step_us"] * 1e-6 / gpt2_block_reference("full"), rel=1e-3)
    # what dse calibrate derives from a measure file's host block (the same fields): the shipped scales
    assert host_scales(_host_file()) == pytest.approx({"dispatch_scale": host.dispatch_scale,
                                                       "checkpoint_dispatch_scale": host.checkpoint_dispatch_scale},
                                                      rel=1e-3)
    # the same ratio with no launch model: the step on CPU tensors here and on the reference host
    cpu = json.loads((data_dir() / "h200" / "host_dispatch_cpu.json").read_text())["gpt2_block"]["step_us"]
    reference = json.loads((data_dir() / "host_dispatch_cpu.json").read_text())["gpt2_block"]["step_us"]
    assert host.dispatch_scale == pytest.approx(cpu / reference, rel=0.02)
    assert load_system("h200-vm").node.host == host


def test_the_other_stack_agrees_with_the_measured_scale_within_ten_percent():
    # Megatron-LM's checkpointed layer on the same VM: host time over its 64 GPU launches, vs 13.5 us x scale
    meg = _host_file()["megatron_layer"]
    per_launch = meg["checkpointed_step_us"] * 1e-6 / 64
    predicted = stack_spec("megatron").dispatch * component("firecracker-xeon-vm").dispatch_scale
    assert predicted == pytest.approx(per_launch, rel=0.10)


#: hosts whose dispatch_scale is transferred from a measured host of the same CPU class -> that host
TRANSFERRED = {"dgx-h100-host": "firecracker-xeon-vm-h100", "xeon-8480-2s-1tb": "firecracker-xeon-vm-h100",
               "dgx-b200-host": "firecracker-xeon-vm-h100", "dgx-a100-host": "vtrain-a100-host",
               "dgx-a100-640gb-host": "vtrain-a100-host", "epyc-7763-2s": "vtrain-a100-host"}


def test_every_other_host_is_the_reference():
    hosts = names(root() / "hwspecs" / "hosts")
    assert "firecracker-xeon-vm" in hosts and len(hosts) > 5
    for name in hosts:
        h = component(name)
        text = (root() / "hwspecs" / "hosts" / f"{name}.yaml").read_text()
        if name in TRANSFERRED:   # the source host's scale, the file saying so; the checkpointed one left to the stack
            assert "TRANSFERRED" in text and h.dispatch_basis == "transferred", name
            assert (h.dispatch_scale, h.checkpoint_dispatch_scale) == (component(TRANSFERRED[name]).dispatch_scale,
                                                                       None), name
        # the two measured VM hosts (h200-vm, h100-vm) and the vTrain cluster's calibrated one (test_megatron_single)
        elif name.startswith("firecracker-xeon-vm"):
            assert h.dispatch_basis == "measured", name
        elif name == "vtrain-a100-host":
            assert h.dispatch_basis == "calibrated"
        else:
            assert (h.dispatch_scale, h.checkpoint_dispatch_scale, h.dispatch_basis) == (1.0, None, "unmeasured"), name
            assert "TRANSFERRED" not in text, name


SCENARIO = dict(tp=1, pp=1, dp=1, zero=0, micro_batch=2, global_batch=2, seq_len=1024, stack="pytorch",
                precision="bf16-pure")


def test_a_scale_of_one_is_bit_identical_and_a_slower_host_raises_only_the_host_floor():
    base = dse.estimate("gpt2-medium", "dgx-h200", **SCENARIO)     # dgx-h100-host: 4.17, transferred
    same = dse.estimate("gpt2-medium", "dgx-h200", overrides=["hardware.node.host.dispatch_scale=4.17"], **SCENARIO)
    assert same["time"] == base["time"]
    one = dse.estimate("gpt2-medium", "dgx-h200", overrides=["hardware.node.host.dispatch_scale=1"], **SCENARIO)
    assert one["time"]["iteration"] < base["time"]["iteration"]
    slow = dse.estimate("gpt2-medium", "dgx-h200", overrides=["hardware.node.host.dispatch_scale=5"], **SCENARIO)
    assert slow["time"]["iteration"] > base["time"]["iteration"]
    assert slow["memory"] == base["memory"] == one["memory"]


def test_the_checkpoint_scale_applies_to_full_recompute_of_an_eager_stack_only():
    ov = ["hardware.node.host.dispatch_scale=5", "hardware.node.host.checkpoint_dispatch_scale=8"]
    plain = ["hardware.node.host.dispatch_scale=5"]

    def t(overrides, **kw):
        return dse.estimate("gpt2-medium", "dgx-h200", overrides=overrides, **{**SCENARIO, **kw})["time"]["iteration"]

    assert t(ov, recompute="full") > t(plain, recompute="full")
    assert t(ov) == t(plain)                                   # no recompute: the plain scale
    assert t(ov, recompute="full", stack="megatron") == t(plain, recompute="full", stack="megatron")


def test_the_suite_has_every_transformers_row_and_no_plain_torch_row():
    ms = h200_hf.measurements()
    assert len(ms) == 24 + 31
    assert len({h200_hf.label(m) for m in ms}) == 55
    assert {m.model.name for m in ms} == {"gpt2-medium", "gpt2-xl", "Qwen2-0.5B", "pythia-1.4b", "gemma-3-1b-pt",
                                          "Llama-3.1-8B"}
    cases = h200_hf.cases()
    assert len(cases) == 110
    times = [c for c in cases if c.quantity == "time"]
    assert all(c.expected_miss == "" or any(w in c.expected_miss for w in ("host-bound", "GPU-bound", "neither"))
               for c in times)
    assert not any(c.expected_miss for c in cases if c.quantity == "memory")


def test_exactly_the_time_rows_outside_the_tolerance_are_expected_misses():
    r = run_suite("h200-hf")
    times = [c for c in r.cases if c.quantity == "time"]
    missed = {c.name.removesuffix(" time") for c in times if not c.within}
    assert missed == set(h200_hf.EXPECTED_TIME_MISSES)
    assert {c.name.removesuffix(" time") for c in times if c.expected_miss} == missed


def test_the_suite_runs_meets_its_memory_target_and_documents_its_time_miss():
    r = run_suite("h200-hf")
    assert r.stats["cases"] == 110
    checks = r.target_checks()
    assert checks["memory mape"]
    assert checks["time mape"] and not r.target_misses     # 7.5 % since eager PyTorch's non-vectorized paths
    assert r.accepted
    assert r.stats["by_quantity"]["time"]["spearman"] > 0.8
