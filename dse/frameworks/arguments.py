"""Command lines and launch scripts as argument tokens, and the tokens as ``{option: value}``.

Megatron-LM is launched as ``torchrun ... pretrain_gpt.py --option value ...``, usually from a bash script that
collects the options in arrays (Megatron-LM's ``examples/gpt3/train_gpt3_175b_distributed.sh``). A script's
``NAME=literal`` variables are substituted (``$NAME``, ``${NAME}``); a value left as a shell variable is an
error only where the value matters (a number).
"""

from __future__ import annotations

import os
import re
import shlex

from dse.errors import InputError
from dse.frameworks.common import bad


def tokens(text: str, source: str = "arguments") -> tuple[list[str], str]:
    """The argument tokens of a string (named ``source`` in errors), or of a launch script when ``text`` names a
    file: ``(tokens, source)``."""
    if "\n" not in text and os.path.isfile(text):
        try:
            with open(text, encoding="utf-8") as f:
                script = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{text}: cannot read the launch script ({exc})") from None
        return _script_tokens(script, text), text
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True), source
    except ValueError as exc:
        raise InputError(f"{source}: cannot split {text[:60]!r} into arguments ({exc})") from None


def _script_tokens(script: str, source: str) -> list[str]:
    """A bash launch script's tokens, ``NAME=literal`` variables substituted (``$NAME``, ``${NAME}``)."""
    script = script.replace("\\\n", " ")
    variables = {}
    for line in script.splitlines():
        m = re.match(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=([^\s$()`;]+)\s*(?:#.*)?$", line)
        if m:
            variables[m.group(1)] = m.group(2).strip("'\"")
    script = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                    lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), script)
    try:
        return shlex.split(script, comments=True)
    except ValueError as exc:
        raise InputError(f"{source}: cannot split the script into arguments ({exc})") from None


def parse(toks: list[str], source: str, options: dict) -> tuple[dict[str, object], list[str]]:
    """``({option: value}, [unknown options])`` of the argument list ``toks``; ``options`` maps each known option to
    its kind: "flag" (store_true: True), "int", "float", "str", "list" (nargs='+': the values up to the next option,
    a list when more than one), or an int (that many values). The last occurrence
    wins; an unknown option's values are skipped."""
    values: dict[str, object] = {}
    unknown: list[str] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not tok.startswith("--") or tok == "--":
            continue
        name, eq, inline = tok.partition("=")
        kind = options.get(name)
        if kind is None:
            if name not in unknown:
                unknown.append(name)
            while not eq and i < len(toks) and not toks[i].startswith("--"):   # its values, whatever they are
                i += 1
            continue
        if kind == "flag":
            values[name] = True
            continue
        count = kind if isinstance(kind, int) else 1
        if kind == "list" and not eq:   # nargs='+': every value up to the next option
            count = next((j for j, t in enumerate(toks[i:]) if t.startswith("--")), len(toks) - i) or 1
        got = [inline] if eq else toks[i:i + count]
        i += 0 if eq else len(got)
        if len(got) < count or any(g.startswith("--") for g in got):
            raise bad(source, name, f"expected {count} value{'s' * (count > 1)}")
        if kind not in ("str", "list") and any("$" in g for g in got):
            raise bad(source, name, f"{' '.join(got)!r} is a shell variable that is not set to a literal in the "
                                    "script; give the value")
        values[name] = got if kind == "list" and count > 1 else got[0] if count == 1 else got
    return values, unknown
