"""DeepSpeed's swap buffers, reduce buckets and optimizer sub-groups: pinned memory the offload needs.

Part of :mod:`dse.formulas.offload` (notation and symbols there).
"""

from __future__ import annotations

from dse.formulas._array import Num, minimum

__all__ = ["OPTIMIZER_BUFFER_COUNT", "PARAM_BUFFER_COUNT", "PARAM_BUFFER_SIZE", "SUB_GROUP_SIZE", "REDUCE_BUCKET_SIZE",
           "optimizer_swap_buffer_bytes", "param_swap_buffer_bytes", "reduce_bucket_bytes", "largest_sub_group"]

# DeepSpeed defaults (deepspeed/runtime/zero/offload_config.py, microsoft/DeepSpeed 38327e0).
OPTIMIZER_BUFFER_COUNT = 4        # offload_optimizer.buffer_count
PARAM_BUFFER_COUNT = 5            # offload_param.buffer_count
PARAM_BUFFER_SIZE = 1e8           # offload_param.buffer_size (elements)
SUB_GROUP_SIZE = 1e9              # zero_optimization.sub_group_size (elements)
REDUCE_BUCKET_SIZE = 5e8          # zero_optimization.reduce_bucket_size (elements)


def optimizer_swap_buffer_bytes(sub_group_size: Num = SUB_GROUP_SIZE, buffer_count: Num = OPTIMIZER_BUFFER_COUNT,
                                element_bytes: Num = 4) -> Num:
    """Pinned host buffers DeepSpeed allocates to swap optimizer state to NVMe.

    Formula: buffer_count x sub_group_size x 4 B
    Source: DeepSpeed ``SwapBufferManager(num_elems=largest sub-group, count=offload_optimizer.buffer_count,
    dtype=fp32)`` (deepspeed/runtime/swap_tensor); research note storage_offload.md §3.4.

    Args:
        sub_group_size: elements per optimizer sub-group [count]
        buffer_count: swap buffers [count]
        element_bytes: bytes per element (fp32) [bytes]
    Returns:
        pinned host bytes [bytes]

    >>> optimizer_swap_buffer_bytes() / 1e9, optimizer_swap_buffer_bytes(4e7, 40) / 1e9   # DeepSpeed, Smart-Inf.: GB
    (16.0, 6.4)
    """
    return buffer_count * sub_group_size * element_bytes


def param_swap_buffer_bytes(buffer_count: Num = PARAM_BUFFER_COUNT, buffer_size: Num = PARAM_BUFFER_SIZE,
                            element_bytes: Num = 2) -> Num:
    """Pinned host buffers for NVMe-offloaded fp16 parameters.

    Formula: buffer_count x buffer_size x 2 B
    Source: DeepSpeed ``partitioned_param_swapper.py``, offload_param defaults 5 x 1e8; research note §3.4.

    Args:
        buffer_count: swap buffers [count]
        buffer_size: elements per buffer [count]
        element_bytes: bytes per element (fp16) [bytes]
    Returns:
        pinned host bytes [bytes]

    >>> param_swap_buffer_bytes() / 1e9   # GB
    1.0
    """
    return buffer_count * buffer_size * element_bytes


def reduce_bucket_bytes(params: Num, bucket_size: Num = REDUCE_BUCKET_SIZE, grad_bytes: Num = 2) -> Num:
    """GPU buffer that collects fp16 gradients before they go to the host.

    Formula: g x min(bucket, P)
    Source: DeepSpeed ``zero_optimization.reduce_bucket_size`` (default 5e8 elements).

    Args:
        bucket_size: elements per reduce bucket [count]
    Returns:
        GPU bytes [bytes]

    >>> reduce_bucket_bytes(4e9) / 1e9, reduce_bucket_bytes(1e8) / 1e9   # GB
    (1.0, 0.2)
    """
    return grad_bytes * minimum(bucket_size, params)


def largest_sub_group(params: Num, sub_group_size: Num = SUB_GROUP_SIZE) -> Num:
    """Elements in the largest optimizer sub-group.

    Formula: min(sub_group_size, P)
    Source: DeepSpeed ``zero_optimization.sub_group_size`` (default 1e9 elements).

    Args:
        sub_group_size: elements per optimizer sub-group [count]
    Returns:
        elements [count]

    >>> largest_sub_group(4e9), largest_sub_group(3e8)
    (1000000000.0, 300000000.0)
    """
    return minimum(sub_group_size, params)
