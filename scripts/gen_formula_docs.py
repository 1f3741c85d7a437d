"""Generate docs/formulas.md, the reference page of ``dse.formulas``, from the docstrings.

    python scripts/gen_formula_docs.py            # rewrite docs/formulas.md
    python scripts/gen_formula_docs.py --check    # exit 1 if docs/formulas.md is out of date

Everything on the page comes from the code: the signature, the docstring sections
(summary, ``Formula:``, ``Source:``, ``Args:``/module ``Symbols:`` with units, ``Returns:``,
examples) and, for "Feeds", a measurement: each public formula's result is multiplied by
(1 + 1e-6) while ``dse estimate`` runs the scenarios of :data:`SCENARIOS`, and the keys of
the estimate's JSON whose values change are the keys the formula feeds. A formula no
scenario calls is listed with the files of ``dse/`` that call it.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "formulas.md"
EPS = 1e-6

# (name, the equivalent CLI command, model, hardware, plan fields): together they call every branch of the estimate.
_SMART = dict(micro_batch=4, global_batch=4, seq_len=1024, recompute="full", attention="math", zero=3,
              precision="fp16")
_SMART_CLI = "-b 4 -B 4 -s 1024 --recompute full --attention math --zero 3 --precision fp16"
SCENARIOS = [
    ("gpu", "dse estimate -m gpt2-medium --hw a100-cluster-800g --tp 2 --pp 2 --dp 4 -b 2 -B 64 --recompute selective",
     "gpt2-medium", "a100-cluster-800g", dict(tp=2, pp=2, dp=4, micro_batch=2, global_batch=64,
                                              recompute="selective")),
    ("gpu-full", "dse estimate -m llama2-7b --hw dgx-a100-80gb --tp 2 --pp 2 --dp 2 --recompute full --attention math "
                 "--zero 3 --set plan.schedule=interleaved --set plan.virtual_stages=2",
     "llama2-7b", "dgx-a100-80gb", dict(tp=2, pp=2, dp=2, recompute="full", attention="math", zero=3,
                                        schedule="interleaved", virtual_stages=2)),
    ("zero-offload", "dse estimate -m smart-infinity-gpt2-4.0b --hw plain-nvme-a5000 " + _SMART_CLI
     + " --offload-optimizer cpu --offload-params cpu",
     "smart-infinity-gpt2-4.0b", "plain-nvme-a5000", dict(_SMART, offload_optimizer="cpu", offload_params="cpu")),
    ("zero-infinity", "dse estimate -m smart-infinity-gpt2-4.0b --hw plain-nvme-a5000 " + _SMART_CLI
     + " --offload-optimizer nvme --offload-params nvme",
     "smart-infinity-gpt2-4.0b", "plain-nvme-a5000", dict(_SMART, offload_optimizer="nvme", offload_params="nvme")),
    ("smart-infinity", "dse estimate -m smart-infinity-gpt2-4.0b --hw smart-infinity-a5000 " + _SMART_CLI
     + " --offload-optimizer csd --offload-params cpu --gradient-compression 0.02 --ssds 10",
     "smart-infinity-gpt2-4.0b", "smart-infinity-a5000",
     dict(_SMART, offload_optimizer="csd", offload_params="cpu", gradient_compression=0.02, ssds=10)),
    ("fp8", "dse estimate -m llama2-7b --hw dgx-h100 --precision fp8",
     "llama2-7b", "dgx-h100", dict(precision="fp8")),
    ("ssdtrain", "dse estimate -m llama2-7b --hw ssdtrain-a100-optane --tp 2 -b 2 --offload-activations ssd",
     "llama2-7b", "ssdtrain-a100-optane", dict(tp=2, micro_batch=2, offload_activations="ssd")),
    ("chiplet-1d", "dse estimate -m llama2-70b --hw chiplet-train-8x8 -B 16 --chiplet-scheme megatron-1d",
     "llama2-70b", "chiplet-train-8x8", dict(global_batch=16, chiplet_scheme="megatron-1d")),
    ("chiplet-summa", "dse estimate -m llama2-70b --hw chiplet-train-8x8 -B 16 --chiplet-scheme summa-2d",
     "llama2-70b", "chiplet-train-8x8", dict(global_batch=16, chiplet_scheme="summa-2d")),
    ("chiplet-2d", "dse estimate -m llama2-70b --hw chiplet-train-8x8 -B 16 --chiplet-scheme hecaton-2d",
     "llama2-70b", "chiplet-train-8x8", dict(global_batch=16, chiplet_scheme="hecaton-2d")),
]
# Callers outside the estimate, and the command that runs them.
COMMANDS = {"dse/validate/": "dse validate", "dse/estimate/rok.py": "dse rok",
            "dse/estimate/chiplet_scaling.py": "dse chiplet-scaling",
            "dse/estimate/offload_compare.py": "dse offload-compare", "dse/specs/": "spec validation",
            "dse/cli.py": "the CLI", "dse/commands/": "the CLI"}
HEADLINE = ("time.iteration", "throughput.tokens_per_s", "memory.gpu.total", "memory.sram.total", "memory.dram.total",
            "energy.iteration_j", "cost.capital_usd")


# ----------------------------------------------------------------------------- what the page documents


def modules():
    import dse.formulas

    return [getattr(dse.formulas, n) for n in dse.formulas.__all__ if inspect.ismodule(getattr(dse.formulas, n))]


def public_functions(mod):
    from dse.formulas._modules import defines

    return [(n, getattr(mod, n)) for n in mod.__all__
            if inspect.isfunction(getattr(mod, n)) and defines(mod, getattr(mod, n))]


def constants(mod):
    return [n for n in mod.__all__ if not callable(getattr(mod, n)) and not inspect.ismodule(getattr(mod, n))]


# ----------------------------------------------------------------------------- feeds, measured


def _leaves(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield prefix[:-1], float(obj)


def _perturb(value):
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {k: _perturb(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_perturb(v) for v in value)
    if isinstance(value, list):
        return [_perturb(v) for v in value]
    try:
        return value * (1 + EPS)
    except TypeError:
        return value


def _holders(fn):
    """Every (module, attribute) of dse that refers to ``fn`` (module globals and ``from ... import`` copies)."""
    out = []
    for name, mod in list(sys.modules.items()):
        if not (name == "dse" or name.startswith("dse.")) or mod is None:
            continue
        for attr, val in list(vars(mod).items()):
            if val is fn:
                out.append((mod, attr))
    return out


def measure_feeds() -> dict:
    """{(module, function): {"scenarios": [names that call it], "keys": set of JSON keys it changes}}."""
    import dse.estimate  # noqa: F401  (loads every estimate module before the holders are collected)
    from dse.estimate import (
        chiplet as _c,  # noqa: F401
        resolve,
        run,
    )

    specs = {name: resolve(m, h, None, (), **fields) for name, _, m, h, fields in SCENARIOS}
    base = {name: dict(_leaves(run(*spec))) for name, spec in specs.items()}
    funcs = [(mod.__name__.rsplit(".", 1)[-1], n, fn) for mod in modules() if mod.__name__ != "dse.formulas.energy"
             for n, fn in public_functions(mod)]
    holders = {(m, n): _holders(fn) for m, n, fn in funcs}
    calls = {key: set() for key in holders}

    def counting(key, fn, scenario):
        def wrapper(*a, **k):
            calls[key].add(scenario)
            return fn(*a, **k)
        return wrapper

    for scenario, spec in specs.items():       # pass 1: who is called where
        for m, n, fn in funcs:
            for mod, attr in holders[(m, n)]:
                setattr(mod, attr, counting((m, n), fn, scenario))
        try:
            run(*spec)
        finally:
            for m, n, fn in funcs:
                for mod, attr in holders[(m, n)]:
                    setattr(mod, attr, fn)
    out = {}
    for m, n, fn in funcs:                       # pass 2: what each one changes
        key = (m, n)
        changed = set()

        def perturbed(*a, _fn=fn, **k):
            return _perturb(_fn(*a, **k))

        for scenario in sorted(calls[key], key=[s[0] for s in SCENARIOS].index):
            for mod, attr in holders[key]:
                setattr(mod, attr, perturbed)
            try:
                after = dict(_leaves(run(*specs[scenario])))
            finally:
                for mod, attr in holders[key]:
                    setattr(mod, attr, fn)
            before = base[scenario]
            changed |= {k for k, v in after.items() if k in before and v != before[k]
                        and not (v != v and before[k] != before[k])}
        out[key] = {"scenarios": [s[0] for s in SCENARIOS if s[0] in calls[key]], "keys": changed}
    return out


def static_callers(name: str) -> list[str]:
    """Files of dse/ (outside the formulas package) whose code (comments aside) calls ``name``."""
    pat = re.compile(rf"(?<![\w.])(?:\w+\.)?{re.escape(name)}\(")
    files = []
    for path in sorted((ROOT / "dse").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("dse/formulas/"):
            continue
        code = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
        if any(not m.group(0).startswith("def ") for m in pat.finditer(code)) and f"def {name}(" not in code:
            files.append(rel)
    return files


_ORDER = ("time", "throughput", "memory", "traffic", "flops")
_LAST = ("cost", "energy")


def _compress(keys: set, all_keys: set) -> str:
    """Dotted keys grouped by section: ``section.*`` when every key of it changed, else up to two keys and a count."""
    if not keys:
        return ""
    groups = {}
    for k in keys:
        groups.setdefault(k.split(".")[0], set()).add(k)
    order = sorted(groups, key=lambda sec: (0, _ORDER.index(sec)) if sec in _ORDER else
                   ((2, _LAST.index(sec)) if sec in _LAST else (1, sec)))
    parts = []
    for sec in order:
        ks = groups[sec]
        total = {k for k in all_keys if k.split(".")[0] == sec}
        if len(ks) == len(total) and len(ks) > 1:
            parts.append(f"`{sec}.*`")
            continue
        shown = [k for k in HEADLINE if k in ks] + sorted(k for k in ks if k not in HEADLINE)
        text = ", ".join(f"`{k}`" for k in shown[:2])
        if len(ks) > 2:
            text += f" (+{len(ks) - 2} more)"
        parts.append(text)
    return "; ".join(parts)


# ----------------------------------------------------------------------------- rendering


def _signature(name, fn) -> str:
    sig = inspect.signature(fn)
    params = []
    for p in sig.parameters.values():
        text = ("**" if p.kind is p.VAR_KEYWORD else "") + p.name
        if p.annotation is not inspect.Parameter.empty:
            text += f": {p.annotation}"
        if p.default is not inspect.Parameter.empty:
            text += f" = {p.default!r}"
        params.append(text)
    ret = "" if sig.return_annotation is inspect.Signature.empty else f" -> {sig.return_annotation}"
    return f"{name}({', '.join(params)}){ret}"


def _constant_note(mod, name) -> str:
    from dse.formulas._modules import home_modules

    for home in home_modules(mod):   # a package's constants are defined in its submodules
        lines = inspect.getsource(home).splitlines()
        for i, line in enumerate(lines):
            if re.match(rf"^{name}\s*(:[^=]*)?=", line):
                comment = []
                j = i - 1
                while j >= 0 and lines[j].lstrip().startswith("#"):
                    comment.insert(0, lines[j].lstrip("# :").strip())
                    j -= 1
                return " ".join(comment)
    return ""


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def render(feeds: dict) -> str:
    from dse.estimate import resolve, run
    from dse.formulas._docstring import parse
    from dse.formulas._modules import concern

    every_key = set()
    for _name, _, m, h, fields in SCENARIOS:
        every_key |= {k for k, _ in _leaves(run(*resolve(m, h, None, (), **fields)))}
    out = ["# `dse.formulas` reference", "",
           "<!-- Generated by scripts/gen_formula_docs.py from the docstrings; do not edit by hand. "
           "tests/test_formula_docs.py fails when this page is out of date. -->", "",
           "Every public equation of `dse`, module by module: its signature, equation, source, the symbol and unit of "
           "each argument, what it returns, an example that runs as a doctest, and which outputs of "
           "`dse estimate --json` it feeds. `Num` is a Python number or a numpy array; arrays broadcast. Units are SI "
           "(bytes, s, FLOP, FLOP/s, bytes/s, J, W, USD); `[count]` is a plain number, `[choice]` a string option, "
           "`[fraction]` a share in [0, 1], `[1]` a dimensionless ratio.", "",
           "**Feeds** is measured, not declared: the formula's result is multiplied by (1 + 10^-6) while the "
           "scenarios below run, and the JSON keys whose value changes are listed (`section.*`: every key of the "
           "section). A formula no scenario calls is listed with the files that call it.", "",
           "| scenario | command |", "|---|---|"]
    for name, cli, *_ in SCENARIOS:
        out.append(f"| {name} | `{cli}` |")
    out.append("")
    out.append("Modules: " + ", ".join(f"[`{m.__name__.rsplit('.', 1)[-1]}`](#{m.__name__.rsplit('.', 1)[-1]})"
                                         for m in modules()))
    out.append("")
    for mod in modules():
        short = mod.__name__.rsplit(".", 1)[-1]
        mdoc = parse(inspect.getdoc(mod) or "")
        symbols = mdoc.get("symbols", {})
        out += [f"## {short}", "", f"`{mod.__name__}`: {mdoc['summary']}", ""]
        if short == "energy":
            out.append("| name | defined in |")
            out.append("|---|---|")
            for n in mod.__all__:
                obj = getattr(mod, n)
                target = f"`{concern(obj)}.{obj.__name__}`" if callable(obj) else "`cost.SECONDS_PER_YEAR`"
                out.append(f"| `{n}` | {target} |")
            out.append("")
            continue
        consts = constants(mod)
        if consts:
            out += ["| constant | value | meaning |", "|---|---|---|"]
            for n in consts:
                val = repr(getattr(mod, n))
                val = f"`{val}`" if len(val) <= 90 else "(table; see the source)"
                out.append(f"| `{n}` | {_md(val)} | {_md(_constant_note(mod, n))} |")
            out.append("")
        for n, fn in public_functions(mod):
            sec = parse(inspect.getdoc(fn) or "")
            out += [f"### `{short}.{n}`", "", "```python", _signature(n, fn), "```", "", sec["summary"], "",
                    f"- **Formula:** {sec['formula']}", f"- **Source:** {sec['source']}"]
            if fn.__module__ != mod.__name__:   # a package's function: say which submodule holds it
                out.append(f"- **Code:** `{fn.__module__.replace('.', '/')}.py`")
            if sec["returns"]:
                out.append(f"- **Returns:** {sec['returns'][0]}")
            info = feeds.get((short, n))
            if info and info["keys"]:
                out.append(f"- **Feeds** ({', '.join(info['scenarios'])}): {_compress(info['keys'], every_key)}")
            elif info and info["scenarios"]:
                out.append(f"- **Feeds:** called in {', '.join(info['scenarios'])}; its result changes no number of "
                           "the JSON (a categorical or a branch that does not decide the numbers there)")
            else:
                callers = static_callers(n)
                if callers:
                    cmds = sorted({c for prefix, c in COMMANDS.items() for f in callers if f.startswith(prefix)})
                    out.append(f"- **Feeds:** not called by `dse estimate`; called by {', '.join(callers)}"
                               + (f" ({', '.join(cmds)})" if cmds else ""))
                else:
                    out.append("- **Feeds:** library only (no CLI command calls it)")
            out += ["", "| argument | meaning | unit |", "|---|---|---|"]
            for p in inspect.signature(fn).parameters.values():
                text, unit = sec["args"].get(p.name) or symbols.get(p.name) or ("", "")
                meaning = re.sub(r"\s*\[[^\[\]]+\]\s*$", "", text)
                out.append(f"| `{p.name}` | {_md(meaning)} | {_md(unit or '')} |")
            out.append("")
            if sec["prose"]:
                out += [" ".join(sec["prose"]), ""]
            for ex in sec["examples"]:
                out += ["```python", ex, "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    text = render(measure_feeds())
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run python scripts/gen_formula_docs.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
