"""dse: analytical cost model and design-space exploration for training LLMs on memory-constrained systems.

``dse.estimate(model, hardware, plan=None, **plan_fields)`` estimates one scenario
(see :func:`dse.estimate.estimate`); ``dse.formulas`` holds the equations.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name in ("estimate", "formulas"):
        import importlib

        return importlib.import_module(f"dse.{name}")
    raise AttributeError(f"module 'dse' has no attribute {name!r}")
