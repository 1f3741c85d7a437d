"""What is trained (model), what it runs on (hardware), how (plan)."""

from dse.specs.hardware import (
    CXLMemoryArraySpec,
    CXLMemorySpec,
    GPUSpec,
    HostSpec,
    LinkSpec,
    NodeSpec,
    StorageArraySpec,
    StorageSpec,
    SystemSpec,
)
from dse.specs.model import ModelSpec
from dse.specs.plan import Plan

__all__ = ["ModelSpec", "Plan", "SystemSpec", "NodeSpec", "GPUSpec", "HostSpec", "LinkSpec",
           "StorageSpec", "StorageArraySpec", "CXLMemorySpec", "CXLMemoryArraySpec"]
