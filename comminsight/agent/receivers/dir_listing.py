"""A directory's entries, listed again only when the directory changed.

The Agent looks at some directories on every pass (shms/ every poll interval; the archived
kinds' directories several times per archive pass), and they can hold thousands of entries
whose answer has not changed: an idle Agent spent a large share of a core listing them.
Creating, renaming or removing an entry changes the directory's mtime and ctime, so a listing
is kept while they stay the same.

File systems stamp times from a coarse clock: an entry added within the same tick as the
listing could leave the times as they were. A listing whose directory changed less than
SETTLE_NS before it was taken is therefore not trusted, and the next call lists again. A full
listing also comes every REFRESH_NS whatever the times say (a clock stepped back could in
principle repeat a stamp), so nothing is missed for longer than that.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

SETTLE_NS = 2_000_000_000
REFRESH_NS = 60_000_000_000

T = TypeVar("T")


class DirectoryListing(Generic[T]):
    """`entries()`: keep(entry) of every entry of the directory for which it is not None, in
    the directory's order (or sorted by sort_key), from the last listing while the directory
    is unchanged; `scans` counts the listings actually taken."""

    def __init__(
        self,
        directory: Path,
        keep: Callable[[os.DirEntry], T | None],
        sort_key: Callable[[T], object] | None = None,
    ) -> None:
        self.directory = directory
        self.keep = keep
        self.sort_key = sort_key
        self.scans = 0
        self._stamp: tuple[int, int, int, int] | None = None
        self._entries: list[T] = []
        self._listed_mono_ns = 0

    def entries(self) -> list[T]:
        """Raises OSError where the directory cannot be read."""
        st = os.stat(self.directory)
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        now_mono = time.monotonic_ns()
        if stamp == self._stamp and now_mono - self._listed_mono_ns < REFRESH_NS:
            return self._entries
        listed_real = time.time_ns()
        with os.scandir(self.directory) as it:
            entries = [kept for e in it if (kept := self.keep(e)) is not None]
        if self.sort_key is not None:
            entries.sort(key=self.sort_key)
        self.scans += 1
        self._entries = entries
        self._listed_mono_ns = now_mono
        # trusted next time only if the directory had settled when it was listed
        # (an entry's change stamps mtime and ctime alike; ctime, which no one can set back,
        # is in the stamp compared next time)
        settled = listed_real - st.st_mtime_ns >= SETTLE_NS
        self._stamp = stamp if settled else None
        return entries

    def forget(self) -> None:
        """List again at the next call (the caller changed the directory itself)."""
        self._stamp = None
