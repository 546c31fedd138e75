"""Read a Profiler's SHM region (shm v1) from another process, without trusting it.

`ShmRegion` maps a file read-only and checks the header before anything else is believed
(magic, ABI version, record sizes, offsets inside the file, ring capacity a power of two).
`RingCursor` reads new op records in batches through the generated numpy dtype, using each
slot's sequence number to tell complete, overwritten and not-yet-written slots apart, and
counts what the ring overwrote before it was read. Everything layout-related comes from
comminsight_gen.abi.shm_v1.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from comminsight_gen.abi import shm_v1

HEADER = shm_v1.HEADER_DTYPE
COMM = shm_v1.COMM_ENTRY_DTYPE
SLOT = shm_v1.OP_SLOT_DTYPE
BUSY = np.uint64(shm_v1.SLOT_BUSY_BIT)


class ShmError(ValueError):
    """The file is not a usable shm v1 region; the message names the file and the field."""


def _text(value: bytes) -> str:
    return value.split(b"\0", 1)[0].decode("utf-8", "replace")


class ShmRegion:
    """A read-only view of one process's SHM file."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise ShmError(f"{self.path}: cannot open: {e.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            if size < HEADER.itemsize:
                raise ShmError(
                    f"{self.path}: {size} bytes, shorter than the {HEADER.itemsize}-byte header"
                )
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        self._buf = np.frombuffer(self._map, dtype=np.uint8)
        self.header = np.frombuffer(self._map, dtype=HEADER, count=1)[0]
        self._check(size)
        h = self.header
        self.comm_capacity = int(h["comm_capacity"])
        self.ring_capacity = int(h["ring_capacity"])
        self.comms = np.frombuffer(
            self._map, dtype=COMM, count=self.comm_capacity, offset=int(h["comm_table_offset"])
        )
        self.ring = np.frombuffer(
            self._map, dtype=SLOT, count=self.ring_capacity, offset=int(h["ring_offset"])
        )

    def _check(self, size: int) -> None:
        h = self.header

        def bad(name: str, why: str) -> ShmError:
            return ShmError(f"{self.path}: header.{name}: {why}")

        if int(h["magic"]) != shm_v1.MAGIC:
            raise bad("magic", f"0x{int(h['magic']):016x} is not an shm v1 region")
        if int(h["abi_version"]) != shm_v1.PROTOCOL_VERSION:
            raise bad(
                "abi_version",
                f"{int(h['abi_version'])} (this reader knows {shm_v1.PROTOCOL_VERSION})",
            )
        for name, dtype in (
            ("header_size", HEADER),
            ("comm_entry_size", COMM),
            ("slot_size", SLOT),
        ):
            if int(h[name]) != dtype.itemsize:
                raise bad(name, f"{int(h[name])}, expected {dtype.itemsize}")
        if int(h["file_size"]) != size:
            raise bad(
                "file_size", f"{int(h['file_size'])} but the file has {size} bytes (truncated?)"
            )
        cap = int(h["ring_capacity"])
        if cap <= 0 or cap & (cap - 1):
            raise bad("ring_capacity", f"{cap} is not a power of two")
        comm_end = int(h["comm_table_offset"]) + int(h["comm_capacity"]) * COMM.itemsize
        ring_end = int(h["ring_offset"]) + cap * SLOT.itemsize
        if int(h["comm_table_offset"]) < HEADER.itemsize or comm_end > int(h["ring_offset"]):
            raise bad("comm_table_offset", "the comm table overlaps the header or the ring")
        if ring_end > size:
            raise bad(
                "ring_offset", f"the ring ends at {ring_end}, past the end of the file ({size})"
            )

    @property
    def state(self) -> int:
        return int(self.header["state"])

    @property
    def pid(self) -> int:
        return int(self.header["pid"])

    @property
    def hostname(self) -> str:
        return _text(bytes(self.header["hostname"]))

    def counter(self, name: str) -> int:
        return int(self.header[name])

    def comm_entries(self) -> np.ndarray:
        """A consistent copy of the comm table (seqlocked progress re-read until stable)."""
        for _ in range(100):
            before = self.comms["progress_seqlock"].copy()
            copy = self.comms.copy()
            after = self.comms["progress_seqlock"]
            if not np.any(before & 1) and np.array_equal(before, after):
                return copy
        return self.comms.copy()

    def close(self) -> None:
        self.header = self.comms = self.ring = self._buf = None  # release the buffer exports
        self._map.close()


@dataclass
class RingCursor:
    """Reads a region's ring from `next_ticket` on; keeps its own position, like the log writer."""

    region: ShmRegion
    next_ticket: int = 0
    lost: int = 0  # records overwritten before they were read
    lost_ranges: list[tuple[int, int]] = field(default_factory=list)  # (first, last) ring seqs

    def poll(self, max_records: int = 1 << 16) -> np.ndarray:
        """Complete records published since the last call (in ticket order), as a numpy array."""
        head = int(self.region.header["ring_head"])
        cap = self.region.ring_capacity
        if head - self.next_ticket > cap:  # lapped: everything older than one ring is gone
            self._lose(self.next_ticket, head - cap)
        end = min(head, self.next_ticket + max_records)
        if end <= self.next_ticket:
            return np.empty(0, dtype=SLOT)
        tickets = np.arange(self.next_ticket, end, dtype=np.uint64)
        batch = self._slots(self.region.ring, self.next_ticket, end).copy()
        # re-read: slots rewritten during the copy
        seq_after = self._slots(self.region.ring["seq"], self.next_ticket, end)
        want = tickets + np.uint64(1)
        good = (batch["seq"] == want) & (seq_after == want)
        pending = (batch["seq"] & ~BUSY) < want  # not written yet: stop before the first one
        stop = int(np.argmax(pending)) if pending.any() else len(tickets)
        self.next_ticket += stop
        if good[:stop].all():
            return batch[:stop]
        for t in tickets[:stop][~good[:stop]]:
            self._lose(int(t), int(t) + 1)
        return batch[:stop][good[:stop]]

    def _slots(self, ring: np.ndarray, first_ticket: int, end_ticket: int) -> np.ndarray:
        """The ring entries of tickets [first, end): one slice, or two where it wraps
        (slices, not a fancy index: this copy is most of the ingest cost)."""
        cap = len(ring)
        start = first_ticket & (cap - 1)
        n = end_ticket - first_ticket
        if start + n <= cap:
            return ring[start : start + n]
        return np.concatenate((ring[start:], ring[: start + n - cap]))

    def _lose(self, first_ticket: int, end_ticket: int) -> None:
        if end_ticket <= first_ticket:
            return
        self.lost += end_ticket - first_ticket
        self.lost_ranges.append((first_ticket + 1, end_ticket))
        self.next_ticket = max(self.next_ticket, end_ticket)


_OP_KINDS = np.array([shm_v1.RecordKind.COLL, shm_v1.RecordKind.P2P], dtype=np.uint8)


def op_records(records: np.ndarray) -> np.ndarray:
    """The Coll and P2P records of a batch, in order. The batch itself, not a copy, when it
    holds nothing else (the common case): slots are 256 bytes, so copying a 64 Ki-record
    batch to drop nothing cost a third of the Agent's ingest time."""
    mask = np.isin(records["kind"], _OP_KINDS)
    return records if mask.all() else records[mask]


def record_text(value: bytes) -> str:
    """A NUL-terminated char[] field as str."""
    return _text(bytes(value))


# Collectives whose op_slot.peer / inflight_peer is a root rank (labels of shm v1 func).
ROOTED_FUNCS = frozenset({"Broadcast", "Reduce", "Gather", "Scatter"})


def label_or_none(labels: dict, enum_type, code: int) -> str | None:
    """enum_label, or None for code 0 (not reported, as algo and proto are for P2P)."""
    return None if code == 0 else enum_label(labels, enum_type, code)


def enum_label(labels: dict, enum_type, code: int) -> str:
    """The protocol label of an enum code; the label of code 0 (unknown) for codes a newer
    Profiler may send that this reader does not know."""
    try:
        return labels[enum_type(code)]
    except ValueError:
        return labels[enum_type(0)]
