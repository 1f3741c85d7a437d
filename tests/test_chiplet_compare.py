"""dse chiplet-compare: the 2D scheme over Megatron 1D, its breakdown, the SRAM x DRAM-bandwidth sweep."""

import importlib.util
import json

import pytest

from dse.cli import main
from dse.estimate.chiplet_compare import compare

PLAN = dict(global_batch=16, micro_batch=1, seq_len=4096, recompute="none")
MiB = 2**20


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_base_point_factors_and_what_drives_them():
    out = compare(**PLAN)
    base = out["base"]
    a, b = base["megatron-1d"], base["hecaton-2d"]
    assert base["time_factor"] == pytest.approx(a["time_s"] / b["time_s"])
    assert base["energy_factor"] == pytest.approx(a["energy_j"] / b["energy_j"])
    assert 1.0 < base["energy_factor"] < base["time_factor"] < out["published"]["time_factor"]
    # the time saved is the phases' differences; the compute is the same work on the same dies
    assert sum(base["drivers"]["time_s"].values()) == pytest.approx(a["time_s"] - b["time_s"])
    assert a["compute_s"] == pytest.approx(b["compute_s"])
    # both NoP-bound: the 1D collectives and Megatron's per-micro-batch weight and gradient traffic crossing the mesh
    assert a["nop_collectives_s"] > b["nop_collectives_s"] and a["nop_dram_s"] > b["nop_dram_s"]
    assert a["dram_bytes"]["weights"] == pytest.approx(b["minibatch"] * b["dram_bytes"]["weights"])
    # the mini-batch is tuned: the fastest feasible divisor of the 16 micro-batches
    tried = {k: t for k, t in base["minibatches_tried"].items() if t is not None}
    assert b["minibatch"] == min(tried, key=tried.get)


def test_factor_does_not_depend_on_dram_bandwidth_when_edge_links_limit():
    out = compare(srams=[64 * MiB, 192 * MiB], dram_bandwidths=[409.5e9, 1638e9], **PLAN)
    by = {(g["sram"], g["dram_bandwidth"]): g for g in out["grid"]}
    for s in (64 * MiB, 192 * MiB):
        assert by[(s, 409.5e9)]["time_factor"] == pytest.approx(by[(s, 1638e9)]["time_factor"])
    # 192 MiB holds both working sets; at 64 MiB both spill and the factor changes
    assert by[(192 * MiB, 409.5e9)]["megatron_spilled"] == by[(192 * MiB, 409.5e9)]["hecaton_spilled"] == 0
    assert by[(64 * MiB, 409.5e9)]["megatron_spilled"] > 0 and by[(64 * MiB, 409.5e9)]["hecaton_spilled"] > 0
    assert by[(192 * MiB, 409.5e9)]["time_factor"] == pytest.approx(out["base"]["time_factor"])


def test_cli_table_json_and_errors(capsys, tmp_path):
    rc, out, _ = run(capsys, "chiplet-compare", "--sram", "64 MiB,192 MiB", "--dram-bandwidth", "819 GB/s")
    assert rc == 0 and "Where the factors come from" in out and "NoP: edge DRAM" in out and "4.98x" in out
    rc, out, _ = run(capsys, "chiplet-compare", "--sram", "", "--dram-bandwidth", "", "--json")
    d = json.loads(out)
    assert d["base"]["time_factor"] > 1 and len(d["grid"]) == 1
    rc, out, err = run(capsys, "chiplet-compare", "--sram", "lots")
    assert rc == 2 and "--sram" in err and "Traceback" not in err
    rc, out, err = run(capsys, "chiplet-compare", "--hw", "dgx-h100")
    assert rc == 2 and "not a chiplet package" in err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs the plot extra")
def test_cli_plot(capsys, tmp_path):
    png = tmp_path / "compare.png"
    rc, out, _ = run(capsys, "chiplet-compare", "--sram", "64 MiB,192 MiB", "--dram-bandwidth", "819 GB/s",
                     "--plot", str(png))
    assert rc == 0 and png.stat().st_size > 10_000
