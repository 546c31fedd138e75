"""The local side of archiving: which files under home are archivable, how much disk CommInsight
data takes, and which archived files the disk budget removes.

A kind's files may be stored compressed by their writer (ArchiveKind.compressed_suffix: the
Profiler replaces a sealed `<name>.jsonl` by `<name>.jsonl.zst`, one zstd frame of the same
bytes, and for a moment both exist). Either file is the same file for the archive: one
LocalFile per source, the source (the ledger key) being the uncompressed name, its path the
uncompressed file while there is one; the other copy is removed with it.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from comminsight.agent.receivers.dir_listing import DirectoryListing
from comminsight.log_segments import COMPRESSED_SUFFIX
from comminsight_gen import home_v1_names as home_names

log = logging.getLogger(__name__)

# Names that are never complete data: open segments, atomic-write and upload temporaries.
_INCOMPLETE_SUFFIXES = (".partial", ".tmp", ".uploading")


@dataclass(frozen=True)
class ArchiveKind:
    """A kind of local file to archive: a glob relative to home matching complete files only.

    Writers must create these files under another name and rename them into place (as the
    Profiler does for segments: `.jsonl.partial` -> `.jsonl`), so a match is never a file
    still being written, and a file never changes once it matches.

    `compressed_suffix`: a complete file may also be stored compressed as
    `<name><compressed_suffix>` (one zstd frame of its bytes, renamed into place once whole);
    such a file is archived as it is, under the same source and object name as `<name>`.
    """

    name: str
    glob: str
    compressed_suffix: str = ""

    @property
    def directory(self) -> str | None:
        """The one directory the glob lists (`inspector_logs/*.jsonl`), or None for a glob
        whose directories have wildcards too (`**/*`)."""
        directory, _, pattern = self.glob.rpartition("/")
        if not pattern or _has_wildcard(directory):
            return None
        return directory

    def complete_files(self, home: Path) -> list[Path]:
        globs = [self.glob]
        if self.compressed_suffix:
            globs.append(self.glob + self.compressed_suffix)
        return [
            p
            for g in globs
            for p in home.glob(g)
            if p.is_file() and not p.name.endswith(_INCOMPLETE_SUFFIXES)
        ]

    def source_name(self, name: str) -> tuple[str, bool]:
        """(the name a file of the kind is archived as, whether the file is compressed)."""
        if self.compressed_suffix and name.endswith(self.compressed_suffix):
            stem = name.removesuffix(self.compressed_suffix)
            if fnmatch.fnmatchcase(stem, self.glob.rpartition("/")[2]):
                return stem, True
        return name, False

    def open_files(self, home: Path) -> list[Path]:
        """Files still being written: counted in disk use, never archived or deleted."""
        return [p for p in home.glob(self.glob + ".partial") if p.is_file()]


def _has_wildcard(text: str) -> bool:
    return any(c in text for c in "*?[")


# In a shared home (COMMINSIGHT_AGENT_SHARED_HOME) each user's segments, under their own
# directory: archived like the Agent's own, each checked against that user as owner.
USERS_INSPECTOR_LOGS = ArchiveKind(
    "users_inspector_logs", "users/*/inspector_logs/*.jsonl", COMPRESSED_SUFFIX
)

DEFAULT_KINDS = (
    # sealed segments, and those the Profiler compressed (`.jsonl.zst`)
    ArchiveKind("inspector_logs", f"{home_names.INSPECTOR_LOGS}/*.jsonl", COMPRESSED_SUFFIX),
    ArchiveKind("step_summaries", f"{home_names.SEMANTICS}/{home_names.STEP}/*.jsonl"),
)


@dataclass(frozen=True)
class _Found:
    """A file of a kind as its directory's listing found it."""

    path: Path
    source: str  # path relative to home (of the uncompressed file, for a compressed one)
    lstat: os.stat_result | None  # None: an open file (its size is read when counted)
    compressed: bool = False


def _kind_entry(kind: ArchiveKind, directory: str) -> Callable[[os.DirEntry], _Found | None]:
    """What a listing of the kind's directory keeps of an entry: complete files, compressed
    or not (never changed once they match, so their lstat stays true while the listing does)
    and open ones."""
    pattern = kind.glob.rpartition("/")[2]
    suffix = kind.compressed_suffix

    def keep(entry: os.DirEntry) -> _Found | None:
        name = entry.name
        if fnmatch.fnmatchcase(name, pattern) or (
            suffix and fnmatch.fnmatchcase(name, pattern + suffix)
        ):
            if name.endswith(_INCOMPLETE_SUFFIXES) or not entry.is_file():
                return None
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                return None  # deleted while listed
            source, compressed = kind.source_name(name)
            return _Found(Path(entry.path), f"{directory}/{source}", st, compressed)
        if fnmatch.fnmatchcase(name, pattern + ".partial") and entry.is_file():
            return _Found(Path(entry.path), f"{directory}/{name}", None)
        return None

    return keep


@dataclass(frozen=True)
class LocalFile:
    path: Path
    source: str  # path relative to home: the ledger key and the stem of the object name
    size: int
    mtime_ns: int
    compressed: bool = False  # path is the file zstd-compressed by its writer: sent as it is
    # the other copy of the same content while both are there (the compressed one, written
    # before the uncompressed one is removed): deleted with it, counted in disk use
    copies: tuple[Path, ...] = ()
    copies_bytes: int = 0
    owner: int = -1  # the user it must belong to: a user's in a shared home; -1 this Agent's

    @property
    def name(self) -> str:
        """The file's own path relative to home (its source but for a compressed file)."""
        return _relative(self.source, self.path)


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
        self._listings: dict[str, DirectoryListing[_Found]] = {}  # kind name -> its listing
        # compressed files found damaged when read (no whole zstd frame): path -> (its
        # identity then, why); refused while they stay the same file
        self._damaged: dict[Path, tuple[tuple[int, int, int], str]] = {}

    def add_kind(self, kind: ArchiveKind) -> None:
        self.kinds += (kind,)

    def complete_files(self) -> list[LocalFile]:
        files: dict[str, LocalFile] = {}
        refused: dict[str, str] = {}
        under_link: dict[Path, str | None] = {}  # directory -> why, for this call
        seen: set[Path] = set()
        for kind in self.kinds:
            for found in self._complete(kind):
                path, source, st = found.path, found.source, found.lstat
                seen.add(path)
                owner = self.owner_of(source)
                why = self.untrusted(path, st, under_link, owner) or self._damaged_why(path, st)
                if why is not None:
                    refused[_relative(found.source, path)] = why
                    continue
                local = LocalFile(
                    path, source, st.st_size, st.st_mtime_ns, found.compressed, owner=owner
                )
                files[source] = _one_of(files[source], local) if source in files else local
        self._note_refused(refused)
        self._damaged = {p: known for p, known in self._damaged.items() if p in seen}
        # Oldest first: upload in the order data was produced, delete the oldest first.
        return sorted(files.values(), key=lambda f: (f.mtime_ns, f.source))

    def _complete(self, kind: ArchiveKind) -> Iterable[_Found]:
        """The kind's complete files (with their lstat)."""
        directory = kind.directory
        if directory is not None:
            return [f for f in self._found(kind, directory) if f.lstat is not None]
        found = []
        for path in kind.complete_files(self.home):
            if self._excluded(path):
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # deleted between glob and stat
            name, compressed = kind.source_name(path.name)
            source = path.with_name(name).relative_to(self.home).as_posix()
            found.append(_Found(path, source, st, compressed))
        return found

    def refuse_damaged(self, local: LocalFile, why: str) -> None:
        """A compressed file found damaged when it was read (not one whole zstd frame):
        refused, and not read again while it stays the same file."""
        try:
            st = os.lstat(local.path)
        except OSError:
            return  # gone: nothing to refuse
        self._damaged[local.path] = (_identity(st), why)
        self.refuse(local.name, why)

    def _damaged_why(self, path: Path, st: os.stat_result) -> str | None:
        known = self._damaged.get(path)
        if known is None:
            return None
        if known[0] != _identity(st):
            del self._damaged[path]  # another file now: read again
            return None
        return known[1]

    def _open(self, kind: ArchiveKind) -> Iterable[Path]:
        directory = kind.directory
        if directory is not None:
            return [f.path for f in self._found(kind, directory) if f.lstat is None]
        return kind.open_files(self.home)

    def _excluded(self, path: Path) -> bool:
        return any(path.is_relative_to(d) for d in self.exclude)

    def _found(self, kind: ArchiveKind, directory: str) -> list[_Found]:
        """The kind's files in its directory, listed again only when the directory changed
        (dir_listing): an Agent beside a long job keeps thousands of sealed segments, and an
        archive pass looks at them several times."""
        d = self.home / directory
        if self._excluded(d):
            return []
        listing = self._listings.get(kind.name)
        if listing is None:
            listing = self._listings[kind.name] = DirectoryListing(d, _kind_entry(kind, directory))
        try:
            return listing.entries()
        except OSError:  # not there yet (or no directory): nothing of this kind
            return []

    @staticmethod
    def owner_of(source: str) -> int:
        """Who a file must belong to, by where it is under home: in `users/<uid>/`, that user
        (USERS_INSPECTOR_LOGS); elsewhere this Agent's user (-1)."""
        parts = PurePosixPath(source).parts
        if len(parts) > 2 and parts[0] == "users" and parts[1].isdigit():
            return int(parts[1])
        return -1

    def untrusted(
        self,
        path: Path,
        st: os.stat_result,
        under_link: dict[Path, str | None] | None = None,
        owner: int = -1,
    ) -> str | None:
        """Why the file at path (lstat: st) must not be archived, or None. under_link: what
        is known of its directories so far (they are looked at once per scan); owner: the
        user it must belong to (-1: this Agent's)."""
        if stat.S_ISLNK(st.st_mode):
            return "is a symbolic link"
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        expected = os.geteuid() if owner == -1 else owner
        if st.st_uid != expected:
            whose = "this Agent's" if owner == -1 else "its directory's"
            return f"is owned by uid {st.st_uid}, not by {whose} uid {expected}"
        known = {} if under_link is None else under_link
        directory = path.parent
        if directory not in known:
            known[directory] = self._linked_directory(directory)
        return known[directory]

    def _linked_directory(self, directory: Path) -> str | None:
        """Why files in directory are not home's: a linked directory between home and it
        leads the scan out of the home."""
        for parent in (directory / "f").relative_to(self.home).parents:
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
        total = sum(f.size + f.copies_bytes for f in complete)
        for kind in self.kinds:
            for path in self._open(kind):
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
                used_bytes -= f.size + f.copies_bytes
        return chosen


def _relative(source: str, path: Path) -> str:
    """The path relative to home of `path`, a file of `source` (itself or its compressed
    copy, beside it)."""
    return PurePosixPath(source).with_name(path.name).as_posix()


def _one_of(a: LocalFile, b: LocalFile) -> LocalFile:
    """One LocalFile for two copies of the same source: the uncompressed one, the other
    among its copies."""
    keep, other = (b, a) if a.compressed and not b.compressed else (a, b)
    return replace(
        keep,
        copies=keep.copies + (other.path,) + other.copies,
        copies_bytes=keep.copies_bytes + other.size + other.copies_bytes,
    )


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)
