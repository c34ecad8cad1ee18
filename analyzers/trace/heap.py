"""Freed memory handed back to the system between the analysis' stages.

glibc's allocator keeps what numpy frees below its (self-raising) mmap threshold — up to 32 MiB
per block — in its heaps, so after each stage's temporaries are gone the process still holds
them: on a 1 GB Nsight export ≈ 280 MiB of freed memory at the GPU-gap stage. ``malloc_trim(0)``
returns the free pages of every arena (``madvise(MADV_DONTNEED)``); the next stage faults in
what it uses. Other C libraries (musl, macOS) have no such call: nothing is done there.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

_trim: Callable[[int], int] | None = None
_loaded = False


def _load() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release() -> None:
    """Return the allocator's free pages to the system (a no-op where the C library cannot)."""
    global _trim, _loaded
    if not _loaded:
        _trim, _loaded = _load(), True
    if _trim is not None:
        _trim(0)
