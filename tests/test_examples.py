"""The papers' figures in examples/: each script runs, writes a real PNG, prints right-shaped plausible numbers,
and uses nothing but the public API (dse.estimate, dse.formulas) and the published numbers of data/published/."""

from __future__ import annotations

import ast
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTS = ("smart_infinity", "ssdtrain", "hecaton", "zero_infinity")
ALLOWED_MODULES = {"__future__", "argparse", "json", "math", "sys", "pathlib", "numpy", "matplotlib",
                   "matplotlib.pyplot", "dse", "dse.formulas",
                   "yaml"}   # to read the published numbers in data/published/ (PyYAML is a dependency of dse)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for name in SCRIPTS:
        d = tmp_path_factory.mktemp(name)
        proc = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), "--out", str(d), "--json"],
                              capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        out[name] = (json.loads(proc.stdout), d / f"{name}.png")
    return out


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow   # the runs fixture executes the four example scripts
@pytest.mark.parametrize("name", SCRIPTS)
def test_figure_is_a_real_image(runs, name):
    data, png = runs[name]
    assert Path(data["png"]) == png and png.exists()
    w, h = _png_size(png)
    assert w >= 1200 and h >= 500, (w, h)
    assert png.stat().st_size > 40_000
    import matplotlib.image

    img = matplotlib.image.imread(png)[..., :3]
    ink = (img.mean(axis=2) < 0.9).mean()
    assert 0.03 < ink < 0.6, f"{name}: {ink:.3f} of the pixels are drawn"
    assert len({tuple(np.round(p, 1)) for p in img.reshape(-1, 3)[:: 97]}) > 8   # several colours


@pytest.mark.slow   # the runs fixture executes the four example scripts
@pytest.mark.parametrize("name", SCRIPTS)
def test_human_readable_output(runs, name):
    """Without --json a script prints tables: the same report function, fed the numbers of the run above."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.report(runs[name][0]["model"])
    assert len(text.splitlines()) > 8 and "published" in text.lower()


@pytest.mark.slow   # the runs fixture executes the four example scripts
def test_smart_infinity_numbers(runs):
    data = runs["smart_infinity"][0]
    model, pub = data["model"], data["published"]
    assert len(model["breakdown"]) == 8
    for key, variants in model["breakdown"].items():
        assert list(variants) == ["BASE", "SU", "SU+O", "SU+O+C"]
        for v, vals in variants.items():
            assert len(vals) == 4 and all(x > 0 for x in vals)
            assert vals[3] == pytest.approx(sum(vals[:3]), rel=0.02)   # the segments make up the iteration
            assert vals[3] == pytest.approx(pub["fig9"][key][v][3], rel=0.15)   # dse validate smart-infinity's bar
        assert variants["SU+O+C"][3] < variants["SU+O"][3] < variants["SU"][3] < variants["BASE"][3]
    sp = model["speedup"]
    assert model["drives"] == list(range(1, 11)) and all(len(v) == 10 for v in sp.values())
    assert sp["A5000 SU+O+C"][9] == pytest.approx(pub["fig9_speedup"]["GPT-2 4.0B|10"][2], rel=0.10)
    assert sp["A100 SU+O+C"][9] == pytest.approx(2.11, rel=0.10)
    base = sp["A5000 BASE over 1 drive"]
    assert base[0] == 1.0 and 2.0 < base[9] < 2.5 and base[9] == pytest.approx(base[3], rel=0.01)   # saturates
    assert sp["A5000 SU+O"][0] < 1 < sp["A5000 SU+O"][9]   # one CSD loses, many win (Sec. VII-E)


@pytest.mark.slow   # the runs fixture executes the four example scripts
def test_smart_infinity_published_points_match_the_validation_suite(runs):
    from dse.validate import smart_infinity as v

    pub = runs["smart_infinity"][0]["published"]
    names = {"gpt2-4.0b": "GPT-2 4.0B", "gpt2-8.4b": "GPT-2 8.4B", "bert-4.0b": "BERT 4.0B", "bert-8.3b": "BERT 8.3B"}
    for (m, n), variants in v.FIG9.items():
        assert {k: list(x) for k, x in variants.items()} == pub["fig9"][f"{names[m]}|{n}"]
    assert pub["fig9_speedup"]["GPT-2 4.0B|6"] == list(v.FIG9_SPEEDUP[("gpt2-4.0b", 6)])
    assert pub["fig9_speedup"]["GPT-2 4.0B|10"] == list(v.FIG9_SPEEDUP[("gpt2-4.0b", 10)])
    assert {int(k): x for k, x in pub["fig3b"].items()} == v.FIG3B
    assert pub["fig11_a100_speedup_10_drives"]["SU+O+C"] == v.FIG11_A100_SPEEDUP["SU+O+C"]


@pytest.mark.slow   # the runs fixture executes the four example scripts
def test_ssdtrain_numbers(runs):
    data = runs["ssdtrain"][0]["model"]
    rok = data["rok"]
    assert list(rok) == ["keep", "selective recompute", "full recompute", "offload to SSD"]
    for row in rok.values():
        assert len(row["activations"]) == len(row["time_per_token"]) == len(data["micro_batches"]) == 6
    keep, full, off = rok["keep"], rok["full recompute"], rok["offload to SSD"]
    for i in range(6):
        assert off["activations"][i] < 0.6 * keep["activations"][i]            # offload frees memory ...
        assert off["time_per_token"][i] == pytest.approx(keep["time_per_token"][i], rel=0.02)   # ... at keep's speed
        assert 1.15 < full["time_per_token"][i] / keep["time_per_token"][i] < 1.45   # recompute costs 15-45 %
    assert not keep["fits"][-1] and off["fits"][-1]                            # offload fits the largest micro-batch
    cfg = data["configs"]
    assert len(cfg) == 6
    for c in cfg:
        assert 0.25 < c["reduction"] < 0.6 and c["reduction"] < c["reduction_held"]
        assert 0 <= c["time_overhead"] < 0.1
    gpt = [c["write_required"] for c in cfg[:3]]
    assert gpt[0] > gpt[1] > gpt[2]                                            # falls with the hidden size (note §1.4)
    assert max(c["reduction"] for c in cfg[:3]) == pytest.approx(0.47, rel=0.15)   # arXiv: up to 47 %


@pytest.mark.slow   # the runs fixture executes the four example scripts
def test_hecaton_numbers(runs):
    rows = runs["hecaton"][0]["model"]["rows"]
    assert [r["dies"] for r in rows] == [64, 100, 144, 196, 256]
    assert rows[0]["model"] == "h8192 L80" and rows[-1]["model"] == "h16384 L126"   # Llama-2-70B ... 3.1-405B
    first, last = rows[0], rows[-1]
    assert last["hecaton-2d"]["ratio"] / first["hecaton-2d"]["ratio"] > 0.85        # nearly constant (weak scaling)
    assert last["megatron-1d"]["ratio"] / first["megatron-1d"]["ratio"] < 0.6       # 1D decays (note: 306.6/621.7)
    for r in rows:
        assert r["hecaton-2d"]["time_per_token"] < r["megatron-1d"]["time_per_token"]
        assert r["hecaton-2d"]["feasible"]
    worked = runs["hecaton"][0]["model"]["note_worked_check_dse"]
    assert worked["megatron-1d 64"] == pytest.approx(621.7, rel=1e-3)
    assert worked["hecaton-2d 239"] == pytest.approx(792.9, rel=1e-2)


@pytest.mark.slow   # the runs fixture executes the four example scripts
def test_zero_infinity_numbers(runs):
    data = runs["zero_infinity"][0]["model"]
    bw = np.asarray(data["bandwidth"])
    for key, curve in data["curves"].items():
        c = np.asarray(curve)
        assert c.shape == bw.shape and np.all(np.diff(c) > 0) and 0 < c[0] < c[-1] < 1, key
    for cp in data["checkpoints"]:
        assert cp["dse_bandwidth"] == pytest.approx(cp["note_bandwidth"], rel=0.01)
    assert data["required"]["params_grads 1024 tokens"]["50%"] == pytest.approx(68.36e9, rel=1e-3)
    server = data["server"]["classes"]
    assert 0 < server["optimizer_states"]["efficiency"] < server["params_grads"]["efficiency"] < 1


@pytest.mark.parametrize("name", SCRIPTS)
def test_examples_use_only_the_public_api(name):
    import dse.formulas

    tree = ast.parse((EXAMPLES / f"{name}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                assert a.name in ALLOWED_MODULES, f"{name}: import {a.name}"
        elif isinstance(node, ast.ImportFrom):
            assert node.module in ALLOWED_MODULES, f"{name}: from {node.module} import ..."
            if node.module == "dse.formulas":
                assert all(a.name in dse.formulas.__all__ for a in node.names), name
            if node.module == "dse":
                assert all(a.name in ("estimate", "formulas") for a in node.names), name
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "dse":
            assert node.attr in ("estimate", "formulas"), f"{name}: dse.{node.attr}"
