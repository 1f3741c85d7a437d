"""Energy and cost in one place: re-exports of the functions that live with their models.

Nothing is defined here; each name is the function of its home module (documented there):

- GPU systems (:mod:`dse.formulas.cost`): capital cost, rated power, energy per iteration at
  the wall, cost per token;
- chiplet packages (:mod:`dse.formulas.chiplet`): energy per iteration by component
  (``chiplet_iteration_energy``) and the SRAM operand traffic it charges;
- manufacturing (:mod:`dse.formulas.package_cost`): die yield, known-good-die cost and the
  recurring cost of a multi-die package (Chiplet Actuary).
"""

from __future__ import annotations

from dse.formulas.chiplet import iteration_energy as chiplet_iteration_energy, sram_operand_bytes
from dse.formulas.cost import SECONDS_PER_YEAR, capital_cost, cost_per_token, iteration_energy, power_draw
from dse.formulas.package_cost import (
                                       die_yield,
                                       dies_per_wafer,
                                       known_good_die_cost,
                                       package_re_cost,
                                       raw_die_cost,
                                       split_die_area,
)

__all__ = ["SECONDS_PER_YEAR", "capital_cost", "power_draw", "iteration_energy", "cost_per_token",
           "chiplet_iteration_energy", "sram_operand_bytes", "die_yield", "dies_per_wafer", "raw_die_cost",
           "known_good_die_cost", "package_re_cost", "split_die_area"]
