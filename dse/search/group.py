"""What the search evaluator works on: a group's specs, a block's result, spec fields replaced.

Part of :mod:`dse.search.evaluate`.

A search space is evaluated as Python-level groups (string/bool choices, a model, a hardware
file: :class:`Group` holds their specs) times numpy blocks of numeric values
(:class:`BlockResult` is what one block gives back).
"""

from __future__ import annotations

import dataclasses

import numpy as np

GPUS_RULE = "gpus not divisible by tp x pp x cp"


def replace_path(obj, path: list[str], value):
    """Copy of a (frozen) spec tree with the field at ``path`` replaced; no validation."""
    key = path[0]
    if isinstance(obj, dict):
        return {**obj, key: value if len(path) == 1 else replace_path(obj[key], path[1:], value)}
    if len(path) == 1:
        return dataclasses.replace(obj, **{key: value})
    return dataclasses.replace(obj, **{key: replace_path(getattr(obj, key), path[1:], value)})


@dataclasses.dataclass
class Group:
    values: dict                  # group parameter -> value
    model: object = None
    system: object = None         # a GPU SystemSpec or a chiplet package
    plan: object = None           # unresolved Plan (numeric vector fields replaced per block)
    error: str | None = None      # the specs cannot be built: every point of the group is excluded

    @property
    def backend(self):
        """The hardware backend of the group's system (:mod:`dse.estimate.backends`)."""
        from dse.estimate.backends import backend

        return backend(self.system)


@dataclasses.dataclass
class BlockResult:
    n: int                                          # points in the block
    counts: dict                                    # exclusion reason -> points
    feasible: np.ndarray                            # local flat indices of feasible points
    objectives: np.ndarray                          # (n_feasible, n_objectives), as reported (not sign-flipped)
    metrics: dict                                   # metric -> array over feasible points
    valid: np.ndarray | None = None                 # local indices of every evaluated (rule-valid) point
    status: np.ndarray | None = None                # reason index per valid point (0 = feasible)
    valid_metrics: dict | None = None               # metric -> array over valid points (NaN where not computed)
    n_valid: int = 0                                # points that passed the plan rules (evaluated)


def load_hardware(ref, overrides=()):
    """A GPU system or a chiplet package, from a catalog name, a file or a spec (:func:`dse.catalog.load_hardware`)."""
    from dse.catalog import load_hardware as load

    return load(ref, list(overrides))


def add_count(counts: dict, reason: str, k: int) -> None:
    """Count ``k`` more points excluded for ``reason``."""
    if k:
        counts[reason] = counts.get(reason, 0) + k


def space_value(param, value):
    """A numpy value of a vector parameter back as the space wrote it (int or float)."""
    v = float(value)
    return int(v) if param is not None and param.kind == "int" else v
