"""The kinds of kernel a table row can be, and the row and table types.

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there).
"""

from __future__ import annotations

from typing import Any

__all__ = ["KINDS"]   # Row and Table are type aliases, not public names

#: The kinds of kernel a row can be.
KINDS = ("gemm", "flash", "elementwise", "collective")

#: One kernel: its kind and numbers (numbers or numpy arrays; see dse.formulas.kernels).
Row = dict[str, Any]
#: A table: kernel name -> row, in execution order.
Table = dict[str, Row]
