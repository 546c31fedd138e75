"""Give the C heap's free pages back to the system after the Semantic Engine's passes.

The engine's arrays (ring copies, column batches, a cut's job-wide columns: hundreds of KiB to
tens of MiB each, made and dropped on every batch and cut) come from glibc malloc. glibc
raises its mmap threshold to the size of the largest block freed so far, so after the first
cuts they all come from its arenas rather than from mmap, and what they free stays resident:
in the engine soak (8 GPUs, TP2 x PP2 x DP2) the arenas held 180 MiB of which 80 were in use
(flat from Step 600 to 2,400, as were Python's objects), and each new peak of a cut (more ops
queued behind it) raised the resident size for good, by ~13 KiB a Step on average.
malloc_trim(0) gives every whole free page of every arena back (madvise), so the resident
size follows what is in use instead of the highest peak so far.

Only glibc has malloc_trim; elsewhere (musl, macOS) trimming does nothing.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

# A trim walks every arena's free chunks (a few ms for a few hundred MiB); pages it gives back
# are faulted in again when reused. Every few cuts is enough to keep the high-water mark off.
TRIM_EVERY_S = 10.0


def libc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class HeapTrim:
    """malloc_trim(0) after work that freed memory (`worked`), at most every `every_s`.
    `trim`: the function to call (default: glibc's; None: never trim)."""

    def __init__(self, every_s: float = TRIM_EVERY_S, trim: Callable[[int], int] | None = ...):
        self.every_s = every_s
        self._trim = libc_malloc_trim() if trim is ... else trim
        self._next = float("-inf")
        self._dirty = False
        self.trims = 0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def worked(self) -> None:
        """Memory may have been freed since the last trim."""
        self._dirty = True

    def due_at(self) -> float:
        """When the next trim is due (time.monotonic()); inf while there is nothing to trim."""
        if self._trim is None or not self._dirty:
            return float("inf")
        return self._next

    def maybe(self, now: float) -> bool:
        """Trim if due at `now`; whether it did."""
        if now < self.due_at():
            return False
        self._dirty = False
        self._next = now + self.every_s
        try:
            self._trim(0)
        except Exception:  # never a reason to stop the engine: trimming is an optimisation
            log.exception("malloc_trim failed; the C heap is no longer trimmed")
            self._trim = None
            return False
        self.trims += 1
        return True
