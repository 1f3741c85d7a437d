"""Bandwidth and latency of each parallel group of a plan on a GPU system (TP, CP, DP, PP, and EP's two groups).

Megatron's rank order puts tp fastest, then cp, dp, pp (experts: tp, ep, dp, pp); a group runs at the
intra-node link's rate while its ranks fit in one node, at its share of the network otherwise
(:func:`dse.formulas.parallelism.group_bandwidth`). Used by the time side of :mod:`dse.estimate.base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.estimate.kernel_cost import Link
from dse.estimate.memo import ints, remembered
from dse.formulas import parallelism as _parallelism
from dse.formulas._array import clip, floor, where
from dse.formulas.parallelism.nccl import Path, path_of
from dse.specs.plan import differs, expert_tp, folded

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule, Num
    from dse.specs.hardware import SystemSpec
    from dse.specs.model import ModelSpec
    from dse.specs.plan import Plan


def links(system: SystemSpec, plan: Plan, P: FormulaModule = _parallelism, model: ModelSpec | None = None
          ) -> dict[str, Link]:
    """Bandwidth and latency of the TP, CP, DP and PP groups (Megatron rank order: tp fastest, then cp, dp, pp).

    A group runs at the intra-node link's rate while its ranks fit in one node, at the network's otherwise.
    The ``dp`` group reduces gradients over dp x cp ranks (contiguous after tp; DualPipe: twice as many, the group
    spanning the two ranks that hold each stage, priced as if contiguous). With expert parallelism, the
    ``ep`` link also carries what its hierarchical all-to-all needs (the model's routing: :func:`_expert_links`).
    A scalar plan's links are kept per system (:mod:`dse.estimate.memo`) and shared: read them, do not change them.
    """
    t, d, cp, ep = plan.tp, plan.dp, plan.cp, plan.ep
    et = expert_tp(plan)
    route = _routing(model)
    dual = plan.schedule == "dualpipe"   # DualPipe: each stage on 2 dp cp ranks (dse.estimate.context.grad_ranks)
    how = getattr(plan, "moe_dispatcher", None)
    if how is None and getattr(plan, "pad_to_capacity", False):   # DeepEP does not pad: dse's default then is NCCL's
        how = "alltoall"
    if P is _parallelism and ints(t, d, cp, ep, et):
        out = remembered(("links", id(system), t, d, cp, ep, et, route, dual, how, P.group_bandwidth,
                          P.dispatch_shares), system,
                         lambda: _links(system, t, d, P, cp, ep, route, dual, et, how))
    else:
        out = _links(system, t, d, P, cp, ep, route, dual, et, how)
    if getattr(plan, "cp_comm", "p2p") == "a2a+p2p":
        out = {**out, **_cp_levels(system, plan, P)}
    return out


def _rates(system: SystemSpec) -> tuple[Num, Num, Num, Path]:
    """(G, B_intra, B_node, path): GPUs per node, the intra-node link's per-GPU bandwidth and the node's network
    bandwidth (each times its efficiency), and NCCL's path inside one node (:func:`system_path`)."""
    node = system.node
    intra = node.gpu_link.bandwidth * node.gpu_link.efficiency if node.gpu_link else float("inf")
    inter = node.network.bandwidth * node.network.efficiency if node.network else intra / 1e3
    return node.gpus_per_node, intra, inter, system_path(system)


def system_path(system: SystemSpec) -> Path:
    """NCCL's path inside one node of ``system``: its GPU link's and network's transports and extra latencies.

    A link's ``transport`` picks NCCL's per-hop latencies (:func:`dse.formulas.parallelism.nccl.hops`); unset, a GPU
    link is NVLink and a network is a network; its ``latency`` (default 0) is added to each hop.
    """
    node = system.node
    gl, net = node.gpu_link, node.network
    return path_of(1, (gl.transport if gl else None) or "nvlink", (net.transport if net else None) or "net",
                   (gl.latency if gl else None) or 0.0, (net.latency if net else None) or 0.0)


def _measured(system: SystemSpec, n: Num, inside: Num, intra: Num, path: Path) -> tuple[Num, Path]:
    """The intra-node link's rate and NCCL path for a collective over ``n`` ranks, where the link measures them per
    group size (``LinkSpec.ranks``): inside one node, the entry of the smallest listed size >= n (a larger group,
    or one that spans nodes, keeps the link's own ``efficiency`` and ``latency``); ``(intra, path)`` otherwise. The
    next size up, not down: the measured extra latency of a whole all-reduce is about the same at 2, 4 and 8 GPUs
    (~25 us), which the larger size's per-step value keeps closer for a group between them (3 GPUs: 16 us, against
    53 us at the 2-GPU value).

    Formula: B(n) = B_link eta_k, a_p(n) = a_p + (lambda_k - lambda), k = min{listed sizes >= n} (the difference to
    the link's own latency lambda is the path's ``extra``, :func:`dse.formulas.parallelism.nccl.fastest_time`)
    Source: the node's own nccl-tests all-reduce table (hwspecs/links/nvlink3-vtrain.yaml: NCCL's ring model fitted
    to each group size's rows, data/a100_allreduce_nccl_tests.csv; tests/test_nccl_a100.py)."""
    gl = system.node.gpu_link
    if gl is None or not gl.ranks:
        return intra, path
    own = gl.latency or 0.0
    bw: Num = intra
    extra: Num = 0.0
    for k, r in sorted(gl.ranks.items(), key=lambda kv: -int(kv[0])):   # largest first: the smallest >= n wins
        here = inside & (n <= int(k))
        bw = where(here, gl.bandwidth * r.efficiency, bw)
        if r.latency is not None:
            extra = where(here, r.latency - own, extra)
    return bw, path._replace(extra=extra)


def _group(system: SystemSpec, P: FormulaModule, n: Num, stride: Num, G: Num, rates: tuple[Num, Num, Path],
           inside: Num) -> Link:
    """The :class:`Link` of a ring over ``n`` ranks ``stride`` apart (``inside``: they share a node): its bandwidth
    (:func:`dse.formulas.parallelism.group_bandwidth`, the link's measured rate for ``n`` ranks inside a node,
    :func:`_measured`) and its NCCL path (:func:`_spanned`)."""
    intra, inter, path = rates
    bw, path = _measured(system, n, inside, intra, path)
    return Link(n, P.group_bandwidth(n, stride, G, bw, inter), _spanned(path, n, stride, G, inside), inside)


def _spanned(path: Path, n: Num, stride: Num, G: Num, inside: Num) -> Path:
    """``path`` for a group of ``n`` ranks ``stride`` apart: N = 1 inside a node, else n / clip(floor(G/stride), 1, n)
    (the ranks of the group one node holds, as :func:`dse.formulas.parallelism.group_bandwidth` places them)."""
    return path._replace(nodes=where(inside, 1, n / clip(floor(G / stride), 1, n)))


def _cp_levels(system: SystemSpec, plan: Plan, P: FormulaModule) -> dict[str, Link]:
    """The two groups of hierarchical context parallelism (a2a+p2p): ``cp_a2a``, A consecutive cp ranks (tp apart;
    A = :func:`dse.specs.rules_cp.a2a_degree`), and ``cp_ring``, the R = cp/A ranks of the ring (t A apart): level 0
    and 1 of Megatron-Core's ``create_hierarchical_groups`` over the cp group."""
    from dse.specs.rules_cp import a2a_degree

    G, intra, inter, path = _rates(system)
    t, cp = plan.tp, plan.cp
    a = a2a_degree(plan, system)
    r = cp // a
    a_in, r_in = t * a <= G, t * cp <= G
    return {"cp_a2a": _group(system, P, a, t, G, (intra, inter, path), a_in),
            "cp_ring": _group(system, P, r, t * a, G, (intra, inter, path), r_in)}


def expert_replicas(plan: Plan, d: Num) -> Num:
    """The expert-data-parallel ranks EDP = tp d / (etp ep) (``d`` = dp cp): the replicas of a GPU's experts.

    MoE Parallel Folding (Liu et al. 2025, arXiv 2504.14960): ETP x EP x EDP = TP x CP x DP. Equal to d / ep at
    etp = tp (written so, exactly, there)."""
    if not folded(plan):
        return d / plan.ep
    return plan.tp * d / (expert_tp(plan) * plan.ep)


def _routing(model: ModelSpec | None) -> tuple[int, int, int, int]:
    """(E, k, G, M): the routed experts, top-k and expert groups of an MoE model (zeros for a dense one)."""
    if model is None or not model.experts:
        return 0, 0, 0, 0
    return model.experts, model.experts_per_token or 0, model.expert_groups or 0, model.expert_groups_per_token or 0


def _links(system: SystemSpec, t: Num, d: Num, P: FormulaModule, cp: Num = 1, ep: Num = 1,
           route: tuple[int, int, int, int] = (0, 0, 0, 0), dual: bool = False, et: Num | None = None,
           how: str | None = None) -> dict[str, Link]:
    G, intra, inter, path = _rates(system)
    rates = (intra, inter, path)
    dc = d * cp                 # dp x cp ranks, tp apart: the gradient group (DualPipe: 2 dc, grad_ranks)
    dg = 2 * dc if dual else dc
    tp_in, cp_in, dp_in, pp_in = t <= G, t * cp <= G, t * dg <= G, t * dc * 2 <= G
    # pp: a send between two stages, which a link's all-reduce table (LinkSpec.ranks) does not measure
    return {"tp": _group(system, P, t, 1, G, rates, tp_in), "cp": _group(system, P, cp, t, G, rates, cp_in),
            "dp": _group(system, P, dg, t, G, rates, dp_in),
            "pp": Link(2, P.group_bandwidth(2, t * dc, G, intra, inter), _spanned(path, 2, t * dc, G, pp_in), pp_in),
            **_expert_links(system, P, G, t, dg, ep, rates, route, t if et is None else et, how)}


def _expert_links(system: SystemSpec, P: FormulaModule, G: Num, t: Num, dc: Num, ep: Num,
                  rates: tuple[Num, Num, Path],
                  route: tuple[int, int, int, int], et: Num, how: str | None = None) -> dict[str, Link]:
    """The expert groups of Megatron-Core's expert rank order etp-ep-edp-pp (MoE Parallel Folding, Liu et al. 2025,
    arXiv 2504.14960; ``parallel_state``'s expert ``RankGenerator``, order tp-ep-dp-pp with cp folded away): the
    expert tensor-parallel group ``etp`` (``et`` consecutive ranks), the expert-parallel group ``ep`` (ranks et
    apart) and the expert-data-parallel group ``edp`` (t dc / (et ep) ranks, et ep apart; dc = dp cp, the
    attention's gradient group, so that the MoE layers' ETP x EP x EDP ranks are the attention's TP x CP x DP).
    ``etp`` is there when it may differ from tp, ``ep`` and ``edp`` then too and when ep is not the Python int 1.
    ``rates``: the intra-node and network bandwidths (whole node) and the node's NCCL path.

    The ``ep`` group's all-to-all is hierarchical (:func:`dse.formulas.parallelism.hierarchical_alltoall_time`):
    q = clip(floor(G/et), 1, ep) of its ranks share a node, N = ep/q nodes; the NVLink stage runs at the intra-node
    rate, the network stage at the GPU's share of its node's network (all G GPUs of a node run their groups'
    all-to-alls at once) with the share of bytes that leave the node (:func:`dse.formulas.parallelism.
    internode_share` of the model's routing ``route``). Which bytes each stage moves is the token dispatcher's
    ``how`` (``plan.moe_dispatcher``: :func:`dse.formulas.parallelism.dispatch_shares`); unset, dse's default: NCCL's
    all-to-all in one node, DeepEP's forwarding across nodes."""
    intra, inter, path = rates
    out = {}
    fold = bool(route[0]) and differs(t, et)   # an MoE model whose etp differs from tp
    if fold:
        out["etp"] = _group(system, P, et, 1, G, rates, et <= G)
    if type(ep) is int and ep == 1 and not fold:
        return out
    ep_in, edp_in = et * ep <= G, t * dc <= G
    q = clip(floor(G / et), 1, ep)
    E, k, groups, per_token = route
    share, stage, nvlink = P.dispatch_shares(how, E, k, ep, q, groups, per_token) if E else (0.0, None, None)
    n_e = t * dc / (et * ep)
    e_bw, e_path = _measured(system, ep, ep_in, intra, path)
    return {**out, "ep": Link(ep, e_bw, e_path._replace(nodes=where(ep_in, 1, ep / q)), ep_in, q, share, inter / G,
                              stage, nvlink),
            "edp": _group(system, P, n_e, et * ep, G, rates, edp_in)}
