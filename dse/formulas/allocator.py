"""What PyTorch's CUDA caching allocator reserves beyond what is allocated (``max_memory_reserved``).

The allocator (``c10/cuda/CUDACachingAllocator.cpp``; PyTorch docs "CUDA semantics: memory management")
rounds every request to 512 bytes, serves it by best fit from cached free blocks of its pool (small:
requests up to 1 MiB, carved from 2 MiB segments; large: 1-10 MiB requests from 20 MiB segments, larger
ones from segments rounded to 2 MiB), splits blocks, merges neighbours on free, and keeps every freed block
cached: ``memory_reserved`` (the segments) never shrinks during training. Reserved exceeds allocated by the
free cached blocks at the moment the segments are largest: here, at the allocated peak (the start of the
loss's backward), by the *holes*: buffers freed earlier that the requests around the peak are too large
to reuse and too small to be worth splitting for smaller ones (best fit takes the smallest block that fits).

Two holes, read off the allocation trace of eager GPT-2 training (scripts/trace_allocator.py) replayed
through a simulation of the allocator (:mod:`dse.measure.caching_allocator`):

- the *logits* in the activation dtype: freed once the loss has made its fp32 copy, just before the loss's
  backward requests its fp32 gradient buffers, twice their size (a loss that upcasts and keeps fp32
  gradient buffers live at the peak: the stack's loss ``transient``);
- the previous backward's *largest gradient temporary*, the vocabulary table's gradient (V h / t
  elements in the gradient dtype): where gradients accumulate into existing ``.grad`` tensors (eager
  PyTorch's AccumulateGrad: the new gradient is a temporary, added, then freed), it stays cached through the
  next forward, whose requests are smaller (served from smaller blocks) or larger (the logits).

Each hole occupies its block as the allocator rounded it: :func:`segment_bytes`. This is an estimate, not a
bound: what else stays free at the peak (the tails of 20 MiB segments, small-pool pages) is left out, a
few percent of the hole sizes in the traced steps. With ``expandable_segments:True`` the same holes remain
(they lie below the segment's end), and no segment rounding: the simulated reserved peak moves by -7 % and
-1 % in the traced cases, inside this estimate's tolerance, so it is not a separate option.

An OOM is raised only after ``release_cached_blocks`` has returned every whole free segment to CUDA and
the allocation still fails; holes inside split segments cannot be returned. The simulated smallest device
that runs the traced steps lies between the allocated and the reserved peak (9 % and 25 % above allocated).
``dse`` keeps feasibility on allocated bytes plus the GPU's ``reserved`` runtime allowance (2 GiB by
default: CUDA context, NCCL, allocator) and reports the reserved estimate beside it.

Symbols:
    tokens: T = s b, tokens of a micro-batch on this GPU [count]
    vocab: V, vocabulary [count]
    hidden: h, hidden size [count]
    tp: t, tensor-parallel degree (vocabulary-parallel head and embedding) [count]
"""

from __future__ import annotations

from dse.formulas._array import Num, ceil, where

__all__ = ["MIN_BLOCK", "SMALL_SIZE", "SMALL_SEGMENT", "LARGE_SEGMENT", "MIN_LARGE_ALLOC", "ROUND_LARGE",
           "segment_bytes", "logits_hole_bytes", "gradient_hole_bytes", "reserved_bytes"]

MiB = 2**20
#: kMinBlockSize: every request is rounded up to a multiple of 512 bytes [bytes]
MIN_BLOCK = 512
#: kSmallSize: the largest request of the small pool [bytes]
SMALL_SIZE = 1 * MiB
#: kSmallBuffer: the segment small requests are carved from [bytes]
SMALL_SEGMENT = 2 * MiB
#: kLargeBuffer: the segment a 1-10 MiB request opens when no cached block fits [bytes]
LARGE_SEGMENT = 20 * MiB
#: kMinLargeAlloc: requests from this size up get a segment of their own size, rounded to ROUND_LARGE [bytes]
MIN_LARGE_ALLOC = 10 * MiB
#: kRoundLarge: the rounding of a large request's own segment [bytes]
ROUND_LARGE = 2 * MiB


def segment_bytes(size: Num) -> Num:
    """Bytes a request of ``size`` bytes takes from the device when it opens its own segment.

    Formula: 2 MiB if size <= 1 MiB; 20 MiB if size < 10 MiB; else 2 MiB ceil(size / 2 MiB)
    Source: PyTorch c10/cuda/CUDACachingAllocator.cpp ``get_allocation_size`` (kSmallBuffer, kLargeBuffer,
    kMinLargeAlloc, kRoundLarge), after ``round_size`` (512 bytes).

    Args:
        size: requested bytes [bytes]
    Returns:
        segment bytes [bytes]

    >>> import numpy as np
    >>> segment_bytes(np.array([0.5, 3, 98.2]) * 2**20) / 2**20   # small pool, a 20 MiB segment, rounded to 2 MiB
    array([  2.,  20., 100.])
    """
    rounded = ceil(size / MIN_BLOCK) * MIN_BLOCK
    return where(rounded <= SMALL_SIZE, SMALL_SEGMENT,
                 where(rounded < MIN_LARGE_ALLOC, LARGE_SEGMENT, ceil(rounded / ROUND_LARGE) * ROUND_LARGE))


def logits_hole_bytes(tokens: Num, vocab: Num, tp: Num = 1, bytes_per_element: Num = 2) -> Num:
    """The freed activation-dtype logits, cached at the loss's backward peak (a loss that upcasts to fp32).

    Formula: H_loss = seg(e T V / t)   (0 when e >= 4: the fp32 copy is the logits themselves)
    Source: the allocation trace of Transformers' GPT-2 loss (``logits.float()``, log_softmax, nll_loss;
    scripts/trace_allocator.py): the bf16 logits are freed before the two fp32 gradient buffers (4 bytes per
    logit each) are requested, which best fit cannot place in a block of 2 bytes per logit.

    Args:
        bytes_per_element: e, bytes of the head's output dtype [bytes]
    Returns:
        bytes [bytes]

    >>> logits_hole_bytes(2 * 512, 50257) / 2**20   # GPT-2, b 2, s 512, bf16 logits: 98.2 MiB in a 100 MiB segment
    100.0
    """
    return where(bytes_per_element < 4, segment_bytes(bytes_per_element * tokens * vocab / tp), 0 * tokens)


def gradient_hole_bytes(vocab: Num, hidden: Num, tp: Num = 1, grad_bytes: Num = 2) -> Num:
    """The previous backward's vocabulary-table gradient temporary, cached through the next forward.

    Formula: H_grad = seg(g V h / t)
    Source: the allocation trace of two eager GPT-2 training steps (scripts/trace_allocator.py): with the
    gradients kept, AccumulateGrad adds each new gradient into ``.grad`` and frees it; the largest, the
    embedding table's, stays cached (PyTorch's autograd AccumulateGrad, torch/csrc/autograd/functions/
    accumulate_grad.h: in-place ``variable.grad += new_grad`` when the gradient exists).

    Args:
        grad_bytes: g, bytes per gradient element [bytes]
    Returns:
        bytes [bytes]

    >>> round(gradient_hole_bytes(50257, 768) / 2**20, 1)   # GPT-2 small, bf16 gradients: 73.6 MiB -> 74
    74.0
    """
    return segment_bytes(grad_bytes * vocab * hidden / tp)


def reserved_bytes(allocated: Num, holes: Num) -> Num:
    """Peak bytes the caching allocator reserves (``torch.cuda.max_memory_reserved``): allocated plus holes.

    Formula: R = A + H   (H: the cached free blocks at the allocated peak, :func:`logits_hole_bytes` +
    :func:`gradient_hole_bytes` where they apply)
    Source: PyTorch c10/cuda/CUDACachingAllocator.cpp (freed blocks stay cached; segments are released only
    when a cudaMalloc fails or on empty_cache); checked against a simulation of that allocator replaying
    eager GPT-2 training steps (tests/test_caching_allocator.py: within 3 %).

    Args:
        allocated: A, peak allocated bytes [bytes]
        holes: H, cached free bytes at that peak [bytes]
    Returns:
        bytes [bytes]

    >>> reserved_bytes(1050 * 2**20, 174 * 2**20) / 2**20
    1224.0
    """
    return allocated + holes
