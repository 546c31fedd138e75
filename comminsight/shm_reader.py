"""Read a Profiler's SHM region (shm v1) from another process, without trusting it.

`ShmRegion` opens the file without following a link it was not given by the Profiler's
layout, without blocking (a FIFO named *.shm is refused, not waited on), checks on the open
descriptor that it is a regular file of this Agent's user, maps it read-only and checks the
header before anything else is believed (magic, ABI version, record sizes, offsets inside the
file, ring capacity a power of two and no larger than a Profiler makes, clocks that fit in
int64); a sparse file is refused unmapped, since touching its holes through the mapping can
kill the reader with SIGBUS on a full tmpfs. It keeps the descriptor so that
`shrunk()` can tell, before a pass reads the mapping, that the file was truncated under it.
Communicator-table rows that break the protocol are left out of `comm_entries()` and counted
(`bad_rows`, `bad_rows_reason`).
`RingCursor` reads new op records in batches through the generated numpy dtype, using each
slot's sequence number to tell complete, overwritten and not-yet-written slots apart (a slot
its producer is still writing is read on a later poll, not counted lost), and counts what the
ring overwrote before it was read. Whatever the header claims, one poll examines at most one
ring's worth of slots; a ring_head no producer could have written sets `problem`, and the
reader stops there. Everything layout-related comes from comminsight_gen.abi.shm_v1.
"""

from __future__ import annotations

import mmap
import os
import re
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from comminsight.safe_open import UntrustedFile, check_fd, open_checked
from comminsight_gen.abi import shm_v1
from comminsight_gen.config_v1 import KEY_BY_NAME

HEADER = shm_v1.HEADER_DTYPE
COMM = shm_v1.COMM_ENTRY_DTYPE
SLOT = shm_v1.OP_SLOT_DTYPE
EVIDENCE = shm_v1.EVIDENCE_ENTRY_DTYPE
BUSY = np.uint64(shm_v1.SLOT_BUSY_BIT)
_BUSY_INT = int(shm_v1.SLOT_BUSY_BIT)
MAX_LOST_RANGES = 1024  # remembered lost ranges (the newest); lost counts every one
DEFAULT_SHM_DIR = "/dev/shm"  # COMMINSIGHT_PROFILER_SHM_DIR's default
_FREE = shm_v1.CommState.FREE
_COMM_STATES = np.array([shm_v1.CommState.ACTIVE, shm_v1.CommState.FINALIZED], dtype=np.uint32)
_FILE_STATES = {int(s) for s in shm_v1.FileState}
_NAME_SOURCES = max(int(s) for s in shm_v1.NameSource)
# header clocks a reader converts to times: a value past int64 is no clock reading, and made
# the Semantic Engine fail with an OverflowError instead of naming the field
_CLOCK_FIELDS = ("start_real_ns", "start_mono_ns", "heartbeat_mono_ns", "heartbeat_real_ns")
_MAX_NS = (1 << 63) - 1
# the largest ring and communicator table a Profiler can be configured to make
RING_SLOTS_MAX = int(KEY_BY_NAME["COMMINSIGHT_PROFILER_RING_SLOTS"].maximum)
COMM_SLOTS_MAX = int(KEY_BY_NAME["COMMINSIGHT_PROFILER_COMM_SLOTS"].maximum)


class ShmError(ValueError):
    """The file is not a usable shm v1 region; the message names the file and the field.
    `missing`: there is no file (a link whose region was removed), nothing to refuse.
    `not_ready`: what a producer still creating its file shows (an empty file, or a header
    still CREATING): not yet a region, not yet a fault either."""

    def __init__(self, message: str, missing: bool = False, not_ready: bool = False) -> None:
        super().__init__(message)
        self.missing = missing
        self.not_ready = not_ready


def _free_bytes(fd: int) -> int:
    """What the file system holding fd can still allocate to this reader."""
    vfs = os.fstatvfs(fd)
    return vfs.f_bavail * vfs.f_frsize


def _holes_unbacked(fd: int, st: os.stat_result) -> int:
    """How many bytes of the file's holes its file system could not back (0: none). A
    Profiler allocates all of its region before using it (posix_fallocate), but a file sized
    with ftruncate alone is a sound region too as long as its holes can be filled: on tmpfs,
    reading a hole through a shared mapping allocates the page, and where the file system
    cannot, the reader is killed by SIGBUS (a forged 2 GiB file on a 64 MiB tmpfs did)."""
    holes = st.st_size - st.st_blocks * 512
    if holes <= 0:
        return 0
    return max(0, holes - _free_bytes(fd))


def _sparse_error(path: Path, fd: int, st: os.stat_result) -> ShmError:
    # read the header with pread, which returns a hole as zeros without allocating it: a file
    # the Profiler has sized but not yet allocated is still zero, and is waited for
    head = os.pread(fd, HEADER.itemsize, 0)
    header = np.frombuffer(head.ljust(HEADER.itemsize, b"\0"), dtype=HEADER, count=1)[0]
    if int(header["state"]) == shm_v1.FileState.CREATING and int(header["magic"]) in (
        0,
        shm_v1.MAGIC,
    ):
        return ShmError(f"{path}: being allocated by its producer", not_ready=True)
    return ShmError(
        f"{path}: a sparse file ({st.st_blocks * 512} of {st.st_size} bytes allocated) whose "
        f"holes its file system cannot fill ({_free_bytes(fd)} bytes free): reading it would "
        "kill the reader (SIGBUS); not mapped"
    )


def open_region_file(path: Path, shm_dir: str | None, owner: int | None = -1) -> tuple[int, Path]:
    """An fd of the region behind path: path itself, or the file its symbolic link names in
    the Profilers' SHM directory (<home>/shms/<name>.shm -> <shm_dir>/<name>.shm), or the
    memfd of a Profiler whose SHM directory had no room (-> /proc/<its pid>/fd/<n>): the two
    links the layout has; never a link elsewhere, never a link at the end of that."""
    target = path
    try:
        if os.path.islink(path):
            link = os.readlink(path)
            if _memfd_link(path.name, link):
                return _open_memfd(path, link, owner), Path(link)
            want = os.path.join(os.path.normpath(shm_dir or DEFAULT_SHM_DIR), path.name)
            if os.path.normpath(link) != want:
                raise ShmError(
                    f"{path}: a symbolic link to {link}, not to {want} "
                    "(COMMINSIGHT_PROFILER_SHM_DIR/<its name>); not followed"
                )
            target = Path(want)
        fd, _ = open_checked(target, "regular file", os.O_RDONLY, owner)
    except UntrustedFile as e:
        raise ShmError(str(e) if target == path else f"{path} -> {e}") from None
    except OSError as e:
        missing = isinstance(e, FileNotFoundError)
        raise ShmError(f"{path}: cannot open: {e.strerror}", missing) from None
    return fd, target


# a region's name, ci-<host>-<pid>-<mono>.shm (group 1: the pid); a memfd region's link
# leads to /proc/<that pid>/fd/<n>
REGION_NAME = re.compile(r"ci-.+-(\d+)-\d+\.shm")
_PROC_FD = re.compile(r"/proc/(\d+)/fd/\d+")
MEMFD_NAME = "comminsight-region"  # the Profiler's CI_MEMFD_NAME


def _memfd_link(name: str, link: str) -> bool:
    """Whether link is a memfd region's: a descriptor of the very process the name names."""
    named, fd_of = REGION_NAME.fullmatch(name), _PROC_FD.fullmatch(link)
    return named is not None and fd_of is not None and named.group(1) == fd_of.group(1)


def is_memfd_target(target: Path) -> bool:
    """Whether a region's target is a process's memfd (nothing to remove: it goes with the
    process and with the last mapping)."""
    return _PROC_FD.fullmatch(str(target)) is not None


def _open_memfd(path: Path, link: str, owner: int | None) -> int:
    """The memfd behind /proc/<pid>/fd/<n> (a magic link, so opened following it), checked to
    be the Profiler's region: a regular file of the owner, named as the Profiler names it (a
    descriptor number the process closed and reused for another file is not)."""
    try:
        # O_NOCTTY: the link a user wrote may lead to a terminal, which must not become the
        # Agent's controlling one
        fd = os.open(link, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        missing = isinstance(e, FileNotFoundError)
        raise ShmError(f"{path} -> {link}: cannot open: {e.strerror}", missing) from None
    try:
        check_fd(fd, link, "regular file", os.geteuid() if owner == -1 else owner)
        opened = os.readlink(f"/proc/self/fd/{fd}")
        if not opened.startswith(f"/memfd:{MEMFD_NAME}"):
            raise ShmError(f"{path} -> {link}: {opened}, not a CommInsight region's memfd")
    except UntrustedFile as e:
        os.close(fd)
        raise ShmError(f"{path} -> {e}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _text(value: bytes) -> str:
    return value.split(b"\0", 1)[0].decode("utf-8", "replace")


class ShmRegion:
    """A read-only view of one process's SHM file."""

    def __init__(
        self, path: str | os.PathLike, shm_dir: str | None = None, owner: int | None = -1
    ) -> None:
        """owner: the uid the file must belong to (-1: this process's, None: anyone's)."""
        self.path = Path(path)
        self.bad_rows = 0  # comm-table rows the last comm_entries() left out
        self.bad_rows_reason: str | None = None
        self.table_copies = 0  # comm-table copies taken from the map (work, for tests)
        # how far the producer's CLOCK_MONOTONIC runs ahead of the reader's (a time namespace
        # of its own); set by a reader that knows (the Agent's producer_clock), 0 otherwise
        self.mono_offset_ns = 0
        self._frozen: np.ndarray | None = None
        self._frozen_evidence: np.ndarray | None = None
        self.released = False  # the file let go of (release): answers from copies
        fd, self.target = open_region_file(self.path, shm_dir, owner)  # target: the file
        try:
            st = os.fstat(fd)
            size = st.st_size
            if size == 0:  # created, not yet sized (the Profiler sizes it next)
                raise ShmError(f"{self.path}: empty, not yet sized by its producer", not_ready=True)
            if size < HEADER.itemsize:
                raise ShmError(
                    f"{self.path}: {size} bytes, shorter than the {HEADER.itemsize}-byte header"
                )
            if _holes_unbacked(fd, st):
                raise _sparse_error(self.path, fd, st)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        except BaseException:
            os.close(fd)
            raise
        # the descriptor stays open so that each poll can fstat the very file it maps: a
        # mapping read past the end of a file truncated since kills the reader with SIGBUS
        self._fd = fd
        self.mapped_size = size
        self._close_fd = weakref.finalize(self, os.close, fd)
        self._buf = np.frombuffer(self._map, dtype=np.uint8)
        self.header = np.frombuffer(self._map, dtype=HEADER, count=1)[0]
        self._check(size)
        if is_memfd_target(self.target):
            self._check_memfd_owner()
        h = self.header
        self.comm_capacity = int(h["comm_capacity"])
        self.ring_capacity = int(h["ring_capacity"])
        self.comms = np.frombuffer(
            self._map, dtype=COMM, count=self.comm_capacity, offset=int(h["comm_table_offset"])
        )
        self.ring = np.frombuffer(
            self._map, dtype=SLOT, count=self.ring_capacity, offset=int(h["ring_offset"])
        )
        # the hang evidence table (a later addition to the layout): a header that places it
        # badly leaves it unread and says why, the rest of the region stays usable
        self.evidence_problem = _evidence_problem(h, size)
        self.evidence = (
            np.frombuffer(
                self._map,
                dtype=EVIDENCE,
                count=int(h["evidence_capacity"]),
                offset=int(h["evidence_offset"]),
            )
            if self.evidence_problem is None and int(h["evidence_offset"])
            else EVIDENCE_EMPTY
        )

    def _check_memfd_owner(self) -> None:
        """A memfd link names a descriptor number of a pid: once that process is gone and the
        pid reused, the number may hold another process's region, which its own link names
        already. The region says which link is its own."""
        own = os.path.basename(_text(bytes(self.header["link_path"])))
        if own and own != self.path.name:
            self.close()
            raise ShmError(
                f"{self.path}: its memfd holds the region {own} names (the pid was reused): "
                "not read twice",
                missing=True,
            )

    def _check(self, size: int) -> None:
        h = self.header

        def bad(name: str, why: str) -> ShmError:
            return ShmError(f"{self.path}: header.{name}: {why}")

        # a file is created zeroed and its header written before it turns LIVE: while CREATING
        # no other field may be trusted, not even the magic
        if int(h["state"]) == shm_v1.FileState.CREATING and int(h["magic"]) in (0, shm_v1.MAGIC):
            raise ShmError(f"{self.path}: header.state: CREATING (being created)", not_ready=True)
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
        for name, most in (("ring_capacity", RING_SLOTS_MAX), ("comm_capacity", COMM_SLOTS_MAX)):
            if int(h[name]) > most:
                raise bad(name, f"{int(h[name])}, more than any Profiler makes ({most})")
        comm_end = int(h["comm_table_offset"]) + int(h["comm_capacity"]) * COMM.itemsize
        ring_end = int(h["ring_offset"]) + cap * SLOT.itemsize
        if int(h["comm_table_offset"]) < HEADER.itemsize or comm_end > int(h["ring_offset"]):
            raise bad("comm_table_offset", "the comm table overlaps the header or the ring")
        for name in ("comm_table_offset", "ring_offset"):
            if int(h[name]) % shm_v1.CACHE_LINE:
                raise bad(name, f"{int(h[name])} is not a multiple of {shm_v1.CACHE_LINE}")
        for name in _CLOCK_FIELDS:  # nanosecond clocks fit in int64 (u64 max is no time)
            if int(h[name]) > _MAX_NS:
                raise bad(name, f"{int(h[name])} is not a time (more than {_MAX_NS} ns)")
        if int(h["state"]) not in _FILE_STATES:
            raise bad("state", f"{int(h['state'])} is not a file_state")
        if ring_end > size:
            raise bad(
                "ring_offset", f"the ring ends at {ring_end}, past the end of the file ({size})"
            )

    def shrunk(self) -> str | None:
        """Why the mapping must no longer be touched: the file is now shorter than what was
        mapped (reading the lost pages would raise SIGBUS and end the Agent). None: it may be
        read. Called before every pass touches the region."""
        if self.released:
            return None  # nothing mapped any more: nothing to fault on
        try:
            st = os.fstat(self._fd)
        except OSError as e:
            return f"{self.path}: cannot be examined: {e.strerror}"
        if st.st_size < self.mapped_size:
            return (
                f"{self.path}: the file shrank to {st.st_size} bytes while mapped "
                f"({self.mapped_size} bytes mapped); its region is no longer read"
            )
        if _holes_unbacked(self._fd, st):
            return (
                f"{self.path}: the file has holes its file system can no longer fill "
                f"({st.st_blocks * 512} of {st.st_size} bytes allocated, "
                f"{_free_bytes(self._fd)} bytes free); its region is no longer read"
            )
        return None

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
        """A consistent copy of the comm table's used, valid rows (seqlocked progress re-read
        until stable). Only used rows are copied: callers run every poll, and copying a
        256-row table three times a pass for idle processes was most of an idle Agent's CPU.
        A frozen region (its producer is gone) answers from the copy taken when it froze."""
        if self._frozen is not None:
            return self._frozen
        if self.shrunk():  # the API may ask between a truncation and the pass that drops it
            return self.comms[:0].copy()
        self.table_copies += 1
        used = np.flatnonzero(self.comms["state"] != _FREE)
        copy = self.comms[used]
        for _ in range(100):
            before = copy["progress_seqlock"]
            after = self.comms["progress_seqlock"][used]
            if not np.any(before & 1) and np.array_equal(before, after):
                break
            copy = self.comms[used]
        return self._valid_rows(copy, used)

    def _valid_rows(self, rows: np.ndarray, index: np.ndarray) -> np.ndarray:
        """The rows the protocol allows; the others are counted and the first one named."""
        nranks, rank, nnodes = rows["nranks"], rows["rank"], rows["nnodes"]
        ok = (
            np.isin(rows["state"], _COMM_STATES)
            & (nranks >= 1)
            & (rank >= 0)
            & (rank < nranks)
            & (nnodes >= 0)  # 0: not reported (profiler ABI v4)
            & (nnodes <= nranks)
            & (rows["name_source"] <= _NAME_SOURCES)
            & (np.char.str_len(rows["name"]) < shm_v1.NAME_LEN)  # NUL-terminated
        )
        self.bad_rows = int(len(rows) - np.count_nonzero(ok))
        if not self.bad_rows:
            self.bad_rows_reason = None
            return rows
        i = int(np.flatnonzero(~ok)[0])
        self.bad_rows_reason = f"row {int(index[i])}: {_row_problem(rows[i])}"
        return rows[ok]

    def evidence_entries(self) -> np.ndarray:
        """A copy of the evidence entries in use, each taken whole: an entry whose generation
        or state changed while it was copied (the Profiler rebinding it) is read again, and
        left out if it keeps changing."""
        if self._frozen_evidence is not None:
            return self._frozen_evidence
        table = self.evidence
        if not len(table) or self.shrunk():
            return EVIDENCE_EMPTY
        used = np.flatnonzero(table["state"] != shm_v1.EvidenceState.FREE)
        copy = table[used]
        for _ in range(100):
            now = table[["state", "generation"]][used]
            stable = (copy["generation"] == now["generation"]) & (copy["state"] == now["state"])
            if np.all(stable):
                break
            copy = table[used]
        else:
            copy = copy[stable]
        known = np.isin(copy["state"], _EVIDENCE_STATES)
        return copy[known]

    def freeze(self) -> None:
        """Nothing will write the region again (its process is gone): keep one last copy of
        the comm table instead of copying it on every call."""
        self._frozen = None
        self._frozen = self.comm_entries()
        self._frozen_evidence = None
        self._frozen_evidence = self.evidence_entries()

    def release(self) -> None:
        """Let go of the file while keeping what readers of a finished process still ask of
        it: the header as it ended, the frozen comm table and evidence. The mapping and the
        descriptor are closed: a node whose processes come and go would otherwise keep two
        descriptors and the whole region's memory per ended process for as long as its
        reader remembers the process."""
        if self.released:
            return
        if self._frozen is None:
            self.freeze()
        # copies first: a view into the mapping left anywhere would keep it from closing
        self.header = self.header.copy()
        self.comms = self.comms[:0].copy()
        self.ring = self.ring[:0].copy()
        self.evidence = EVIDENCE_EMPTY
        self._buf = None
        self._map.close()
        self._close_fd()
        self.released = True

    def close(self) -> None:
        # release the buffer exports
        self.header = self.comms = self.ring = self._buf = self._frozen = None
        self.evidence = self._frozen_evidence = None
        if not self.released:
            self._map.close()
        self._close_fd()


EVIDENCE_EMPTY = np.zeros(0, dtype=EVIDENCE)
_EVIDENCE_STATES = np.array(
    [shm_v1.EvidenceState.RAISED, shm_v1.EvidenceState.LOWERED], dtype=np.uint32
)
MAX_EVIDENCE_ENTRIES = 1024  # far above EVIDENCE_SLOTS: a header claiming more is not believed


def _evidence_problem(h, size: int) -> str | None:
    """Why the header's evidence table cannot be read; None when it can (or there is none)."""
    offset, count = int(h["evidence_offset"]), int(h["evidence_capacity"])
    if offset == 0:
        return None
    ring_end = int(h["ring_offset"]) + int(h["ring_capacity"]) * SLOT.itemsize
    entry_size = int(h["evidence_entry_size"])
    if entry_size != EVIDENCE.itemsize:
        return f"header.evidence_entry_size: {entry_size}, expected {EVIDENCE.itemsize}"
    if not 0 < count <= MAX_EVIDENCE_ENTRIES:
        return f"header.evidence_capacity: {count} is not in 1..{MAX_EVIDENCE_ENTRIES}"
    if offset % shm_v1.CACHE_LINE or offset < ring_end:
        return (
            f"header.evidence_offset: {offset} is not a cache-line offset "
            f"after the ring ({ring_end})"
        )
    if offset + count * EVIDENCE.itemsize > size:
        return f"header.evidence_offset: the table ends past the end of the file ({size})"
    return None


def _row_problem(row) -> str:
    state, nranks, rank, nnodes = (int(row[k]) for k in ("state", "nranks", "rank", "nnodes"))
    if state not in _COMM_STATES:
        return f"state {state} is not a comm_state"
    if nranks < 1 or not 0 <= rank < nranks:
        return f"rank {rank} of nranks {nranks}"
    if not 0 <= nnodes <= nranks:
        return f"nnodes {nnodes} for nranks {nranks}"
    if int(row["name_source"]) > _NAME_SOURCES:
        return f"name_source {int(row['name_source'])} is not a name_source"
    return "name is not NUL-terminated"


@dataclass
class RingCursor:
    """Reads a region's ring from `next_ticket` on; keeps its own position, like the log writer.

    Work per poll is bounded by the ring, never by what the header claims: the first pending
    slot is found from the slots' seq words before any slot is copied, and a ring_head that
    jumped past one lap is believed only if the ring's newest slot is within one lap of it
    (a producer claims tickets in order, so it cannot be further). `slots_copied` and
    `seqs_read` count the work done, for tests and the curious."""

    region: ShmRegion
    next_ticket: int = 0
    lost: int = 0  # records overwritten before they were read
    lost_ranges: list[tuple[int, int]] = field(default_factory=list)  # (first, last) ring seqs
    problem: str | None = None  # why the ring cannot be read (set once, then polls stop)
    slots_copied: int = 0
    seqs_read: int = 0

    def poll(self, max_records: int = 1 << 16, final: bool = False) -> np.ndarray:
        """Complete records published since the last call (in ticket order), as a numpy array.
        final: the producer is gone, so a slot not complete now never will be: it is lost
        rather than waited for."""
        if self.problem is not None:
            return np.empty(0, dtype=SLOT)
        head = int(self.region.header["ring_head"])
        cap = self.region.ring_capacity
        if head < self.next_ticket:
            self.problem = (
                f"header.ring_head went back from {self.next_ticket} to {head}: no producer "
                "does that; the ring is no longer read"
            )
            return np.empty(0, dtype=SLOT)
        if head - self.next_ticket > cap:  # lapped: everything older than one ring is gone
            newest = int((self.region.ring["seq"] & ~BUSY).max())
            self.seqs_read += cap
            if newest + cap < head:
                self.problem = (
                    f"header.ring_head {head} is not plausible: the ring's newest slot holds "
                    f"ring seq {newest} (a ring of {cap} slots); the ring is no longer read"
                )
                return np.empty(0, dtype=SLOT)
            self._lose(self.next_ticket, head - cap)
        end = min(head, self.next_ticket + max_records)
        if end <= self.next_ticket:
            return np.empty(0, dtype=SLOT)
        first = int(self.region.ring["seq"][self.next_ticket & (cap - 1)])
        self.seqs_read += 1
        if not final and _pending(first, self.next_ticket + 1):  # the common idle case: O(1)
            return np.empty(0, dtype=SLOT)
        tickets = np.arange(self.next_ticket, end, dtype=np.uint64)
        want = tickets + np.uint64(1)
        seq_before = self._slots(self.region.ring["seq"], self.next_ticket, end)
        self.seqs_read += len(tickets)
        # not written yet, or still being written for this very ticket: stop before the first
        # one and read it on a later poll (a busy slot is not an overwritten one)
        pending = ((seq_before & ~BUSY) < want) | (seq_before == (want | BUSY))
        stop = len(tickets) if final or not pending.any() else int(np.argmax(pending))
        if stop == 0:
            return np.empty(0, dtype=SLOT)
        batch = self._slots(self.region.ring, self.next_ticket, self.next_ticket + stop).copy()
        self.slots_copied += stop
        # re-read: slots rewritten during the copy
        seq_after = self._slots(self.region.ring["seq"], self.next_ticket, self.next_ticket + stop)
        want = want[:stop]
        good = (batch["seq"] == want) & (seq_after == want)
        self.next_ticket += stop
        if good.all():
            return batch
        for t in tickets[:stop][~good]:
            self._lose(int(t), int(t) + 1)
        return batch[good]

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
        if self.lost_ranges and self.lost_ranges[-1][1] == first_ticket:  # adjacent: one range
            self.lost_ranges[-1] = (self.lost_ranges[-1][0], end_ticket)
        else:
            self.lost_ranges.append((first_ticket + 1, end_ticket))
            if len(self.lost_ranges) > MAX_LOST_RANGES:  # the count stays exact
                del self.lost_ranges[: -MAX_LOST_RANGES // 2]
        self.next_ticket = max(self.next_ticket, end_ticket)


def _pending(seq: int, want: int) -> bool:
    """A slot's seq says the ticket wanting `want` is not complete yet (never written, or
    its writer is still at work)."""
    return (seq & ~_BUSY_INT) < want or seq == (want | _BUSY_INT)


_OP_KINDS = np.array([shm_v1.RecordKind.COLL, shm_v1.RecordKind.P2P], dtype=np.uint8)


def op_records(records: np.ndarray) -> np.ndarray:
    """The Coll and P2P records of a batch, in order. The batch itself, not a copy, when it
    holds nothing else (the common case): slots are 256 bytes, so copying a 64 Ki-record
    batch to drop nothing cost a third of the Agent's ingest time."""
    mask = np.isin(records["kind"], _OP_KINDS)
    return records if mask.all() else records[mask]


def rank_or_none(value: int) -> int | None:
    """A rank field of the ABIs (shm, fifo-event), where NO_RANK means none."""
    return None if value == shm_v1.NO_RANK else value


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
