"""The README and the pages of docs/ run as written: their Python examples execute, their links resolve.

The README is the front page; the technique sections, the search details and the Python API live in
docs/*.md. Every ```python block of the README and of docs/*.md runs here (docs/formulas.md holds
signatures, generated and doctested elsewhere; docs/architecture.md's worked example is
tests/test_guide_example.py's).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
NOT_RUN_HERE = {"formulas.md", "architecture.md"}


def python_blocks(path: Path, section: str | None = None) -> list[str]:
    text = path.read_text()
    if section is not None:
        text = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def run_blocks(blocks: list[str], where: str) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for code in blocks:
            exec(compile(code, where, "exec"), {"__name__": "readme"})
    return out.getvalue().splitlines()


def test_use_from_python_runs():
    blocks = python_blocks(DOCS / "python-api.md")
    assert blocks, "docs/python-api.md has no ```python block"
    printed = run_blocks(blocks, "docs/python-api.md")
    assert len(printed) == 8
    grid = [[float(x) for x in line.strip(" []").split()] for line in printed[3:5]]   # 2 micro-batches x 3 HBM
    assert all(len(row) == 3 and row == sorted(row, reverse=True) for row in grid)   # faster HBM: never slower
    assert grid[1][0] > grid[0][0]                                                   # bigger micro-batch: longer
    assert printed[5] == "6738415616"                      # the comment's Llama-2-7B count
    assert printed[6] == "68.359375" and printed[7].startswith("[9.25")


def test_front_page_example_runs():
    blocks = python_blocks(README)
    assert len(blocks) == 1
    printed = run_blocks(blocks, "README.md")
    assert len(printed) == 2
    assert printed[0].count("[") == 2 and "True" in printed[0]          # tokens/s and fits, per micro-batch
    assert float(printed[1]) == pytest.approx(3.08, abs=0.01)


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md") if p.name not in NOT_RUN_HERE))
def test_docs_python_examples_run(page):
    """Every Python example of a docs/ page executes (pages without one pass trivially)."""
    run_blocks(python_blocks(DOCS / page), f"docs/{page}")


def test_front_page_keeps_the_two_setup_commands():
    """.ci/run runs exactly these two commands from the README."""
    text = README.read_text()
    assert "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/dse estimate" in text
    assert "bash scripts/test.sh" in text
    assert len(text.splitlines()) <= 180     # a front page; the details are in docs/


def test_links_resolve():
    for path in [README, *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" in target:
                continue
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to missing {target}"


def test_stability_section_names_the_public_api():
    text = README.read_text().split("## Stability\n", 1)[1].split("\n## ", 1)[0]
    for needed in ("dse.estimate", "__all__", "DeprecationWarning", "CHANGELOG.md", "tests/public_api.txt"):
        assert needed in text
