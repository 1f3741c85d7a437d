"""Chiplet-package estimates: routing, JSON sections, feasibility, schedules, arrays, the headline direction."""

import dataclasses

import numpy as np
import pytest

from dse import catalog
from dse.estimate import chiplet as est, estimate, resolve
from dse.specs.chiplet import ChipletPackageSpec

PKG = "chiplet-train-8x8"
PLAN = dict(micro_batch=1, global_batch=16, seq_len=4096)


@pytest.fixture(scope="module")
def headline():
    from dse.validate.chiplet import headline as h

    return h()


def test_catalog_packages_load_and_route():
    for name in ("chiplet-train-8x8", "chiplet-simba-6x6"):
        assert catalog.is_chiplet_package(name)
        pkg = catalog.load_chiplet_package(name)
        assert isinstance(pkg, ChipletPackageSpec) and "chiplet" in pkg.name
    assert not catalog.is_chiplet_package("a100-cluster-800g")
    m, s, p = resolve("llama2-70b", PKG)
    assert isinstance(s, ChipletPackageSpec)
    assert s.dies == 64 and s.die.sram == 192 * 2**20 and s.nop.link_bandwidth == 64e9


def test_package_from_a_yaml_file(tmp_path):
    src = catalog.hw_dir("chiplets") / f"{PKG}.yaml"
    path = tmp_path / "mine.yaml"
    path.write_text(src.read_text().replace("rows: 8", "rows: 4").replace("cols: 8", "cols: 16"))
    assert catalog.is_chiplet_package(str(path))
    r = estimate("llama2-70b", str(path))
    assert r["chiplet"]["mesh"] == "4x16" and r["hardware"]["name"] == "chiplet-train-8x8"


def test_json_sections_share_the_gpu_key_names():
    r = estimate("llama2-70b", PKG, **PLAN, recompute="full")
    assert r["kind"] == "chiplet"
    for key in ("iteration_j", "per_token_j", "power_w", "components"):
        assert key in r["energy"]
    comps = r["energy"]["components"]
    assert sum(comps.values()) == pytest.approx(r["energy"]["iteration_j"])
    for key in ("package_usd", "capital_usd", "per_million_tokens_usd", "dies_usd", "packaging_usd", "dram_usd"):
        assert key in r["cost"]
    assert r["cost"]["package_usd"] == pytest.approx(r["cost"]["dies_usd"] + r["cost"]["packaging_usd"]
                                                     + r["cost"]["dram_usd"] + r["cost"]["assembly_usd"])
    t = r["time"]
    assert t["iteration"] == pytest.approx(t["forward"] + t["backward"] + t["optimizer"])
    assert t["forward"] == pytest.approx(max(t["phase_forward"].values()))   # overlap 1: the max of the three
    assert r["throughput"]["tokens_per_s"] == pytest.approx(16 * 4096 / t["iteration"])
    assert r["feasible"] and r["violations"] == []
    assert r["traffic"]["dram_bytes"] == pytest.approx(sum(r["traffic"][f"dram_{k}"] for k in (
        "weights", "gradients", "activations", "boundary", "optimizer", "spill")))


def test_sram_overflow_spills_to_dram_instead_of_failing():
    r = estimate("llama2-70b", "chiplet-simba-6x6")     # 752 KiB per die: every layer spills
    sram = r["memory"]["sram"]
    assert r["chiplet"]["sram_working_set"] > 100 * sram["capacity"] and sram["total"] == sram["capacity"]
    assert sum(v for c, v in sram.items() if c not in ("total", "capacity")) == pytest.approx(sram["total"])
    assert r["traffic"]["dram_spill"] > 0
    assert not any(v.startswith("SRAM") for v in r["violations"])
    assert any(v.startswith("DRAM") for v in r["violations"])        # its 4 GiB of DRAM is what fails
    big = estimate("llama3.1-405b", PKG, chiplet_scheme="megatron-1d", seq_len=4096,
                   overrides=["hardware.rows=15", "hardware.cols=16"])
    assert big["chiplet"]["sram_working_set"] > big["memory"]["sram"]["capacity"]   # 1D's operands grow with h
    assert sum(big["chiplet"]["sram_spilled"].values()) > 0
    assert big["traffic"]["dram_spill"] == 0     # one micro-batch: the evicted weight block streams once anyway
    assert not any(v.startswith("SRAM") for v in big["violations"])
    two_d = estimate("llama3.1-405b", PKG, seq_len=4096, overrides=["hardware.rows=15", "hardware.cols=16"])
    assert sum(two_d["chiplet"]["sram_spilled"].values()) == 0


def test_dram_capacity_violation_for_a_whole_minibatch_without_recompute():
    r = estimate("llama2-70b", PKG, **PLAN)            # hecaton-2d, mini-batch of all 16 micro-batches
    assert r["chiplet"]["minibatch"] == 16
    assert any(v.startswith("DRAM") for v in r["violations"])
    ok = estimate("llama2-70b", PKG, **PLAN, chiplet_minibatch=4)
    assert ok["feasible"]


def test_schedule_auto_and_overrides():
    assert estimate("llama2-70b", PKG, chiplet_scheme="megatron-1d")["chiplet"]["schedule"] == "microbatch"
    assert estimate("llama2-70b", PKG, chiplet_scheme="summa-2d")["chiplet"]["schedule"] == "microbatch"
    assert estimate("llama2-70b", PKG)["chiplet"]["scheme"] == "hecaton-2d"
    assert estimate("llama2-70b", PKG)["chiplet"]["schedule"] == "minibatch"
    r = estimate("llama2-70b", PKG, chiplet_scheme="megatron-1d", chiplet_schedule="minibatch", **PLAN,
                 chiplet_minibatch=4)
    assert r["chiplet"]["schedule"] == "minibatch" and r["chiplet"]["minibatch"] == 4


def test_minibatch_cuts_weight_traffic():
    micro = estimate("llama2-70b", PKG, **PLAN, chiplet_minibatch=1)
    mini = estimate("llama2-70b", PKG, **PLAN, chiplet_minibatch=4)
    assert micro["traffic"]["dram_weights"] == pytest.approx(4 * mini["traffic"]["dram_weights"])
    assert mini["traffic"]["dram_boundary"] > 0 == micro["traffic"]["dram_boundary"]


def test_serial_overlap_is_slower():
    fast = estimate("llama2-70b", PKG, **PLAN, chiplet_minibatch=4)
    slow = estimate("llama2-70b", PKG, **PLAN, chiplet_minibatch=4, overrides=["plan.chiplet_overlap=0"])
    t = slow["time"]
    assert t["forward"] == pytest.approx(sum(t["phase_forward"].values()))
    assert t["iteration"] > fast["time"]["iteration"]


def test_mesh_layout_changes_perimeter_dram():
    sq = estimate("llama2-70b", PKG)
    wide = estimate("llama2-70b", PKG, chiplet_mesh="4x16")
    assert wide["hardware"]["dram_bandwidth"] == pytest.approx(sq["hardware"]["dram_bandwidth"] * 40 / 32)
    assert wide["chiplet"]["mesh"] == "4x16"
    # the layout is hardware: the report shows the one in effect, and the extra stacks are paid for
    assert (wide["hardware"]["rows"], wide["hardware"]["cols"]) == (4, 16)
    assert (sq["hardware"]["rows"], sq["hardware"]["cols"]) == (8, 8)
    assert wide["cost"]["dram_usd"] == pytest.approx(sq["cost"]["dram_usd"] * 40 / 32)


def test_recompute_costs_compute():
    base = estimate("llama2-70b", PKG, **PLAN, chiplet_minibatch=4)
    full = estimate("llama2-70b", PKG, **PLAN, chiplet_minibatch=4, recompute="full")
    assert full["flops"]["hardware_per_iteration"] > 1.3 * base["flops"]["hardware_per_iteration"]
    assert full["memory"]["dram"]["activations"] < base["memory"]["dram"]["activations"]


def test_headline_direction_and_drivers(headline):
    assert headline["feasible"]
    assert headline["time"] > 1.5 and headline["energy"] > 1.2
    meg, hec = headline["megatron"], headline["hecaton"]
    assert "NoP" in meg["bottleneck"]
    # both the collectives and the DRAM schedule contribute
    assert meg["traffic"]["nop_bytes_per_die"] > 1.5 * hec["traffic"]["nop_bytes_per_die"]
    wg = lambda r: r["traffic"]["dram_weights"] + r["traffic"]["dram_gradients"]  # noqa: E731
    assert wg(meg) > 3 * wg(hec)


def test_time_factor_independent_of_link_bandwidth_when_nop_bound():
    def factor(bw):
        ov = [f"hardware.nop.link_bandwidth={bw}"]
        meg = estimate("llama2-70b", PKG, chiplet_scheme="megatron-1d", overrides=ov, **PLAN)
        hec = estimate("llama2-70b", PKG, chiplet_minibatch=4, overrides=ov, **PLAN)
        return meg["time"]["iteration"] / hec["time"]["iteration"]

    assert factor("16 GB/s") == pytest.approx(factor("32 GB/s"), rel=1e-3)
    assert factor("1 TB/s") == pytest.approx(1.0, abs=0.05)            # both compute-bound


def test_compose_broadcasts_over_hardware_arrays():
    m, pkg, plan = resolve("llama2-70b", PKG, **PLAN, chiplet_minibatch=4)
    bws = np.array([16e9, 64e9, 256e9])
    flops = np.array([50e12, 100e12, 200e12])
    arr_pkg = dataclasses.replace(pkg, nop=dataclasses.replace(pkg.nop, link_bandwidth=bws),
                                  die=dataclasses.replace(pkg.die, peak_flops=flops))
    arr = est.compose(m, arr_pkg, plan)
    for i in range(3):
        one_pkg = dataclasses.replace(pkg, nop=dataclasses.replace(pkg.nop, link_bandwidth=float(bws[i])),
                                      die=dataclasses.replace(pkg.die, peak_flops=float(flops[i])))
        one = est.compose(m, one_pkg, plan)
        for key in ("iteration", "compute", "nop", "dram", "forward", "backward"):
            assert np.broadcast_to(arr["time"][key], (3,))[i] == pytest.approx(one["time"][key]), key
        assert arr["energy"]["iteration_j"][i] == pytest.approx(one["energy"]["iteration_j"])
        assert arr["cost"]["per_million_tokens_usd"][i] == pytest.approx(one["cost"]["per_million_tokens_usd"])


def test_explain_traces_chiplet_formulas():
    from dse.estimate.trace import Trace

    m, s, p = resolve("llama2-70b", PKG)
    trace = Trace()
    est.run(m, s, p, trace=trace)
    terms = {row["term"] for row in trace.rows}
    assert "chiplet.layer_nop" in terms and "package_cost.package_re_cost" in terms
    assert all(row["formula"] for row in trace.rows)


def test_weak_scaling_rows():
    from dse.estimate.chiplet_scaling import interpolated_model, mesh_for, weak_scaling

    base, target = catalog.load_model("llama2-70b"), catalog.load_model("llama3.1-405b")
    mid = interpolated_model(base, target, 0.5)
    assert mid.heads % mid.kv_heads == 0 and base.hidden < mid.hidden < target.hidden
    assert mesh_for(238.4) == (15, 16) and mesh_for(64) == (8, 8)
    rows = weak_scaling(base, target, catalog.load_chiplet_package(PKG), steps=1)
    assert len(rows) == 3 * 3
    by = {(r["model"], r["scheme"]): r for r in rows}
    last = by[("llama3.1-405b", "hecaton-2d")]
    first = by[("llama2-70b", "hecaton-2d")]
    assert abs(last["ratio"] / first["ratio"] - 1) < 0.10
    assert by[("llama3.1-405b", "megatron-1d")]["ratio"] / by[("llama2-70b", "megatron-1d")]["ratio"] < 0.55
    assert by[("llama3.1-405b", "summa-2d")]["ratio"] is None                # 15 x 16 is not square
    sq = weak_scaling(base, target, catalog.load_chiplet_package(PKG), steps=0, square=True, schemes=("summa-2d",))
    assert sq[-1]["mesh"] == "15x15" and sq[-1]["ratio"] < sq[0]["ratio"]   # weights on the NoP: no weak scaling


def test_die_area_auto_follows_sram_and_links():
    """area: auto derives the die area (Chiplet Cloud 7 nm model): the shipped die is 208 mm^2 as its header
    computes, and more SRAM or faster links cost silicon, yield and dollars; an explicit area is kept."""
    from dse.errors import InputError

    base = estimate("llama2-70b", PKG, **PLAN)
    assert base["hardware"]["die_area_mm2"] == pytest.approx(208.1, abs=0.05)
    big = estimate("llama2-70b", PKG, **PLAN, overrides=["hardware.die.sram=256 MiB"])
    assert big["hardware"]["die_area_mm2"] == pytest.approx(253.3, abs=0.05)
    assert big["cost"]["capital_usd"] > base["cost"]["capital_usd"]
    assert big["cost"]["die_yield"] < base["cost"]["die_yield"]
    fast = estimate("llama2-70b", PKG, **PLAN, overrides=["hardware.nop.link_bandwidth=128 GB/s"])
    assert fast["hardware"]["die_area_mm2"] > base["hardware"]["die_area_mm2"]
    fixed = estimate("llama2-70b", PKG, **PLAN, overrides=["hardware.die.sram=256 MiB", "hardware.die.area=208 mm2"])
    assert fixed["hardware"]["die_area_mm2"] == 208.0
    with pytest.raises(InputError, match=r"area: auto .* 7 nm"):
        resolve("llama2-70b", PKG, overrides=["hardware.die.node=16"])
