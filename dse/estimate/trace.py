"""Record every formula call of one estimate, for ``dse estimate --explain``.

:class:`Tracer` wraps a formulas module; calling a function through it records
the function, its inputs and its value. The normal path uses the modules
directly, so tracing costs nothing unless asked for.
"""

from __future__ import annotations

import inspect


def formula_line(fn) -> str:
    """The ``Formula:`` line of a formula's docstring (its equation), with its ``Source:`` in parentheses."""
    from dse.formulas._docstring import formula_line as line

    return line(fn)


class Trace:
    def __init__(self):
        self.rows: list[dict] = []
        self.context: str = ""

    def record(self, module: str, fn, args: tuple, kwargs: dict, value):
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):  # pragma: no cover
            params = []
        inputs = dict(zip(params, args))
        inputs.update(kwargs)
        self.rows.append({"term": f"{module}.{fn.__name__}", "context": self.context,
                          "formula": formula_line(fn), "inputs": inputs, "value": value})


class Tracer:
    """A stand-in for a formulas module that records each call in a :class:`Trace`."""

    def __init__(self, module, trace: Trace):
        self._module = module
        self._trace = trace
        self._name = module.__name__.rsplit(".", 1)[-1]

    def __getattr__(self, name):
        fn = getattr(self._module, name)
        if not callable(fn):
            return fn

        def call(*args, **kwargs):
            value = fn(*args, **kwargs)
            self._trace.record(self._name, fn, args, kwargs, value)
            return value

        return call
