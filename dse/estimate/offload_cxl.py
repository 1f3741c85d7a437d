"""Offload to CXL memory expanders (``--offload-optimizer cxl``, ``--offload-params cxl``): the time terms.

Part of the time half of storage offload (:mod:`dse.estimate.offload_time`). CXL memory is host memory on a CPU-less
NUMA node (DeepSpeed sees ``offload_device: cpu``, its buffers bound to that node), so a ``cxl`` plan moves the same
bytes as a ``cpu`` plan; what differs is where they land:

- a GPU<->CXL copy goes through the host's root complex: per GPU it takes ``max(S_gpu / B_host, S_node / B_cxl)``,
  the node's GPUs sharing the expanders' aggregate rate ``B_cxl = N x min(B_device, B_port)`` in each direction
  (:func:`dse.formulas.offload.cxl_bandwidth`);
- the CPU optimizer step over states held there takes ``max(P x state / throughput, t_mem)``, the host's CPU-Adam
  rate (``host.optimizer_throughput``, DeepSpeed#6695) or streaming its bytes through the expanders' links
  (read ``P (state + g)``, write ``P x state``, full duplex: :func:`dse.formulas.offload.memory_bound_time`),
  whichever is slower.

Sources and the check against Liaw & Chen's measurements (arXiv 2507.03305): docs/storage-offload.md, "CXL memory".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.formulas import offload as _offload
from dse.formulas._array import maximum, where

if TYPE_CHECKING:
    from dse.estimate.aliases import FormulaModule
    from dse.estimate.offload_time import Flows, Partition
    from dse.estimate.terms import Num
    from dse.specs.hardware import SystemSpec
    from dse.specs.plan import Plan

__all__ = ["cxl_bandwidths", "fetch", "gradients", "update", "params_back", "link"]
INF = float("inf")


def cxl_bandwidths(system: SystemSpec, O: FormulaModule = _offload) -> tuple[Num, Num]:
    """(read, write) bandwidth of the node's CXL memory expanders, all of them interleaved [bytes/s]; inf without."""
    cxl = system.node.cxl
    if cxl is None:
        return INF, INF
    dev = cxl.device
    port = O.link_bandwidth(dev.link.bandwidth, dev.link.efficiency) if dev.link is not None else INF
    return (O.cxl_bandwidth(cxl.count, dev.read_bandwidth, port), O.cxl_bandwidth(cxl.count, dev.write_bandwidth, port))


def fetch(f: Flows, t_pass: Num, node_pass: Num, m: Num, passes: Num, bc: tuple[Num, Num], O: FormulaModule) -> Num:
    """ZeRO-3 parameter fetch from CXL memory: the node's GPUs share the expanders' read rate. Returns t per pass."""
    f.cxl_read = f.cxl_read + m * O.param_fetch_bytes(node_pass, 1, passes)
    return maximum(t_pass, O.transfer_time(node_pass, bc[0]))


def gradients(f: Flows, part: Partition, plan: Plan, again: Num, b_host: Num, bc: tuple[Num, Num],
              O: FormulaModule) -> None:
    """The fp32 gradient partitions written into CXL memory once per iteration.

    ZeRO-3 copies them from the GPU straight into the optimizer's fp32 buffer (``again`` bytes per GPU, already on
    the GPU link): the expanders add what their write rate takes beyond that copy. ZeRO-1/2: the CPU converts the
    fp16 partitions into the buffer, bounded by the write rate alone.
    """
    w = O.gradient_offload_bytes(part.node_opt, part.master_grad_bytes)
    f.cxl_write = f.cxl_write + w
    on_link = where(plan.zero == 3, O.transfer_time(again, b_host), 0.0)
    f.t_tier = maximum(O.transfer_time(w, bc[1]) - on_link, 0.0)


def update(f: Flows, part: Partition, system: SystemSpec, bc: tuple[Num, Num], O: FormulaModule) -> None:
    """The CPU optimizer step over states in CXL memory: compute-bound or bound by the expanders' links."""
    r_bytes, w_bytes = O.cpu_step_bytes(part.node_opt, part.state_bytes, part.master_grad_bytes)
    f.cxl_read, f.cxl_write = f.cxl_read + r_bytes, f.cxl_write + w_bytes
    t_cpu = O.cpu_optimizer_time(part.node_opt, part.state_bytes, system.node.host.optimizer_throughput)
    f.optimizer = f.t_update = maximum(t_cpu, O.memory_bound_time(r_bytes, w_bytes, bc[0], bc[1]))


def params_back(f: Flows, part: Partition, plan: Plan, t_post: Num, b_host: Num, bc: tuple[Num, Num],
                O: FormulaModule) -> Num:
    """The updated fp16 parameters when CXL memory is on their path; returns the segment's new ``t_post``.

    CPU step (optimizer in CXL) and parameters on the GPU: they go up from the expanders' pinned buffer; GPU step and
    parameters in CXL: they go down into it; parameters in CXL after a CPU step: the CPU writes them there.
    """
    opt, par = plan.offload_optimizer, plan.offload_params
    node = part.gather_bytes * part.node_w
    if opt == "cxl" and par == "gpu":   # each GPU's own updated partition (as host DRAM: offload_time.params_back)
        up = part.gather_bytes * part.node_opt
        f.cxl_read = f.cxl_read + up
        return maximum(t_post, O.transfer_time(up, bc[0]))
    if par == "cxl":
        f.cxl_write = f.cxl_write + node
        t_w = O.transfer_time(node, bc[1])
        return maximum(t_post, t_w) if opt == "gpu" else t_post + t_w
    return t_post


def link(f: Flows, bc: tuple[Num, Num]) -> tuple[dict[str, Any], Num]:
    """The host<->CXL link entry of the offload section and its busy seconds (both directions at once)."""
    busy = maximum(f.cxl_read / bc[0], f.cxl_write / bc[1])
    return {"bytes_read": f.cxl_read, "bytes_written": f.cxl_write, "bandwidth_read": bc[0],
            "bandwidth_write": bc[1], "busy_s": busy}, busy
