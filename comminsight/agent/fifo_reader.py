"""Receive the Profilers' hang events (fifo-event v1) from `<home>/fifos/hang-events.fifo`.

The Profiler's watchdog opens the FIFO write-only and non-blocking for each event and drops
the event (counting it in its SHM header) when nobody has the FIFO open for reading. So the
Agent keeps it open for the whole of its life: one read end, plus one write end of its own so
that the read end never sees end-of-file when the last Profiler closes (otherwise the event
loop would spin on a readable, empty FIFO).

Every event is one 512-byte write (<= PIPE_BUF, so writers never interleave), but the FIFO is
a plain file anyone with the permission can write to; so the reader trusts nothing: an event
with a wrong magic, ABI version or size is counted and named, and the reader finds the next
magic to resynchronize instead of misreading every later event.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from comminsight.agent.snapshot import rank_or_none
from comminsight.shm_reader import enum_label, record_text
from comminsight_gen.abi import fifo_event_v1, shm_v1

EVENT = fifo_event_v1.EVENT_DTYPE
EVENT_SIZE = fifo_event_v1.EVENT_SIZE
MAGIC_BYTES = int(fifo_event_v1.MAGIC).to_bytes(4, "little")
FIFO_NAME = "hang-events.fifo"
READ_CHUNK = 64 * EVENT_SIZE


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
    rejected: int = 0  # events with a known magic but a bad ABI version or size
    bytes_discarded: int = 0  # bytes skipped to find the next magic
    last_error: str | None = None
    by_type: dict[str, int] = field(default_factory=dict)


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


class EventDecoder:
    """Turns a byte stream into events, rejecting and resynchronizing on bad input."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.stats = FifoStats()
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[HangEvent]:
        self._pending += data
        events: list[HangEvent] = []
        while len(self._pending) >= EVENT_SIZE:
            if self._pending[:4] != MAGIC_BYTES:
                self._resync()
                continue
            header = np.frombuffer(bytes(self._pending[:8]), dtype="<u4,<u2,<u2", count=1)[0]
            version, size = int(header[1]), int(header[2])
            if version != fifo_event_v1.PROTOCOL_VERSION or size != EVENT_SIZE:
                self.stats.rejected += 1
                self.stats.last_error = (
                    f"{self.source}: event with abi_version {version} and event_size {size} "
                    f"(this Agent reads version {fifo_event_v1.PROTOCOL_VERSION}, "
                    f"size {EVENT_SIZE}); skipped"
                )
                del self._pending[:4]  # past this magic; the next one starts the next event
                self._resync(report=False)  # the rest of this event, already reported
                continue
            event = decode_event(bytes(self._pending[:EVENT_SIZE]))
            del self._pending[:EVENT_SIZE]
            self.stats.events += 1
            self.stats.by_type[event.event_type] = self.stats.by_type.get(event.event_type, 0) + 1
            events.append(event)
        return events

    def _resync(self, report: bool = True) -> None:
        """Drop bytes up to the next magic (or all but a possible magic prefix at the end)."""
        at = self._pending.find(MAGIC_BYTES)
        skip = at if at >= 0 else max(0, len(self._pending) - (len(MAGIC_BYTES) - 1))
        if not skip:
            return
        del self._pending[:skip]
        self.stats.bytes_discarded += skip
        if report:
            self.stats.last_error = (
                f"{self.source}: {skip} bytes that are not a fifo-event (no magic 'CIFE'); skipped"
            )


class HangEventFifo:
    """The Agent's end of `<home>/fifos/hang-events.fifo`, created if it does not exist."""

    def __init__(self, home: str | os.PathLike) -> None:
        self.path = Path(home) / "fifos" / FIFO_NAME
        self.decoder = EventDecoder(str(self.path))
        self._read_fd = -1
        self._keep_open_fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def stats(self) -> FifoStats:
        return self.decoder.stats

    def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise self._error("create", err) from None
        try:
            os.mkfifo(self.path, 0o600)
        except FileExistsError:
            pass  # ours from an earlier run, or a Profiler's: checked below
        except OSError as err:
            raise self._error("create", err) from None
        mode = self.path.lstat().st_mode
        if not stat.S_ISFIFO(mode):
            raise FifoError(
                errno.EEXIST,
                f"{self.path} exists but is not a FIFO (mode {stat.filemode(mode)}); "
                "move it away so the Agent can receive hang events",
            )
        try:
            self._read_fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self._keep_open_fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            self.close()
            raise self._error("open", err) from None

    def _error(self, what: str, err: OSError) -> FifoError:
        return FifoError(
            err.errno, f"cannot {what} the hang-event FIFO {self.path}: {err.strerror}"
        )

    def read_available(self) -> list[HangEvent]:
        """Every complete event the FIFO holds now; never blocks."""
        events: list[HangEvent] = []
        while True:
            try:
                data = os.read(self._read_fd, READ_CHUNK)
            except BlockingIOError:
                return events
            if not data:  # cannot happen while we hold a write end; do not spin if it does
                return events
            events += self.decoder.feed(data)

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

    def __enter__(self) -> HangEventFifo:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
