"""Optional dependencies: one way to import them, one message when one is missing.

``dse`` itself needs only typer, rich, numpy and PyYAML. The search engine (optuna),
fits (scipy), plots (matplotlib) and PostgreSQL study storage (psycopg2) are extras,
imported where they are used (``dse estimate`` never imports them). Every such import
goes through :func:`require`, so a missing package always reads the same way::

    dse: error: --plot needs matplotlib: pip install 'dse[plot]'

and the CLI exits with status 2 (an :class:`~dse.errors.InputError`), never a traceback.
"""

from __future__ import annotations

import sys
from types import ModuleType

from dse.errors import InputError

# The extra of pyproject.toml that installs each optional package.
EXTRAS = {"matplotlib": "plot", "optuna": "search", "scipy": "search", "psycopg2": "postgres", "torch": "measure",
          "pandas": "notebook"}


def require(module: str, extra: str | None = None, needed_by: str = "this command") -> ModuleType:
    """Import ``module`` (a dotted name is fine) or raise a one-line :class:`InputError`.

    ``extra`` is the pyproject extra that installs it (default: from :data:`EXTRAS`);
    ``needed_by`` names what needs it in the message, e.g. ``"--plot"``.

    >>> require("json").__name__
    'json'
    >>> require("no_such_module_xyz", "plot", "--plot")
    Traceback (most recent call last):
    ...
    dse.errors.InputError: --plot needs no_such_module_xyz: pip install 'dse[plot]'
    """
    top = module.split(".")[0]
    extra = extra or EXTRAS.get(top)
    try:
        __import__(module)            # through builtins.__import__, so tests can hide a package
    except ImportError as exc:
        hint = f": pip install 'dse[{extra}]'" if extra else ""
        broken = exc.name and exc.name.split(".")[0] != top
        why = f" (importing it failed: {' '.join(str(exc).split())})" if broken else ""
        raise InputError(f"{needed_by} needs {top}{why}{hint}") from None
    return sys.modules[module]
