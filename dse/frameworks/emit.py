"""``--emit megatron|deepspeed|torchtitan``: a resolved plan as the framework's launch configuration.

Each framework module's ``emit(model, system, plan)`` returns the text (torchrun arguments, ds_config.json,
job TOML) and the warnings: what that framework cannot express for the plan (dse's research techniques,
options it lacks). Megatron's and torchtitan's warnings are comments in the text; JSON has no comments, so
DeepSpeed's go to stderr. Reading the text back with ``--from`` gives the same plan in every field the
framework carries (tests/test_frameworks_roundtrip.py).
"""

from __future__ import annotations

import importlib
import sys

from dse.errors import InputError


def emit(framework: str, model, system, plan) -> dict:
    """``{"framework", "config" (the text), "warnings"}`` for a resolved plan."""
    from dse.frameworks import FRAMEWORKS
    from dse.specs.hardware import GPU_SYSTEM

    if framework not in FRAMEWORKS:
        raise InputError(f"--emit {framework!r}: expected one of {', '.join(FRAMEWORKS)}")
    if system.kind != GPU_SYSTEM:
        raise InputError(f"--emit {framework}: {system.name} is a {system.kind}; framework configs describe GPU "
                         "systems")
    text, warnings = importlib.import_module(f"dse.frameworks.{framework}").emit(model, system, plan)
    return {"framework": framework, "config": text, "warnings": warnings}


def show(out: dict) -> None:
    """Print an emitted config on stdout (DeepSpeed's warnings on stderr: JSON holds no comments)."""
    sys.stdout.write(out["config"])
    if out["framework"] == "deepspeed":
        for w in out["warnings"]:
            sys.stderr.write(f"dse: warning: {w}\n")
