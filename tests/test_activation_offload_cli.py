"""``dse estimate --offload-activations``, ``dse rok``, ``dse validate ssdtrain``: output and bad input."""

from __future__ import annotations

import importlib.util

import pytest

from dse.validate import run_suite

SSDTRAIN_MODEL = ("name: ssdtrain-gpt-12288x3\nlayers: 3\nhidden: 12288\nheads: 96\nvocab: 50432\nmax_seq_len: 1024\n"
                  "dropout: 0.1\n")


def one_line_error(r, *needles):
    assert r.code == 2, (r.code, r.out, r.err)
    assert r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("dse: error") and "Traceback" not in r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture
def gpt_file(tmp_path):
    p = tmp_path / "ssdtrain-gpt.yaml"
    p.write_text(SSDTRAIN_MODEL)
    return p


# ----------------------------------------------------------------- output


def test_estimate_json_has_the_sections(dse, gpt_file):
    r = dse("estimate", "--model", gpt_file, "--hw", "ssdtrain-a100-optane", "--tp", "2", "-b", "16",
            "--precision", "fp16", "--offload-activations", "ssd", "--json")
    assert r.code == 0, r.err
    out = r.json()
    ao, en = out["activation_offload"], out["endurance"]
    assert ao["layers_offloaded"] == 3 and ao["layers_per_stage"] == 3 and ao["rule"] == "adaptive"
    assert ao["bytes_offloaded_per_iteration"] > 10e9 and ao["gpu_memory_saved"] > 8e9
    assert set(en) >= {"bytes_written_per_iteration", "lifetime_years"} and 1 < en["lifetime_years"] < 20
    assert out["plan"]["offload_activations"] == "ssd" and out["plan"]["offload_layers"] is None
    assert out["traffic"]["storage_write"] == ao["bytes_offloaded_per_iteration"]
    assert out["memory"]["storage"]["activations"] > 0


def test_estimate_table_shows_the_offload(dse, gpt_file):
    r = dse("estimate", "--model", gpt_file, "--hw", "ssdtrain-a100-optane", "--tp", "2", "-b", "16",
            "--offload-activations", "ssd", "--offload-layers", "2", "--ssds", "4")
    assert r.code == 0, r.err
    for needle in ("Activation offload to SSD", "layers offloaded / kept", "2 / 1", "--offload-layers",
                   "TBW", "exposed I/O", "largest micro-batch"):
        assert needle in r.out, needle


def test_estimate_host_target_and_auto(dse):
    r = dse("estimate", "--model", "llama2-7b", "--hw", "a100-cluster-800g", "--tp", "1", "--dp", "8",
            "--offload-activations", "host", "--offload-layers", "auto", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["activation_offload"]["target"] == "host" and "endurance" not in out
    assert out["memory"]["host"]["activations"] == out["activation_offload"]["capacity_needed_per_node"]


def test_rok_table_and_json(dse, gpt_file):
    r = dse("rok", "--model", gpt_file, "--hw", "ssdtrain-a100-optane", "--tp", "2", "--precision", "fp16",
            "--micro-batches", "4,16,32", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["target"] == "ssd"
    assert [(row["micro_batch"], row["strategy"]) for row in out["rows"]] == \
        [(b, s) for b in (4, 16, 32) for s in ("keep", "selective", "full", "offload")]
    by = {(row["micro_batch"], row["strategy"]): row for row in out["rows"]}
    for b in (4, 16, 32):   # ROK: offload and full recompute keep far less than keep; full recompute is the slowest
        # Offload keeps the last layer's activations beside the head's loss buffers; full recompute rebuilds that
        # layer only after the head's backward has freed them (peak: inputs + max(head, layer)). With 3 layers of
        # h 12288 one layer outweighs the other two's inputs, so full recompute holds less here than offload,
        # unlike SSDTrain's qualitative ROK claim (its figure values are not in the notes); see CHANGELOG.
        assert by[b, "full"]["gpu_activations"] < by[b, "offload"]["gpu_activations"] < \
            0.5 * by[b, "keep"]["gpu_activations"]
        assert by[b, "full"]["iteration_s"] > by[b, "offload"]["iteration_s"]
    best = {s["strategy"]: s for s in out["best"]}
    assert best["offload"]["micro_batch"] >= best["keep"]["micro_batch"]
    r = dse("rok", "--model", gpt_file, "--hw", "ssdtrain-a100-optane", "--tp", "2", "--micro-batches", "4,8")
    assert r.code == 0, r.err
    assert "Recompute-offload-keep" in r.out and "What the memory buys" in r.out


def test_rok_with_a_fixed_offloaded_layer_count(dse, gpt_file):
    """--offload-layers N applies to the offload rows only (keep and recompute rows offload nothing)."""
    r = dse("rok", "--model", gpt_file, "--hw", "ssdtrain-a100-optane", "--tp", "2", "--micro-batches", "4,8",
            "--offload-layers", "1", "--json")
    assert r.code == 0, r.err
    rows = r.json()["rows"]
    assert {row["layers_offloaded"] for row in rows if row["strategy"] == "offload"} == {1}
    assert {row["layers_offloaded"] for row in rows if row["strategy"] != "offload"} == {0}


def test_rok_stage_scan(dse):
    r = dse("rok", "--model", "llama2-13b", "--hw", "dgx-a100-80gb", "--tp", "2", "--dp", "1",
            "--micro-batches", "2", "--stages", "1,2,4", "--json")
    assert r.code == 0, r.err
    out = r.json()
    stages = {s["strategy"]: s for s in out["stages"]}
    assert out["stages_micro_batch"] == 2 and out["stages_global_batch"] == 2 * 4 * 4
    fit = [stages[s]["pp"] for s in ("keep", "full")]
    assert all(p in (1, 2, 4, None) for p in fit)
    full, keep = stages["full"]["pp"], stages["keep"]["pp"]
    assert full is not None and (keep is None or full <= keep)


def test_rok_plot(dse, gpt_file, tmp_path):
    png = tmp_path / "rok.png"
    r = dse("rok", "--model", gpt_file, "--hw", "ssdtrain-a100-optane", "--tp", "2", "--micro-batches", "4,8",
            "--plot", png)
    if importlib.util.find_spec("matplotlib") is None:
        one_line_error(r, "--plot needs matplotlib")
    else:
        assert r.code == 0, r.err
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_validate_ssdtrain_suite_passes(dse):
    res = run_suite("ssdtrain")
    assert res.accepted, [(c.name, c.value, c.reference) for c in res.cases if not c.within]
    # the one documented miss: SSDTrain's rule at hidden 8192, where dse's read path is 10 % short
    assert [c.name for c in res.cases if not c.within] == \
        ["throughput loss of offload where the model's read path is short (arXiv: negligible)"]
    by = {c.name: c for c in res.cases}
    peak = next(c for name, c in by.items() if "arXiv: up to 47" in name)
    assert 0.40 < peak.value < 0.55
    r = dse("validate", "ssdtrain", "--allow-expected-misses")
    assert r.code == 0 and "expected miss" in r.out


# ----------------------------------------------------------------- bad input: one line, exit 2


def test_offload_to_ssd_without_drives(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--offload-activations", "ssd"),
                   "--offload-activations ssd", "a100-cluster-800g", "no storage drives")
    one_line_error(dse("rok", "--model", "gpt2-xl", "--hw", "a100-cluster-800g", "--target", "ssd",
                       "--micro-batches", "1"), "no storage drives")


@pytest.mark.parametrize("value", ["0", "-5 GB/s"])
@pytest.mark.parametrize("field", ["write_bandwidth", "read_bandwidth"])
def test_zero_or_negative_drive_bandwidth(dse, field, value):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--offload-activations", "ssd",
                       "--set", f"hardware.node.storage.device.{field}={value}"), field, "greater than 0")


def test_zero_link_bandwidth(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane",
                       "--offload-activations", "host",
                       "--set", "hardware.node.host_link.bandwidth=0"), "host_link.bandwidth", "greater than 0")


def test_more_offloaded_layers_than_the_model_has(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--offload-activations", "ssd",
                       "--offload-layers", "49"), "--offload-layers 49", "48 layers")
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "dgx-a100-80gb", "--pp", "2", "--dp", "1",
                       "--offload-activations", "ssd", "--offload-layers", "30"), "--offload-layers 30",
                       "24 layers on each")


@pytest.mark.parametrize("value", ["abc", "-1", "2.5"])
def test_offload_layers_not_a_count(dse, value):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--offload-activations", "ssd",
                       "--offload-layers", value), "--offload-layers")


def test_offload_layers_without_offload(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--offload-layers", "4"),
                   "--offload-layers 4", "--offload-activations")


@pytest.mark.parametrize("mode", ["none", "host"])
def test_io_path_without_offload_to_drives(dse, mode):
    """--activation-io-path chooses how activations reach the drives: without drive offload it is an error."""
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--offload-activations", mode,
                       "--activation-io-path", "bounce"), "--activation-io-path bounce", "--offload-activations ssd")


def test_ssds_must_be_positive(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--offload-activations", "ssd",
                       "--ssds", "0"), "--ssds")
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--offload-activations", "ssd",
                       "--set", "plan.ssds=-2"), "ssds", "greater than 0")


def test_bad_choices(dse):
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane",
                       "--offload-activations", "nvme"),
                   "--offload-activations")
    one_line_error(dse("estimate", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--offload-activations", "ssd",
                       "--activation-io-path", "dma"), "--activation-io-path")


@pytest.mark.parametrize("value", ["4,x", "0", ",", "-4"])
def test_rok_bad_micro_batches(dse, value):
    one_line_error(dse("rok", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--micro-batches", value),
                   "--micro-batches")


def test_rok_plot_unwritable(dse, tmp_path):
    r = dse("rok", "--model", "gpt2-xl", "--hw", "ssdtrain-a100-optane", "--micro-batches", "1",
            "--plot", tmp_path / "missing-dir" / "rok.png")
    one_line_error(r, "--plot")


def test_offload_on_a_chiplet_package(dse):
    one_line_error(dse("estimate", "--model", "llama2-70b", "--hw", "chiplet-train-8x8", "-B", "16",
                       "--offload-activations", "ssd"), "--offload-activations ssd", "chiplet package")
