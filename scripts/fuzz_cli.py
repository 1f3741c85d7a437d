"""Fuzz the command line with random and adversarial inputs; list every defect found.

    PYTHONPATH=$PWD python scripts/fuzz_cli.py [--seed 0] [--quick] [--only estimate,hf,...]

Runs ``dse estimate`` / ``search`` / ``calibrate`` / ``validate`` / ``measure`` in-process (``dse.cli.main``) with bad
numbers (0, negative, NaN, inf, huge, fractions, unicode digits), wrong types in YAML / JSON / CSV files, missing
files, directories for files, empty files, unknown keys, and every supported config.json (tests/fixtures/hf) with a
field deleted or set to null, 0, a negative number or a string. A run is a defect when

- an exception escapes ``main`` (a traceback),
- the exit status is not 0 or 2 (1 for a failing ``validate`` suite),
- exit 2's message is not one line naming what is wrong (the flag, field or file the case changed),
- a successful ``--json`` output holds NaN, inf or a negative number where none is allowed.

The runner and its checks: scripts/fuzz_runner.py. Not a test (it takes minutes): the defect classes it finds
have parametrized regression tests (tests/test_bad_input_fuzz.py). Prints the count run and each defect, grouped by
class, a few examples each.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_runner import (  # noqa: E402
    GOOD_MODEL,
    GOOD_SPACE,
    JSON_VALUES,
    NUMBERS,
    ROOT,
    Fuzz,
    _leaves,
    _set,
    _timeout,
)

SHARD = (0, 1)        # --shard K/N: the K-th of N slices of the config.json fixtures
FIXTURES: tuple[str, ...] = ()    # --fixtures a,b: only these (default: every one)


# ----------------------------------------------------------------------------- estimate
EST_INT_FLAGS = ["--tp", "--pp", "--dp", "--cp", "--cp-a2a", "--ep", "--etp", "--micro-batch", "--global-batch",
                 "--seq-len", "--target-len", "--zero", "--ssds", "--lora-rank"]
EST_FLOAT_FLAGS = ["--gradient-compression", "--lora-dropout"]
EST_STR_FLAGS = ["--offload-layers", "--pp-layout", "--mesh", "--recompute", "--attention", "--stack", "--precision",
                 "--cp-comm", "--moe-dispatcher", "--optimizer", "--offload-optimizer", "--offload-params",
                 "--finetune", "--lora-targets", "--quantization", "--fp8-scaling", "--chiplet-scheme", "--emit"]
BASES = [("gpt2-small", "dgx-h100"), ("llama2-7b", "dgx-a100-80gb"), ("mixtral-8x7b", "dgx-h100"),
         ("llama2-70b", "chiplet-train-8x8"), ("smart-infinity-gpt2-4.0b", "smart-infinity-a5000")]


FLAG_OF = {"pipeline_layout": "--pp-layout", "micro_batch": "--micro-batch", "global_batch": "--global-batch",
           "cp_a2a": "--cp-a2a", "offload_layers": "--offload-layers", "chiplet_mesh": "--mesh"}


def _names(field: str) -> tuple[str, ...]:
    """The ways an error may name a plan or model field: as written, or as its flag."""
    return field, "--" + field.replace("_", "-"), FLAG_OF.get(field, field)


def fuzz_estimate(f: Fuzz, quick: bool) -> None:
    for model, hw in BASES[: 2 if quick else None]:
        base = ["estimate", "-m", model, "--hw", hw, "--json"]
        f.run(base, check_json=True)
        for flag in EST_INT_FLAGS + EST_FLOAT_FLAGS + EST_STR_FLAGS:
            for v in NUMBERS if flag not in EST_STR_FLAGS else NUMBERS[:12] + ["bogus", "1,2", "x" * 300]:
                f.run([*base, flag, v], needles=(flag, flag.lstrip("-").replace("-", "_")), check_json=True,
                      must_fail=v.lower() in ("nan", "inf", "-inf", "1e400", "abc", "bogus", "🙂"))
    # --set on every plan / model field and some hardware leaves
    import dataclasses

    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan

    values = ["0", "-1", "nan", "inf", "-inf", "1e30", "abc", "[1, 2]", "{a: 1}", "null", "1.5", "true"]
    for spec, head in ((Plan, "plan"), (ModelSpec, "model")):
        for fld in dataclasses.fields(spec):
            for v in (values if not quick else f.rng.sample(values, 4)):
                f.run(["estimate", "-m", "llama2-7b", "--hw", "dgx-a100-80gb", "--json", "--set",
                       f"{head}.{fld.name}={v}"], needles=_names(fld.name), check_json=True,
                      must_fail=v in ("nan", "inf", "-inf", "[1, 2]", "{a: 1}") and "str" not in str(fld.type)
                      and fld.name != "dense_layers")    # strings take any text; dense_layers: an MoE model's
    hw_leaves = ["node.gpu.hbm_capacity", "node.gpu.hbm_bandwidth", "node.gpu.peak_flops.bf16", "node.gpus_per_node",
                 "nodes", "node.network.bandwidth", "node.network.latency", "node.gpu_link.bandwidth",
                 "node.host.memory", "node.storage.count", "node.gpu.tdp", "node.gpu.price", "node.gpu.efficiency.gemm",
                 "node.gpu.efficiency.memory", "node.gpu.efficiency.attention", "node.gpu.launch_overhead"]
    invalid = ("0", "-1", "nan", "inf", "-inf", "abc", "[1, 2]", "{a: 1}", "80 GX", "-80 GiB", "nan GB/s", "inf TB/s",
               "1e400 B")
    zero_ok = ("node.network.latency", "node.gpu.price")     # no latency, a free GPU: degenerate but meaningful
    for leaf in hw_leaves:
        for v in values + ["80 GX", "-80 GiB", "nan GB/s", "inf TB/s", "1e400 B"]:
            f.run(["estimate", "-m", "llama2-7b", "--hw", "dgx-h100", "--json", "--set", f"hardware.{leaf}={v}"],
                  needles=(leaf.rsplit(".", 1)[-1],), check_json=True,
                  must_fail=v in invalid and not (v == "0" and leaf in zero_ok))
    for bad in ["plan.tp", "plan", "=3", "plan.tp=", "foo.bar=1", "plan..tp=1", "plan.tp==2", "model.hidden.x=1"]:
        f.run(["estimate", "-m", "llama2-7b", "--hw", "dgx-h100", "--set", bad],
              needles=("--set", bad.split("=")[0], bad.split("=")[0].rsplit(".", 1)[-1] + ":"))
    fuzz_model_files(f)


def fuzz_model_files(f: Fuzz) -> None:
    hw = ["--hw", "dgx-h100", "--json"]
    d = f.tmp / "adir.yaml"
    d.mkdir(exist_ok=True)
    cases = [(f.tmp / "missing.yaml", "missing.yaml"), (d, "adir.yaml"), (f.file(""), ".yaml"),
             (f.file("   \n# only a comment\n"), ".yaml"), (f.file("- a\n- b\n"), ".yaml"),
             (f.file("42\n"), ".yaml"), (f.file(b"\xff\xfe\x00garbage"), ".yaml"), (f.file("{"), ".yaml"),
             (f.file("name: x\nlayers: 2\n"), "hidden"), (f.file(GOOD_MODEL + "bogus_key: 1\n"), "bogus_key"),
             (f.file(GOOD_MODEL + "layers: 8\n"), "layers"), (f.file(GOOD_MODEL, ".json"), ".json"),
             (f.file("{}", ".json"), ".json"), (f.file("[]", ".json"), ".json"), (f.file("{", ".json"), ".json")]
    for path, needle in cases:
        f.run(["estimate", "-m", path, *hw], needles=(needle, Path(path).name), check_json=True)
    keys = [ln.split(":")[0] for ln in GOOD_MODEL.splitlines()]
    for k in keys:
        for v in ["0", "-4", ".nan", ".inf", "-.inf", "1e400", "1.5", "abc", "[1, 2]", "{a: 1}", "null", "true", "''",
                  "'8'", "99999999999999999999999999"]:
            text = "\n".join(f"{k}: {v}" if ln.startswith(k + ":") else ln for ln in GOOD_MODEL.splitlines())
            bad = v in ("0", "-4", ".nan", ".inf", "-.inf", "1e400", "1.5", "[1, 2]", "{a: 1}", "null", "''")
            f.run(["estimate", "-m", f.file(text), *hw], needles=(k,) if bad else (), check_json=True,
                  must_fail=bad and k != "name" and not (k == "max_seq_len" and v == "null"), label=f"{k}: {v}")
        text = "\n".join(ln for ln in GOOD_MODEL.splitlines() if not ln.startswith(k + ":"))
        f.run(["estimate", "-m", f.file(text), *hw], needles=(k,), check_json=True)
    # hardware files: a catalog system with a leaf replaced
    import yaml

    sysf = yaml.safe_load((ROOT / "hwspecs/systems/dgx-h100.yaml").read_text())
    for path in (["nodes"], ["node", "gpus_per_node"], ["node", "gpu"], ["node", "storage", "count"], ["kind"],
                 ["node", "network"]):
        for v in JSON_VALUES:
            data = copy.deepcopy(sysf)
            cur = data
            for p in path[:-1]:
                cur = cur[p]
            cur[path[-1]] = v
            try:
                text = yaml.safe_dump(data, allow_unicode=True)
            except yaml.YAMLError:
                continue
            f.run(["estimate", "-m", "gpt2-small", "--hw", f.file(text), "--json"], needles=(path[-1],),
                  check_json=True)


# ----------------------------------------------------------------------------- config.json of every model_type
def fuzz_hf(f: Fuzz, quick: bool) -> None:
    k, n = SHARD
    fixtures = [p for p in sorted((ROOT / "tests/fixtures/hf").glob("*/config.json"))[k::n]
                if not FIXTURES or p.parent.name in FIXTURES]
    for cfg in fixtures:
        data = json.loads(cfg.read_text())
        f.run(["estimate", "-m", cfg, "--hw", "dgx-h100", "--json"], check_json=True)
        flat = list(_leaves(data))
        from dse.specs.hf.config_types import INDEX_LISTS, KINDS, MAPPINGS

        read = set(KINDS)     # the keys the readers read: others may hold anything (dse does not look at them)
        for path in flat:
            mutations = [("delete", None), ("null", None), ("zero", 0), ("negative", -1), ("string", "x"),
                         ("half", 0.5), ("huge", 10 ** 12), ("nan", float("nan")), ("inf", float("inf")),
                         ("list", [1]), ("bool", True)]
            if quick:       # three of them, at random
                mutations = f.rng.sample(mutations, 3)
            for kind, v in mutations:
                d = copy.deepcopy(data)
                _set(d, path, v, delete=kind == "delete")
                p = f.tmp / f"hf{f.runs}" / "config.json"
                p.parent.mkdir()
                p.write_text(json.dumps(d))
                f.run(["estimate", "-m", p, "--hw", "dgx-h100", "--json"], needles=(path[-1], "config.json"),
                      check_json=True, label=f"{cfg.parent.name}: {'.'.join(path)} {kind}",
                      must_fail=path[-1] in read and all(p in MAPPINGS for p in path[:-1]) and (
                          kind in ("nan", "inf") or (
                          kind == "list" and path[-1] not in INDEX_LISTS)))


# ----------------------------------------------------------------------------- search
def fuzz_search(f: Fuzz, quick: bool) -> None:
    base = ["search", "-q", "--engine", "exhaustive"]
    good = f.file(GOOD_SPACE)
    f.run([*base, "--space", good])
    flags = {"--gpus": NUMBERS[:10], "-B": NUMBERS[:10], "-s": NUMBERS[:10], "--budget": ["-5", "nan", "abc", "0",
             "inf", "$-3", "1e400"], "--power-cap": ["-5 W", "nan W", "abc", "0 W", "inf", "10 GB"],
             "--min-ssd-lifetime": ["-1 years", "nan", "abc", "inf days"], "--trials": ["0", "-1", "abc"],
             "--top": ["0", "-1", "abc", "1e30"], "--chunk": ["0", "-1", "abc"], "--engine": ["bogus", ""],
             "--objective": ["bogus", "", "time,bogus"], "--seed": ["-1", "abc", "1e30"],
             "--param": ["plan.tp", "plan.tp=", "plan.tp=[0, 1]", "plan.tp=[-1]", "plan.tp={min: 4, max: 1}",
                         "plan.tp={min: 0, max: 4}", "plan.bogus=[1]", "plan.micro_batch={min: 1, max: 1e30}",
                         "plan.tp=[nan]", "plan.tp=[inf]", "plan.recompute=[bogus]", "gpus=0", "gpus=-8",
                         "plan.tp={min: 1, max: 8, log2: maybe}", "plan.tp=abc", "plan.tp=[]"],
             "--set": ["plan.tp=0", "plan.bogus=1", "plan.seq_len=nan", "hardware.nodes=-1", "model.hidden=0"],
             "--sampler": ["bogus"], "--emit": ["bogus"]}
    for flag, values in flags.items():
        for v in values:
            args = [*base, "--space", good, flag, v]
            if flag in ("--trials", "--sampler", "--seed"):
                args = ["search", "-q", "--engine", "optuna", "--space", good, "--trials", "3", flag, v]
            f.run(args, needles=(flag, flag.lstrip("-"), v.split("=")[0] if "=" in v else flag))
    for flag in ("--json", "--csv", "--html", "--plot"):
        for target in (f.tmp, f.tmp / "no" / "such" / "dir" / "x.out"):
            f.run([*base, "--space", good, flag, target], needles=(flag, str(target)))
    d = f.tmp / "space_dir.yaml"
    d.mkdir(exist_ok=True)
    for path in (f.tmp / "nope.yaml", d, f.file(""), f.file("[1, 2]"), f.file("{"), f.file(b"\xff\xfe")):
        f.run([*base, "--space", path], needles=(Path(path).name, "--space"))
    import yaml

    space = yaml.safe_load(GOOD_SPACE)
    keys = [("name",), ("model",), ("hardware",), ("fixed",), ("parameters",), ("objectives",),
            ("fixed", "plan.global_batch"), ("fixed", "plan.seq_len"), ("parameters", "gpus"),
            ("parameters", "plan.tp"), ("parameters", "plan.micro_batch")]
    for path in keys:
        for v in ["__delete__", None, 0, -1, "x", [], {}, [0], [-1], 1.5, float("nan"), float("inf"), 10 ** 30,
                  {"min": 4, "max": 1}, {"min": 0, "max": 4}, True, "ñ🙂"]:
            d2 = copy.deepcopy(space)
            _set(d2, path, v, delete=v == "__delete__")
            try:
                text = yaml.safe_dump(d2, allow_unicode=True)
            except yaml.YAMLError:
                continue
            f.run([*base, "--space", f.file(text)], needles=(path[-1], path[0], path[0].rstrip("s")))
    for extra in ("bogus: 1\n", "constraints: {bogus: 1}\n", "constraints: {memory: -1}\n",
                  "constraints: {budget: abc}\n", "objectives: [bogus]\n", "objectives: time\n", "objectives: []\n"):
        f.run([*base, "--space", f.file(GOOD_SPACE.replace("objectives: [time]\n", "") + extra)],
              needles=(extra.split(":")[0], extra.split("{")[-1].split(":")[0], "bogus"))


# ----------------------------------------------------------------------------- calibrate
def fuzz_calibrate(f: Fuzz, quick: bool) -> None:
    good = ROOT / "data" / "h100_hf_training.jsonl"
    base = ["calibrate", "--hw", "dgx-h100", "--params", "memory", "--folds", "0"]
    rows = [json.loads(ln) for ln in good.read_text().splitlines() if ln.strip()]
    base_rows = [r for r in rows if r.get("kind") == "base"]
    d = f.tmp / "data_dir.jsonl"
    d.mkdir(exist_ok=True)
    for path in (f.tmp / "nope.jsonl", d, f.file("", ".jsonl"), f.file("\n\n", ".jsonl"), f.file("[1]\n", ".jsonl"),
                 f.file("{\n", ".jsonl"), f.file(b"\xff\xfe", ".jsonl"), f.file("", ".csv"),
                 f.file("a,b\n1,2\n", ".csv"), f.file(b"\xff\xfe", ".csv")):
        f.run(["calibrate", "--data", path, "--hw", "dgx-h100"], needles=(Path(path).name, "--data"))
    keys = ["model", "attn", "b", "s", "recompute", "step_s", "peak_bytes", "params", "offload_host"]
    for k in keys:
        for v in ["__delete__", None, 0, -1, 0.5, 1.5, "x", "", [], {}, float("nan"), float("inf"), 10 ** 30, True]:
            rs = copy.deepcopy(base_rows)
            for r in rs:
                _set(r, (k,), v, delete=v == "__delete__" and k in r)
            text = "\n".join(json.dumps(r) for r in rs) + "\n"
            fine = {"peak_bytes": (None, "", "__delete__", 0.5, 1.5, 10 ** 30), "step_s": (0.5, 1.5, 10 ** 30),
                    "b": (10 ** 30,), "s": (10 ** 30,)}
            bad = k in ("b", "s", "step_s", "peak_bytes", "model", "attn") and v not in fine.get(k, ())
            f.run([*base, "--data", f.file(text, ".jsonl")], needles=(k,) if bad else (), check_json=False,
                  must_fail=bad and k != "offload_host", label=f"every row's {k} = {v!r}")
    generic = "model,time_s,tp,dp,micro_batch,global_batch,seq_len,peak_bytes\n" + "".join(
        f"gpt2-small,{0.1 * (i + 1)},1,1,{1 + i % 2},{1 + i % 2},{256 * (1 + i % 3)},\n" for i in range(8))
    f.run(["calibrate", "--data", f.file(generic, ".csv"), "--hw", "dgx-h100", "--params", "memory", "--folds", "0"])
    for col, vals in {"time_s": ["0", "-1", "nan", "inf", "abc", "1e400"], "tp": ["0", "-1", "nan", "abc", "1.5"],
                      "micro_batch": ["0", "nan", "inf", "abc"], "model": ["", "bogus-model", "ñ"],
                      "seq_len": ["0", "-5", "inf"], "peak_bytes": ["-1", "nan", "inf", "abc"]}.items():
        for v in vals:
            lines = generic.splitlines()
            hdr = lines[0].split(",")
            i = hdr.index(col)
            body = [",".join(v if j == i else c for j, c in enumerate(ln.split(","))) for ln in lines[1:]]
            f.run(["calibrate", "--data", f.file("\n".join([lines[0], *body]) + "\n", ".csv"), "--hw", "dgx-h100",
                   "--params", "memory", "--folds", "0"], needles=(col, v or "model"), must_fail=True,
                  label=f"column {col} = {v!r}")
    f.run(["calibrate", "--data", f.file(generic.replace("peak_bytes", "bogus_col"), ".csv"), "--hw", "dgx-h100",
           "--params", "memory", "--folds", "0"], needles=("bogus_col",), label="unknown column")
    flags = {"--params": ["bogus", "", ",", "memory,memory", "gemm,bogus"], "--folds": ["-1", "abc", "1000", "1"],
             "--hw": ["bogus", "chiplet-train-8x8"], "--out": [str(f.tmp), "/no/such/dir/x.yaml"]}
    for flag, vals in flags.items():
        for v in vals:
            f.run(["calibrate", "--data", good, "--hw", "dgx-h100", "--params", "memory", "--folds", "0", flag, v],
                  needles=(flag, flag.lstrip("-"), v.split(",")[-1] or flag))


# ----------------------------------------------------------------------------- validate, measure
def fuzz_validate_measure(f: Fuzz, quick: bool) -> None:
    for suite in ["bogus", "", "ñ🙂", "../etc", "megatron-a100 extra", "FORMULAS"]:
        f.run(["validate", *suite.split(" ")] if suite else ["validate", ""], needles=("suite", suite or "''"),
              command_ok=(0, 1, 2))
    f.run(["validate", "formulas", "--json"], command_ok=(0, 1), check_json=False)
    for flag, vals in {"--device": ["bogus", "", "cuda:99"], "--models": ["bogus", "", ",", "llama2-7b"],
                       "--batches": ["0", "-1", "abc", "", "1,,2", "nan", "1e30"], "--seq-len": ["0", "-1", "abc"],
                       "--impl": ["bogus", ""], "--out": [str(f.tmp), "/no/such/dir/x.jsonl"]}.items():
        for v in vals:
            f.run(["measure", "--smoke", "--device", "cpu", flag, v], needles=(flag, flag.lstrip("-"), v or flag))


SECTIONS = {"estimate": fuzz_estimate, "hf": fuzz_hf, "search": fuzz_search, "calibrate": fuzz_calibrate,
            "validate": fuzz_validate_measure}


def cli() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a sample of each section")
    ap.add_argument("--only", default=",".join(SECTIONS))
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--memory", type=float, default=4.0, help="address-space limit, GiB: a run that would exhaust "
                    "the machine's memory raises MemoryError instead (a defect)")
    ap.add_argument("--log", help="write each run's arguments here before it runs (to find a crash)")
    ap.add_argument("--fixtures", default="", help="comma-separated fixture names (tests/fixtures/hf/NAME)")
    ap.add_argument("--shard", default="0/1", help="K/N: fuzz the K-th of N slices of the config.json fixtures")
    a = ap.parse_args()
    global SHARD, FIXTURES
    SHARD = tuple(map(int, a.shard.split("/")))
    FIXTURES = tuple(filter(None, a.fixtures.split(",")))
    import resource

    limit = int(a.memory * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _timeout)
    with tempfile.TemporaryDirectory() as tmp:
        log = open(a.log, "w") if a.log else None      # noqa: SIM115 - open for the whole run
        os.chdir(tmp)      # what a command writes by default (measured.jsonl, a search study) goes there
        f = Fuzz(Path(tmp), random.Random(a.seed), log)
        for name in a.only.split(","):
            before = f.runs
            SECTIONS[name](f, a.quick)
            print(f"{name}: {f.runs - before} runs", file=sys.stderr)
    print(f"{f.runs} runs, {sum(map(len, f.defects.values()))} defective, {len(f.defects)} classes")
    for cls, ex in sorted(f.defects.items(), key=lambda kv: -len(kv[1])):
        print(f"\n[{len(ex)}] {cls}")
        for e in ex[: a.examples]:
            print("   ", e)
    return 1 if f.defects else 0


if __name__ == "__main__":
    sys.exit(cli())
