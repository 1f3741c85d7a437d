"""CXL memory expanders as an offload tier: their bandwidth and the CPU optimizer step over states held there.

Part of :mod:`dse.formulas.offload` (notation and symbols there). A CXL 2.0 Type 3 memory expander is DRAM behind a
PCIe 5.0 port; the OS shows it as a CPU-less NUMA node (Wang et al., "Exploring and Evaluating Real-world CXL",
arXiv 2405.14209, Sec. I; Sun et al., "Demystifying CXL Memory with Genuine CXL-Ready Systems and Devices",
MICRO 2023). Offload software sees host memory: DeepSpeed's ``offload_optimizer: cpu`` with its buffers bound to
that node (``numactl --membind``) keeps the optimizer states there. GPUs reach it by DMA through the host's root
complex, so a GPU<->CXL copy is bounded by the GPU's host link and by the expanders' own rate, shared by the GPUs of a
node; the CPU step streams the states through the expanders' links.
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum, minimum

__all__ = ["cxl_bandwidth", "memory_bound_time", "cpu_step_bytes"]


def cxl_bandwidth(devices: Num, per_device: Num, port: Num = float("inf")) -> Num:
    """Bandwidth of N interleaved CXL memory expanders in one direction.

    Formula: B = N x min(B_device, B_port)
    Source: interleaving spreads consecutive pages (or 256 B..4 KiB granules) over the devices, so a long stream
    uses every device at once (Micron/Intel, "Optimizing System Memory Bandwidth with Micron CXL Memory Expansion
    Modules on Intel Xeon 6 Processors", arXiv 2412.12491: eight CZ122 in one NUMA node add their bandwidths); each
    device is capped by its own PCIe 5.0 port (x8 for E3.S modules, 31.5 GB/s per direction).

    Args:
        devices: N, expanders per node [count]
        per_device: B_device, one expander's sustained rate in this direction [bytes/s]
        port: B_port, achievable rate of its PCIe/CXL port [bytes/s]
    Returns:
        bandwidth [bytes/s]

    >>> cxl_bandwidth(4, 31.5e9, 26.5e9) / 1e9   # four x8 modules, link-bound: GB/s
    106.0
    """
    return devices * minimum(per_device, port)


def memory_bound_time(read_bytes: Num, write_bytes: Num, read_bandwidth: Num, write_bandwidth: Num) -> Num:
    """Time to stream bytes in and out of a memory whose link carries both directions at once.

    Formula: t = max(S_read / B_read, S_write / B_write)
    Source: PCIe/CXL links are full duplex: reads return data device -> host while writes send data host -> device
    (CXL 2.0 specification, CXL.mem S2M and M2S channels); Micron's CZ120 reaches 36 GB/s with a 2:1 read/write
    mix, above the 31.5 GB/s an x8 link carries one way (Micron CZ120 announcement, 2023). A lower bound of the
    time: the request messages that share the write direction and the expander's DRAM read/write turnarounds are not
    modelled (against a published CPU-Adam measurement it is 29 % fast, docs/storage-offload.md "CXL memory").

    Args:
        read_bytes: S_read, bytes read from the memory [bytes]
        write_bytes: S_write, bytes written to it [bytes]
        read_bandwidth: B_read [bytes/s]
        write_bandwidth: B_write [bytes/s]
    Returns:
        time [s]

    >>> memory_bound_time(16e9, 12e9, 57.4e9, 40.0e9)   # 1e9 Adam parameters on an 8-DIMM x16 CXL card
    0.3
    """
    return maximum(read_bytes / read_bandwidth, write_bytes / write_bandwidth)


def cpu_step_bytes(params: Num, state_bytes: Num = 12, grad_bytes: Num = 4) -> tuple[Num, Num]:
    """Bytes the CPU optimizer step reads and writes in the memory that holds the states.

    Formula: read = P x (state + g), write = P x state
    Source: DeepSpeed CPU-Adam (``csrc/adam/cpu_adam_impl.cpp``, ``Step_AVX``) loads the fp32 master parameter,
    gradient, momentum and variance of each element and stores the parameter and both moments back.

    Args:
        params: P, parameters updated [count]
        state_bytes: fp32 master + optimizer moments per parameter (Adam 12) [bytes]
        grad_bytes: g, fp32 gradient per parameter [bytes]
    Returns:
        (bytes read, bytes written) [bytes]

    >>> cpu_step_bytes(1e9)
    (16000000000.0, 12000000000.0)
    """
    return params * (state_bytes + grad_bytes), params * state_bytes
