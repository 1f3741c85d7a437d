"""The equations, as pure functions of numbers or numpy arrays (SI units).

One module per concern:

- :mod:`dse.formulas.transformer` — parameters, FLOPs, activation bytes per layer
- :mod:`dse.formulas.memory` — model-state bytes per tensor class and ZeRO stage
- :mod:`dse.formulas.parallelism` — collectives, group bandwidths, pipeline bubble
- :mod:`dse.formulas.compute` — GEMM, attention and element-wise kernel times

Every function states its equation and source in its docstring, on a line that
starts with ``Formula:``; ``dse estimate --explain`` prints those lines.
"""

from dse.formulas import compute, memory, parallelism, transformer

__all__ = ["transformer", "memory", "parallelism", "compute"]
