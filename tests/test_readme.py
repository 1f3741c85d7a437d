"""The README's "Use from Python" code runs as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(section: str) -> list[str]:
    text = README.read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, flags=re.S)


def test_use_from_python_runs():
    blocks = python_blocks("Use from Python")
    assert blocks, "README.md has no ```python block under '## Use from Python'"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for code in blocks:
            exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    printed = out.getvalue().splitlines()
    assert len(printed) == 8
    grid = [[float(x) for x in line.strip(" []").split()] for line in printed[3:5]]   # 2 micro-batches x 3 HBM
    assert all(len(row) == 3 and row == sorted(row, reverse=True) for row in grid)   # faster HBM: never slower
    assert grid[1][0] > grid[0][0]                                                   # bigger micro-batch: longer
    assert printed[5] == "6738415616"                      # the comment's Llama-2-7B count
    assert printed[6] == "68.359375" and printed[7].startswith("[9.25")


def test_stability_section_names_the_public_api():
    text = README.read_text().split("## Stability\n", 1)[1].split("\n## ", 1)[0]
    for needed in ("dse.estimate", "__all__", "DeprecationWarning", "CHANGELOG.md", "tests/public_api.txt"):
        assert needed in text
