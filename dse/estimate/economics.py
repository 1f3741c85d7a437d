"""Cost and energy sections of an estimate (applied after every technique).

Prices and powers come from the hardware spec; the site (amortisation, electricity,
PUE, utilisation) from ``system.site``. A plan is charged for the nodes it fills (``node.price``) and the
hosts it uses (``ceil(gpus / gpus_per_host)``: host price and power, and the drives, stated per host).
"""

from __future__ import annotations

from typing import Any

from dse.estimate.technique import TechniqueBase
from dse.estimate.terms import drive_use
from dse.formulas import cost as _cost
from dse.formulas._array import where


class Economics(TechniqueBase):
    """Cost and energy (applied after every other technique: it prices the final iteration)."""

    name = "economics"
    sections = ("cost", "energy")
    after = ("storage_offload", "activation_offload", "paged_optimizer", "drive_wear")

    def apply_time(self, c: dict[str, Any], state: Any, model: Any, system: Any, plan: Any, F: Any = None) -> None:
        apply(c, model, system, plan, F)


def apply(c: dict[str, Any], model: Any, system: Any, plan: Any, F: Any = None) -> None:
    """Set ``c["cost"]`` and ``c["energy"]`` from the composed estimate's final time and throughput."""
    K = F["cost"] if F and "cost" in F else _cost
    node = system.node
    nodes, hosts = c["nodes"], c["hosts"]
    gpus = c["gpus"]
    use = drive_use(system, plan)          # drives per host, price and power of each (shared with offload)
    drives = hosts * use.count
    drive_price, drive_power = use.price, use.power
    cxl = node.cxl                         # CXL memory expanders: part of the host's price and power
    cxl_price = cxl.count * cxl.device.price if cxl is not None else 0.0
    host_price = node.host.price + cxl_price
    capital = K.capital_cost(gpus, node.gpu.price, nodes, node.price, drives, drive_price, hosts, host_price)
    host_power = node.host.power + (cxl.count * cxl.device.power if cxl is not None else 0.0)
    power = K.power_draw(gpus, node.gpu.power, hosts, host_power, drives, drive_power)
    t_iter = c["time"]["iteration"]
    tokens = c["terms"].tokens
    site = system.site
    energy = K.iteration_energy(power, t_iter, site.pue)
    tps = c["throughput"]["tokens_per_s"]
    per_token = energy / tokens
    usd_token = K.cost_per_token(capital, per_token, tps, site.amortization_years, site.utilization, site.electricity)
    c["cost"] = {
        "capital_usd": capital,
        "gpus_usd": gpus * node.gpu.price,
        "nodes_usd": nodes * node.price + hosts * host_price,   # the servers: rack parts and hosts
        "storage_usd": drives * drive_price,
        "per_million_tokens_usd": usd_token * 1e6,
        "tokens_per_s_per_kusd": tps * 1e3 / where(capital > 0, capital, float("nan")),
    }
    if cxl is not None:
        c["cost"]["cxl_usd"] = hosts * cxl_price
    c["energy"] = {"iteration_j": energy, "per_token_j": per_token, "power_w": power * site.pue}


TECHNIQUE = Economics()
