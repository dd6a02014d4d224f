"""Giving freed memory back to the system (no framework, no I/O).

glibc keeps what Python and numpy free inside its heap for reuse; arrays of a few MB to
32 MB come from that heap once the allocator has seen large frees (its mmap threshold
rises to the largest freed chunk), so a stage that now and then builds such arrays keeps
its high-water mark as RSS. A level-1 index merge (800,000 entries) left the persister
20-30 MB larger each time; `give_back` after such work returns it (malloc_trim(0): a
few milliseconds).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim  # glibc only
    except (OSError, AttributeError, TypeError):
        return None
    return trim


_TRIM = _malloc_trim()


def give_back() -> None:
    """Return the heap's free pages to the system (nothing where libc has no malloc_trim)."""
    if _TRIM is not None:
        _TRIM(0)


__all__ = ["give_back"]
