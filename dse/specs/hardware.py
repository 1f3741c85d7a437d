"""The hardware spec: GPUs, host, links, storage, composed into nodes and systems.

Every number is in SI base units once loaded (spec files use readable units).
A *system* is a number of identical *nodes*; a plan that needs ``tp*pp*dp`` GPUs
fills ``ceil(tp*pp*dp / gpus_per_node)`` of them. A node is one NVLink domain (8 GPUs of a DGX, 72 of a
GB200 NVL72 rack); its GPUs are grouped into *hosts* of ``gpus_per_host`` (default: the whole node), each
with its own CPU and DRAM, host link and drives, and a plan uses ``ceil(gpus / gpus_per_host)`` of them.
Bandwidths are per direction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dse.errors import InputError
from dse.specs._schema import spec_field

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
TRANSPORTS = ("nvlink", "pci", "net")   # NCCL's hardware classes of a link (dse.formulas.parallelism.nccl.TRANSPORTS)

# Hardware kinds: the ``kind:`` field of a hardware file picks its spec class (and the estimate's backend,
# dse/estimate/backends.py). Components under hwspecs/ (gpus, hosts, links, storage) are parts, not kinds.
GPU_SYSTEM = "gpu-system"             # SystemSpec: nodes of GPUs with host, links and drives (hwspecs/systems/)
CHIPLET_PACKAGE = "chiplet-package"   # dse.specs.chiplet.ChipletPackageSpec: a mesh of dies (hwspecs/chiplets/)
HARDWARE_KINDS = (GPU_SYSTEM, CHIPLET_PACKAGE)


@dataclass(frozen=True, kw_only=True)
class GPUEfficiency:
    """Achieved fractions and fixed overheads of one GPU + software stack.

    The defaults are the shared calibration against measured Megatron runs on
    A100 (see ``dse validate`` and ``benchmarks/calibrate.py``); on other GPUs they
    are an assumption, stated in the catalog file.
    """

    gemm: float = spec_field(0.763, unit="fraction", gt=0, le=1, help="fraction of dense peak a large GEMM reaches")
    gemm_overhead: float = spec_field(43e-6, unit="s", ge=0, help="fixed time per GEMM kernel (launch, tail)")
    gemm_depth: float = spec_field(0.0, unit="count", ge=0, help="k0: main-loop steps over k that a GEMM tile's "
                                   "prologue and epilogue cost (t x (1 + k0/k)); 0: folded into gemm")
    gemm_unaligned: float | None = spec_field(None, unit="fraction", gt=0, le=1, help="fraction of dense peak a GEMM "
                                              "with a dimension not a multiple of 16 bytes reaches (align1 kernels; "
                                              "an unpadded vocabulary); default: gemm")
    gemm_fp8: float | None = spec_field(None, unit="fraction", gt=0, le=1, help="fraction of the fp8 peak an FP8 "
                                        "GEMM reaches (precision fp8's linear layers); no default: a GPU spec states "
                                        "it with its source, precision fp8 needs it")
    gemm_fp8_depth: float | None = spec_field(None, unit="count", ge=0, help="k0 of an FP8 GEMM (as gemm_depth: "
                                              "t x (1 + k0/k)); default: gemm_depth")
    gemm_grouped: dict[str, dict[str, float]] = spec_field(
        factory=dict, help="measured rate of a grouped GEMM kernel (torch._grouped_mm, what Transformers runs its "
                           "experts with): group shape 'k x n' -> {rows per group: fraction of dense peak} "
                           "(dse.formulas.compute.grouped_gemm_time); default: none (priced as batched dense GEMMs)")
    kernel_overhead: float = spec_field(0.0, unit="s", ge=0, help="fixed GPU time per element-wise kernel a software "
                                        "stack counts (launch, ramp and drain; stacks/*.yaml); 0: folded into the "
                                        "fitted efficiencies")
    attention: float = spec_field(0.6, unit="fraction", gt=0, le=1,
                                  help="fraction of peak reached by fused (flash) attention")
    memory: float = spec_field(0.694, unit="fraction", gt=0, le=1,
                               help="fraction of HBM bandwidth reached by element-wise kernels")
    memory_strided: float | None = spec_field(None, unit="fraction", gt=0, le=1,
                                              help="fraction of HBM bandwidth reached by eager PyTorch's element-wise "
                                                   "kernels on the non-vectorized path with operands in different "
                                                   "orders (a transposed view: a stack's `strided` passes); "
                                                   "default: memory")
    memory_unvectorized: float | None = spec_field(None, unit="fraction", gt=0, le=1,
                                                   help="fraction of HBM bandwidth reached by eager PyTorch's "
                                                        "element-wise kernels whose operands share one layout but "
                                                        "cannot take 16-byte accesses (a broadcast operand, a slice, "
                                                        "a dtype-converting copy: a stack's `unvectorized` passes); "
                                                        "default: memory_strided")
    softmax_rate: float | None = spec_field(None, unit="Hz", gt=0,
                                            help="elements per second of eager PyTorch's row softmax forward "
                                                 "(softmax_warp_forward: instruction-bound; a stack's `softmax` "
                                                 "passes); default: bytes-bound only")
    softmax_rate_backward: float | None = spec_field(None, unit="Hz", gt=0,
                                                     help="elements per second of the row softmax's backward; "
                                                          "default: bytes-bound only")
    layer_overhead: float = spec_field(0.0, unit="s", ge=0,
                                       help="host-side (framework) time per layer per forward pass beyond the "
                                            "stack's per-kernel dispatch (stacks/*.yaml); backward counts twice")
    microbatch_overhead: float = spec_field(0.0, unit="s", ge=0,
                                            help="fixed time per micro-batch per pipeline stage (data broadcast, "
                                                 "schedule, synchronisation)")

    def _check(self, where: str) -> None:
        for shape, rows in self.gemm_grouped.items():
            at = f"{where}.gemm_grouped.{shape}"
            if not re.fullmatch(r"[1-9][0-9]*x[1-9][0-9]*", shape):
                raise InputError(f"{at}: a group shape is 'k x n' written KxN (e.g. 2048x1536)")
            if not rows or any(not r.isdigit() or int(r) < 1 or not 0 < v <= 1 for r, v in rows.items()):
                raise InputError(f"{at}: expected {{rows per group (>= 1): fraction of peak in (0, 1]}}, got {rows!r}")


@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    name: str
    peak_flops: dict[str, float] = spec_field(unit="flop/s", gt=0, factory=dict, help="dense peak per dtype")
    hbm_capacity: float = spec_field(unit="bytes", gt=0, help="device memory")
    hbm_bandwidth: float = spec_field(unit="bytes/s", gt=0, help="device memory bandwidth")
    reserved: float = spec_field(2 * 2**30, unit="bytes", ge=0,
                                 help="memory the runtime keeps (CUDA context, NCCL, allocator)")
    power: float = spec_field(400.0, unit="W", gt=0, help="board power (TDP)")
    price: float = spec_field(0.0, unit="USD", ge=0, help="street price per GPU")
    efficiency: GPUEfficiency = spec_field(factory=GPUEfficiency)
    source: str = ""

    def _check(self, where: str) -> None:
        bad = [k for k in self.peak_flops if k not in DTYPES]
        if bad:
            raise InputError(f"{where}.peak_flops: unknown dtype '{bad[0]}'; allowed: {', '.join(DTYPES)}")


@dataclass(frozen=True, kw_only=True)
class GroupRate:
    """What NCCL reaches on a link for a collective over a group of a given number of ranks in one node, measured.

    A node's own nccl-tests table (e.g. data/a100_allreduce_nccl_tests.csv) gives less bus bandwidth and more latency
    per ring step to a group of 2 or 4 GPUs than to 8; the link's own ``efficiency`` and ``latency`` are its largest
    group's (:attr:`LinkSpec.ranks`).
    """

    efficiency: float = spec_field(unit="fraction", gt=0, le=1,
                                   help="NCCL bus bandwidth of a group of this many ranks / the link's bandwidth")
    latency: float | None = spec_field(None, unit="s", ge=0,
                                       help="latency per ring step beyond NCCL's for the link's transport, for this "
                                            "group size; default: the link's latency")


@dataclass(frozen=True, kw_only=True)
class LinkSpec:
    name: str
    bandwidth: float = spec_field(unit="bytes/s", gt=0, help="per direction")
    transport: str | None = spec_field(None, choices=TRANSPORTS,
                                       help="NCCL's hardware class of the link, which sets the per-hop latency of "
                                            "each NCCL protocol (dse.formulas.parallelism.nccl); default: nvlink "
                                            "for a node's gpu_link, net for its network")
    latency: float | None = spec_field(None, unit="s", ge=0,
                                       help="latency the link adds to each collective hop beyond NCCL's for its "
                                            "transport (a network plugin's reported latency: 0 for InfiniBand); "
                                            "needs transport")
    efficiency: float = spec_field(0.8, unit="fraction", gt=0, le=1,
                                   help="achievable fraction of bandwidth for large transfers")
    ranks: dict[str, GroupRate] = spec_field(factory=dict,
                                             help="a gpu_link's measured rate per group size: ranks -> {efficiency, "
                                                  "latency}; a collective over n ranks in one node takes the entry "
                                                  "of the smallest listed size >= n, a larger group the link's own "
                                                  "efficiency and latency (dse.estimate.links); default: none")
    source: str = ""

    def _check(self, where: str) -> None:
        bad = [k for k in self.ranks if not (k.isdigit() and int(k) >= 2)]
        if bad:
            raise InputError(f"{where}.ranks: {bad[0]!r} is not a group size; keys are numbers of ranks >= 2")
        if any(r.latency is not None for r in self.ranks.values()) and self.transport is None:
            raise InputError(f"{where}.ranks: a group size's latency is added to NCCL's per-hop latency of the "
                             f"link's transport: set transport ({', '.join(TRANSPORTS)})")
        if self.latency is not None and self.transport is None:
            raise InputError(f"{where}.latency: collectives now take NCCL's per-hop latencies from the link's "
                             f"transport; latency is what the link adds beyond them (0 for NVLink and "
                             f"InfiniBand): set transport ({', '.join(TRANSPORTS)}) or delete latency")


#: Where a host's ``dispatch_scale`` comes from (``HostSpec.dispatch_basis``).
DISPATCH_BASES = ("measured", "calibrated", "transferred", "unmeasured")


@dataclass(frozen=True, kw_only=True)
class HostSpec:
    name: str
    cpu: str = ""
    cores: int = spec_field(64, gt=0)
    dram_capacity: float = spec_field(unit="bytes", gt=0)
    dram_bandwidth: float = spec_field(200e9, unit="bytes/s", gt=0)
    reserved: float = spec_field(32 * 2**30, unit="bytes", ge=0, help="DRAM kept by the OS, framework and data loaders")
    power: float = spec_field(1000.0, unit="W", ge=0, help="host power without GPUs and drives")
    price: float = spec_field(0.0, unit="USD", ge=0, help="server price without GPUs and drives")
    optimizer_throughput: float = spec_field(16e9, unit="bytes/s", gt=0,
                                             help="CPU optimizer step (DeepSpeed CPU-Adam): bytes of fp32 optimizer "
                                                  "state (master + moments) updated per second")
    dispatch_scale: float = spec_field(1.0, gt=0,
                                       help="host time per eager PyTorch op relative to the reference host the "
                                            "stacks' dispatch was measured on (data/host_dispatch_cpu.json: 7.7 us "
                                            "per op of the pytorch stack); measured with scripts/measure_host.py "
                                            "--device cuda: gpt2_block us_per_op_step / 7.7 us; 1: the reference")
    checkpoint_dispatch_scale: float | None = spec_field(
        None, gt=0, help="the same for an op of a layer under torch.utils.checkpoint (non-reentrant: "
        "the eager stacks' recompute full; its forward, recompute and backward): us_per_op_checkpointed_step / 7.7 "
        "us; default: dispatch_scale x the stack's checkpoint_dispatch (stacks/pytorch.yaml: measured on two hosts)")
    dispatch_basis: str | None = spec_field(
        None, choices=DISPATCH_BASES, help="where dispatch_scale comes from: measured (this host's own GPT2Block "
        "step), calibrated (fitted to its step times), transferred (a measured or calibrated host of its CPU "
        "generation), unmeasured (the reference's 1); unset: stated by whoever wrote the file")
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class NearStorageSpec:
    """Compute beside each drive (a computational storage drive, e.g. an FPGA in a SmartSSD).

    Used when a plan runs the optimizer step on the drives (``--offload-optimizer csd``).
    Throughputs count the bytes the kernel reads from the drive (optimizer state and
    gradients) per second; the internal bandwidths are the drive<->accelerator path,
    which never touches the host's shared link.
    """

    accelerator: str = ""
    update_throughput: float = spec_field(unit="bytes/s", gt=0,
                                          help="optimizer-update kernel, bytes of state + gradient read per second")
    decompress_throughput: float = spec_field(unit="bytes/s", gt=0,
                                              help="decompress (top-k scatter) + update kernel, bytes read per second")
    dram_capacity: float = spec_field(unit="bytes", gt=0,
                                      help="accelerator DRAM that holds the transfer handler's buffers")
    device_link: float = spec_field(unit="bytes/s", gt=0,
                                    help="PCIe link of the device, per direction: drive<->accelerator "
                                         "through its internal switch, and device<->host")
    internal_read_bandwidth: float = spec_field(unit="bytes/s", gt=0,
                                                help="drive -> accelerator (peer-to-peer) read, measured")
    internal_write_bandwidth: float = spec_field(unit="bytes/s", gt=0,
                                                 help="accelerator -> drive (peer-to-peer) write, measured")
    write_overlap: float = spec_field(0.0, unit="fraction", ge=0, le=1,
                                      help="share of the ideal overlap of drive writes with the next sub-group's loads "
                                           "that the transfer handler reaches (0 = serial, 1 = fully pipelined)")
    price: float = spec_field(0.0, unit="USD", ge=0,
                              help="price of the compute part above a plain drive of the same capacity")
    power: float = spec_field(0.0, unit="W", ge=0, help="extra power of the accelerator while it is used")


@dataclass(frozen=True, kw_only=True)
class StorageSpec:
    name: str
    capacity: float = spec_field(unit="bytes", gt=0)
    read_bandwidth: float = spec_field(unit="bytes/s", gt=0, help="sequential read")
    write_bandwidth: float = spec_field(unit="bytes/s", gt=0, help="sequential write")
    read_latency: float = spec_field(0.0, unit="s", ge=0, help="access latency of one read at queue depth 1 "
                                     "(datasheet); 0 = not modelled (DeepSpeed's aio queue never limits the drive)")
    write_latency: float = spec_field(0.0, unit="s", ge=0, help="access latency of one write at queue depth 1")
    dwpd: float = spec_field(1.0, gt=0, help="rated drive writes per day")
    warranty_years: float = spec_field(5.0, gt=0, help="warranty period the DWPD rating covers")
    power: float = spec_field(15.0, unit="W", ge=0)
    price: float = spec_field(0.0, unit="USD", ge=0)
    near_storage: NearStorageSpec | None = spec_field(None,
                                                      help="compute beside the drive (computational storage); None "
                                                           "for a plain drive")
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class StorageArraySpec:
    device: StorageSpec
    count: int = spec_field(1, gt=0, help="drives in the array")
    uplink: LinkSpec | None = spec_field(None,
                                         help="shared link between the drives' switch and the host (None: each drive "
                                              "on its own lanes)")
    port: LinkSpec | None = spec_field(None, help="each drive's own link to the switch or root port (caps one "
                                                  "drive's rate; None: the drive's rate)")


@dataclass(frozen=True, kw_only=True)
class CXLMemorySpec:
    """A CXL memory expander (CXL 2.0 Type 3 device): DRAM behind a PCIe/CXL port of the host.

    The OS shows it as a CPU-less NUMA node (docs/storage-offload.md, "CXL memory"): host memory that the
    CPU reads and writes with loads and stores and that GPUs reach by DMA through the host's root complex.
    Bandwidths are sustained rates of one device for bulk transfers in one direction.
    """

    name: str
    capacity: float = spec_field(unit="bytes", gt=0)
    read_bandwidth: float = spec_field(unit="bytes/s", gt=0, help="device -> host (reads from the expander)")
    write_bandwidth: float = spec_field(unit="bytes/s", gt=0, help="host -> device (writes to the expander)")
    link: LinkSpec | None = spec_field(None, help="the device's PCIe/CXL port (caps each direction; None: the "
                                                  "device's rates)")
    load_latency: float = spec_field(0.0, unit="s", ge=0, help="idle load-to-use latency from a CPU core "
                                     "(reported, not used: bulk transfers are bandwidth-bound)")
    power: float = spec_field(0.0, unit="W", ge=0)
    price: float = spec_field(0.0, unit="USD", ge=0)
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class CXLMemoryArraySpec:
    device: CXLMemorySpec
    count: int = spec_field(1, gt=0, help="expanders per host (interleaved: their bandwidths add)")


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    gpu: GPUSpec
    host: HostSpec
    gpus_per_node: int = spec_field(8, gt=0, help="GPUs in one NVLink domain (tensor-, expert- and data-parallel "
                                                  "groups inside it run on gpu_link)")
    gpus_per_host: int | None = spec_field(None, gt=0, help="GPUs that share one host: its CPU and DRAM, its "
                                           "host_link and its storage array, all stated per host; a divisor of "
                                           "gpus_per_node (GB200 NVL72: 2, one Grace per two GPUs); default: "
                                           "gpus_per_node")
    gpu_link: LinkSpec | None = spec_field(None, help="GPU-to-GPU inside a node (NVLink), per GPU per direction")
    host_link: LinkSpec | None = spec_field(None, help="GPU-to-host (PCIe, NVLink-C2C), per GPU per direction")
    network: LinkSpec | None = spec_field(None, help="node-to-node, whole node per direction")
    storage: StorageArraySpec | None = spec_field(None, help="drives of one host")
    cxl: CXLMemoryArraySpec | None = spec_field(None, help="CXL memory expanders of the host (offload tier "
                                                           "between host DRAM and the drives; None: none)")
    price: float = spec_field(0.0, unit="USD", ge=0, help="integration cost per node beyond its parts and hosts")

    @property
    def host_gpus(self) -> int:
        """GPUs sharing one host (``gpus_per_host``, or the whole node)."""
        return self.gpus_per_host or self.gpus_per_node

    def _check(self, where: str) -> None:
        h, g = self.gpus_per_host, self.gpus_per_node
        if h is not None and g % h:
            divisors = ", ".join(str(d) for d in range(1, g + 1) if g % d == 0)
            raise InputError(f"{where}.gpus_per_host: {h} does not divide gpus_per_node {g}; allowed: {divisors}")


@dataclass(frozen=True, kw_only=True)
class SiteSpec:
    """Where the system runs: what its capital and energy cost per token."""

    amortization_years: float = spec_field(4.0, gt=0, help="years over which the capital cost is written off")
    electricity: float = spec_field(0.10, gt=0, help="electricity price, USD per kWh")
    pue: float = spec_field(1.2, ge=1, help="power usage effectiveness of the data centre")
    utilization: float = spec_field(0.9, unit="fraction", gt=0, le=1, help="share of the year spent training")


@dataclass(frozen=True, kw_only=True)
class SystemSpec:
    name: str
    kind: str = spec_field(GPU_SYSTEM, choices=(GPU_SYSTEM,), help="hardware kind (hwspecs/systems/: gpu-system)")
    node: NodeSpec
    nodes: int = spec_field(1, gt=0, help="nodes available")
    site: SiteSpec = spec_field(factory=SiteSpec)
    description: str = ""
    source: str = ""

    @property
    def gpus(self) -> int:
        return self.nodes * self.node.gpus_per_node

    @property
    def hosts(self) -> int:
        return self.gpus // self.node.host_gpus
