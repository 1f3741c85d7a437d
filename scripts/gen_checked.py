"""Write dse/validate/checked.json: each validation part's error and optimism, as an estimate reports them.

    python scripts/gen_checked.py

Run it after a change that moves any suite's numbers (tests/test_regimes.py fails until it is rerun).
See dse.validate.regimes.
"""

from __future__ import annotations

import json

from dse.validate import regimes


def main() -> None:
    text = json.dumps({"about": "dse validate's error per part, read by dse.validate.regimes (written by "
                                "scripts/gen_checked.py; do not edit)", "parts": regimes.measure()},
                      indent=1, sort_keys=True)
    regimes.FILE.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {regimes.FILE}")


if __name__ == "__main__":
    main()
