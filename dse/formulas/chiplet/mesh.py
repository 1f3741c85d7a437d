"""Geometry of the R x C die mesh: perimeter, DRAM attach points, hops from the edge, ring bandwidth, collective volume.

Part of :mod:`dse.formulas.chiplet` (notation, symbols and the collective-timing assumptions there).
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum, minimum, where

__all__ = ["DRAM_PLACEMENTS", "mesh_perimeter_sides", "dram_attach_points", "edge_hops", "interior_fraction",
           "inward_links", "ring_bandwidth_factor", "collective_bytes"]

#: Where DRAM attaches: package edge (bandwidth grows with the perimeter), every die, or fixed IO dies.
DRAM_PLACEMENTS = ("edge", "per-die", "io-dies")


def mesh_perimeter_sides(rows: Num, cols: Num) -> Num:
    """Die sides on the package boundary, where edge DRAM attaches.

    Formula: 2 (R + C)
    Source: geometry of an R x C mesh.

    Returns:
        die sides [count]

    >>> mesh_perimeter_sides(8, 8)
    32
    """
    return 2 * (rows + cols)


def dram_attach_points(rows: Num, cols: Num, placement: str = "edge", per_side: Num = 1) -> Num:
    """Number of DRAM attach points (stacks or channels) of the package.

    Formula: edge: k 2 (R + C); per-die: k R C; io-dies: k
    Source: research note chiplet.md §2d ("B_DRAM proportional to sqrt(N)" for edge DRAM); Gemini (HPCA'24) code
    for four IO dies per package.

    Args:
        per_side: k, attach points per perimeter die-side (per die, or in total for io-dies) [count]
    Returns:
        attach points [count]

    >>> dram_attach_points(8, 8), dram_attach_points(8, 8, "per-die"), dram_attach_points(8, 8, "io-dies", 4)
    (32, 64, 4)
    """
    if placement == "per-die":
        return rows * cols * per_side
    if placement == "io-dies":
        return per_side + 0 * rows
    return per_side * mesh_perimeter_sides(rows, cols)


def edge_hops(rows: Num, cols: Num) -> Num:
    """Mean NoP hops from the nearest package edge to a die, plus the edge link itself.

    Formula: a/4 - a^2/(12 b) + 1/2 with a = min(R, C), b = max(R, C)
    Source: mean distance from a point of an a x b rectangle to its boundary, a/4 - a^2/12b (geometry), minus the
    half-die of the cell centre, plus the IO link; this tool's approximation (8 x 8: 1.83, exact mean 1.875).

    Returns:
        hops [count]

    >>> round(edge_hops(8, 8), 2)
    1.83
    """
    a = minimum(rows, cols)
    b = maximum(rows, cols)
    return a / 4 - a * a / (12 * b) + 0.5


def interior_fraction(rows: Num, cols: Num) -> Num:
    """Share of dies not on the package boundary.

    Formula: max(R-2, 0) max(C-2, 0) / (R C)
    Source: geometry of an R x C mesh.

    Returns:
        share [fraction]

    >>> interior_fraction(8, 8)
    0.5625
    """
    return maximum(rows - 2, 0) * maximum(cols - 2, 0) / (rows * cols)


def inward_links(rows: Num, cols: Num) -> Num:
    """Links from boundary dies into the interior (they carry edge DRAM traffic inwards).

    Formula: 2 max(R-2, 0) + 2 max(C-2, 0)
    Source: geometry of an R x C mesh (one link per boundary die facing an interior die).

    Returns:
        links [count]

    >>> inward_links(8, 8)
    24
    """
    return 2 * maximum(rows - 2, 0) + 2 * maximum(cols - 2, 0)


def ring_bandwidth_factor(rows: Num, cols: Num) -> Num:
    """Link directions a die uses in a ring over the whole mesh (the 1D scheme's snake).

    Formula: 2 when R, C >= 2 and R C even (a nearest-neighbour Hamiltonian cycle, used both ways); else 1
    Source: grid graphs have a Hamiltonian cycle iff both sides are >= 2 and the node count is even (Itai et al.
    1982, SIAM J. Comput. 11(4)); a bidirectional ring halves the per-direction volume.

    Returns:
        factor [1]

    >>> import numpy as np
    >>> ring_bandwidth_factor(np.array([8, 3, 1]), np.array([8, 3, 16]))
    array([2., 1., 1.])
    """
    cycle = (minimum(rows, cols) >= 2) & ((rows * cols) % 2 == 0)
    return where(cycle, 2.0, 1.0)


def collective_bytes(nbytes: Num, n: Num) -> Num:
    """Bytes one member receives in an all-gather (or sends in a reduce-scatter) of a tensor.

    Formula: (n - 1)/n S
    Source: Patarasuk & Yuan 2009 (ring or line all-gather / reduce-scatter).

    Args:
        n: members [count]
    Returns:
        bytes [bytes]

    >>> collective_bytes(64e6, 8) / 1e6   # MB
    56.0
    """
    return (n - 1) / n * nbytes
