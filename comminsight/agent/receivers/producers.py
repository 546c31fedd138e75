"""The Profilers of this node, as the Agent sees them through their SHM files.

`ProducerSet.poll()` is one ingest pass: it discovers new files under <home>/shms/ (and, for a
shared node Agent, under each user's `users/<uid>/shms/`: `serve`), maps them (refusing, with
one log line and a quarantine, a file that is not a regular file of its directory's user, has
another ABI version or a corrupt header, while the others go on), reads
every producer's new ring records in one batch each, and retires a producer whose process is
gone once its ring is drained. What it read comes back as a list of `Batch`es for the
metrics, the engine hook and the API's recent-ops view. shms/ is listed again only when it
changed (shms_listing): entries that are no regions cost nothing pass after pass.

Retiring has two steps. As soon as an ended process's records are safe (read, and written to
its logs by its writer or by recovery) its region is released: the files are removed, the
mapping and descriptors closed, so a crowded node's tmpfs and the Agent's descriptors do not
fill with ended processes. The producer itself, its header as it ended and its frozen rows,
is remembered for the retirement delay, for diagnosis (process_died, rank_left).

A process that died without a clean end (its region never reached CLOSED) may have records
its log writer never wrote: before its region goes they are written to its inspector_logs
(log_recovery). A region whose process was already gone when the Agent found it (an Agent
stopped before it retired it) is retired counting from the process's last heartbeat, so
stopping Agents does not keep regions for ever. A producer whose ring or comm table breaks
the protocol is named (`problems()`) and its ring no longer read: whatever a region claims,
a pass does at most one ring's work per producer.

Each pass fstats a region's file before it touches the mapping: a file truncated under it is
quarantined (reading its lost pages would end the Agent with SIGBUS). Ring records whose
fields are out of their range are dropped, counted by field and named (slot_checks). A
recovery that fails for want of space keeps the region and is retried with backoff; one that
fails for another reason lets the region go, counting and naming the records lost.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from comminsight.agent.core.liveness import ProcessIdentity, process_runs, runs_as
from comminsight.agent.core.rate_limited_log import RateLimitedLog
from comminsight.agent.receivers.acting_as import files_as
from comminsight.agent.receivers.file_remover import FileRemover
from comminsight.agent.receivers.log_recovery import (
    Recovered,
    RecoveryError,
    logged_through,
    recover,
    segment_prefix,
)
from comminsight.agent.receivers.producer_clock import ProducerClock, on_reader_clock
from comminsight.agent.receivers.shms_listing import ShmsListing
from comminsight.agent.receivers.slot_checks import SlotRejects, check_slots
from comminsight.agent.receivers.tenants import Tenant
from comminsight.shm_reader import (
    RingCursor,
    ShmError,
    ShmRegion,
    is_memfd_target,
    record_text,
)
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.abi import shm_v1

log = logging.getLogger("comminsight.agent.receivers.producers")

QUARANTINE = home_names.QUARANTINE
MAX_REFUSED_NAMES = 64  # refused files named in health (the count covers every one)
# A recovery that failed for want of space is tried again after this, doubling up to the cap:
# the region is the only copy of those records, so it stays until they are written.
RECOVERY_RETRY_FIRST_NS = 1_000_000_000
RECOVERY_RETRY_MAX_NS = 30_000_000_000
# A file still being created (empty, or its header CREATING) is looked at again each pass for
# this long: sizing and populating a region takes a loaded node seconds. Past it, the file is
# refused like any other that is no region.
CREATING_GRACE_NS = 60_000_000_000
# Ended processes remembered (their regions released) for diagnosis at most: a node's GPUs'
# processes several times over. Beyond it the oldest are forgotten before the delay.
MAX_ENDED_REMEMBERED = 64
# Regions mapped at once at most: each holds a descriptor (its file is fstat'ed before every
# read) and a live GPU's summary file. Far above what a node runs; past it, when processes
# start faster than their regions are drained (hundreds of short-lived processes), the rest
# wait in shms/ for the next passes, counted, instead of taking the Agent to its descriptor
# limit.
MAX_MAPPED_REGIONS = 256
# Of those, one user of a shared home maps at most this many (a node's GPUs' processes several
# times over): a user who keeps regions open cannot take the others' turn.
MAX_MAPPED_PER_USER = 64
RETRYABLE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM})


@dataclass
class Producer:
    """One Profiler process: its region, the agent's own cursor into its ring."""

    path: Path
    region: ShmRegion
    cursor: RingCursor
    clock: ProducerClock
    source: ShmSource
    gone_since_mono_ns: int | None = None
    recovered: Recovered | None = None  # what was written for it after it died
    recovery_error: str | None = None
    # a failure for want of space (or descriptors) is retried: the region is kept till then
    recovery_retryable: bool = False
    recovery_attempts: int = 0
    recovery_retry_at_ns: int = 0
    slots_rejected: int = 0  # ring records dropped: a field out of its range
    slot_problem: str | None = None  # the latest one, named
    # its pid was seen to run as its directory's user (a region of the Agent's own home is
    # the Agent's user's): only then does the pid name the user's process (owners)
    pid_verified: bool = True
    # the header as it was when the region was retired: its final counters stay readable
    final_header: np.ndarray | None = None

    @property
    def pid(self) -> int:
        return self.region.pid

    @property
    def host(self) -> str:
        """The host name the process reported (a pod's own, in a pod)."""
        return record_text(self.region.header["hostname"])

    @property
    def pid_namespace(self) -> int:
        """The inode of the PID namespace its pid is numbered in (0: not recorded)."""
        return self.clock.identity.pid_namespace

    @property
    def uid(self) -> int:
        """The user the process's files belong to: the owner of the directory it was found
        in (the Agent checked every file of it against that owner), not what it says."""
        return self.source.uid

    @property
    def closed(self) -> bool:
        return int(self.region.header["state"]) == shm_v1.FileState.CLOSED

    @property
    def released(self) -> bool:
        """Its region was let go of (records safe, files removed): kept for diagnosis only."""
        return self.region.released

    def alive(self) -> bool:
        """Dead is for ever (a pid that runs again is another process): once gone, the
        region is frozen and no longer probed."""
        if self.gone_since_mono_ns is not None:
            return False
        return not self.closed and process_runs(self.pid, identity_of(self.region))

    @property
    def problem(self) -> str | None:
        return self.cursor.problem


def identity_of(region: ShmRegion) -> ProcessIdentity:
    h = region.header
    names = h.dtype.names
    return ProcessIdentity(
        start_ticks=int(h["process_start_ticks"]) if "process_start_ticks" in names else 0,
        boot_id=record_text(h["boot_id"]) if "boot_id" in names else "",
        pid_namespace=int(h["pid_namespace"]) if "pid_namespace" in names else 0,
        created_mono_ns=int(h["start_mono_ns"]),
    )


@dataclass
class Batch:
    producer: Producer
    records: np.ndarray  # shm v1 op slots, in ring order


@dataclass
class IngestCounters:
    """What the ingest pass did, for metrics: all monotonic counts."""

    records: int = 0
    records_lost: int = 0  # overwritten before the agent read them
    files_refused: int = 0
    producers_retired: int = 0
    regions_released: int = 0  # ended processes' regions unmapped and removed
    regions_deferred: int = 0  # passes x regions left for a later pass (MAX_MAPPED_REGIONS)
    refused: dict[str, str] = field(default_factory=dict)  # file name -> reason (last ones)
    refused_by_reason: dict[str, int] = field(default_factory=dict)
    records_recovered: int = 0  # written to a dead process's logs from its region
    recovery_failures: int = 0  # attempts that failed, retried ones included
    records_unrecovered: int = 0  # retired without reaching the logs (a named reason)
    unrecovered: dict[str, str] = field(default_factory=dict)  # file name -> why (last ones)
    # the work the passes did: ring slots copied and slot seq words examined
    slots_copied: int = 0
    seqs_read: int = 0
    slots_rejected: int = 0  # ring records with a field out of range (slot_checks)
    slots_rejected_by_reason: dict[str, int] = field(default_factory=dict)  # by field


@dataclass(eq=False)
class ShmSource:
    """One home's shms/ and inspector_logs/, and the user every file in them must belong to:
    the Agent's own home, or a user's directory of a shared home (tenants)."""

    home: Path
    uid: int
    gid: int
    owner: int | None  # the owner a region's file must have (None: anyone, tests only)
    listing: ShmsListing = field(init=False)
    refused_here: set[tuple[str, int]] = field(default_factory=set)  # (name, inode) left
    creating_since: dict[tuple[str, int], int] = field(default_factory=dict)  # -> first seen

    def __post_init__(self) -> None:
        self.listing = ShmsListing(self.shms)

    @property
    def shms(self) -> Path:
        return self.home / home_names.SHMS

    @property
    def logs(self) -> Path:
        return self.home / home_names.INSPECTOR_LOGS

    @property
    def tenant(self) -> bool:
        """A user's directory: what the Agent changes in it, it changes as that user."""
        return self.uid != os.geteuid()

    def acting(self):
        """The block in which the Agent writes here: as the directory's user (acting_as)."""
        return files_as(self.uid, self.gid) if self.tenant else contextlib.nullcontext()


class ProducerSet:
    def __init__(
        self,
        home: Path,
        batch_max: int = 1 << 16,
        shm_dir: str | None = None,
        owner: int | None = -1,
        compact_logs: bool = True,
    ) -> None:
        me = os.geteuid()
        self.own = ShmSource(Path(home), me, os.getegid(), me if owner == -1 else owner)
        self.sources: dict[Path, ShmSource] = {self.own.home: self.own}
        self.shms = self.own.shms
        self.logs = self.own.logs
        self.compact_logs = compact_logs  # the form of the op lines a recovery writes
        self.batch_max = batch_max
        self.shm_dir = shm_dir
        self.producers: dict[Path, Producer] = {}
        self.counters = IngestCounters()
        self.retired_in_pass: list[Producer] = []  # the producers the latest poll retired
        self.regions_waiting = 0  # in shms/, not opened yet: MAX_MAPPED_REGIONS were mapped
        # released regions' files go in a thread of their own (file_remover)
        self.remover = FileRemover("shm-remover")
        self._slot_log = RateLimitedLog(log, "ring records out of range", 60.0, logging.ERROR)

    @property
    def owner(self) -> int | None:
        return self.own.owner

    @property
    def listing(self) -> ShmsListing:
        return self.own.listing

    def serve(self, tenants: Iterable[Tenant]) -> None:
        """The users' directories to read besides the Agent's own home: those new are added,
        those gone are no longer listed (their processes already found are followed to
        their end)."""
        wanted = {t.home: t for t in tenants if t.home != self.own.home}
        for home in [h for h in self.sources if h != self.own.home and h not in wanted]:
            del self.sources[home]
        for home, t in wanted.items():
            source = self.sources.get(home)
            if source is None or (source.uid, source.gid) != (t.uid, t.gid):
                self.sources[home] = ShmSource(home, t.uid, t.gid, t.uid)

    # ---- discovery ----

    def shm_names(self) -> set[str]:
        """The names of the SHM files in every shms/ now, mapped or not (a file refused, or
        one still being created, is a process that runs all the same)."""
        listed = set()
        for source in self.sources.values():
            try:
                listed |= {name for name, _ in source.listing.entries()}
            except OSError:
                pass
        return listed | {path.name for path in self.producers}

    def discover(self) -> None:
        """Open the regions new in each shms/. An unchanged directory is not listed again
        (shms_listing): only files still being created are looked at once more."""
        mapped = sum(1 for p in self.producers.values() if not p.released)
        waiting = 0
        pending = {path for path in self.remover.pending()}
        for source in list(self.sources.values()):
            mapped, left = self._discover_in(source, mapped, pending)
            waiting += left
        self.regions_waiting = waiting
        if waiting:
            self.counters.regions_deferred += waiting

    def _discover_in(self, source: ShmSource, mapped: int, pending: set[Path]) -> tuple[int, int]:
        try:
            scans = source.listing.scans
            entries = source.listing.entries()
        except OSError:
            return mapped, 0
        if source.listing.scans == scans:
            for key in list(source.creating_since):
                self._open(source, key)
            return mapped, 0
        known = {path.name for path in self.producers if path.parent == source.shms}
        known |= {path.name for path in pending if path.parent == source.shms}
        present = set()
        waiting = 0
        mine = sum(1 for p in self.producers.values() if p.source is source and not p.released)
        cap = MAX_MAPPED_PER_USER if source.tenant else MAX_MAPPED_REGIONS
        for key in entries:
            if key[0] in known:
                continue
            present.add(key)
            if key in source.refused_here:
                continue
            if mapped >= MAX_MAPPED_REGIONS or mine >= cap:
                waiting += 1
                continue
            self._open(source, key)
            opened = (source.shms / key[0]) in self.producers
            mapped += opened
            mine += opened
        for key in source.creating_since.keys() - present:  # opened, refused or removed
            del source.creating_since[key]
        source.refused_here &= present  # names gone from shms/ need no remembering
        if waiting:
            source.listing.forget()  # the next pass opens them as mapped ones are released
        return mapped, waiting

    def _open(self, source: ShmSource, key: tuple[str, int]) -> None:
        path = source.shms / key[0]
        try:
            region = ShmRegion(path, shm_dir=self.shm_dir, owner=source.owner)
        except ShmError as e:
            if e.missing:  # removed meanwhile, or a link whose region a sweep removed
                source.creating_since.pop(key, None)
                if path.is_symlink():
                    with source.acting():
                        _remove_link(path)
                return
            reason = str(e)
            if e.not_ready:
                if self._still_creating(source, key):
                    return  # look again next pass
                reason += f", for {CREATING_GRACE_NS // 1_000_000_000} s"
            self._quarantine(source, path, key[1], reason, _reason_label(reason))
            return
        source.creating_since.pop(key, None)
        identity = identity_of(region)
        verified = True
        if source.tenant:
            # a user writes their region's header: its pid must be a process of theirs
            runs = runs_as(region.pid, identity)
            if runs is not None and runs != source.uid:
                region.close()
                why = (
                    f"names pid {region.pid}, a process of uid {runs}, not of uid {source.uid} "
                    "whose directory it is in"
                )
                self._quarantine(source, path, key[1], why, "other_users_pid")
                return
            verified = runs is not None
        clock = ProducerClock(region, identity)
        region.mono_offset_ns = clock.offset_ns()
        self.producers[path] = Producer(
            path, region, RingCursor(region), clock, source, pid_verified=verified
        )
        log.info(
            "producer pid %d (%s, uid %d): %s", region.pid, region.hostname, source.uid, path.name
        )
        smaller = ring_sized_down(region.header)
        if smaller:
            log.warning("SHM file %s (pid %d): %s", path.name, region.pid, smaller)

    def _still_creating(self, source: ShmSource, key: tuple[str, int]) -> bool:
        now = time.monotonic_ns()
        first = source.creating_since.setdefault(key, now)
        if now - first < CREATING_GRACE_NS:
            return True
        del source.creating_since[key]
        return False

    def _quarantine(
        self, source: ShmSource, path: Path, inode: int, reason: str, label: str
    ) -> None:
        """Move a file the agent cannot read out of the way (keeping it for inspection). A
        rename within shms/, never a copy (the file may be a FIFO or huge); where it cannot
        be moved it stays, remembered, and is not opened again."""
        self.counters.files_refused += 1
        self.counters.refused_by_reason[label] = self.counters.refused_by_reason.get(label, 0) + 1
        self.counters.refused.pop(path.name, None)
        self.counters.refused[path.name] = reason
        while len(self.counters.refused) > MAX_REFUSED_NAMES:
            del self.counters.refused[next(iter(self.counters.refused))]
        log.error("refusing %s: %s", path, reason)
        target_dir = source.shms / QUARANTINE
        try:
            with source.acting():
                _private_dir(target_dir, source.uid)
                os.rename(path, target_dir / path.name)
                _write_private(target_dir / f"{path.name}.reason", reason + "\n")
        except OSError as e:
            source.refused_here.add((path.name, inode))
            log.error("cannot quarantine %s: %s", path, e.strerror or e)
            where = f"left in place, not read again (cannot quarantine it: {e.strerror or e})"
        else:
            where = f"quarantined in shms/{QUARANTINE}/"
        if path.name in self.counters.refused:
            self.counters.refused[path.name] = f"{reason}; {where}"

    # ---- ingest ----

    def poll(self, now_mono_ns: int, retire_after_ns: int = 0) -> list[Batch]:
        """One pass: discover, read every producer's new records, retire the finished ones."""
        self.retired_in_pass = []
        self.discover()
        batches = []
        for path, producer in list(self.producers.items()):
            if producer.released:  # nothing left to read: only remembered for a while
                self._maybe_forget(path, producer, now_mono_ns, retire_after_ns)
                continue
            shrunk = producer.region.shrunk()
            if shrunk:  # checked before anything reads the mapping
                self._drop_shrunk(path, producer, shrunk)
                continue
            gone = not producer.alive()
            if producer.gone_since_mono_ns is None:  # an ended process's offset is settled
                producer.region.mono_offset_ns = producer.clock.offset_ns()
            if gone and producer.gone_since_mono_ns is None:
                self._note_gone(producer, now_mono_ns)
            cursor = producer.cursor
            before = (cursor.lost, cursor.slots_copied, cursor.seqs_read)
            records = cursor.poll(self.batch_max, final=gone)
            records = self._in_range(producer, records, now_mono_ns)
            self.counters.records_lost += cursor.lost - before[0]
            self.counters.slots_copied += cursor.slots_copied - before[1]
            self.counters.seqs_read += cursor.seqs_read - before[2]
            if len(records):
                self.counters.records += len(records)
                batches.append(Batch(producer, records))
            if gone:
                self._maybe_retire(path, producer, now_mono_ns, retire_after_ns, not len(records))
        self._forget_beyond_bound()
        return batches

    def _in_range(self, producer: Producer, records: np.ndarray, now: int) -> np.ndarray:
        """The records whose fields a Profiler could have written (slot_checks); the others
        are dropped, counted by field and named."""
        if not len(records):
            return records
        # counted into the node's totals as well as the producer's own
        rejects = SlotRejects(by_reason=self.counters.slots_rejected_by_reason)
        start = int(producer.region.header["start_mono_ns"])
        # the pass's clock may be a test's; the records were stamped with this machine's,
        # as the producer's time namespace shows it
        here = max(now, time.monotonic_ns())
        now_there = max(here, here + producer.region.mono_offset_ns)
        good = check_slots(records, start, now_there, rejects)
        if rejects.total:
            self.counters.slots_rejected += rejects.total
            producer.slots_rejected += rejects.total
            producer.slot_problem = rejects.latest
            self._slot_log.note(
                f"SHM file {producer.path.name} (pid {producer.pid}): {rejects.total} ring "
                f"records out of range dropped ({rejects.latest})"
            )
        return good

    def _drop_shrunk(self, path: Path, producer: Producer, why: str) -> None:
        """A region whose file was truncated under the mapping: never touched again (its
        lost pages would kill the Agent with SIGBUS), quarantined with the reason."""
        del self.producers[path]
        producer.region.close()
        try:
            inode = os.lstat(path).st_ino
        except OSError:
            inode = 0  # already gone: counted and named all the same
        self._quarantine(producer.source, path, inode, why, "shrunk")

    def _note_gone(self, producer: Producer, now: int) -> None:
        """The process ended. Its region will not change again. Count its absence from its
        last heartbeat (when the Agent was not running then, that is when it died, give or
        take a heartbeat), never from the future."""
        producer.region.freeze()
        heartbeat = on_reader_clock(
            int(producer.region.header["heartbeat_mono_ns"]), producer.region.mono_offset_ns
        )
        producer.gone_since_mono_ns = heartbeat if 0 < heartbeat <= now else now

    def _maybe_retire(
        self, path: Path, producer: Producer, now: int, after_ns: int, drained: bool
    ) -> None:
        head = int(producer.region.header["ring_head"])
        if producer.problem is None and (not drained or producer.cursor.next_ticket < head):
            return
        if producer.recovered is None and (
            producer.recovery_error is None
            or (producer.recovery_retryable and now >= producer.recovery_retry_at_ns)
        ):
            self._recover(producer, now)
        if producer.recovered is None and producer.recovery_retryable:
            return  # its records are written first: the region is their only copy
        if producer.recovered is None:
            # Recovery failed for good: the region stays the only copy of what it holds for
            # the retirement delay (someone may still copy it out), then goes, counted.
            if now - producer.gone_since_mono_ns < after_ns:
                return
            self._count_unrecovered(producer)
        # Everything it published has been read and logged: its memory and descriptors go
        # now, however long the process itself is remembered (_maybe_forget).
        self._release(path, producer)
        self._maybe_forget(path, producer, now, after_ns)

    def _release(self, path: Path, producer: Producer) -> None:
        """Unmap an ended process's region and have its files removed (file_remover); what
        diagnosis reads of it (its header as it ended, its frozen rows) stays in memory."""
        producer.final_header = producer.region.header.copy()
        target = producer.region.target
        producer.region.release()
        self.counters.regions_released += 1
        # a memfd's memory goes with its last mapping (released now): its link alone stays
        self.remover.remove(
            [path] if is_memfd_target(target) else [path, target],
            producer.source.uid if producer.source.tenant else None,
            producer.source.gid,
        )
        log.info(
            "released the region of pid %d (%s): its records are safe", producer.pid, path.name
        )

    def _maybe_forget(self, path: Path, producer: Producer, now: int, after_ns: int) -> None:
        """A dead process stays in the set, its region released, for the retirement delay:
        diagnosis names it (process_died) while its peers wait that long, and the node's
        view still lists a job that just ended. At most MAX_ENDED_REMEMBERED are kept, the
        oldest forgotten first (a node churning through processes must not pay for each of
        them on every pass)."""
        if now - producer.gone_since_mono_ns >= after_ns:
            self._forget(path, producer)

    def _forget(self, path: Path, producer: Producer) -> None:
        del self.producers[path]
        self.counters.producers_retired += 1
        self.retired_in_pass.append(producer)
        log.info("retired producer pid %d (%s)", producer.pid, path.name)

    def _forget_beyond_bound(self) -> None:
        ended = [(p.gone_since_mono_ns, path) for path, p in self.producers.items() if p.released]
        if len(ended) <= MAX_ENDED_REMEMBERED:
            return
        for _, path in sorted(ended)[: len(ended) - MAX_ENDED_REMEMBERED]:
            self._forget(path, self.producers[path])

    def _recover(self, producer: Producer, now: int) -> None:
        """Write what only the region holds into the process's logs, once, for a process
        that ended without closing its region (a closed one's writer drained and sealed)."""
        if producer.closed or producer.problem is not None:
            producer.recovered = Recovered(None)
            return
        producer.recovery_attempts += 1
        try:
            with producer.source.acting():
                producer.recovered = recover(
                    producer.region, producer.source.logs, self.compact_logs, producer.uid
                )
        except (RecoveryError, OSError) as e:
            self._recovery_failed(producer, str(e), e.errno in RETRYABLE_ERRNOS, now)
            return
        except Exception as e:  # a bug must not end the Agent, nor keep the region for ever
            log.exception("pid %d: recovering its records failed", producer.pid)
            self._recovery_failed(producer, f"{type(e).__name__}: {e}", False, now)
            return
        if producer.recovery_error is not None:
            log.warning(
                "pid %d: its records were recovered at attempt %d",
                producer.pid,
                producer.recovery_attempts,
            )
        producer.recovery_error = None
        producer.recovery_retryable = False
        self.counters.records_recovered += producer.recovered.records

    def _recovery_failed(self, producer: Producer, why: str, retryable: bool, now: int) -> None:
        self.counters.recovery_failures += 1
        producer.recovery_error = why
        producer.recovery_retryable = retryable
        if retryable:
            delay = RECOVERY_RETRY_FIRST_NS << min(producer.recovery_attempts - 1, 16)
            producer.recovery_retry_at_ns = now + min(delay, RECOVERY_RETRY_MAX_NS)
            log.error(
                "pid %d: %s; its region is kept and this is tried again (attempt %d)",
                producer.pid,
                why,
                producer.recovery_attempts,
            )
        else:
            log.error("pid %d: %s", producer.pid, why)

    def _count_unrecovered(self, producer: Producer) -> None:
        """A region retired without its records reaching the logs (a failure other than
        space): how many, and why, stay counted and named once the region is gone."""
        head = int(producer.region.header["ring_head"])
        try:
            last, _ = logged_through(producer.source.logs, segment_prefix(producer.region))
        except OSError:
            last = 0  # the logs cannot be read either: at most the whole ring
        lost = min(max(head - last, 0), producer.region.ring_capacity)
        self.counters.records_unrecovered += lost
        name = producer.path.name
        self.counters.unrecovered.pop(name, None)
        self.counters.unrecovered[name] = (
            f"pid {producer.pid}: {lost} records only its SHM region held were not written to "
            f"its logs ({producer.recovery_error})"
        )
        while len(self.counters.unrecovered) > MAX_REFUSED_NAMES:
            del self.counters.unrecovered[next(iter(self.counters.unrecovered))]
        log.error("retiring %s: %s", name, self.counters.unrecovered[name])

    # ---- health ----

    def problems(self) -> list[str]:
        """What health names of the producers: rings no longer read, bad comm-table rows,
        failed recoveries."""
        out = []
        if self.regions_waiting:
            out.append(
                f"{self.regions_waiting} SHM regions in shms/ wait to be read: at most "
                f"{MAX_MAPPED_REGIONS} are mapped at once, and processes start faster than "
                "their ended peers' regions are drained"
            )
        for p in self.producers.values():
            who = f"SHM file {p.path.name} (pid {p.pid})"
            smaller = None if p.released else ring_sized_down(p.region.header)
            if smaller:
                out.append(f"{who}: {smaller}")
            if p.problem:
                out.append(f"{who}: {p.problem}")
            if p.slots_rejected:
                out.append(
                    f"{who}: {p.slots_rejected} ring records break the shm v1 protocol and "
                    f"were dropped (the latest: {p.slot_problem})"
                )
            if p.region.bad_rows:
                out.append(
                    f"{who}: {p.region.bad_rows} communicator table rows break the shm v1 "
                    f"protocol and are ignored ({p.region.bad_rows_reason})"
                )
            if p.recovery_error and p.recovery_retryable:
                out.append(
                    f"{who}: its unwritten records could not be recovered yet: "
                    f"{p.recovery_error}; the region is kept and this is retried "
                    f"({p.recovery_attempts} attempts)"
                )
            elif p.recovery_error:
                out.append(
                    f"{who}: its unwritten records could not be recovered: {p.recovery_error}"
                )
        for name, why in self.counters.unrecovered.items():
            out.append(f"SHM file {name} retired: {why}")
        return out

    def following(self) -> bool:
        """Whether a process is followed: a region mapped and not yet released, or one that
        waits to be opened (too many mapped, or still being created)."""
        return (
            any(not p.released for p in self.producers.values())
            or self.regions_waiting > 0
            or any(source.creating_since for source in self.sources.values())
        )

    def close(self) -> None:
        for producer in self.producers.values():
            producer.region.close()
        self.remover.close()
        self.producers.clear()


def ring_sized_down(header) -> str | None:
    """What a producer says of a ring smaller than its configuration asked for: it sized it
    down to fit its SHM file system rather than go without SHM. None: as configured (or a
    file of a producer too old to say)."""
    asked, ring = int(header["ring_slots_configured"]), int(header["ring_capacity"])
    if not asked or ring >= asked:
        return None
    mib = 1024 * 1024
    return (
        f"its SHM ring holds {ring} records, not the {asked} configured: sized down to fit "
        f"its SHM file system ({int(header['shm_dir_bytes']) / mib:.1f} MiB, "
        f"{int(header['shm_dir_free_bytes']) / mib:.1f} MiB free, shared by "
        f"{int(header['sizing_local_ranks'])} processes); records a slow reader misses are "
        "overwritten sooner"
    )


def _reason_label(message: str) -> str:
    """A short, bounded label of a refusal for metrics (the message says the rest)."""
    for label, words in (
        ("symlink", ("symbolic link",)),
        ("not_regular_file", ("not a regular file",)),
        ("other_owner", ("owned by uid",)),
        ("writable_by_others", ("lets group or others write",)),
        ("unreadable", ("cannot open",)),
        ("short", ("shorter than",)),
        ("sparse", ("a sparse file",)),
    ):
        if any(w in message for w in words):
            return label
    if "header." in message:
        return "header." + message.split("header.", 1)[1].split(":", 1)[0]
    return "corrupt"


def _remove_link(path: Path) -> None:
    try:
        path.unlink()
        log.info("removed %s: the region it named is gone", path)
    except OSError as e:
        log.error("cannot remove %s: %s", path, e.strerror)


def _private_dir(path: Path, owner: int) -> None:
    """A directory of `owner` (the Agent, or the user it acts as) at path, made 0700."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != owner:
            raise OSError(errno.EPERM, f"{path} is not a directory of uid {owner}") from None


def _write_private(path: Path, text: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
