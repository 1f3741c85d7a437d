"""Print dse/validate/h200_holdout.py's EXPECTED_TIME_MISSES for the model as it is now.

    PYTHONPATH=$PWD python scripts/gen_holdout_misses.py

Every time row of ``dse validate h200-holdout`` outside its tolerance, with the cause its own profile shows: "moe"
for an MoE family, "host" where the profile's device time is below ``HOST_BOUND`` of the measured step, else "gpu".
Paste the output over the dict after a change that moves the suite (tests/test_h200_holdout.py fails until then).
"""

from __future__ import annotations

from dse.validate import h200_holdout as H, run_suite


def misses() -> dict[str, str]:
    prof = H.profiles()
    by_label = {H.label(m): m for m in H.measurements()}
    out = {}
    for c in run_suite("h200-holdout").cases:
        if c.quantity.endswith("time") and not c.within:
            lab = c.name[: -len(" time")]
            fam, attn, b, _s, rc = lab.split(" ")
            p = prof[(fam, attn, int(b[1:]), rc[3:])]
            busy = sum(p["device_s_by_category"].values()) / by_label[lab].time_s
            out[lab] = "moe" if c.quantity.startswith("moe") else ("host" if busy < H.HOST_BOUND else "gpu")
    return out


def main() -> None:
    items = [f'"{k}": "{v}"' for k, v in misses().items()]
    lines, line = [], "    "
    for it in items:
        if len(line) + len(it) + 2 > 118:
            lines.append(line.rstrip())
            line = "    "
        line += it + ", "
    lines.append(line.rstrip())
    print("EXPECTED_TIME_MISSES: dict[str, str] = {\n" + "\n".join(lines) + "\n}")


if __name__ == "__main__":
    main()
