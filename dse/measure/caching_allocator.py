"""A simulation of PyTorch's CUDA caching allocator: block and segment policy only, no device.

Re-implements the published algorithm of ``c10/cuda/CUDACachingAllocator.cpp`` (PyTorch 2.x; the
constants in ``c10/core/AllocatorConfig.h``) so that an allocation sequence recorded anywhere (a CPU
training step) can be replayed to get what ``torch.cuda.max_memory_reserved`` would report for it.

The rules, with their constants:

- every request is rounded up to a multiple of ``kMinBlockSize`` = 512 bytes (``round_size``);
- a rounded request of at most ``kSmallSize`` = 1 MiB goes to the *small* pool, a larger one to the
  *large* pool (``get_pool``); pools never lend to each other;
- a request is served by the smallest cached free block of its pool (and stream) that fits, ties by
  address (best fit, ``get_free_block``); with ``max_split_size`` set, a block at or above it serves
  only requests at or above it, and those only if the block is smaller than request + 20 MiB;
- when nothing fits, a new segment is ``cudaMalloc``-ed (``get_allocation_size``): 2 MiB
  (``kSmallBuffer``) for a small request, 20 MiB (``kLargeBuffer``) for one below ``kMinLargeAlloc`` =
  10 MiB, else the request rounded up to ``kRoundLarge`` = 2 MiB;
- the block handed out is split when the remainder is worth keeping (``should_split``): at least 512
  bytes in the small pool (and in expandable segments), more than 1 MiB in the large pool (and only for
  requests below ``max_split_size``); an unsplit remainder stays inside the handed-out block and counts
  as allocated (``memory_allocated`` sums block sizes, not requested sizes);
- a freed block merges with free neighbours of its segment (``free_block``/``try_merge_blocks``) and
  stays cached: ``memory_reserved`` (the sum of segments) never shrinks on its own;
- when ``cudaMalloc`` fails (here: reserved + new segment > ``capacity``), the allocator first frees
  cached whole segments (with ``max_split_size``: oversize ones, then) all free, unsplit segments
  (``release_cached_blocks``), and retries; only then is it out of memory;
- ``expandable_segments:True``: one segment per pool grows by mapping pages (2 MiB small, 20 MiB
  large: ``large_segment_size``) at its end, the trailing free block included, and any remainder of
  512 bytes or more is split off.

Not modelled: streams (one stream: a training step on the default stream), events and ``record_stream``
(frees are immediate), CUDA graphs and private pools, ``roundup_power2_divisions``, the
``garbage_collection_threshold``; on OOM an expandable segment unmaps only the free pages at its end (PyTorch
also unmaps whole free pages inside it: the simulated minimum capacity is then an upper bound).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

KiB, MiB = 1024, 1024 * 1024
MIN_BLOCK = 512                 # kMinBlockSize
SMALL_SIZE = 1 * MiB            # kSmallSize: largest small-pool request
SMALL_BUFFER = 2 * MiB          # kSmallBuffer: small-pool segment (and expandable small page)
LARGE_BUFFER = 20 * MiB         # kLargeBuffer: segment of a 1-10 MiB request (and expandable large page)
MIN_LARGE_ALLOC = 10 * MiB      # kMinLargeAlloc
ROUND_LARGE = 2 * MiB           # kRoundLarge
NO_LIMIT = 2**63                # max_split_size default: SIZE_MAX


class OutOfMemory(Exception):
    """The replay needed more than ``capacity`` even after releasing every cached free segment."""


def round_size(size: int) -> int:
    """``round_size``: max(512, 512 ceil(size / 512)) bytes."""
    return MIN_BLOCK if size < MIN_BLOCK else MIN_BLOCK * -(-size // MIN_BLOCK)


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the segment a rounded request opens when no cached block fits."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * -(-size // ROUND_LARGE)


@dataclass(eq=False)
class _Block:
    addr: int
    size: int
    small: bool
    seg: int                    # segment id
    allocated: bool = False
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class Stats:
    """Current and peak bytes, as ``torch.cuda.memory_stats`` names them."""
    requested: int = 0          # sum of requested sizes (what a tensor-bytes model counts)
    allocated: int = 0          # sum of handed-out block sizes (memory_allocated)
    reserved: int = 0           # sum of segments, or mapped pages (memory_reserved)
    peak_requested: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments: int = 0
    releases: int = 0           # segments freed to satisfy an allocation (OOM retries)


@dataclass
class CachingAllocator:
    """Replays ``malloc(key, size)`` / ``free(key)`` calls under the caching allocator's policy.

    ``capacity``: device bytes the allocator may reserve (None: unlimited); ``expandable``:
    ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; ``max_split_size``: the option of that name in bytes.

    >>> a = CachingAllocator()
    >>> a.malloc("x", 3 * MiB); a.free("x"); a.malloc("y", 1 * MiB + 512)   # y reuses x's 20 MiB segment
    >>> a.stats.reserved // MiB, a.stats.allocated
    (20, 1049088)
    """
    capacity: int | None = None
    expandable: bool = False
    max_split_size: int = NO_LIMIT
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        self._free: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}   # (size, addr, id)
        self._by_id: dict[int, _Block] = {}
        self._live: dict[object, tuple[_Block, int]] = {}
        self._next_addr = 1 << 40
        self._seg_count = 0
        self._tail: dict[bool, _Block | None] = {True: None, False: None}   # expandable: last mapped block
        self._base: dict[bool, int] = {}                                      # expandable: segment start

    # ---------------------------------------------------------------- public
    def malloc(self, key: object, nbytes: int) -> None:
        """Allocate ``nbytes`` under ``key`` (a tensor storage's id)."""
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        block = self._best_fit(size, small)
        if block is None:
            block = self._new_memory(size, small)
        if self._should_split(block, size):
            rest = _Block(block.addr + size, block.size - size, small, block.seg, prev=block, next=block.next)
            if block.next:
                block.next.prev = rest
            block.next, block.size = rest, size
            self._insert(rest)
            if self.expandable and self._tail[small] is block:
                self._tail[small] = rest
        block.allocated = True
        self._live[key] = (block, nbytes)
        s = self.stats
        s.requested += nbytes
        s.allocated += block.size
        s.peak_requested = max(s.peak_requested, s.requested)
        s.peak_allocated = max(s.peak_allocated, s.allocated)

    def free(self, key: object) -> None:
        """Free the allocation made under ``key``: merge with free neighbours, keep it cached."""
        block, nbytes = self._live.pop(key)
        self.stats.requested -= nbytes
        self.stats.allocated -= block.size
        block.allocated = False
        for other in (block.prev, block.next):
            if other is not None and not other.allocated:
                self._remove(other)
                if other is block.prev:
                    block.addr, block.prev = other.addr, other.prev
                    if other.prev:
                        other.prev.next = block
                else:
                    block.next = other.next
                    if other.next:
                        other.next.prev = block
                    if self._tail[block.small] is other:
                        self._tail[block.small] = block
                block.size += other.size
        self._insert(block)

    # ---------------------------------------------------------------- policy
    def _best_fit(self, size: int, small: bool) -> _Block | None:
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i == len(pool):
            return None
        block = self._by_id[pool[i][2]]
        limit = self.max_split_size
        if size < limit <= block.size or (size >= limit and block.size >= size + LARGE_BUFFER):
            return None
        self._remove(block)
        return block

    def _should_split(self, block: _Block, size: int) -> bool:
        rest = block.size - size
        if block.small or self.expandable:
            return rest >= MIN_BLOCK
        return size < self.max_split_size and rest > SMALL_SIZE

    def _new_memory(self, size: int, small: bool) -> _Block:
        grow = self._growth(size, small)
        if self.capacity is not None and self.stats.reserved + grow > self.capacity:
            self._release_cached(small)
            grow = self._growth(size, small)
            if self.stats.reserved + grow > self.capacity:
                raise OutOfMemory(f"tried to allocate {size} B with {self.stats.reserved} B reserved")
        return self._expand(size, small, grow) if self.expandable else self._segment(grow, small)

    def _growth(self, size: int, small: bool) -> int:
        """Bytes of device memory the request adds: a new segment, or the pages an expandable segment maps."""
        if not self.expandable:
            return allocation_size(size)
        page = SMALL_BUFFER if small else LARGE_BUFFER
        tail = self._tail[small]
        have = tail.size if tail is not None and not tail.allocated else 0
        return page * -(-(size - have) // page)

    def _segment(self, nbytes: int, small: bool) -> _Block:
        self._seg_count += 1
        block = _Block(self._next_addr, nbytes, small, self._seg_count)
        self._next_addr += nbytes + (1 << 30)
        self._account(nbytes, 1)
        return block

    def _expand(self, size: int, small: bool, grow: int) -> _Block:
        tail = self._tail[small]
        page = _Block(self._next_addr if tail is None else tail.addr + tail.size, grow, small, 0 if small else -1)
        if tail is None:
            self._base[small] = page.addr
            self._next_addr += 1 << 40
            self._account(0, 1)
        self._account(grow, 0)
        page.prev = tail
        if tail is not None:
            tail.next = page
            if not tail.allocated:   # map behind the trailing free block and take both
                self._remove(tail)
                tail.size += grow
                tail.next = None
                page = tail
        self._tail[small] = page
        return page

    def _release_cached(self, small: bool) -> None:
        """``release_cached_blocks``: free every cached block that is a whole segment (not split), both pools."""
        for pool in (False, True):
            for size, _, bid in list(self._free[pool]):
                block = self._by_id[bid]
                if block.prev is None and block.next is None and not self.expandable:
                    self._remove(block)
                    self._account(-size, -1)
                    self.stats.releases += 1
            if self.expandable:   # unmap the whole free pages at the end of the segment
                tail = self._tail[pool]
                if tail is not None and not tail.allocated:
                    page = SMALL_BUFFER if pool else LARGE_BUFFER
                    keep = -(tail.addr - self._base[pool]) % page
                    if tail.size > keep:
                        self._remove(tail)
                        self._account(keep - tail.size, 0)
                        self.stats.releases += 1
                        tail.size = keep
                        if keep:
                            self._insert(tail)
                        else:
                            self._tail[pool] = tail.prev
                            if tail.prev:
                                tail.prev.next = None

    # ---------------------------------------------------------------- bookkeeping
    def _account(self, nbytes: int, segments: int) -> None:
        s = self.stats
        s.reserved += nbytes
        s.segments += segments
        s.peak_reserved = max(s.peak_reserved, s.reserved)

    def _insert(self, block: _Block) -> None:
        self._by_id[id(block)] = block
        bisect.insort(self._free[block.small], (block.size, block.addr, id(block)))

    def _remove(self, block: _Block) -> None:
        pool = self._free[block.small]
        i = bisect.bisect_left(pool, (block.size, block.addr, id(block)))
        assert pool[i][2] == id(block)
        del pool[i]
        del self._by_id[id(block)]


def replay(events: list[tuple[str, object, int]], **options: object) -> Stats:
    """Replay ``("alloc", key, bytes)`` / ``("free", key, 0)`` events; return the allocator's :class:`Stats`."""
    a = CachingAllocator(**options)   # type: ignore[arg-type]
    for op, key, nbytes in events:
        if op == "alloc":
            a.malloc(key, nbytes)
        else:
            a.free(key)
    return a.stats


def min_capacity(events: list[tuple[str, object, int]], lo: int, hi: int, **options: object) -> int:
    """Smallest device capacity (to 2 MiB) with which the replay does not run out of memory (bisection)."""
    while hi - lo > 2 * MiB:
        mid = (lo + hi) // 2
        try:
            replay(events, capacity=mid, **options)
            hi = mid
        except OutOfMemory:
            lo = mid
    return hi
