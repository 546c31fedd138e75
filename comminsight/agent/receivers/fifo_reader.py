"""Receive the Profilers' hang events (fifo-event v1) from `<home>/fifos/hang-events.fifo`.

The Profiler's watchdog opens the FIFO write-only and non-blocking for each event and drops
the event (counting it in its SHM header) when nobody has the FIFO open for reading. So the
Agent keeps it open for the whole of its life: one read end, plus one write end of its own so
that the read end never sees end-of-file when the last Profiler closes (otherwise the event
loop would spin on a readable, empty FIFO).

Every event is one 512-byte write (<= PIPE_BUF, so writers never interleave), but the FIFO is
a plain file anyone with the permission can write to; so the reader trusts nothing: an event
with a wrong magic, ABI version or size is counted and named, and the reader finds the next
magic to resynchronize instead of misreading every later event. Its work is bounded per
event-loop callback (BYTES_PER_CALLBACK), so a flood is read between the API's requests,
not instead of them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from comminsight.agent.core.rate_limited_log import RateLimitedLog
from comminsight.durable_files import make_private_dirs
from comminsight.safe_open import UntrustedFile, open_checked
from comminsight.shm_reader import enum_label, rank_or_none, record_text
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.abi import fifo_event_v1, shm_v1

EVENT = fifo_event_v1.EVENT_DTYPE
EVENT_SIZE = fifo_event_v1.EVENT_SIZE
MAGIC_BYTES = int(fifo_event_v1.MAGIC).to_bytes(4, "little")
FIFO_NAME = home_names.HANG_EVENTS_FIFO
READ_CHUNK = 64 * EVENT_SIZE
# Bytes read (and so events decoded) per event-loop callback: whatever a writer floods the
# FIFO with, the API and the poll loop get their turn between two callbacks.
BYTES_PER_CALLBACK = 4 * READ_CHUNK
RECENT_S = 300.0  # how long health names a replaced FIFO
KNOWN_TYPES = frozenset(t.name.lower() for t in fifo_event_v1.EventType)
_VERSION_AND_SIZE = struct.Struct("<HH")  # abi_version, event_size after the magic

log = logging.getLogger(__name__)


class FifoError(OSError):
    """The FIFO path cannot be used (not a FIFO, no permission); the message names it."""


@dataclass(frozen=True)
class HangEvent:
    """One decoded fifo-event: which process, communicator and op, and its progress."""

    event_type: str  # hang_suspected | hang_cleared | process_exit | unknown(<code>)
    event_seq: int
    pid: int
    hostname: str
    local_rank: int | None
    cuda_device: int | None
    comm_id: int
    comm_name: str
    rank: int
    nranks: int
    op_kind: str  # coll | p2p | unknown
    func: str
    datatype: str
    peer: int | None
    op_seq: int
    op_index: int
    count: int
    bytes: int
    n_channels: int
    channels_started: int
    channels_stopped: int
    enqueue_mono_ns: int
    detect_mono_ns: int
    detect_real_ns: int
    age_ns: int
    threshold_ns: int
    coll_enqueued: int
    coll_completed: int
    p2p_enqueued: int
    p2p_completed: int
    inflight_count: int
    # the record as read, which a slave forwards to its master unchanged (agent-master-slave
    # HangEvent.record)
    raw: bytes = field(default=b"", repr=False, compare=False)


@dataclass
class FifoStats:
    """What the reader received and rejected since it opened the FIFO."""

    events: int = 0
    rejected: int = 0  # malformed input: bad ABI version or size, bytes without a magic
    rejected_by_reason: dict[str, int] = field(default_factory=dict)  # abi_version, ...
    bytes_discarded: int = 0  # bytes skipped to find the next magic
    last_error: str | None = None
    # by event type; codes this Agent does not know count as "unknown" (a forger's codes
    # must not grow the dict)
    by_type: dict[str, int] = field(default_factory=dict)
    evicted: int = 0  # events pushed out of the Agent's bounded store of recent events
    log: RateLimitedLog | None = field(default=None, repr=False)


def _event_type(code: int) -> str:
    try:
        return fifo_event_v1.EventType(code).name.lower()
    except ValueError:
        return f"unknown({code})"


def _op_kind(code: int) -> str:
    if code == shm_v1.RecordKind.COLL:
        return "coll"
    if code == shm_v1.RecordKind.P2P:
        return "p2p"
    return "unknown"


def decode_event(raw: bytes) -> HangEvent:
    """One EVENT_SIZE-byte event whose header has already been checked."""
    e = np.frombuffer(raw, dtype=EVENT, count=1)[0]
    return HangEvent(
        event_type=_event_type(int(e["event_type"])),
        event_seq=int(e["event_seq"]),
        pid=int(e["pid"]),
        hostname=record_text(e["hostname"]),
        local_rank=rank_or_none(int(e["local_rank"])),
        cuda_device=rank_or_none(int(e["cuda_device"])),
        comm_id=int(e["comm_id"]),
        comm_name=record_text(e["comm_name"]),
        rank=int(e["rank"]),
        nranks=int(e["nranks"]),
        op_kind=_op_kind(int(e["op_kind"])),
        func=enum_label(shm_v1.FUNC_LABELS, shm_v1.Func, int(e["func"])),
        datatype=enum_label(shm_v1.DATATYPE_LABELS, shm_v1.Datatype, int(e["datatype"])),
        peer=rank_or_none(int(e["peer"])),
        op_seq=int(e["op_seq"]),
        op_index=int(e["op_index"]),
        count=int(e["count"]),
        bytes=int(e["bytes"]),
        n_channels=int(e["n_channels"]),
        channels_started=int(e["channels_started"]),
        channels_stopped=int(e["channels_stopped"]),
        enqueue_mono_ns=int(e["enqueue_mono_ns"]),
        detect_mono_ns=int(e["detect_mono_ns"]),
        detect_real_ns=int(e["detect_real_ns"]),
        age_ns=int(e["age_ns"]),
        threshold_ns=int(e["threshold_ns"]),
        coll_enqueued=int(e["coll_enqueued"]),
        coll_completed=int(e["coll_completed"]),
        p2p_enqueued=int(e["p2p_enqueued"]),
        p2p_completed=int(e["p2p_completed"]),
        inflight_count=int(e["inflight_count"]),
        raw=bytes(raw),
    )


PID_MAX = 1 << 22  # the kernel's largest pid_max (PID_MAX_LIMIT)


def field_problem(buf: bytes, at: int) -> tuple[str, str] | None:
    """Why the event at `at` (magic, version and size already checked) cannot be one a
    Profiler wrote: (a reason label for counters, the field and value). None: it can.
    Enum codes are not checked: a newer Profiler of this ABI may send codes this Agent does
    not know, and they decode as unknown; the fields checked have no such future."""
    e = np.frombuffer(buf, dtype=EVENT, count=1, offset=at)[0]
    pid, nranks, rank = int(e["pid"]), int(e["nranks"]), int(e["rank"])
    if not 0 <= pid <= PID_MAX:
        return "pid", f"pid {pid} (outside 0..{PID_MAX})"
    # nranks 0: not reported (an event about no communicator); then any rank >= 0 goes
    if nranks < 0 or rank < shm_v1.NO_RANK or (nranks and rank >= nranks):
        return "rank", f"rank {rank} of nranks {nranks}"
    if int(e["reserved0"]) or e["reserved"].any():
        return "reserved", "reserved bytes that are not zero"
    return None


class EventDecoder:
    """Turns a byte stream into events, rejecting and resynchronizing on bad input.

    Parsing walks an index through the bytes of one call and keeps only the tail that may
    begin an event: deleting each rejected prefix from the front of a buffer made 4 MB of
    repeated magic cost 1 M memmoves of megabytes. Candidates are found with bytes.find."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.stats = FifoStats()
        self._pending = b""
        self._last_rejection: tuple | None = None

    def feed(self, data: bytes) -> list[HangEvent]:
        buf = self._pending + data if self._pending else bytes(data)
        events: list[HangEvent] = []
        at, end = 0, len(buf)
        while end - at >= EVENT_SIZE:
            if not buf.startswith(MAGIC_BYTES, at):
                at = self._resync(buf, at)
                continue
            version, size = _VERSION_AND_SIZE.unpack_from(buf, at + 4)
            if version != fifo_event_v1.PROTOCOL_VERSION or size != EVENT_SIZE:
                reason = (
                    "abi_version" if version != fifo_event_v1.PROTOCOL_VERSION else "event_size"
                )
                self._reject(reason, (version, size))
                # past this magic; the next one starts the next event (the rest of this one
                # is already reported, so the bytes up to it are not counted again)
                at = self._resync(buf, at + len(MAGIC_BYTES), report=False)
                continue
            problem = field_problem(buf, at)
            if problem is not None:
                # a misframed event (a partial write before a genuine one) or a forged one:
                # the next magic inside these bytes may begin the real event
                self._reject(problem[0], problem)
                at = self._resync(buf, at + len(MAGIC_BYTES), report=False)
                continue
            event = decode_event(buf[at : at + EVENT_SIZE])
            at += EVENT_SIZE
            self.stats.events += 1
            key = event.event_type if event.event_type in KNOWN_TYPES else "unknown"
            self.stats.by_type[key] = self.stats.by_type.get(key, 0) + 1
            events.append(event)
        self._pending = buf[at:]
        return events

    def _resync(self, buf: bytes, at: int, report: bool = True) -> int:
        """The index of the next magic at or after `at` (or of the last bytes that may begin
        one), counting what is skipped."""
        found = buf.find(MAGIC_BYTES, at)
        to = found if found >= 0 else max(at, len(buf) - (len(MAGIC_BYTES) - 1))
        skip = to - at
        if skip:
            self.stats.bytes_discarded += skip
            if report:
                self._reject("no_magic", skip)
        return to

    def _reject(self, reason: str, detail) -> None:
        """Count; the message is formatted only when it differs from the last one (a flood of
        one forged header costs a comparison per event, not a string)."""
        stats = self.stats
        stats.rejected += 1
        stats.rejected_by_reason[reason] = stats.rejected_by_reason.get(reason, 0) + 1
        if (reason, detail) != self._last_rejection:
            self._last_rejection = (reason, detail)
            stats.last_error = self._message(reason, detail)
        self._log.note(stats.last_error)

    def _message(self, reason: str, detail) -> str:
        if isinstance(detail, tuple) and len(detail) == 2 and isinstance(detail[1], str):
            return f"{self.source}: event with {detail[1]}; skipped, resynchronized"
        if reason == "no_magic":
            return (
                f"{self.source}: {detail} bytes that are not a fifo-event (no magic 'CIFE'); "
                "skipped"
            )
        version, size = detail
        return (
            f"{self.source}: event with abi_version {version} and event_size {size} "
            f"(this Agent reads version {fifo_event_v1.PROTOCOL_VERSION}, size {EVENT_SIZE}); "
            "skipped"
        )

    @property
    def _log(self) -> RateLimitedLog:
        if self.stats.log is None:
            self.stats.log = RateLimitedLog(log, "hang-event FIFO input rejected")
        return self.stats.log


class HangEventFifo:
    """The Agent's end of `<home>/fifos/hang-events.fifo`, created if it does not exist.

    Only a FIFO this Agent's user owns and nobody else can write is read: another user's, a
    group- or world-writable one, or a symbolic link in its place would let anyone who can
    reach it forge hang events. Such a thing is refused (named in `refused`, counted, logged)
    and, where the fifos/ directory is the Agent's own, replaced by a new FIFO (mode 0600);
    a regular file or directory there is left alone and refused (FifoError).

    In a user's directory of a shared home (`owner`, that user's uid) the FIFO is the user's
    own, made by their Profilers: the Agent only reads one that user owns and nobody else can
    write, and creates or replaces nothing there."""

    def __init__(self, home: str | os.PathLike, owner: int | None = None) -> None:
        self.path = Path(home) / home_names.FIFOS / FIFO_NAME
        self.owner = os.geteuid() if owner is None else owner
        self.tenant = self.owner != os.geteuid()
        self.decoder = EventDecoder(str(self.path))
        self.refused: dict[str, int] = {}  # reason -> times the FIFO in place was refused
        self.last_refusal: str | None = None
        self.replaced_mono_s: float | None = None
        self._read_fd = -1
        self._keep_open_fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def stats(self) -> FifoStats:
        return self.decoder.stats

    @property
    def is_open(self) -> bool:
        return self._read_fd >= 0

    def open(self) -> None:
        if not self.tenant:
            try:
                make_private_dirs(self.path.parent)
            except OSError as err:
                raise self._error("create", err) from None
        try:
            self._open_ends()
        except UntrustedFile as bad:
            self._refuse(bad)
            if self.tenant:
                raise FifoError(errno.EPERM, f"{bad}; hang events are not received") from None
            if bad.reason == "not_fifo":
                raise FifoError(
                    errno.EEXIST,
                    f"{self.path} exists but is not a FIFO ({bad.why}); move it away so the "
                    "Agent can receive hang events",
                ) from None
            self._replace(bad)
        except OSError as err:
            self.close()
            raise self._error("open", err) from None

    def _open_ends(self) -> None:
        if not self.tenant:
            try:
                os.mkfifo(self.path, 0o600)
            except FileExistsError:
                pass  # ours from an earlier run, or a Profiler's: checked on the descriptor
            except OSError as err:
                raise self._error("create", err) from None
        try:
            self._read_fd, st = open_checked(self.path, "FIFO", os.O_RDONLY, self.owner)
            self._keep_open_fd, st2 = open_checked(self.path, "FIFO", os.O_WRONLY, self.owner)
        except OSError:
            self.close()
            raise
        if (st.st_dev, st.st_ino) != (st2.st_dev, st2.st_ino):  # swapped between the opens
            self.close()
            raise UntrustedFile(self.path, "replaced", "was replaced while it was opened")

    def _refuse(self, bad: UntrustedFile) -> None:
        self.refused[bad.reason] = self.refused.get(bad.reason, 0) + 1
        self.last_refusal = str(bad)
        log.error("refusing the hang-event FIFO %s", bad)

    def _replace(self, bad: UntrustedFile) -> None:
        """unlink + mkfifo 0600, only in a fifos/ directory that is the Agent's alone (else
        whoever may write there could plant the next one too)."""
        problem = _not_private_dir(self.path.parent)
        if problem:
            raise FifoError(
                errno.EPERM, f"{bad}; not replaced: {problem}; hang events are not received"
            )
        try:
            os.unlink(self.path)  # a symbolic link itself, never its target
            self._open_ends()
        except UntrustedFile as again:
            self._refuse(again)
            raise FifoError(errno.EPERM, f"{again}; hang events are not received") from None
        except OSError as err:
            raise self._error("replace", err) from None
        self.replaced_mono_s = time.monotonic()
        log.warning("replaced the hang-event FIFO %s with a new one (mode 0600)", self.path)

    def _error(self, what: str, err: OSError) -> FifoError:
        return FifoError(
            err.errno, f"cannot {what} the hang-event FIFO {self.path}: {err.strerror}"
        )

    def read_available(self, max_bytes: int = BYTES_PER_CALLBACK) -> list[HangEvent]:
        """The complete events among the next max_bytes the FIFO holds; never blocks. What is
        left stays in the pipe: the event loop calls again, after its other work."""
        events: list[HangEvent] = []
        left = max_bytes
        while left > 0:
            try:
                data = os.read(self._read_fd, min(READ_CHUNK, left))
            except BlockingIOError:
                return events
            if not data:  # cannot happen while we hold a write end; do not spin if it does
                return events
            left -= len(data)
            events += self.decoder.feed(data)
        return events

    def attach(
        self, loop: asyncio.AbstractEventLoop, on_events: Callable[[list[HangEvent]], None]
    ) -> None:
        """Call on_events from the event loop whenever events arrive."""

        def readable() -> None:
            events = self.read_available()
            if events:
                on_events(events)

        self._loop = loop
        loop.add_reader(self._read_fd, readable)

    def close(self) -> None:
        if self._loop is not None and self._read_fd >= 0:
            self._loop.remove_reader(self._read_fd)
            self._loop = None
        for fd in (self._read_fd, self._keep_open_fd):
            if fd >= 0:
                os.close(fd)
        self._read_fd = self._keep_open_fd = -1

    def problems(self, now_mono_s: float) -> list[str]:
        """What health says of the FIFO: refused input, a replaced or missing FIFO."""
        out = []
        if self.replaced_mono_s is not None and now_mono_s - self.replaced_mono_s < RECENT_S:
            out.append(
                f"the hang-event FIFO was replaced {now_mono_s - self.replaced_mono_s:.0f} s "
                f"ago: {self.last_refusal}"
            )
        s = self.stats
        if s.rejected and s.last_error:
            counts = ", ".join(f"{n} {r}" for r, n in sorted(s.rejected_by_reason.items()))
            out.append(f"hang-event FIFO input rejected ({counts}); last: {s.last_error}")
        return out

    def __enter__(self) -> HangEventFifo:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def keep_recent(store: deque, events: list[HangEvent]) -> int:
    """Add events to a bounded store; how many older ones it pushed out."""
    evicted = max(0, len(store) + len(events) - (store.maxlen or len(store) + len(events)))
    store.extend(events)
    return evicted


def _not_private_dir(path: Path) -> str | None:
    """Why path is not a directory this Agent alone controls; None when it is."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} (mode {stat.filemode(st.st_mode)}) is writable by group or others"
    return None
