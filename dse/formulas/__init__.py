"""The equations, as pure functions of numbers or numpy arrays (SI units).

One module per concern:

- :mod:`dse.formulas.transformer` — parameters, FLOPs, activation bytes per layer
- :mod:`dse.formulas.precision` — precision recipes: bytes per tensor class, dtype per GEMM class
- :mod:`dse.formulas.finetune` — fine-tuning with frozen weights: LoRA adapters, QLoRA's quantized weights
- :mod:`dse.formulas.fp8` — FP8 training (Transformer Engine): cast kernels, FP8 weight copies, scaling metadata
- :mod:`dse.formulas.optimizer` — the optimizers: states, bytes kept, bytes moved by the step
- :mod:`dse.formulas.memory` — model-state bytes per tensor class and ZeRO stage
- :mod:`dse.formulas.allocator` — PyTorch's CUDA caching allocator: reserved beyond allocated (segments, holes)
- :mod:`dse.formulas.parallelism` — collectives, group bandwidths, pipeline bubble
- :mod:`dse.formulas.compute` — GEMM, attention and element-wise kernel times
- :mod:`dse.formulas.kernels` — a layer as a table of kernels (shapes, bytes, saved tensors, collectives)
- :mod:`dse.formulas.stacks` — a software stack (stacks/*.yaml) applied to the kernel table
- :mod:`dse.formulas.cost` — capital cost, power, energy and cost per token
- :mod:`dse.formulas.offload` — ZeRO-Infinity placement, bytes per tier and link, phase times
- :mod:`dse.formulas.near_storage` — Smart-Infinity's update on computational storage, top-k compression
- :mod:`dse.formulas.activation_offload` — SSDTrain: activations offloaded to SSDs, overlap, endurance
- :mod:`dse.formulas.chiplet` — chiplet packages: NoP collectives per scheme, SRAM, DRAM, overlap, energy
- :mod:`dse.formulas.package_cost` — die yield, known-good dies, packaging cost (Chiplet Actuary)
- :mod:`dse.formulas.energy` — every energy and cost function in one place (re-exports)

Every public function (the names in each module's ``__all__``) takes numbers or numpy
arrays (``Num``; arrays broadcast), states its equation on a ``Formula:`` line and its
source on a ``Source:`` line, gives each argument's unit, and shows a doctest example.
``dse estimate --explain`` prints the equations; docs/formulas.md lists them all.

>>> from dse.formulas import activation_offload
>>> round(activation_offload.lifetime_years(292e15, 3e9), 2)   # an Optane P5800X written at 3 GB/s
3.08
"""

import importlib
from types import ModuleType

from dse.formulas._array import Num

__all__ = ["transformer", "memory", "parallelism", "compute", "kernels", "cost", "offload", "near_storage",
           "chiplet", "package_cost", "activation_offload", "energy", "precision", "finetune", "fp8", "optimizer",
           "stacks", "allocator",
           "Num"]


def __getattr__(name: str) -> ModuleType:
    """Submodules load on first use, so ``dse estimate`` imports only the equations it evaluates."""
    if name in __all__:
        return importlib.import_module(f"dse.formulas.{name}")
    raise AttributeError(f"module 'dse.formulas' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
