"""What Inject tells the rest of CommInsight: `<home>/metadata/inject/<host>.<pid>.jsonl`.

One JSON object a line (protocols/inject-metadata/v1): a `process` line first, then a `group`
line for every process group this process created (its communicator name and how the name
reached NCCL) and, when step markers are on, a `step` line after every optimizer step. Lines
are written with one O_APPEND write each, so a crash leaves whole lines, and nothing is held
in memory. Directories are made 0700, the file 0600 (architecture §7).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from . import state

try:  # the Inject wheel's own copy of the generated names (the standard library only)
    from . import home_v1_names as home_names  # type: ignore[attr-defined]
    from . import inject_metadata_v1_names as names  # type: ignore[attr-defined]
except ImportError:  # the source tree, and the CommInsight package
    from comminsight_gen import home_v1_names as home_names
    from comminsight_gen import inject_metadata_v1_names as names

F, V = names.F, names.V
SCHEMA = names.SCHEMA


def global_rank() -> int | None:
    """The process's rank as the launcher (torchrun, mp.spawn scripts) exports it, if it has."""
    try:
        return int(os.environ["RANK"])
    except (KeyError, ValueError):
        return None


class MetadataFile:
    def __init__(
        self,
        home: Path,
        process: dict | None = None,
        pid: int | None = None,
        host: str | None = None,
    ):
        self.home = Path(home)
        self.process = dict(process or {})  # the first line of every file this writes
        self.host = host or socket.gethostname()
        self._fixed_pid = pid
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._failed = False
        self._name_for(os.getpid() if pid is None else pid)

    def _name_for(self, pid: int) -> None:
        self.pid = pid
        self.path = self.home / home_names.METADATA / home_names.INJECT / f"{self.host}.{pid}.jsonl"

    def _open(self) -> int | None:
        if self._fixed_pid is None and os.getpid() != self.pid:
            # a forked child (a data-loader worker, say) writes a file of its own
            self._fd, self._failed = None, False
            self._name_for(os.getpid())
        if self._fd is None and not self._failed:
            try:
                old = os.umask(0o077)
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                finally:
                    os.umask(old)
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
                self._fd = os.open(self.path, flags, 0o600)
                self._append(V.PROCESS, time.monotonic_ns(), self.process)
            except OSError as e:
                self._failed = True
                state.warn_once("metadata", f"cannot write {self.path}: {e}; names go to NCCL")
        return self._fd

    def write(self, kind: str, **fields: object) -> bool:
        """Append one line; False (after one warning) when the file cannot be written."""
        mono_ns = fields.pop(F.MONO_NS, None) or time.monotonic_ns()
        with self._lock:
            fd = self._open()
            if fd is None:
                return False
            try:
                self._append(kind, mono_ns, fields)
                return True
            except OSError as e:
                state.warn_once("metadata-write", f"cannot write {self.path}: {e}")
                return False

    def _append(self, kind: str, mono_ns: int, fields: dict) -> None:
        record = {F.SCHEMA: SCHEMA, F.KIND: kind, F.PID: self.pid, F.HOST: self.host}
        record[F.MONO_NS] = mono_ns
        record[F.REAL_NS] = time.time_ns()
        record.update(fields)
        os.write(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
