"""The shipped catalog works from an installed wheel, not only from a source checkout.

Builds the wheel with pip (the hatchling backend; pyproject.toml force-includes
models/, hwspecs/, data/ and the research notes docs/reference/ as dse/_catalog/), installs it into a fresh virtual
environment in a temporary directory and runs the installed ``dse`` console script
from a directory outside the repository. The new environment borrows the runtime
dependencies (typer, rich, numpy, pyyaml) from the running interpreter through a
``.pth`` file, so the test needs no network; ``dse`` itself comes only from the wheel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import numpy
import pytest
import rich
import typer
import yaml

REPO = Path(__file__).resolve().parents[1]


def sh(*cmd, cwd=None, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def build_wheel(out: Path) -> Path:
    try:
        import hatchling  # noqa: F401  (in the [test] extra: build offline, without isolation)

        isolation = ["--no-build-isolation"]
    except ImportError:  # pragma: no cover - falls back to pip's isolated build (fetches hatchling)
        isolation = []
    sh(sys.executable, "-m", "pip", "wheel", REPO, "--no-deps", *isolation, "-w", out, "-q")
    (wheel,) = out.glob("dse-*.whl")
    return wheel


@pytest.mark.slow                     # builds a wheel and a virtual environment
def test_installed_wheel_ships_the_catalog(tmp_path):
    wheel = build_wheel(tmp_path / "dist")
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("dse/_catalog/models/llama2-7b.yaml", "dse/_catalog/hwspecs/systems/dgx-a100-80gb.yaml",
                    "dse/_catalog/hwspecs/gpus/a100-sxm-80gb.yaml",
                    "dse/_catalog/data/megatron_a100_multinode_times.csv"):
        assert shipped in names
    # the research notes the docstrings cite ship with the code (docs/reference/ -> dse/_catalog/docs/reference/)
    cited = cited_notes()
    assert {"docs/reference/chiplet.md", "docs/reference/storage_offload.md",
            "docs/reference/activation_offload.md"} <= cited
    for note in cited | {f"docs/reference/{p.name}" for p in (REPO / "docs" / "reference").glob("*.md")}:
        assert f"dse/_catalog/{note}" in names, note

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    site = Path(sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    sh(python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel)
    # Only now expose the dependencies (pip must not see the running environment's own dse).
    deps = {str(Path(m.__file__).resolve().parents[1]) for m in (typer, rich, numpy, yaml)}
    deps.add(sysconfig.get_paths()["purelib"])
    (site / "_dse_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")

    work = tmp_path / "elsewhere"        # not the repository: nothing to pick up from the source tree
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = sh(python, "-c", "import dse, dse.catalog as c; print(dse.__file__); print(c.root())", cwd=work, env=env)
    module_file, root = where.stdout.split()
    assert Path(module_file).resolve().is_relative_to(site.resolve())
    assert Path(root).resolve() == (site / "dse" / "_catalog").resolve()

    dse = bindir / ("dse.exe" if os.name == "nt" else "dse")
    listed = json.loads(sh(dse, "list", "models", "--json", cwd=work, env=env).stdout)
    assert {"llama2-7b", "gpt2-xl", "llama3.1-405b", "bert-large"} <= {m["name"] for m in listed}
    human = sh(dse, "list", "models", cwd=work, env=env).stdout
    assert "llama2-7b" in human and "megatron-530b" in human

    result = json.loads(sh(dse, "estimate", "--json", cwd=work, env=env).stdout)
    assert result["model"]["name"] == "llama2-7b" and result["model"]["params"] == 6_738_415_616
    assert result["hardware"]["name"] == "dgx-a100-80gb"
    assert result["time"]["iteration"] > 0
    # formula concerns split into packages (dse/formulas/activation_offload/) ship with their submodules
    assert "dse/formulas/activation_offload/tensors.py" in names
    offloaded = json.loads(sh(dse, "estimate", "-m", "llama2-7b", "--hw", "ssdtrain-a100-optane", "--tp", "2",
                              "-b", "2",
                              "--offload-activations", "ssd", "--json", cwd=work, env=env).stdout)
    assert offloaded["activation_offload"]["bytes_offloaded_per_iteration"] > 0

    # the shipped Hugging Face configs (models/hf/) come with the wheel: a hub id resolves offline
    hub = json.loads(sh(dse, "estimate", "--model", "openai-community/gpt2-large", "--hw", "dgx-h100", "--json",
                        cwd=work, env=env).stdout)
    assert (hub["model"]["name"], hub["model"]["params"]) == ("gpt2-large", 774_030_080)
    assert "dse/_catalog/models/hf/EleutherAI/pythia-1.4b/config.json" in names
    assert "openai-community/gpt2-large" in {m["name"] for m in listed}

    validated = sh(dse, "show", "hardware", "h100-cluster", "--json", cwd=work, env=env).stdout
    assert json.loads(validated)["nodes"] == 32

    # a citation in an installed docstring resolves against the installed package's catalog root
    note = sh(python, "-c",
              "import dse.catalog as c; print((c.root() / 'docs/reference/chiplet.md').read_text()[:200])",
              cwd=work, env=env).stdout
    assert note.startswith("#")


def cited_notes() -> set[str]:
    """Every ``docs/reference/*.md`` a docstring, comment or spec file of the package cites."""
    import re

    cited = set()
    for sub in ("dse", "models", "hwspecs", "data"):
        for path in (REPO / sub).rglob("*"):
            if path.suffix in (".py", ".yaml", ".yml", ".csv") and path.is_file():
                cited |= set(re.findall(r"docs/reference/[\w.-]+\.md", path.read_text()))
    for note in sorted(cited):
        assert (REPO / note).is_file(), f"{note} is cited but not in the repository"
    return cited


def test_cited_research_notes_exist():
    """Each research note a docstring cites is in docs/reference/ (and no citation still reads 'reference/...')."""
    import re

    assert cited_notes()
    stale = []
    for path in (REPO / "dse").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(?<![\w/])reference/\w+\.md", line) and not line.lstrip().startswith("NOTE ="):
                stale.append(f"{path.relative_to(REPO)}:{n}")
    assert stale == []
