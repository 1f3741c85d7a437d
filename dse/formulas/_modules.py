"""Which functions a formulas module defines, when one concern is a package of submodules.

A concern of :mod:`dse.formulas` (``activation_offload``, ...) is a module, or a package whose
``__init__`` re-exports the names of its submodules. Its own functions are those defined in it or in
one of its submodules; names imported from another concern (``activation_terms`` from
``transformer``) are not. The API tests and scripts/gen_formula_docs.py ask this module.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def home_modules(mod: ModuleType) -> list[ModuleType]:
    """``mod`` itself and, when it is a package, each of its submodules (sorted by name)."""
    if not hasattr(mod, "__path__"):
        return [mod]
    subs = sorted(info.name for info in pkgutil.iter_modules(mod.__path__))
    return [mod] + [importlib.import_module(f"{mod.__name__}.{name}") for name in subs]


def defines(mod: ModuleType, obj: object) -> bool:
    """Whether ``obj`` is defined in ``mod`` or, when ``mod`` is a package, in one of its submodules."""
    home = str(getattr(obj, "__module__", None) or "")
    return home == mod.__name__ or (hasattr(mod, "__path__") and home.startswith(mod.__name__ + "."))


def concern(obj: object) -> str:
    """The :mod:`dse.formulas` concern (module or package) that defines ``obj``: ``"activation_offload"``."""
    return str(getattr(obj, "__module__", "")).split(".")[2]
