"""Process-wide settings, applied by the command line (:mod:`dse.search.command`), never by library code.

A library must not change the allocator of the program that imports it; ``dse search``
owns its process and may. Scripts that want the same speed call :func:`tune_allocator`
themselves (benchmarks/bench_search.py does).
"""

from __future__ import annotations

import ctypes
import sys


def tune_allocator() -> bool:
    """Let glibc serve numpy's block-sized temporaries from its heap (Linux only).

    By default glibc maps every allocation above 128 KiB with a fresh ``mmap`` and
    unmaps it on free, so each temporary array of a block costs system calls and
    page faults: on flat 131,072-point columns that halved the rate of the composed
    estimate (benchmarks/bench_search.py prints both). Raising the mmap threshold to
    32 MiB and keeping up to 256 MiB of freed heap avoids that; memory stays bounded
    by the block size. Returns whether the settings took effect.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3      # <malloc.h>
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 256 << 20)
                    and libc.mallopt(m_top_pad, 16 << 20))
    except (OSError, AttributeError):    # not glibc (musl, ...): keep the defaults
        return False
