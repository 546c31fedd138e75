"""The candidate region names in <home>/shms/, listed again only when the directory changed.

An ingest pass runs every poll interval; listing a directory that holds thousands of entries
that are no regions (junk another tool left, names the Agent could not quarantine) cost an idle
Agent a large share of a core, pass after pass, for an answer that had not changed. Creating,
renaming or removing an entry changes the directory's mtime and ctime, so the listing is kept
while they stay the same.

File systems stamp times from a coarse clock: an entry added within the same tick as the
listing could leave the times as they were. A listing whose directory changed less than
SETTLE_NS before it was taken is therefore not trusted, and the next pass lists again. A full
listing also comes every REFRESH_NS whatever the times say (a clock stepped back could in
principle repeat a stamp), so nothing is missed for longer than that.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SUFFIX = ".shm"
SETTLE_NS = 2_000_000_000
REFRESH_NS = 60_000_000_000


class ShmsListing:
    """`entries()`: (name, inode) of every *.shm entry of the directory, from the last
    listing while the directory is unchanged; `scans` counts the listings actually taken."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.scans = 0
        self._stamp: tuple[int, int, int, int] | None = None
        self._entries: list[tuple[str, int]] = []
        self._listed_mono_ns = 0

    def entries(self) -> list[tuple[str, int]]:
        """Raises OSError where the directory cannot be read."""
        st = os.stat(self.directory)
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        now_mono = time.monotonic_ns()
        if stamp == self._stamp and now_mono - self._listed_mono_ns < REFRESH_NS:
            return self._entries
        listed_real = time.time_ns()
        with os.scandir(self.directory) as it:
            entries = sorted((e.name, e.inode()) for e in it if e.name.endswith(SUFFIX))
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
        """List again at the next call (the Agent changed the directory itself)."""
        self._stamp = None
