"""Give large freed blocks back to the operating system at once (glibc only).

An event stream serialises events one at a time: a 200 KB event is a few
200 KB strings that live for a moment. glibc serves blocks that large from
``mmap`` at first, but raises that threshold each time one is freed, after
which they come from the heap, whose freed space it keeps: 1,000 streams of
200 KB events left ``stint api`` at 530 MiB after they had all ended.
Pinning the threshold at 128 KiB (glibc's own default, made fixed) keeps
every such block in its own mapping, unmapped when freed, so the process's
memory follows what it holds. Elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["return_large_allocations"]

log = logging.getLogger("stint.api")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 128 * 1024


def return_large_allocations() -> bool:
    """True when glibc took the settings."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    taken = bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _THRESHOLD)
    )
    if not taken:
        log.info("the C library did not take the allocator settings; memory may stay high")
    return taken
