"""Which communicator names Inject gave, from what it wrote under `<home>/metadata/inject/`.

Inject names a PyTorch process group's communicator by writing `<group_desc>:<group_name>`
into the NCCL config PyTorch passes to ncclCommInitRankConfig, so the Profiler receives it as
NCCL's commName and records name_source NCCL. Inject's own `group` lines
(protocols/inject-metadata/v1) say which names it set, per process (host and pid, taken from
each line, as a host name may hold dots): the Agent reports those names' source as Inject.

Files are read incrementally (each pass reads what was appended since the last; Inject writes
whole lines with one O_APPEND write each, so a line without its newline is waited for). A line
that does not decode as inject-metadata v1 is skipped and remembered in `errors` by file and
line number, with a warning logged once per file; the file's other lines still count.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from comminsight_gen.abi import shm_v1
from comminsight_gen.models.inject_metadata_v1 import InjectMetadata, Kind, Naming

log = logging.getLogger(__name__)

# how a name reached NCCL when Inject set it (user-named: the user's own name was kept)
SET_BY_INJECT = (Naming.nccl_config, Naming.torch_option)


@dataclass
class _File:
    offset: int = 0
    inode: int = 0
    line_no: int = 0
    processes: set = field(default_factory=set)  # (host, pid) of its group lines


class InjectNames:
    def __init__(self, home: str | Path) -> None:
        self.dir = Path(home) / "metadata" / "inject"
        self._files: dict[str, _File] = {}
        self._names: dict[tuple[str, int], set[str]] = {}
        self.errors: dict[str, str] = {}  # file name -> the first bad line, and why
        self._decoder = msgspec.json.Decoder(InjectMetadata)

    def refresh(self) -> None:
        """Read what the files gained since the last call."""
        try:
            entries = list(os.scandir(self.dir))
        except OSError:  # no Inject on this node (yet)
            return
        present = set()
        for entry in entries:
            if entry.name.endswith(".jsonl") and entry.is_file(follow_symlinks=False):
                present.add(entry.name)
                self._read(entry)
        for gone in set(self._files) - present:  # removed (a job cleaned up): forget it
            for key in self._files.pop(gone).processes:
                self._names.pop(key, None)
            self.errors.pop(gone, None)

    def _read(self, entry: os.DirEntry) -> None:
        st = entry.stat(follow_symlinks=False)
        state = self._files.setdefault(entry.name, _File())
        if state.inode != st.st_ino or st.st_size < state.offset:  # a new file by that name
            state.offset, state.inode, state.line_no = 0, st.st_ino, 0
        if st.st_size == state.offset:
            return
        try:
            with open(entry.path, "rb") as f:
                f.seek(state.offset)
                data = f.read(st.st_size - state.offset)
        except OSError as e:
            self._bad(entry.name, f"cannot read: {e}")
            return
        end = data.rfind(b"\n") + 1  # whole lines only
        for line in data[:end].splitlines():
            state.line_no += 1
            if line.strip():
                self._line(entry.name, state, line)
        state.offset += end

    def _line(self, file: str, state: _File, line: bytes) -> None:
        try:
            record = self._decoder.decode(line)
        except (msgspec.DecodeError, UnicodeDecodeError) as e:
            self._bad(file, f"line {state.line_no}: {e}")
            return
        if (
            record.kind is Kind.group
            and record.naming in SET_BY_INJECT
            and isinstance(record.comm_name, str)
        ):
            key = (record.host, record.pid)
            self._names.setdefault(key, set()).add(record.comm_name)
            state.processes.add(key)

    def _bad(self, file: str, why: str) -> None:
        if file not in self.errors:
            self.errors[file] = why
            log.warning("inject metadata %s: %s (line skipped)", self.dir / file, why)

    def named_by_inject(self, host: str, pid: int, name: str) -> bool:
        return name in self._names.get((host, pid), ())

    def name_source(self, code: int, host: str, pid: int, name: str) -> int:
        """A Profiler row's name_source, NCCL turned INJECT where Inject set that name."""
        if code == shm_v1.NameSource.NCCL and name and self.named_by_inject(host, pid, name):
            return int(shm_v1.NameSource.INJECT)
        return code
