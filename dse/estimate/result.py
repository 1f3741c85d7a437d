"""The dictionary :func:`dse.estimate` returns, as a ``dict`` that Jupyter renders as tables.

:class:`Estimate` is a plain ``dict`` (the keys of ``dse estimate --json``; ``json.dumps`` and every
dictionary operation work as before) with ``_repr_html_``: in a notebook, the last expression
``dse.estimate(...)`` shows the plan, the defaults it filled in, its warnings and the time, memory and
throughput tables (an estimate over arrays: one row per scenario). :mod:`dse.report.html` renders it, imported
only when a notebook asks.
"""

from __future__ import annotations

from typing import Any


class Estimate(dict[str, Any]):
    """An estimate's result dictionary that renders as HTML tables in Jupyter."""

    def _repr_html_(self) -> str:
        from dse.report.html import estimate_html

        return estimate_html(self)
