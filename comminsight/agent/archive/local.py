"""The local side of archiving: which files under home are archivable, how much disk CommInsight
data takes, and which archived files the disk budget removes.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Names that are never complete data: open segments, atomic-write and upload temporaries.
_INCOMPLETE_SUFFIXES = (".partial", ".tmp", ".uploading")


@dataclass(frozen=True)
class ArchiveKind:
    """A kind of local file to archive: a glob relative to home matching complete files only.

    Writers must create these files under another name and rename them into place (as the
    Profiler does for segments: `.jsonl.partial` -> `.jsonl`), so a match is never a file
    still being written, and a file never changes once it matches.
    """

    name: str
    glob: str

    def complete_files(self, home: Path) -> list[Path]:
        return [
            p
            for p in home.glob(self.glob)
            if p.is_file() and not p.name.endswith(_INCOMPLETE_SUFFIXES)
        ]

    def open_files(self, home: Path) -> list[Path]:
        """Files still being written: counted in disk use, never archived or deleted."""
        return [p for p in home.glob(self.glob + ".partial") if p.is_file()]


DEFAULT_KINDS = (
    ArchiveKind("inspector_logs", "inspector_logs/*.jsonl"),
    ArchiveKind("step_summaries", "semantics/step/*.jsonl"),
)


@dataclass(frozen=True)
class LocalFile:
    path: Path
    source: str  # path relative to home: the ledger key and the stem of the object name
    size: int
    mtime_ns: int


class LocalData:
    """The archivable files under home, oldest first, and the disk they take."""

    def __init__(self, home: Path, kinds: Iterable[ArchiveKind], exclude: Iterable[Path] = ()):
        self.home = home
        self.kinds = tuple(kinds)
        # A broad glob must not pick up the archiver's own ledger or an archive under home.
        self.exclude = tuple(exclude)
        # Files that match a kind but are not this user's regular files (a symbolic link
        # planted to make the Archiver copy a file it may read and others may not): source ->
        # why, as of the latest scan; `refused_total` counts each (source, why) once.
        self.refused: dict[str, str] = {}
        self.refused_total = 0
        self._refused_seen: set[tuple[str, str]] = set()

    def add_kind(self, kind: ArchiveKind) -> None:
        self.kinds += (kind,)

    def complete_files(self) -> list[LocalFile]:
        files = {}
        refused: dict[str, str] = {}
        for kind in self.kinds:
            for path in kind.complete_files(self.home):
                if any(path.is_relative_to(d) for d in self.exclude):
                    continue
                source = path.relative_to(self.home).as_posix()
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue  # deleted between glob and stat
                why = self.untrusted(path, st)
                if why is not None:
                    refused[source] = why
                    continue
                files[source] = LocalFile(path, source, st.st_size, st.st_mtime_ns)
        self._note_refused(refused)
        # Oldest first: upload in the order data was produced, delete the oldest first.
        return sorted(files.values(), key=lambda f: (f.mtime_ns, f.source))

    def untrusted(self, path: Path, st: os.stat_result) -> str | None:
        """Why the file at path (lstat: st) must not be archived, or None."""
        if stat.S_ISLNK(st.st_mode):
            return "is a symbolic link"
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        if st.st_uid != os.geteuid():
            return f"is owned by uid {st.st_uid}, not by this Agent's uid {os.geteuid()}"
        # a linked directory between home and the file leads the glob out of the home
        for parent in path.relative_to(self.home).parents:
            if parent != Path(".") and (self.home / parent).is_symlink():
                return f"lies under {self.home / parent}, a symbolic link"
        return None

    def refuse(self, source: str, why: str) -> None:
        """A file found untrusted when it was opened (it changed after the scan)."""
        self.refused[source] = why
        self._note_refused({source: why}, replace=False)

    def _note_refused(self, refused: dict[str, str], replace: bool = True) -> None:
        for source, why in refused.items():
            if (source, why) not in self._refused_seen:
                self._refused_seen.add((source, why))
                self.refused_total += 1
                log.error("archive: refusing %s: %s", self.home / source, why)
        if replace:
            self.refused = refused

    def used_bytes(self, complete: list[LocalFile] | None = None) -> int:
        if complete is None:
            complete = self.complete_files()
        total = sum(f.size for f in complete)
        for kind in self.kinds:
            for path in kind.open_files(self.home):
                try:
                    total += path.stat().st_size
                except FileNotFoundError:
                    pass
        return total


@dataclass(frozen=True)
class DiskBudget:
    """How many bytes of local CommInsight data may stay; 0 means no limit (never delete)."""

    limit_bytes: int

    def files_to_delete(
        self,
        oldest_first: list[LocalFile],
        used_bytes: int,
        is_archived: Callable[[LocalFile], bool],
    ) -> list[LocalFile]:
        """The oldest archived files whose removal brings use within the limit (or as close
        as archived files allow: unarchived and open files are never chosen)."""
        chosen: list[LocalFile] = []
        if self.limit_bytes <= 0:
            return chosen
        for f in oldest_first:
            if used_bytes <= self.limit_bytes:
                break
            if is_archived(f):
                chosen.append(f)
                used_bytes -= f.size
        return chosen
