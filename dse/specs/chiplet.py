"""The chiplet-package spec: a mesh of compute dies with SRAM, NoP links and DRAM.

A package is ``rows x cols`` identical dies (:class:`ChipletDieSpec`) joined by
nearest-neighbour network-on-package links (:class:`NoPSpec`), with DRAM
(:class:`ChipletDRAMSpec`) attached at the package edge (one attach point per
perimeter die-side) or on every die, assembled with one of the three packaging
technologies of the Chiplet Actuary cost model. Catalog files live in
``hwspecs/chiplets/`` and carry ``chiplet`` in their names; every number cites its
source in a YAML comment. Units are SI once loaded.

Plan-side choices (which distributed scheme, the logical mesh, the schedule) are
fields of :class:`dse.specs.plan.Plan` (``chiplet_*``); :func:`parse_mesh` and
:func:`check_chiplet_plan` validate them against a package.
"""

from __future__ import annotations

from dataclasses import dataclass

from dse.errors import InputError
from dse.specs._schema import spec_field
from dse.specs.hardware import CHIPLET_PACKAGE, SiteSpec

PACKAGINGS = ("organic", "fanout", "interposer")
DRAM_PLACEMENTS = ("edge", "per-die", "io-dies")
TRAINING_BYTES = 2          # bf16 operands: the dtype the die's peak and its SRAM tiles are stated in


def _nodes():
    from dse.formulas.package_cost import PROCESS_NODES

    return PROCESS_NODES


@dataclass(frozen=True, kw_only=True)
class ChipletDieSpec:
    peak_flops: float = spec_field(unit="flop/s", gt=0, help="dense bf16 peak of one die")
    sram: float = spec_field(unit="bytes", gt=0, help="on-die SRAM")
    area: float | None = spec_field(None, unit="mm2", gt=0,
                                    help="die area including its D2D PHYs (sets yield and cost); "
                                         "auto (or omitted): Chiplet Cloud's 7 nm area model from peak, SRAM and NoP "
                                         "links")
    node: str = spec_field("7", help="process node in nm, a row of the cost model "
                                     "(3, 5, 7, 10, 12, 14, 16, 20, 28, 40, 55)")
    utilization: float = spec_field(0.8, unit="fraction", gt=0, le=1, help="fraction of peak the GEMMs reach")
    tile: int = spec_field(128, gt=0,
                           help="edge of the MAC array's output tile, elements (SRAM operand traffic, smallest "
                                "working set)")
    flop_energy: float = spec_field(unit="J/flop", ge=0, help="energy per FLOP of the MAC array")
    sram_energy: float = spec_field(unit="J/B", ge=0, help="energy per SRAM byte read or written")
    static_power: float = spec_field(0.0, unit="W", ge=0, help="power drawn regardless of activity (leakage, clocks)")

    def _check(self, where: str) -> None:
        from dse.formulas.chiplet import min_tile_sram
        from dse.units import fmt

        nodes = _nodes()
        if str(self.node) not in nodes:
            raise InputError(f"{where}.node: unknown process node '{self.node}'; allowed: {', '.join(nodes)} (nm)")
        if self.area is None and str(self.node) != "7":
            raise InputError(f"{where}.area: auto (the default) uses Chiplet Cloud's 7 nm area model; give the area "
                             f"of a {self.node} nm die, e.g. area: 200 mm2")
        need = min_tile_sram(self.tile, TRAINING_BYTES)
        if self.sram < need:
            raise InputError(f"{where}.sram: {fmt(self.sram, 'bytes')} is too small for any tile: a "
                             f"{self.tile}x{self.tile} MAC tile needs {fmt(need, 'bytes')} (double-buffered input, "
                             "weight and output tiles, bf16)")


@dataclass(frozen=True, kw_only=True)
class NoPSpec:
    link_bandwidth: float = spec_field(unit="bytes/s", gt=0, help="per direction, per link between mesh neighbours")
    hop_latency: float = spec_field(20e-9, unit="s", ge=0, help="per hop (PHY + router)")
    energy: float = spec_field(unit="J/B", ge=0, help="energy per byte per hop")
    technology: str = spec_field("", help="what the link is (for reports)")


@dataclass(frozen=True, kw_only=True)
class ChipletDRAMSpec:
    placement: str = spec_field("edge", choices=DRAM_PLACEMENTS, help="edge: per perimeter die-side; per-die: on every "
                                "die; io-dies: a fixed set of IO dies at the package edge")
    per_attach: int = spec_field(1, gt=0,
                                 help="DRAM devices per attach point (perimeter die-side or die); io-dies: in total")
    bandwidth: float = spec_field(unit="bytes/s", gt=0, help="per DRAM device")
    capacity: float = spec_field(unit="bytes", gt=0, help="per DRAM device")
    energy: float = spec_field(unit="J/B", ge=0, help="energy per byte read or written")
    price: float = spec_field(0.0, unit="USD", ge=0, help="per DRAM device")
    technology: str = spec_field("", help="what the DRAM is (for reports)")


@dataclass(frozen=True, kw_only=True)
class ChipletPackageSpec:
    name: str
    kind: str = spec_field(CHIPLET_PACKAGE, choices=(CHIPLET_PACKAGE,),
                           help="hardware kind (hwspecs/chiplets/: chiplet-package)")
    rows: int = spec_field(gt=0, help="dies along the package's vertical side")
    cols: int = spec_field(gt=0, help="dies along the horizontal side")
    die: ChipletDieSpec
    nop: NoPSpec
    dram: ChipletDRAMSpec
    packaging: str = spec_field("organic", choices=PACKAGINGS,
                                help="organic substrate, fan-out RDL, or silicon interposer")
    assembly_price: float = spec_field(0.0, unit="USD", ge=0,
                                       help="per-package cost beyond dies, packaging and DRAM (IO dies, test)")
    site: SiteSpec = spec_field(factory=SiteSpec)
    description: str = ""
    source: str = ""

    @property
    def dies(self) -> int:
        return self.rows * self.cols


def parse_mesh(text: str, where: str = "--mesh") -> tuple[int, int]:
    """``"8x16"`` -> (8, 16); one-line error otherwise."""
    parts = str(text).lower().replace("×", "x").split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise InputError(f"{where} {text!r}: expected ROWSxCOLS with positive integers, e.g. 8x8")
    r, c = int(parts[0]), int(parts[1])
    if r < 1 or c < 1:
        raise InputError(f"{where} {text!r}: rows and columns must be at least 1")
    return r, c


def plan_mesh(plan, package) -> tuple[int, int]:
    """The logical R x C layout of a plan on a package (default: the package's own rows x cols)."""
    if plan.chiplet_mesh is None:
        return package.rows, package.cols
    return parse_mesh(plan.chiplet_mesh)


def check_chiplet_plan(plan, model, package, where: str = "plan") -> None:
    """Raise :class:`InputError` for a plan that cannot run on a chiplet package at all
    (the rules :data:`dse.specs.rules.CHIPLET_RULES`)."""
    from dse.specs import rules

    rules.check(rules.CHIPLET_RULES, plan, model, package, where)


def chiplet_plan_rules(plan, model, package) -> dict:
    """:func:`check_chiplet_plan` as ``{rule: ok}``, array-safe in the numeric plan fields (the search).

    A malformed ``chiplet_mesh`` is still an input error (raised), not a rule.
    """
    from dse.specs import rules

    return rules.holds(rules.CHIPLET_RULES, plan, model, package)
