"""Which communicator names Inject gave, from what it wrote under `<home>/metadata/inject/`.

Inject names a PyTorch process group's communicator by writing `<group_desc>:<group_name>`
into the NCCL config PyTorch passes to ncclCommInitRankConfig, so the Profiler receives it as
NCCL's commName and records name_source NCCL. Inject's own `group` lines
(protocols/inject-metadata/v1) say which names it set, per process (host and pid, taken from
each line, as a host name may hold dots): the Agent reports those names' source as Inject.

Its `stacks` lines (the latest per process) say whether the process takes the stack signal,
which `stack_capture` reads before it ever sends one (`stacks_announcement`); any line at
all says that Inject is in the process (`has_inject`). Its `step` lines are the process's
optimizer-step markers, which the live Semantic Engine weighs as the strongest evidence of
where Steps end (`step_markers`, read from the engine's thread; kept bounded by
step_marker_store).

Files are read incrementally (each pass reads what was appended since the last; Inject writes
whole lines with one O_APPEND write each, so a line without its newline is waited for). A line
that does not decode as inject-metadata v1 is skipped and remembered in `errors` by file and
line number, with a warning logged once per file; the file's other lines still count.

Whatever a file holds, a pass reads at most READ_BUDGET bytes of it and never reads a byte
twice: a line longer than `max_line` bytes (Inject's are a few hundred) is refused once,
counted (`rejected["line_too_long"]`) and skipped up to its newline, however many passes that
takes, instead of being re-read every pass while its newline is waited for. Files are opened
without following links or blocking, and only regular files of this Agent's user are read.

However many files the directory holds, a pass opens at most FILES_PER_PASS of them (taking
turns, so every file is reached); a file whose (inode, size, mtime) did not change since it
was last read or refused costs one lstat, not a read (a cut last line is not re-read while its
newline is waited for); a file not yet read whose process is gone and that nothing wrote for
STALE_S is not read at all; and bad files are logged at most once per RateLimitedLog period,
each still named in `errors`.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from comminsight.agent.core.rate_limited_log import RateLimitedLog
from comminsight.agent.receivers.step_marker_store import StepMarkerStore
from comminsight.safe_open import open_checked
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.inject_metadata_v1 import InjectMetadata, Kind, Naming

log = logging.getLogger(__name__)

# how a name reached NCCL when Inject set it (user-named: the user's own name was kept)
SET_BY_INJECT = (Naming.nccl_config, Naming.torch_option)
MAX_LINE = 1 << 20  # bytes; a longer line is refused
READ_BUDGET = 4 << 20  # bytes read from one file per pass
FILES_PER_PASS = 128  # files opened and read per pass; the others wait their turn
STALE_S = 3600.0  # a file of a process that is gone, untouched this long, is not read


@dataclass
class _File:
    offset: int = 0
    inode: int = 0
    line_no: int = 0
    processes: set = field(default_factory=set)  # (host, pid) of its lines
    skipping: bool = False  # inside a refused (too long) line: drop bytes to its newline
    seen: tuple[int, int, int] | None = None  # (inode, size, mtime) when last read or refused


@dataclass
class _Dir:
    """One home's metadata/inject/ and the user every file in it must belong to."""

    path: Path
    uid: int
    next_first: str = ""  # the pass after a cut-short one starts past this name


# (uid of the directory the line was in, host, pid): a line speaks only for processes of
# the user who wrote it, so that no user can claim another user's process
ProcessKey = tuple[int, str, int]


class InjectNames:
    def __init__(self, home: str | Path, max_line: int = MAX_LINE) -> None:
        self.own = _Dir(Path(home) / home_names.METADATA / home_names.INJECT, os.geteuid())
        self.dir = self.own.path
        self._dirs: dict[Path, _Dir] = {self.own.path: self.own}
        self.max_line = min(max_line, READ_BUDGET)  # a longer one could never be read whole
        self._files: dict[str, _File] = {}  # by file key (_file_key)
        self._names: dict[ProcessKey, set[str]] = {}
        self._stacks: dict[ProcessKey, InjectMetadata] = {}  # the latest `stacks` line
        self._seen: set[ProcessKey] = set()  # processes with any valid line
        self._markers = StepMarkerStore()  # the host times each process's step() returned
        self.errors: dict[str, str] = {}  # file name -> the first bad line, and why
        self.rejected: dict[str, int] = {}  # reason -> lines (or files) refused
        self.bytes_read = 0  # every byte read, for tests of the bound
        self.files_opened = 0  # every open, for tests of the bound
        self.stale_ignored = 0  # files of processes long gone, never read
        self._bad_log = RateLimitedLog(log, "inject metadata refused", 60.0)
        self._decoder = msgspec.json.Decoder(InjectMetadata)

    def serve(self, homes: dict[int, Path]) -> None:
        """Read the metadata/inject/ of these users' homes (uid -> home) besides the Agent's
        own; a directory no longer served is forgotten with what it said."""
        wanted = {
            Path(home) / home_names.METADATA / home_names.INJECT: uid for uid, home in homes.items()
        }
        for path in [p for p in self._dirs if p != self.own.path and p not in wanted]:
            del self._dirs[path]
            self._forget_dir(path)
        for path, uid in wanted.items():
            if path != self.own.path and (path not in self._dirs or self._dirs[path].uid != uid):
                self._forget_dir(path)
                self._dirs[path] = _Dir(path, uid)

    def _forget_dir(self, path: Path) -> None:
        prefix = f"{path}/"
        for key in [k for k in self._files if k.startswith(prefix)]:
            self._forget_file(key)

    def refresh(self) -> None:
        """Read what the files gained since the last call."""
        for directory in list(self._dirs.values()):
            self._refresh_dir(directory)

    def _refresh_dir(self, directory: _Dir) -> None:
        try:
            entries = list(os.scandir(directory.path))
        except OSError:  # no Inject on this node (yet)
            return
        present = set()
        files = sorted(
            (e for e in entries if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)),
            key=lambda e: e.name,
        )
        # take turns: start where the last pass that ran out of opens stopped
        start = next((i for i, e in enumerate(files) if e.name > directory.next_first), 0)
        opens = 0
        for entry in files[start:] + files[:start]:
            present.add(self._file_key(directory, entry.name))
            if opens >= FILES_PER_PASS:
                continue  # kept (present), read on a later pass
            if self._read(directory, entry):
                opens += 1
                if opens == FILES_PER_PASS:
                    directory.next_first = entry.name
        if opens < FILES_PER_PASS:
            directory.next_first = ""
        mine = {k for k in self._files if self._in_dir(directory, k)}
        for gone in mine - present:  # removed (a job cleaned up): forget it
            self._forget_file(gone)

    def _file_key(self, directory: _Dir, name: str) -> str:
        """How `errors` and the file table name a file: its name in the Agent's own home, its
        path in a user's directory."""
        return name if directory is self.own else f"{directory.path}/{name}"

    def _in_dir(self, directory: _Dir, key: str) -> bool:
        if directory is self.own:
            return "/" not in key
        return key.startswith(f"{directory.path}/")

    def _forget_file(self, key: str) -> None:
        for process in self._files.pop(key).processes:
            self._names.pop(process, None)
            self._stacks.pop(process, None)
            self._seen.discard(process)
            self._markers.forget(process)
        self.errors.pop(key, None)

    def _read(self, directory: _Dir, entry: os.DirEntry) -> bool:
        """Read what the file gained; True when it was opened (the per-pass bound)."""
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:  # removed meanwhile
            return False
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        file = self._file_key(directory, entry.name)
        state = self._files.get(file)
        if state is None and _stale(entry.name, st.st_mtime_ns):
            self.stale_ignored += 1
            return False
        state = self._files.setdefault(file, _File())
        if state.seen == key:  # nothing new since it was last read or refused
            return False
        if state.inode != st.st_ino or st.st_size < state.offset:  # a new file by that name
            state.offset, state.inode, state.line_no, state.skipping = 0, st.st_ino, 0, False
        if st.st_size == state.offset:
            state.seen = key
            return False
        state.seen = key  # refused or read, it is looked at again only once it changes
        self.files_opened += 1
        try:
            # another user's file in a user's directory is refused: it would speak for them
            fd, _ = open_checked(entry.path, "regular file", owner=directory.uid)
        except OSError as e:
            self._reject(file, "unreadable", f"cannot read: {e}")
            return True
        try:
            data = os.pread(fd, min(st.st_size - state.offset, READ_BUDGET), state.offset)
        except OSError as e:
            self._reject(file, "unreadable", f"cannot read: {e}")
            return True
        finally:
            os.close(fd)
        if len(data) == READ_BUDGET:
            state.seen = None  # more to read on the next pass
        self.bytes_read += len(data)
        at = 0
        if state.skipping:  # the rest of a refused line
            newline = data.find(b"\n")
            if newline < 0:
                state.offset += len(data)
                return
            at, state.skipping = newline + 1, False
        end = data.rfind(b"\n") + 1  # whole lines only
        for line in data[at:end].split(b"\n")[:-1] if end > at else ():
            state.line_no += 1
            if len(line) > self.max_line:
                self._too_long(file, state, len(line))
            elif line.strip():
                self._line(directory.uid, file, state, line)
        tail = len(data) - max(end, at)
        if tail > self.max_line:  # no newline within the limit: refuse it now, skip the rest
            state.line_no += 1
            self._too_long(file, state, tail)
            state.skipping = True
            end = len(data)
        state.offset += max(end, at)
        return True

    def _too_long(self, file: str, state: _File, size: int) -> None:
        self._reject(
            file,
            "line_too_long",
            f"line {state.line_no}: {size} bytes or more, longer than the {self.max_line}-byte "
            "limit of an inject-metadata line; refused and skipped",
        )

    def _reject(self, file: str, reason: str, why: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self._bad(file, why)

    def _line(self, uid: int, file: str, state: _File, line: bytes) -> None:
        try:
            record = self._decoder.decode(line)
        except NOT_JSON as e:
            self._reject(file, "invalid", f"line {state.line_no}: {e}")
            return
        key = (uid, record.host, record.pid)
        state.processes.add(key)
        self._seen.add(key)
        if record.kind is Kind.stacks:
            self._stacks[key] = record
        if (
            record.kind is Kind.step
            and isinstance(record.optimizer, str)
            and isinstance(record.mono_ns, int)
        ):
            self._markers.add(uid, key, record.optimizer, record.mono_ns)
        if (
            record.kind is Kind.group
            and record.naming in SET_BY_INJECT
            and isinstance(record.comm_name, str)
        ):
            self._names.setdefault(key, set()).add(record.comm_name)

    def _bad(self, file: str, why: str) -> None:
        if file not in self.errors:
            self.errors[file] = why
            where = self.dir / file if "/" not in file else file
            self._bad_log.note(f"{where}: {why} (line skipped)")

    def _key(self, host: str, pid: int, uid: int | None) -> ProcessKey:
        return (self.own.uid if uid is None else uid, host, pid)

    def has_inject(self, host: str, pid: int, uid: int | None = None) -> bool:
        """Inject wrote at least one valid line for this process, in the directory of its
        user `uid` (default: the Agent's own home)."""
        return self._key(host, pid, uid) in self._seen

    def stacks_announcement(
        self, host: str, pid: int, uid: int | None = None
    ) -> InjectMetadata | None:
        """The process's latest `stacks` line, if it wrote one."""
        return self._stacks.get(self._key(host, pid, uid))

    def step_markers(self, host: str, pid: int, uid: int | None = None) -> np.ndarray | None:
        """The process's optimizer-step markers so far (sorted host times of the optimizer
        class that stepped most, as the offline reader takes them), or None without any."""
        return self._markers.markers(self._key(host, pid, uid))

    def named_by_inject(self, host: str, pid: int, name: str, uid: int | None = None) -> bool:
        return name in self._names.get(self._key(host, pid, uid), ())

    def name_source(self, code: int, host: str, pid: int, name: str, uid: int | None = None) -> int:
        """A Profiler row's name_source, NCCL turned INJECT where Inject set that name."""
        if code == shm_v1.NameSource.NCCL and name and self.named_by_inject(host, pid, name, uid):
            return int(shm_v1.NameSource.INJECT)
        return code


def _stale(name: str, mtime_ns: int) -> bool:
    """A `<host>.<pid>.jsonl` whose process no longer runs here and that nothing wrote for
    STALE_S: left over from a job long gone, never worth reading (a node can collect
    thousands). A pid of another namespace looks gone too, hence the age as well."""
    if time.time_ns() - mtime_ns < STALE_S * 1e9:
        return False
    pid = name[: -len(".jsonl")].rpartition(".")[2]
    if not pid.isdigit() or not 0 < int(pid) <= 1 << 22:
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, another user's
        return False
    return False
