"""The local side of archiving: which files under home are archivable, how much disk CommInsight
data takes, and which archived files the disk budget removes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

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

    def add_kind(self, kind: ArchiveKind) -> None:
        self.kinds += (kind,)

    def complete_files(self) -> list[LocalFile]:
        files = {}
        for kind in self.kinds:
            for path in kind.complete_files(self.home):
                if any(path.is_relative_to(d) for d in self.exclude):
                    continue
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue  # deleted between glob and stat
                source = path.relative_to(self.home).as_posix()
                files[source] = LocalFile(path, source, st.st_size, st.st_mtime_ns)
        # Oldest first: upload in the order data was produced, delete the oldest first.
        return sorted(files.values(), key=lambda f: (f.mtime_ns, f.source))

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
