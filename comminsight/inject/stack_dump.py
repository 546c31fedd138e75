"""The process's Python stacks on a signal: what the Agent reads when a hang names this rank.

`StackDumper.handler` is a Python-level signal handler (signal.signal): Python runs it in the
main thread between two bytecodes, so it may read frames, source lines and write a file like
any Python code, and the frames it reads are consistent. The price: while the main thread is
inside one long C call (a CUDA synchronize waiting on a hung collective) the handler runs only
when that call returns. That is acceptable here: the rank a hang blames is usually running
Python (sleeping, loading data, stuck in a loop), time.sleep and lock waits are interrupted by
signals and run the handler at once, and the Agent gives up after its timeout and says so.
A C-level dump (faulthandler) would answer from inside any C call, but gives no thread names
or source lines, cannot be written atomically, and needs a helper thread to turn its text into
a file the Agent can trust; it is not worth that.

Each dump is one JSON document (protocols/python-stack/v1) written to
<home>/metadata/stacks/<pid>-<seq>.json through a temporary name and a rename, 0600, bounded
in threads, frames, source characters and bytes; the oldest files of the process beyond
KEEP_FILES are removed so that a flood of signals cannot fill the disk, and dumps closer
together than MIN_INTERVAL_S are skipped so that it cannot take the training's time either.
Nothing here may raise into the program: a failed dump is one line on stderr, once.
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import threading
import time
from pathlib import Path

from .metadata import global_rank

try:  # the Inject wheel's own copy of the generated names (the standard library only)
    from . import home_v1_names as home_names  # type: ignore[attr-defined]
    from . import python_stack_v1_names as names  # type: ignore[attr-defined]
except ImportError:  # the source tree, and the CommInsight package
    from comminsight_gen import home_v1_names as home_names
    from comminsight_gen import python_stack_v1_names as names

F, V = names.F, names.V
SCHEMA = names.SCHEMA
MAX_THREADS = 64
MAX_FRAMES = 50
MAX_CODE = 256
MAX_TEXT = 1024  # file names
MAX_NAME = 256  # thread and function names
MAX_BYTES = 256 * 1024
KEEP_FILES = 4
MIN_INTERVAL_S = 1.0
STACK_DIR = (home_names.METADATA, home_names.STACKS)


def stack_dir(home: Path) -> Path:
    return Path(home).joinpath(*STACK_DIR)


class StackDumper:
    def __init__(
        self,
        home: Path,
        host: str,
        signum: int,
        clock=time.monotonic,
        max_bytes: int = MAX_BYTES,
        min_interval_s: float = MIN_INTERVAL_S,
    ):
        self.dir = stack_dir(home)
        self.host = host
        self.signum = signum
        self.clock = clock
        self.max_bytes = max_bytes
        self.min_interval_s = min_interval_s
        self.pid = os.getpid()
        self.seq = 0
        self.last_dump: float | None = None
        self.skipped = 0  # signals within MIN_INTERVAL_S of the last dump
        self.failed = False

    # ---- the handler ---------------------------------------------------------------------

    def handler(self, signum, frame) -> None:
        try:
            now = self.clock()
            if self.last_dump is not None and now - self.last_dump < self.min_interval_s:
                self.skipped += 1
                return
            self.last_dump = now
            self.dump(frame)
        except Exception as e:
            self._fail(e)

    def _fail(self, error: BaseException) -> None:
        # no state.warn_once here: it takes a lock the interrupted main thread may hold
        if self.failed:
            return
        self.failed = True
        try:
            sys.stderr.write(
                f"comminsight-inject: cannot write Python stacks to {self.dir}: "
                f"{type(error).__name__}: {error}\n"
            )
            sys.stderr.flush()
        except Exception:
            pass

    def dump(self, main_frame) -> Path:
        """Write one document; `main_frame` is where the main thread was interrupted."""
        if os.getpid() != self.pid:  # a forked child numbers its own dumps
            self.pid, self.seq = os.getpid(), 0
        document = self.document(main_frame)
        path = self.dir / f"{self.pid}-{self.seq}.json"
        write_private(path, json.dumps(document, separators=(",", ":")).encode())
        self._forget(self.seq - KEEP_FILES)
        self.seq += 1
        return path

    def _forget(self, seq: int) -> None:
        if seq >= 0:
            try:
                os.unlink(self.dir / f"{self.pid}-{seq}.json")
            except OSError:
                pass

    # ---- the document ----------------------------------------------------------------------

    def document(self, main_frame) -> dict:
        captured_mono_ns, captured_real_ns = time.monotonic_ns(), time.time_ns()
        main_ident = threading.main_thread().ident
        frames = dict(sys._current_frames())
        if main_frame is not None and main_ident is not None:
            frames[main_ident] = main_frame  # not the handler's own frames
        # threading._active, not threading.enumerate(): enumerate takes a lock that the
        # interrupted main thread may be holding, and a handler must never wait for it
        known = dict(getattr(threading, "_active", {}))
        order = sorted(frames, key=lambda ident: (ident != main_ident, ident))
        budget = self.max_bytes - 1024  # room for the document's own fields
        threads, truncated = [], False
        for ident in order[:MAX_THREADS]:
            thread = known.get(ident)
            entry = {
                F.NAME: _cut(getattr(thread, "name", "<unknown>"), MAX_NAME),
                F.IDENT: ident,
                F.NATIVE_ID: getattr(thread, "native_id", None),
                F.MAIN: ident == main_ident,
                F.DAEMON: bool(getattr(thread, "daemon", False)),
                F.FRAMES: [],
                F.FRAMES_OMITTED: 0,
            }
            budget -= len(json.dumps(entry))
            walked = _walk(frames[ident])
            for i, f in enumerate(walked[:MAX_FRAMES]):
                size = len(json.dumps(f)) + 1
                if budget - size < 0:
                    truncated = True
                    entry[F.FRAMES_OMITTED] = len(walked) - i
                    break
                budget -= size
                entry[F.FRAMES].append(f)
            else:
                entry[F.FRAMES_OMITTED] = max(0, len(walked) - MAX_FRAMES)
            threads.append(entry)
            if budget <= 0:
                truncated = True
                break
        return {
            F.SCHEMA: SCHEMA,
            F.STATUS: V.CAPTURED,
            F.HOST: self.host,
            F.PID: self.pid,
            F.RANK: global_rank(),
            F.SEQ: self.seq,
            F.SIGNAL: self.signum,
            F.CAPTURED_MONO_NS: captured_mono_ns,
            F.CAPTURED_REAL_NS: captured_real_ns,
            F.THREADS: threads,
            F.THREADS_OMITTED: len(order) - len(threads),
            F.TRUNCATED: truncated,
        }


def _walk(frame) -> list[dict]:
    """The frames from `frame` outwards, innermost first (at most a bounded walk)."""
    out = []
    while frame is not None and len(out) < 4096:
        code = frame.f_code
        line = frame.f_lineno
        file = code.co_filename
        source = linecache.getline(file, line).strip() if isinstance(line, int) else ""
        out.append(
            {
                F.FILE: _cut(file, MAX_TEXT),
                F.LINE: line if isinstance(line, int) and line >= 0 else None,
                F.FUNCTION: _cut(getattr(code, "co_qualname", code.co_name), MAX_NAME),
                F.CODE: _cut(source, MAX_CODE),
            }
        )
        frame = frame.f_back
    return out


def _cut(text, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def write_private(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all: a 0600 temporary file in the same directory, renamed
    over it, so a reader never sees half a document."""
    old = os.umask(0o077)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    finally:
        os.umask(old)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.rename(tmp, path)
