"""Redraw docs/html-report.png, the README's picture of ``dse search --html``.

    python scripts/html_screenshot.py [OUT.png]

Runs the cost/time Pareto example search with ``--html``, opens the page in headless Chromium (the DevTools
client of tests/_chromium.py), hovers the second front point so its tooltip shows, and captures the top of the
page (the front and the start of the best point's breakdown).
"""

from __future__ import annotations

import base64
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import _chromium  # noqa: E402

from dse.cli import main  # noqa: E402


def shoot(out: Path, width: int = 980, height: int = 700) -> Path:
    exe = _chromium.find()
    if exe is None:
        sys.exit("chromium is not installed (Debian package 'chromium')")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "front.html"
        code = main(["search", "--space", str(ROOT / "examples/spaces/cost-time-pareto.yaml"), "--html", str(page),
                     "-q"])
        if code:
            sys.exit(f"dse search failed ({code})")
        with _chromium.Browser(exe, width, 2 * height) as b:
            b.call("Emulation.setDeviceMetricsOverride", width=width, height=2 * height, deviceScaleFactor=1,
                   mobile=False)
            b.open(page)
            b.hover("circle.pt[data-i='1']")     # in view already: nothing scrolls
            time.sleep(0.5)                       # let the tooltip paint
            shot = b.call("Page.captureScreenshot", format="png",
                          clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
    out.write_bytes(base64.b64decode(shot["data"]))
    return out


if __name__ == "__main__":
    path = shoot(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "html-report.png")
    print(f"{path}: {path.stat().st_size:,} bytes")
