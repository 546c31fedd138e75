"""Files removed in a thread of their own.

Removing an ended process's SHM region frees its memory, which costs the kernel milliseconds
for each 16 MiB region (2.6 ms measured on tmpfs). A node whose processes come and go by the
hundred would spend its poll loop on that, and every other producer's records would wait
meanwhile; this thread takes it instead. Until a file is gone it is `pending`: a reader that
lists the directory must not take it for a new file. A file in a user's directory of a shared
home is removed as that user (acting_as), like every change the Agent makes there.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from comminsight.agent.receivers.acting_as import files_as

log = logging.getLogger(__name__)


class FileRemover:
    def __init__(self, name: str = "file-remover") -> None:
        self.name = name
        self.failures = 0  # removals that failed for another reason than the file being gone
        self._cond = threading.Condition()
        self._queue: deque[tuple[Path, int | None, int | None]] = deque()
        self._pending: set[Path] = set()
        self._closing = False
        self._thread: threading.Thread | None = None

    def remove(self, paths: Iterable[Path], uid: int | None = None, gid: int | None = None) -> None:
        """Queue `paths` for removal, as user `uid` (group `gid`) when given."""
        with self._cond:
            for path in paths:
                if path not in self._pending:
                    self._pending.add(path)
                    self._queue.append((path, uid, gid))
            if self._thread is None or not self._thread.is_alive():
                self._closing = False
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> frozenset[Path]:
        """The files queued or being removed now."""
        with self._cond:
            return frozenset(self._pending)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Until every queued file is removed; False when timeout_s passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending, timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Remove what is queued (for at most timeout_s), then end the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if self._closing:
                        return
                    self._cond.wait()
                path, uid, gid = self._queue.popleft()
            try:
                with files_as(uid, gid):
                    path.unlink()
            except FileNotFoundError:
                pass  # removed already (by a Profiler's own sweep, or by hand)
            except OSError as e:
                self.failures += 1
                log.error("cannot remove %s: %s", path, e.strerror)
            with self._cond:
                self._pending.discard(path)
                self._cond.notify_all()
