"""``dse search``: find the best hardware and parallelism for a training job.

Modules, in the order data flows through them:

- :mod:`~dse.search.space` — a space file (or flags) -> :class:`~dse.search.space.Space`
  (parameters are any ``--set`` path; values as lists or ranges);
- :mod:`~dse.search.objectives` — objectives and constraints, read from the estimate's keys;
- :mod:`~dse.search.grid` — the discrete grid: Python-level groups x numpy blocks;
- :mod:`~dse.search.evaluate` — one block with numpy (memory first, time only for the
  points that fit: :mod:`~dse.search.block`) or one point with the scalar estimate
  (:mod:`~dse.search.point`); :mod:`~dse.search.group`, :mod:`~dse.search.gather`,
  :mod:`~dse.search.vector_check` hold what they share;
- :mod:`~dse.search.pareto` — exact best-k and Pareto front over a stream of blocks;
- :mod:`~dse.search.exhaustive`, :mod:`~dse.search.optuna_engine` — the engines;
  :mod:`~dse.search.storage` — optuna storages (SQLite, PostgreSQL, journal file);
- :mod:`~dse.search.runner` — engine choice, verification of the answer, the
  ``dse estimate`` command for it; :mod:`~dse.search.output` — progress, tables, exports.

Library use::

    from dse.search import load_space, search
    out = search(load_space("examples/spaces/llama2-70b-parallelism.yaml"), engine="exhaustive")
    out["ranked"][0]["params"], out["ranked"][0]["value"]

Nothing here is imported by ``dse estimate``; optuna and matplotlib are imported
only by the code that uses them.
"""

from __future__ import annotations

from dse.search.space import Space, from_dict, load as load_space


def search(space, **kw) -> dict:
    """Search a :class:`Space`; keyword arguments as :func:`dse.search.runner.search`."""
    from dse.search.runner import search as _search

    return _search(space, **kw)


__all__ = ["Space", "from_dict", "load_space", "search"]
