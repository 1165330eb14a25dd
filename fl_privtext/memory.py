"""Process memory: give freed arrays back to the operating system (glibc's allocator keeps many of them).

glibc serves an allocation above its mmap threshold with its own mapping, returned to the OS when freed; below it,
from the heap, which keeps freed memory for reuse. The threshold starts at 128 KiB but rises to the size of every
mapped block freed (up to 32 MiB), so after the first large temporary, arrays of a few MiB (a chunk of uploads, a
batch of scores) come from the heap and their memory stays resident after they are freed. Pinning the threshold
(which also switches the rise off) returns them: the driver's peak RSS of the plain loop at 200,000 synthetic users
fell from 2.10 GB to 1.60 GB with the same results (benchmarks/README.md, "Scale"). A no-op where the C library is
not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
MMAP_THRESHOLD = 128 * 1024  # bytes: glibc's own initial value, pinned


def return_freed_arrays() -> bool:
    """Pin glibc's mmap threshold at ``MMAP_THRESHOLD`` for this process; True when it was set (glibc), False
    elsewhere (nothing changed). Idempotent; cheap enough to call before every large stage."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):  # no libc found, or one without mallopt (musl)
        return False
