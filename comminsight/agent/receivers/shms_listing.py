"""The candidate region names in <home>/shms/, listed again only when the directory changed
(dir_listing): an ingest pass runs every poll interval, and a directory holding thousands of
entries that are no regions (junk another tool left, names the Agent could not quarantine)
cost an idle Agent a large share of a core, pass after pass.
"""

from __future__ import annotations

import os
from pathlib import Path

from comminsight.agent.receivers.dir_listing import DirectoryListing

SUFFIX = ".shm"


def _region_entry(entry: os.DirEntry) -> tuple[str, int] | None:
    return (entry.name, entry.inode()) if entry.name.endswith(SUFFIX) else None


class ShmsListing(DirectoryListing[tuple[str, int]]):
    """`entries()`: (name, inode) of every *.shm entry of the directory, sorted."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, _region_entry, sort_key=lambda e: e)
