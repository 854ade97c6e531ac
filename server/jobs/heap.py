"""A job worker's freed heap, returned to the operating system after every unlearning round.

A round's temporaries are of the size of its stored shares (n·m int64: the stacked uploads,
the products and comparisons over them) and are all freed when the round ends; what the
worker keeps is bounded (docs/JOBS.md, "Memory of a job worker"). glibc's allocator,
however, keeps freed blocks of a few MB in its arenas for reuse, and a fragmented arena
is not shrunk: the resident size then grows round after round although the live objects
do not. `release()` asks the allocator to return every free page (malloc_trim(0), which
also releases whole free pages inside an arena), so the resident size between rounds is
what the worker holds. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None when the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    return getattr(ctypes.CDLL(name), "malloc_trim", None)


def release() -> bool:
    """Return the heap's free pages to the operating system; True if any were returned."""
    trim = _trim()
    return bool(trim(0)) if trim is not None else False
