"""The runner of scripts/fuzz_cli.py: one in-process ``dse`` run and the checks that make it a defect (a traceback,
an exit status other than 0 or 2, exit 2 without one line naming what is wrong, NaN / inf / negative numbers in a
``--json`` output, an invalid input accepted, a run past :data:`RUN_SECONDS`), and the shared inputs."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import signal
import sys
import traceback
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dse.cli import main  # noqa: E402

NUMBERS = ["0", "-1", "-0", "nan", "NaN", "inf", "-inf", "1e400", "1e30", "99999999999999999999999", "1.5", "0.5",
           "abc", "", " ", "٣", "１", "2**3", "0x10", "1_000", "true", "[1]", "{a: 1}", "null", "~", "🙂"]
JSON_VALUES = [None, 0, -1, -0.5, 0.5, 1.5, "x", "", "64", True, False, [], {}, [1, 2], 1e30, float("nan"),
               float("inf"), 10 ** 30, "ñ🙂"]
# JSON keys whose numbers may be negative (differences, signed errors, log-scale values)
SIGNED = ("error", "delta", "diff", "change", "signed", "bias", "log", "slack", "margin", "vs_", "residual", "gain",
          "saving", "over", "headroom", "correlation", "spearman", "pearson", "r2", "skew", "offset")

GOOD_MODEL = "name: tiny\nlayers: 4\nhidden: 256\nheads: 8\nvocab: 1000\nmax_seq_len: 512\n"
GOOD_SPACE = ("name: fz\nmodel: gpt2-small\nhardware: dgx-h100\nfixed:\n  plan.global_batch: 16\n  plan.seq_len: 512\n"
              "parameters:\n  gpus: 8\n  plan.tp: [1, 2]\n  plan.micro_batch: [1, 2]\nobjectives: [time]\n")


RUN_SECONDS = 60      # longer than any one run of the cases below takes


def _timeout(signum, frame):
    raise TimeoutError(f"still running after {RUN_SECONDS} s")


class Fuzz:
    def __init__(self, tmp: Path, rng: random.Random, log=None):
        self.tmp, self.rng, self.runs, self.log = tmp, rng, 0, log
        self.defects: dict[str, list[str]] = defaultdict(list)
        self.n_file = 0

    def file(self, text: str | bytes, suffix: str = ".yaml") -> Path:
        self.n_file += 1
        p = self.tmp / f"f{self.n_file}{suffix}"
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        return p

    def run(self, args: list, needles=(), command_ok=(0, 2), check_json=False, must_fail=False,
            label: str = "") -> tuple[int, str, str]:
        """One run; records a defect where the checks above fail. ``needles``: any one must be in exit 2's line;
        ``must_fail``: the input is invalid (NaN, inf, a fraction where a count goes, a wrong type), so exit 0 is a
        silently wrong number."""
        args = [str(a) for a in args]
        self.runs += 1
        shown = " ".join(args) + (f" [{label}]" if label else "")
        if self.log:
            self.log.write(shown + "\n")
            self.log.flush()
        out, err = io.StringIO(), io.StringIO()
        rc = None
        signal.alarm(RUN_SECONDS)    # a hang is a defect too (signal.SIGALRM raises TimeoutError below)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(args)
        except SystemExit as exc:       # noqa: PERF203
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:   # noqa: BLE001 - the defect we look for
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            self.add(f"traceback {type(exc).__name__} at {Path(tb.filename).name}:{tb.lineno}",
                     f"{shown[:260]} -> {str(exc)[:160]}")
            return -1, out.getvalue(), err.getvalue()
        finally:
            signal.alarm(0)
        o, e = out.getvalue(), err.getvalue()
        if rc not in command_ok:
            self.add(f"exit status {rc}", f"{shown[:260]} -> {e.strip()[:200]}")
        if rc == 2:
            lines = [ln for ln in e.strip().splitlines() if not ln.startswith(("warning", "dse: warning"))]
            if len(lines) != 1 or not lines[0].startswith("dse: error"):
                self.add("exit 2 without one error line", f"{shown[:260]} -> {e.strip()[:300]!r}")
            elif needles and not any(str(n).lower() in lines[0].lower() for n in needles):
                self.add("error does not name what is wrong",
                         f"{shown[:260]} -> {lines[0][:240]} (expected one of {list(needles)[:4]})")
        if rc == 0 and must_fail:
            self.add("invalid input accepted", shown[:300])
        if rc == 0 and check_json and o.strip().startswith(("{", "[")):
            try:
                data = json.loads(o)
            except ValueError as exc:
                self.add("--json output is not JSON", f"{shown[:260]} -> {exc}")
            else:
                for path, v in _bad_numbers(data):
                    self.add(f"bad number in output ({'negative' if v < 0 else v})",
                             f"{shown[:260]} -> {path} = {v}")
        return rc, o, e

    def add(self, cls: str, example: str) -> None:
        self.defects[cls].append(example)


def _bad_numbers(data):
    """(path, value) of every NaN, infinite or (outside :data:`SIGNED` keys) negative number in a JSON document."""
    stack = [("", data)]
    while stack:
        path, obj = stack.pop()
        if isinstance(obj, dict | list):
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            stack.extend((f"{path}.{k}" if isinstance(obj, dict) else f"{path}[{k}]", v) for k, v in items)
        elif isinstance(obj, float | int) and not isinstance(obj, bool) and (
                not math.isfinite(obj) or (obj < 0 and not any(s in path.lower() for s in SIGNED))):
            yield path, obj


def _leaves(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, (*prefix, k))
        else:
            yield (*prefix, k)


def _get(d, path):
    for p in path:
        d = d[p]
    return d


def _set(d, path, v, delete=False):
    for p in path[:-1]:
        d = d[p]
    if delete:
        del d[path[-1]]
    else:
        d[path[-1]] = v
