"""The equations, as pure functions of numbers or numpy arrays (SI units).

One module per concern:

- :mod:`dse.formulas.transformer` — parameters, FLOPs, activation bytes per layer
- :mod:`dse.formulas.memory` — model-state bytes per tensor class and ZeRO stage
- :mod:`dse.formulas.parallelism` — collectives, group bandwidths, pipeline bubble
- :mod:`dse.formulas.compute` — GEMM, attention and element-wise kernel times
- :mod:`dse.formulas.cost` — capital cost, power, energy and cost per token
- :mod:`dse.formulas.offload` — ZeRO-Infinity placement, bytes per tier and link, phase times
- :mod:`dse.formulas.near_storage` — Smart-Infinity's update on computational storage, top-k compression
- :mod:`dse.formulas.chiplet` — chiplet packages: NoP collectives per scheme, SRAM, DRAM, overlap, energy
- :mod:`dse.formulas.package_cost` — die yield, known-good dies, packaging cost (Chiplet Actuary)
- :mod:`dse.formulas.activation_offload` — SSDTrain: activations offloaded to SSDs, overlap, endurance

Every function states its equation and source in its docstring, on a line that
starts with ``Formula:``; ``dse estimate --explain`` prints those lines.
"""

from dse.formulas import (activation_offload, chiplet, compute, cost, memory, near_storage, offload, package_cost,
                          parallelism, transformer)

__all__ = ["transformer", "memory", "parallelism", "compute", "cost", "offload", "near_storage", "chiplet",
           "package_cost", "activation_offload"]
