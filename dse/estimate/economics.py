"""Cost and energy sections of an estimate (applied after every technique).

Prices and powers come from the hardware spec; the site (amortisation, electricity,
PUE, utilisation) from ``system.site``. A plan is charged for the nodes it fills.
"""

from __future__ import annotations

from dse.formulas import cost as _cost
from dse.formulas._array import where


def apply(c, model, system, plan, F=None) -> None:
    K = F["cost"] if F and "cost" in F else _cost
    node = system.node
    nodes = c["nodes"]
    gpus = c["gpus"]
    drives = nodes * node.storage.count if node.storage else 0
    drive = node.storage.device if node.storage else None
    node_price = node.price + node.host.price
    capital = K.capital_cost(gpus, node.gpu.price, nodes, node_price, drives, drive.price if drive else 0.0)
    power = K.power_draw(gpus, node.gpu.power, nodes, node.host.power, drives, drive.power if drive else 0.0)
    t_iter = c["time"]["iteration"]
    tokens = c["internal"]["tokens"]
    site = system.site
    energy = K.iteration_energy(power, t_iter, site.pue)
    tps = c["throughput"]["tokens_per_s"]
    per_token = energy / tokens
    usd_token = K.cost_per_token(capital, per_token, tps, site.amortization_years, site.utilization, site.electricity)
    c["cost"] = {
        "capital_usd": capital,
        "gpus_usd": gpus * node.gpu.price,
        "nodes_usd": nodes * node_price,
        "storage_usd": drives * (drive.price if drive else 0.0),
        "per_million_tokens_usd": usd_token * 1e6,
        "tokens_per_s_per_kusd": where(capital > 0, tps / (where(capital > 0, capital, 1.0) / 1e3), float("nan")),
    }
    c["energy"] = {"iteration_j": energy, "per_token_j": per_token, "power_w": power * site.pue}
