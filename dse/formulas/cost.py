"""Capital cost, energy and cost per token of a training system.

Capital is the sum of part prices from the hardware spec; it is written off
linearly over ``amortization_years`` of which a share ``utilization`` is spent
training. Energy assumes every part draws its rated power while the iteration
runs (an upper bound: LLM training keeps GPUs near TDP), times the data-centre PUE.
The energy of chiplet packages (per FLOP, per byte) is :func:`dse.formulas.chiplet.iteration_energy`;
:mod:`dse.formulas.energy` gathers every energy and cost function in one place.
"""

from __future__ import annotations

from dse.formulas._array import Num

__all__ = ["SECONDS_PER_YEAR", "capital_cost", "power_draw", "iteration_energy", "cost_per_token"]

#: Seconds in a Julian year (365.25 days), used for amortisation and drive lifetimes.
SECONDS_PER_YEAR = 365.25 * 86400


def capital_cost(gpus: Num, gpu_price: Num, nodes: Num, node_price: Num, drives: Num = 0,
                 drive_price: Num = 0.0, hosts: Num = 0, host_price: Num = 0) -> Num:
    """Purchase cost of the parts a plan uses.

    Formula: C = n_gpu p_gpu + n_node p_node + n_host p_host + n_drive p_drive
    Source: definition (sum of part prices); prices are in the hardware spec files, each with its citation.

    Args:
        gpus: n_gpu, GPUs used [count]
        gpu_price: p_gpu, price of one GPU [USD]
        nodes: n_node, nodes used [count]
        node_price: p_node, price of one node beyond its GPUs and hosts (chassis, switches, network) [USD]
        drives: n_drive, drives used [count]
        drive_price: p_drive, price of one drive (with its accelerator for a CSD) [USD]
        hosts: n_host, hosts used: one per node unless the node states smaller hosts [count]
        host_price: p_host, price of one host (CPU, DRAM, board) [USD]
    Returns:
        capital cost [USD]

    >>> capital_cost(8, 15_000, 1, 50_000, drives=4, drive_price=400)   # one 8-GPU node with 4 drives
    171600
    >>> capital_cost(8, 40_000, 1, 250_000, 8, 700, hosts=4, host_price=5_000)   # 8 GPUs of a rack: 4 hosts of 2
    595600
    >>> import numpy as np
    >>> capital_cost(np.array([8, 16, 32]), 15_000, np.array([1, 2, 4]), 50_000)
    array([170000., 340000., 680000.])
    """
    return gpus * gpu_price + nodes * node_price + hosts * host_price + drives * drive_price


def power_draw(gpus: Num, gpu_power: Num, nodes: Num, host_power: Num, drives: Num = 0, drive_power: Num = 0.0) -> Num:
    """Electrical power of the parts in use, at their rated power.

    Formula: P = n_gpu P_gpu + n_host P_host + n_drive P_drive
    Source: definition; rated powers (TDP) from the hardware spec files.

    Args:
        gpus: n_gpu, GPUs used [count]
        gpu_power: P_gpu, rated power of one GPU [W]
        nodes: n_host, hosts used: the nodes unless a node states smaller hosts [count]
        host_power: P_host, rated power of one host without its GPUs and drives [W]
        drives: n_drive, drives used [count]
        drive_power: P_drive, rated power of one drive [W]
    Returns:
        power [W]

    >>> power_draw(8, 400, 1, 1500, drives=4, drive_power=25)   # DGX A100-like node
    4800
    """
    return gpus * gpu_power + nodes * host_power + drives * drive_power


def iteration_energy(power_w: Num, iteration_s: Num, pue: Num = 1.0) -> Num:
    """Energy of one iteration at the wall.

    Formula: E = P t PUE
    Source: definition; PUE (power usage effectiveness) as defined by The Green Grid (2007).

    Args:
        power_w: P, power drawn by the parts [W]
        iteration_s: t, iteration time [s]
        pue: PUE, facility power / IT power [1]
    Returns:
        energy per iteration [J]

    >>> iteration_energy(4800, 10.0, pue=1.2)
    57600.0
    """
    return power_w * iteration_s * pue


def cost_per_token(capital_usd: Num, energy_per_token_j: Num, tokens_per_s: Num, amortization_years: Num = 4.0,
                   utilization: Num = 0.9, electricity_usd_per_kwh: Num = 0.10) -> Num:
    """USD per token: amortised capital plus electricity.

    Formula: c = C / (Y u 3.156e7 s) / (tokens/s) + E_token / 3.6e6 J/kWh x price
    Source: straight-line amortisation (definition); 3.6e6 J per kWh.

    Args:
        capital_usd: C, capital cost [USD]
        energy_per_token_j: E_token, energy per token at the wall [J]
        tokens_per_s: training throughput [tokens/s]
        amortization_years: Y, write-off period [years]
        utilization: u, share of the period spent training [fraction]
        electricity_usd_per_kwh: electricity price [USD/kWh]
    Returns:
        cost per token [USD]

    >>> round(cost_per_token(171_600, 1.5, 20_000) * 1e6, 4)   # USD per million tokens: capital 0.0755 + energy 0.0417
    0.1172
    """
    capital_rate = capital_usd / (amortization_years * utilization * SECONDS_PER_YEAR)
    return capital_rate / tokens_per_s + energy_per_token_j / 3.6e6 * electricity_usd_per_kwh
