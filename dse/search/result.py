"""The dictionary :func:`dse.search.search` returns, as a ``dict`` that renders in Jupyter and converts to pandas.

:class:`SearchResult` is the same ``dict`` as before (``ranked``, ``evaluated``, ``objectives``, ...) with
``_repr_html_`` (the ranked points or the Pareto front as a table: rank, parameters, objective values, metrics,
bottleneck) and :meth:`~SearchResult.to_dataframe` (one row per ranked point, the same columns plus the
``dse estimate`` command; needs pandas, an optional dependency: ``pip install 'dse[notebook]'``).
"""

from __future__ import annotations

from typing import Any


class SearchResult(dict):
    """A search's result dictionary: ``_repr_html_`` for Jupyter, :meth:`to_dataframe` for pandas."""

    def _repr_html_(self) -> str:
        from dse.report.html import search_html

        return search_html(self)

    def to_dataframe(self) -> Any:
        """The ranked points (best first; a Pareto front in its order) as a ``pandas.DataFrame``.

        Columns: ``rank``, each searched parameter (``plan.tp``, ``gpus``, ...), each objective, the other
        metrics (``throughput.mfu``, ``memory.gpu.total``, ...), ``bottleneck`` and ``command``. A search without
        a feasible point gives an empty frame with those columns.
        """
        from dse._optional import require
        from dse.report.html import search_rows

        pd = require("pandas", "notebook", "SearchResult.to_dataframe()")
        columns, rows = search_rows(self)
        return pd.DataFrame(rows, columns=columns)
