"""Check the hosts whose ``dispatch_scale`` is transferred, not measured, against the suites that price them.

Some shipped hosts carry a ``dispatch_scale`` taken from a measured host of the same CPU class
(hwspecs/hosts/dgx-h100-host.yaml says why and from where). This script prices every validation suite whose
systems use one of those hosts twice: with the hosts as shipped, and with their ``dispatch_scale`` removed (the
reference host, 1), and prints each case's error both ways and each suite's MAPE. Nothing is fitted.

    python scripts/host_transfer.py [--suites h100-hf megatron-bridge ...] [--json]

``SUITE@SYSTEM`` prices a suite's rows on another system, e.g. ``h200-hf@dgx-h200``: the H200 VM's Transformers
steps on a DGX H200 (whose host is transferred), what a user pricing their VM-measured steps on the DGX would see.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The suites whose systems run on a host with a transferred dispatch_scale.
SUITES = ("h100-hf", "megatron-bridge", "moe-h100", "deepseek-v3", "llama3-405b")


def transferred_hosts() -> list[str]:
    """The hosts whose dispatch_scale is transferred (``dispatch_basis: transferred``)."""
    from dse.catalog import find_hardware

    return sorted(p.stem for p in (ROOT / "hwspecs" / "hosts").glob("*.yaml")
                  if find_hardware(p.stem)[1].dispatch_basis == "transferred")


def _errors(suites, reference: bool) -> dict:
    """{suite: [(case, error), ...]} priced in this process; ``reference``: the transferred hosts at scale 1."""
    import dse.catalog as catalog
    from dse.validate import run_suite

    if reference:
        hosts = set(transferred_hosts())
        read = catalog.read_yaml

        def without_scale(path, *args, **kwargs):
            data = read(path, *args, **kwargs)
            if Path(path).parent.name == "hosts" and Path(path).stem in hosts:
                data = {k: v for k, v in data.items() if k != "dispatch_scale"}
            return data

        catalog.read_yaml = without_scale
    out = {}
    for s in suites:
        name, _, system = s.partition("@")   # SUITE@SYSTEM: the suite's rows priced on another system
        if system:
            from dse.validate import load

            load(name).SYSTEM = system
        out[s] = [(c.name, c.error, c.quantity) for c in run_suite(name).cases]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", nargs="*", default=list(SUITES))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--_child", choices=("shipped", "reference"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._child:
        print(json.dumps(_errors(a.suites, a._child == "reference")))
        return 0
    runs = {}
    for variant in ("reference", "shipped"):   # one process each: the catalog caches what it loads
        cmd = [sys.executable, __file__, "--_child", variant, "--suites", *a.suites]
        runs[variant] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout)
    if a.json:
        print(json.dumps({"hosts": transferred_hosts(), **runs}, indent=1))
        return 0
    print("hosts with a transferred dispatch_scale:", ", ".join(transferred_hosts()))
    for s in a.suites:
        ref, shp = runs["reference"][s], runs["shipped"][s]
        print(f"\n{s}: MAPE {100 * _mape(ref):.1f} % at the reference host -> {100 * _mape(shp):.1f} % as shipped")
        for q in sorted({r[2] for r in ref} - {""}):
            r0, r1 = [r for r in ref if r[2] == q], [r for r in shp if r[2] == q]
            print(f"  {q}: MAPE {100 * _mape(r0):.1f} % (mean {100 * _mean(r0):+.1f} %) -> {100 * _mape(r1):.1f} % "
                  f"(mean {100 * _mean(r1):+.1f} %)")
        for (name, e0, _), (_, e1, _) in zip(ref, shp):
            if e0 is not None and e1 is not None and abs(e1 - e0) > 5e-4:
                print(f"  {name[:70]:70s} {100 * e0:+7.1f} % -> {100 * e1:+7.1f} %")
    return 0


def _mape(rows) -> float:
    errs = [abs(r[1]) for r in rows if r[1] is not None]
    return sum(errs) / len(errs) if errs else float("nan")


def _mean(rows) -> float:
    errs = [r[1] for r in rows if r[1] is not None]
    return sum(errs) / len(errs) if errs else float("nan")


if __name__ == "__main__":
    raise SystemExit(main())
