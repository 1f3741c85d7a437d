"""Manufacturing cost of a chiplet package: die yield, dies per wafer, known-good dies, packaging.

The Chiplet Actuary model (Feng & Ma, "Chiplet Actuary: A Quantitative Cost Model and
Multi-Chiplet Architecture Exploration", DAC 2022; open code Yinxiao-Feng/chiplet-actuary,
``chiplet_actuary/{chip,package,spec}.py`` and ``parameter.ini``), re-derived here as pure
functions of numbers or numpy arrays. Recurring (RE) cost only: the one-off design cost
(NRE) is amortised over volume and is outside a per-package price.

Packaging technologies (the model's three): ``organic`` substrate (OS), ``fanout`` RDL
interposer (FO, chip-last) and silicon ``interposer`` (SI). The per-node defaults
(:data:`PROCESS_NODES`) and the packaging constants (:data:`PACKAGING`) are the model's
``parameter.ini`` values; the 3 nm row is marked "Inaccurate Assumptions" there.

Quirk kept on purpose: in the reference ``Advanced.cost_RE`` (FO and SI) the micro-bump
cost ``chip.area * u_bump_cost_factor`` is added once per chip *type*, not once per chip
(the organic-substrate path multiplies its C4 bump cost by the chip count). We reproduce
the reference outputs, so :func:`package_re_cost` does the same when ``bump_per_type`` is
true (the default) and multiplies by the chip count when it is false. The FO path also
uses the SI micro-bump factor (0.01 $/mm^2), as the reference code does.
"""

from __future__ import annotations

import math

from dse.formulas._array import Num, where

__all__ = ["PROCESS_NODES", "WAFER_DIAMETER", "EDGE_LOSS", "SCRIBE_LANE", "CRITICAL_LEVEL", "PACKAGING",
           "PACKAGE_TECHNOLOGIES", "die_yield", "dies_per_wafer", "raw_die_cost", "known_good_die_cost",
           "node_constants", "package_re_cost", "split_die_area", "AREA_7NM", "die_area"]

#: Process node (nm, as a string) -> defect density D0 (/cm^2) and wafer price (USD, 300 mm)
#: (Chiplet Actuary parameter.ini; the 3 nm row is flagged "Inaccurate Assumptions" there).
PROCESS_NODES = {
    "3": {"defect_density": 0.20, "wafer_cost": 30000.0},
    "5": {"defect_density": 0.11, "wafer_cost": 16988.0},
    "7": {"defect_density": 0.09, "wafer_cost": 9346.0},
    "10": {"defect_density": 0.08, "wafer_cost": 5992.0},
    "12": {"defect_density": 0.08, "wafer_cost": 5992.0},   # Gemini's C++ port adds 12 nm with the 10 nm values
    "14": {"defect_density": 0.08, "wafer_cost": 3984.0},
    "16": {"defect_density": 0.08, "wafer_cost": 3984.0},   # assumption: 16 nm as the 14 nm row (same FinFET)
    "20": {"defect_density": 0.07, "wafer_cost": 3677.0},
    "28": {"defect_density": 0.07, "wafer_cost": 2891.0},
    "40": {"defect_density": 0.07, "wafer_cost": 2274.0},
    "55": {"defect_density": 0.07, "wafer_cost": 1937.0},
}

WAFER_DIAMETER = 300.0   # mm
EDGE_LOSS = 5.0          # mm
SCRIBE_LANE = 0.2        # mm
CRITICAL_LEVEL = 10.0    # negative-binomial clustering parameter alpha for logic dies

# packaging technology -> constants of the reference parameter.ini ([OS], [FO], [SI])
PACKAGING = {
    "organic": {"substrate_scale": 4.0, "substrate_cost": 0.005, "c4_bump_cost": 0.005, "bond_yield": 0.99},
    "fanout": {"interposer_scale": 1.2, "interposer_wafer": 1200.0, "defect_density": 0.05, "critical_level": 3.0,
               "bond_yield": 0.98, "u_bump_cost": 0.01},
    "interposer": {"interposer_scale": 1.1, "interposer_wafer": 1937.0, "defect_density": 0.06, "critical_level": 6.0,
                   "bond_yield": 0.95, "u_bump_cost": 0.01},
}
PACKAGE_TECHNOLOGIES = tuple(PACKAGING)


def die_yield(area_mm2: Num, defect_density_cm2: Num, critical_level: Num = CRITICAL_LEVEL) -> Num:
    """Fraction of good dies of a given area (negative binomial yield).

    Formula: Y = (1 + D0 A / (100 alpha))^(-alpha), A in mm^2, D0 in defects/cm^2
    Source: Feng & Ma, Chiplet Actuary (DAC 2022) Eq. 1; code ``Chip.die_yield`` (alpha = 10).

    Args:
        area_mm2: A, die area [mm^2]
        defect_density_cm2: D0, defect density [1/cm^2]
        critical_level: alpha, clustering parameter [1]
    Returns:
        yield [fraction]

    >>> round(die_yield(100, 0.09), 4)   # 7 nm, 100 mm^2 (research note chiplet.md §4a: 0.9143)
    0.9143
    >>> import numpy as np
    >>> np.round(die_yield(np.array([100, 400, 800]), 0.09), 4)
    array([0.9143, 0.7021, 0.4989])
    """
    return (1 + defect_density_cm2 * area_mm2 / (100 * critical_level)) ** (-critical_level)


def dies_per_wafer(area_mm2: Num, wafer_diameter: Num = WAFER_DIAMETER, edge_loss: Num = EDGE_LOSS,
                   scribe_lane: Num = SCRIBE_LANE) -> Num:
    """Gross dies on a round wafer, scribe lanes and edge loss counted.

    Formula: A_s = A + 2 s sqrt(A) + s^2; N = pi (d/2 - e)^2 / A_s - pi (d - 2e) / sqrt(2 A_s)
    Source: Chiplet Actuary (Feng & Ma, DAC 2022) code ``Chip.N_die_total`` (d = 300 mm, e = 5 mm, s = 0.2 mm).

    Args:
        area_mm2: A, die area [mm^2]
        wafer_diameter: d [mm]
        edge_loss: e [mm]
        scribe_lane: s [mm]
    Returns:
        dies [count]

    >>> round(dies_per_wafer(100), 1)
    571.7
    """
    a_s = area_mm2 + 2 * scribe_lane * area_mm2 ** 0.5 + scribe_lane ** 2
    return (math.pi * (wafer_diameter / 2 - edge_loss) ** 2 / a_s
            - math.pi * (wafer_diameter - 2 * edge_loss) / (2 * a_s) ** 0.5)


def raw_die_cost(area_mm2: Num, wafer_cost: Num) -> Num:
    """Cost of one die before test (good or not).

    Formula: C_raw = C_wafer / N_die
    Source: Chiplet Actuary (Feng & Ma, DAC 2022) code ``cost_raw_die``.

    Args:
        area_mm2: A, die area [mm^2]
        wafer_cost: C_wafer, price of a processed 300 mm wafer [USD]
    Returns:
        cost [USD]

    >>> round(raw_die_cost(100, 9346), 2)   # 7 nm
    16.35
    """
    return wafer_cost / dies_per_wafer(area_mm2)


def known_good_die_cost(area_mm2: Num, wafer_cost: Num, defect_density_cm2: Num,
                        critical_level: Num = CRITICAL_LEVEL) -> Num:
    """Cost of one known-good die: the wafer is paid for by the good dies only.

    Formula: C_KGD = C_wafer / (N_die Y_die)
    Source: Chiplet Actuary (Feng & Ma, DAC 2022) code ``Chip.cost_KGD``.

    Args:
        area_mm2: A, die area [mm^2]
        wafer_cost: C_wafer [USD]
        defect_density_cm2: D0 [1/cm^2]
        critical_level: alpha [1]
    Returns:
        cost [USD]

    >>> import numpy as np
    >>> np.round(known_good_die_cost(np.array([100, 400, 800]), 9346, 0.09), 2)   # note §4a: 17.88, 102.41, 318.60
    array([ 17.88, 102.41, 318.6 ])
    """
    return wafer_cost / (dies_per_wafer(area_mm2) * die_yield(area_mm2, defect_density_cm2, critical_level))


def node_constants(node: str) -> dict[str, float]:
    """Defect density and wafer price of a process node (``"7"`` for 7 nm); KeyError if unknown.

    Formula: a row of PROCESS_NODES
    Source: Chiplet Actuary (Feng & Ma, DAC 2022) ``parameter.ini``.

    Args:
        node: process node in nm, as a string [choice]
    Returns:
        dict defect_density [1/cm^2], wafer_cost [USD]

    >>> node_constants("7")
    {'defect_density': 0.09, 'wafer_cost': 9346.0}
    """
    return PROCESS_NODES[str(node)]


#: Chiplet Cloud's 7 nm die-area constants (Peng et al., "Chiplet Cloud", ISCA 2024; code
#: ``bespoke-silicon-group/reallm`` ``hardware_exploration/scripts/CONSTANTS.py``; research note
#: chiplet.md §4c): mm^2 per bf16 TFLOP/s of MACs, per MB (1e6 B) of SRAM and per GB/s of D2D IO
#: (0.3 mm^2 per 12.5 GB/s), the placed fraction of the core (0.7) and the width of the die's ring [mm].
AREA_7NM = {"mac_mm2_per_tflops": 0.29, "sram_mm2_per_mb": 0.45, "io_mm2_per_gbs": 0.3 / 12.5,
            "core_utilization": 0.7, "ring_mm": 0.35}


def die_area(peak_flops: Num, sram_bytes: Num, io_bandwidth: Num) -> Num:
    """Area of a 7 nm compute die from its MAC peak, its SRAM and its D2D IO bandwidth.

    Formula: A = (sqrt((0.29 F/1e12 + 0.45 S/1e6 + 0.024 IO/1e9) / 0.7) + 2 x 0.35)^2
    Source: Chiplet Cloud's 7 nm area model (ISCA 2024; reallm ``CONSTANTS.py``, research note
    chiplet.md §4c): core = MAC + SRAM + IO area, placed at 70 % utilisation, plus a 0.35 mm ring
    on every side (our reading of "(logic + SRAM + IO)/0.7 + a 0.35 mm ring", as in
    hwspecs/chiplets/chiplet-train-8x8.yaml). 7 nm only: other nodes have no constants here.

    Args:
        peak_flops: F, dense bf16 peak of the die [FLOP/s]
        sram_bytes: S, on-die SRAM [bytes]
        io_bandwidth: IO, D2D bandwidth of all the die's links, both directions [bytes/s]
    Returns:
        die area [mm^2]

    >>> round(die_area(100e12, 192 * 2**20, 4 * 2 * 64e9), 1)   # chiplet-train-8x8's die (208 mm^2)
    208.1
    >>> import numpy as np
    >>> np.round(die_area(100e12, np.array([128, 256, 512]) * 2**20, 512e9), 1)   # SRAM costs area
    array([162.6, 253.3, 432.7])
    """
    c = AREA_7NM
    core = (c["mac_mm2_per_tflops"] * peak_flops / 1e12 + c["sram_mm2_per_mb"] * sram_bytes / 1e6
            + c["io_mm2_per_gbs"] * io_bandwidth / 1e9)
    return ((core / c["core_utilization"]) ** 0.5 + 2 * c["ring_mm"]) ** 2


def package_re_cost(n_dies: Num, die_area_mm2: Num, node: str = "7", technology: str = "organic",
                    bump_per_type: bool = True) -> dict[str, Num]:
    """Recurring cost of ``n_dies`` identical dies of one node in one package, by component.

    Formula: total = chips + chip defects + package + package defects + wasted KGD
    Source: Chiplet Actuary (Feng & Ma, DAC 2022) code ``OS.cost_RE`` / ``Advanced.cost_RE``, chip-last.

    With organic: A_pkg = 4 n A; C_pkg = A_pkg 0.005 f (f = 1 single die, 1.5 if A_pkg <= 17^2,
    1.75 if <= 30^2, else 2); chips = n (C_raw + 0.005 A) ; defects = n (C_KGD - C_raw);
    package defects = C_pkg (1/y^n - 1); wasted KGD = (chips + defects)(1/y^n - 1), y = 0.99.
    fanout / interposer: A_int = k n A; y1 = (1 + D A_int/(100 a))^-a; y2 = y_b^n; y3 = 0.99;
    C_int = C_wafer,int / N(A_int) + 0.005 A_int; C_sub = 4 A_int 0.005;
    chips = n C_raw + u A (u = 0.01 $/mm^2; once per chip type, see the module note);
    package defects = C_int (1/(y1 y2 y3) - 1) + C_sub (1/y3 - 1); wasted KGD = (chips + defects)(1/(y2 y3) - 1).

    Args:
        n_dies: n, dies in the package [count]
        die_area_mm2: A, area of each die [mm^2]
        node: process node in nm [choice]
        technology: organic, fanout or interposer [choice]
        bump_per_type: reproduce the reference's micro-bump cost once per chip type [bool]
    Returns:
        dict chips, chip_defects, package, package_defects, wasted_kgd, total [USD]

    >>> round(package_re_cost(1, 800)["total"], 1)   # 800 mm^2 of 7 nm as one SoC (note §4a: $342.0)
    342.0
    >>> import numpy as np
    >>> n = np.array([2, 4, 8, 16])
    >>> np.round(package_re_cost(n, split_die_area(800, n))["total"], 1)   # split into chiplets (note: 281.0 ... 221.5)
    array([281. , 231. , 215.6, 221.5])
    """
    c = node_constants(node)
    raw = raw_die_cost(die_area_mm2, c["wafer_cost"])
    kgd = known_good_die_cost(die_area_mm2, c["wafer_cost"], c["defect_density"])
    defects = n_dies * (kgd - raw)
    p = PACKAGING[technology]
    if technology == "organic":
        chips = n_dies * (raw + die_area_mm2 * p["c4_bump_cost"])
        area = p["substrate_scale"] * n_dies * die_area_mm2
        f = where(n_dies == 1, 1.0, where(area > 30 * 30, 2.0, where(area > 17 * 17, 1.75, 1.5)))
        pkg = area * p["substrate_cost"] * f
        y = p["bond_yield"] ** n_dies
        pkg_defects = pkg * (1 / y - 1)
        wasted = (chips + defects) * (1 / y - 1)
    else:
        os_ = PACKAGING["organic"]
        bumps = die_area_mm2 * p["u_bump_cost"] * (1 if bump_per_type else n_dies)
        chips = n_dies * raw + bumps
        a_int = p["interposer_scale"] * n_dies * die_area_mm2
        y1 = die_yield(a_int, p["defect_density"], p["critical_level"])
        y2 = p["bond_yield"] ** n_dies
        y3 = os_["bond_yield"]
        c_int = p["interposer_wafer"] / dies_per_wafer(a_int) + a_int * os_["c4_bump_cost"]
        c_sub = os_["substrate_scale"] * a_int * os_["substrate_cost"]
        pkg = c_int + c_sub
        pkg_defects = c_int * (1 / (y1 * y2 * y3) - 1) + c_sub * (1 / y3 - 1)
        wasted = (chips + defects) * (1 / (y2 * y3) - 1)
    total = chips + defects + pkg + pkg_defects + wasted
    return {"chips": chips, "chip_defects": defects, "package": pkg, "package_defects": pkg_defects,
            "wasted_kgd": wasted, "total": total}


def split_die_area(total_logic_mm2: Num, n_chiplets: Num, d2d_overhead: Num = 0.10) -> Num:
    """Area of each chiplet when a monolithic design is split into n pieces.

    Formula: A_chiplet = A_total / n x (1 + d2d) for n > 1, A_total for n = 1
    Source: Chiplet Actuary (Feng & Ma, DAC 2022) exploration: die-to-die PHY overhead of 10 %.

    Args:
        total_logic_mm2: A_total, area of the monolithic design [mm^2]
        n_chiplets: n [count]
        d2d_overhead: d2d, area added per chiplet for die-to-die interfaces [fraction]
    Returns:
        area per chiplet [mm^2]

    >>> split_die_area(800, 8)
    110.00000000000001
    """
    return where(n_chiplets == 1, total_logic_mm2, total_logic_mm2 / n_chiplets * (1 + d2d_overhead))
