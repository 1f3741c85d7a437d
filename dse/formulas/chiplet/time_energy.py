"""Time of a phase whose compute, NoP and DRAM work overlap; energy of an iteration by component.

Part of :mod:`dse.formulas.chiplet` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum

__all__ = ["overlapped_time", "iteration_energy", "sram_operand_bytes"]

def overlapped_time(compute: Num, nop: Num, dram: Num, overlap: Num = 1.0) -> Num:
    """Time of a phase whose compute, NoP and DRAM work can overlap.

    Formula: t = max(t_c, t_n, t_d) + (1 - eta)(t_c + t_n + t_d - max)
    Source: roofline-style overlap (eta = 1: perfect, double-buffered prefetch; eta = 0: serial); the themoonlight
    summary of Hecaton v2 mentions overlapping computation with memory access (research note chiplet.md §1a).

    Args:
        compute: t_c [s]
        nop: t_n [s]
        dram: t_d [s]
        overlap: eta [fraction]
    Returns:
        time [s]

    >>> import numpy as np
    >>> overlapped_time(3.0, 1.0, 2.0, np.array([1.0, 0.5, 0.0]))
    array([3. , 4.5, 6. ])
    """
    peak = maximum(maximum(compute, nop), dram)
    return peak + (1 - overlap) * (compute + nop + dram - peak)


def iteration_energy(flops: Num, sram_bytes: Num, nop_byte_hops: Num, dram_bytes: Num, flop_energy: Num,
                     sram_energy: Num, nop_energy: Num, dram_energy: Num, static_power: Num = 0.0,
                     seconds: Num = 0.0) -> dict[str, Num]:
    """Energy of one iteration of a chiplet package by component.

    Formula: E = F e_flop + B_sram e_sram + B_nop,hops e_nop + B_dram e_dram + P_static t
    Source: Gemini (HPCA'24) code SET-Scheduling-Project/GEMINI-HPCA2024 src/main.cpp (per-byte and per-MAC
    energies); research note chiplet.md §1c, §2e.

    Args:
        flops: F, FLOPs executed [FLOP]
        sram_bytes: B_sram, SRAM bytes read and written [bytes]
        nop_byte_hops: B_nop,hops, NoP bytes times hops [bytes]
        dram_bytes: B_dram, DRAM bytes [bytes]
        flop_energy: e_flop [J/FLOP]
        sram_energy: e_sram [J/byte]
        nop_energy: e_nop, per byte and hop [J/byte]
        dram_energy: e_dram [J/byte]
        static_power: P_static [W]
        seconds: t, iteration time [s]
    Returns:
        dict compute_j, sram_j, nop_j, dram_j, static_j, total_j [J]

    >>> e = iteration_energy(1e15, 1e13, 1e12, 1e12, 0.5e-12, 0.1e-12, 0.6e-12 * 8, 5.5e-12 * 8)
    >>> {k: round(v, 1) for k, v in e.items()}
    {'compute_j': 500.0, 'sram_j': 1.0, 'nop_j': 4.8, 'dram_j': 44.0, 'static_j': 0.0, 'total_j': 549.8}
    """
    parts = {"compute_j": flops * flop_energy, "sram_j": sram_bytes * sram_energy, "nop_j": nop_byte_hops * nop_energy,
             "dram_j": dram_bytes * dram_energy, "static_j": static_power * seconds}
    parts["total_j"] = parts["compute_j"] + parts["sram_j"] + parts["nop_j"] + parts["dram_j"] + parts["static_j"]
    return parts


def sram_operand_bytes(flops: Num, tile: Num, bytes_per_element: Num = 2) -> Num:
    """SRAM bytes read to feed the MAC array.

    Formula: B = F e / t
    Source: output-stationary tiling: a t x t output tile reads t + t operands per k step for 2 t^2 FLOP.

    Args:
        flops: F, FLOPs executed [FLOP]
    Returns:
        bytes [bytes]

    >>> sram_operand_bytes(1e15, 128) / 1e12   # TB
    15.625
    """
    return flops * bytes_per_element / tile
