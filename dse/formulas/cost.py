"""Capital cost, energy and cost per token of a training system.

Capital is the sum of part prices from the hardware spec; it is written off
linearly over ``amortization_years`` of which a share ``utilization`` is spent
training. Energy assumes every part draws its rated power while the iteration
runs (an upper bound: LLM training keeps GPUs near TDP), times the data-centre PUE.
"""

from __future__ import annotations

SECONDS_PER_YEAR = 365.25 * 86400


def capital_cost(gpus, gpu_price, nodes, node_price, drives=0, drive_price=0.0):
    """Purchase cost of the parts a plan uses. Formula: n_gpu p_gpu + n_node p_node + n_drive p_drive."""
    return gpus * gpu_price + nodes * node_price + drives * drive_price


def power_draw(gpus, gpu_power, nodes, host_power, drives=0, drive_power=0.0):
    """Electrical power of the parts in use. Formula: n_gpu P_gpu + n_node P_host + n_drive P_drive."""
    return gpus * gpu_power + nodes * host_power + drives * drive_power


def iteration_energy(power_w, iteration_s, pue=1.0):
    """Energy of one iteration at the wall. Formula: E = P t PUE."""
    return power_w * iteration_s * pue


def cost_per_token(capital_usd, energy_per_token_j, tokens_per_s, amortization_years=4.0, utilization=0.9,
                   electricity_usd_per_kwh=0.10):
    """USD per token: amortised capital plus electricity.

    Formula: C / (Y u 3.156e7 s) / (tokens/s) + E_token / 3.6e6 J/kWh x price.
    """
    capital_rate = capital_usd / (amortization_years * utilization * SECONDS_PER_YEAR)
    return capital_rate / tokens_per_s + energy_per_token_j / 3.6e6 * electricity_usd_per_kwh
