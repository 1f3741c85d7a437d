"""Storage-offloaded training (ZeRO-Infinity): placement, bytes per tier and link, phase times.

Sources: Rajbhandari et al., "ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme
Scale Deep Learning", SC'21 (arXiv 2104.07857), Sec. 3-4; Jang et al., "Smart-Infinity:
Fast Large Language Model Training using Near-Storage Processing on a Real System",
HPCA'24 (arXiv 2403.06664), Sec. II-III and Table I; DeepSpeed's swap code
(``deepspeed/runtime/swap_tensor/*``, ``runtime/zero/offload_config.py``) for the
defaults. The research note ``docs/reference/storage_offload.md`` collects the numbers.

Tensor classes of mixed-precision training with an adaptive optimizer, bytes per
parameter: fp16 parameters 2, fp16 gradients 2, fp32 gradients 4, fp32 master
parameters 4, momentum 4, variance 4 (Adam: 12 B of optimizer state; SGD with
momentum and AdaGrad: 8 B, hence "3/4 of Adam's offload volume", Smart-Infinity
Sec. VII-F). Smart-Infinity's unit M = 2P bytes (the fp16 model).

The per-iteration time splits into the three segments of Smart-Infinity's figures:
forward, backward + gradient offload, update + optimizer-state I/O. The update
cannot start before every gradient is in (loss-scale overflow check and gradient
clipping need the global norm; Smart-Infinity Sec. IV-C), so the segments add.
All functions broadcast over numpy arrays.

The equations live in one submodule per question; every name is importable from this package:

- :mod:`~dse.formulas.offload.tiers`: tiers, tensor classes and their bytes, where a plan puts each class;
- :mod:`~dse.formulas.offload.buffers`: DeepSpeed's swap buffers, reduce buckets and sub-groups (pinned memory);
- :mod:`~dse.formulas.offload.traffic`: bytes per iteration on each link (fetches, gradients, swaps);
- :mod:`~dse.formulas.offload.bandwidth`: link and drive-array bandwidth, DeepSpeed aio queue depth, transfer time;
- :mod:`~dse.formulas.offload.phases`: forward, backward and update segment times (CPU optimizer, swaps);
- :mod:`~dse.formulas.offload.cxl`: CXL memory expanders: their bandwidth, the CPU step over states held there;
- :mod:`~dse.formulas.offload.efficiency`: ZeRO-Infinity's arithmetic intensity and required bandwidth.

Symbols:
    params: P, parameters [count]
    zero: ZeRO stage, 0 to 3 [count]
    optimizer: adam, sgd-momentum or adagrad [choice]
    state_bytes: optimizer-state bytes per parameter incl. the fp32 master copy (Adam 12) [bytes]
    grad_bytes: g, bytes per gradient sent to the optimizer's tier (fp32: 4) [bytes]
    weight_bytes: w, bytes per fp16 parameter [bytes]
    param_bytes: p, bytes per updated parameter returned by the drives (fp32 exchange: 4) [bytes]
    compression: c, bytes sent / dense bytes of the gradients (1 = dense) [fraction]
    bandwidth: B, bandwidth of the link or tier [bytes/s]
    peak_flops: peak_tp, achievable compute rate of one GPU [FLOP/s]
    seq: s, sequence length [count]
    batch: bsz, sequences per GPU (per micro-batch, or per iteration for the optimizer) [count]
    ait: arithmetic intensity, FLOP per byte moved [FLOP/byte]
    efficiency: eff, share of time the GPU computes [fraction]
"""

from __future__ import annotations

from dse.formulas.offload.bandwidth import (
    AIO_BLOCK_SIZE,
    AIO_QUEUE_DEPTH,
    AIO_THREAD_COUNT,
    RAID_CHUNK,
    aio_inflight_bytes,
    array_bandwidth,
    drive_request_bytes,
    link_bandwidth,
    queue_limited_bandwidth,
    transfer_time,
)
from dse.formulas.offload.buffers import (
    OPTIMIZER_BUFFER_COUNT,
    PARAM_BUFFER_COUNT,
    PARAM_BUFFER_SIZE,
    REDUCE_BUCKET_SIZE,
    SUB_GROUP_SIZE,
    largest_sub_group,
    optimizer_swap_buffer_bytes,
    param_swap_buffer_bytes,
    reduce_bucket_bytes,
)
from dse.formulas.offload.cxl import cpu_step_bytes, cxl_bandwidth, memory_bound_time
from dse.formulas.offload.efficiency import arithmetic_intensity, offload_efficiency, required_bandwidth
from dse.formulas.offload.phases import backward_phase_time, cpu_optimizer_time, forward_phase_time, swap_update_time
from dse.formulas.offload.tiers import (
    CLASS_BYTES,
    CLASS_SECTION,
    OPTIMIZER_CLASSES,
    TENSOR_CLASSES,
    TIER_SECTION,
    TIERS,
    bytes_by_tier,
    optimizer_state_bytes,
    placement,
)
from dse.formulas.offload.traffic import (
    fetch_passes,
    gradient_offload_bytes,
    gradient_round_trip_bytes,
    param_fetch_bytes,
    shared_link_traffic,
    swap_in_bytes,
    swap_out_bytes,
)

__all__ = ["TIERS", "TENSOR_CLASSES", "CLASS_BYTES", "OPTIMIZER_CLASSES", "TIER_SECTION", "CLASS_SECTION",
           "OPTIMIZER_BUFFER_COUNT", "PARAM_BUFFER_COUNT", "PARAM_BUFFER_SIZE", "SUB_GROUP_SIZE",
           "REDUCE_BUCKET_SIZE", "optimizer_state_bytes", "placement", "bytes_by_tier",
           "optimizer_swap_buffer_bytes", "param_swap_buffer_bytes", "reduce_bucket_bytes", "largest_sub_group",
           "fetch_passes", "param_fetch_bytes", "gradient_offload_bytes", "gradient_round_trip_bytes",
           "swap_in_bytes", "swap_out_bytes", "shared_link_traffic", "link_bandwidth", "array_bandwidth",
           "transfer_time", "AIO_BLOCK_SIZE", "AIO_QUEUE_DEPTH", "AIO_THREAD_COUNT", "RAID_CHUNK",
           "aio_inflight_bytes", "drive_request_bytes", "queue_limited_bandwidth", "cpu_optimizer_time",
           "swap_update_time", "forward_phase_time", "backward_phase_time", "arithmetic_intensity",
           "offload_efficiency", "required_bandwidth", "cxl_bandwidth", "memory_bound_time", "cpu_step_bytes"]
