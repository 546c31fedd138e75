"""One node at one instant, as plain Python values: its processes and their communicator rows.

`build_snapshot` reads a list of `ShmRegion`s (one per Profiler process) once and copies what
hang diagnosis needs out of the mapped memory, so the result stays valid after the regions are
closed and can be built by hand in tests or shipped to a master Agent. The only side effect is
the liveness probe (liveness.process_runs); everything downstream (`diagnosis.diagnose`) is pure.

Monotonic times are the reading Agent's CLOCK_MONOTONIC: a producer in a time namespace of
its own has its times shifted by its region's `mono_offset_ns` (producer_clock) as they are
copied. `ProcessView.to_real_ns` converts them to wall-clock time with the (start_real_ns,
start_mono_ns) pair of the process's header, shifted alike.
"""

from __future__ import annotations

import dataclasses
import socket
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

from comminsight.agent.core.liveness import process_runs
from comminsight.agent.receivers.producer_clock import on_reader_clock
from comminsight.agent.receivers.proxy_evidence import EvidenceView, evidence_by_row
from comminsight.agent.state.current_run import current_run
from comminsight.agent.state.rank_runs import EMPTY, RankRuns
from comminsight.shm_reader import ShmRegion, enum_label, rank_or_none, record_text
from comminsight_gen.abi import shm_v1

NO_RANK = shm_v1.NO_RANK
NO_FLAGGED_SEQ = (1 << 64) - 1  # hang_flagged_seq when the watchdog flagged nothing


@dataclass(frozen=True)
class ProcessView:
    """One Profiler process as its SHM header describes it."""

    pid: int
    host: str
    global_rank: int | None
    local_rank: int | None
    job_id: str
    file_state: int  # shm_v1.FileState
    start_real_ns: int
    start_mono_ns: int
    heartbeat_mono_ns: int
    heartbeat_age_ns: int
    heartbeat_interval_ms: int
    pid_exists: bool
    heartbeat_fresh: bool
    # The node the process runs on, where a master's snapshot joins several; None: the
    # snapshot's own node
    node_name: str | None = None
    # The inode of the PID namespace `pid` is numbered in (0: not recorded): pods on one node
    # each number their own, so a pid names a process only with it
    pid_namespace: int = 0
    world_size: int | None = None  # WORLD_SIZE of its launcher, None where unknown

    @property
    def key(self) -> tuple[str | None, int, int]:
        """The process among every process of the snapshot: its node, pid and namespace."""
        return self.node_name, self.pid, self.pid_namespace

    @property
    def alive(self) -> bool:
        # A live pid with a stale heartbeat is a frozen producer: as good as dead for peers.
        # A CLOSED region was closed by the Profiler's exit handler: the process is ending
        # and its communicators will never move again, however long its pid lingers.
        return (
            self.pid_exists and self.heartbeat_fresh and self.file_state != shm_v1.FileState.CLOSED
        )

    @property
    def ended(self) -> bool:
        """Certainly over: its pid is gone, or its exit handler closed its region. A stale
        heartbeat alone is not (a frozen process, or a node whose reports stopped)."""
        return not self.pid_exists or self.file_state == shm_v1.FileState.CLOSED

    def to_real_ns(self, mono_ns: int) -> int:
        return max(0, self.start_real_ns + (mono_ns - self.start_mono_ns))


@dataclass(frozen=True)
class InflightOp:
    """The oldest op a member has enqueued and not completed (comm_entry.inflight_*)."""

    kind: int  # shm_v1.RecordKind: COLL or P2P
    func: str  # label, e.g. "AllReduce"
    datatype: str  # label, e.g. "ncclFloat32"
    seq: int  # NCCL's per-function seqNumber (or the P2P counter)
    op_index: int  # the communicator's op index: the same op on every rank
    count: int
    bytes: int
    peer: int | None  # root of a rooted collective, peer of a P2P
    n_channels: int
    channels_started: int
    channels_stopped: int
    enqueue_mono_ns: int
    start_mono_ns: int | None  # GPU kernel start in host time; None until started
    # not GPU-timed (GPU timing sampled) and no later kernel has started: maybe done already,
    # as may the untimed ops enqueued after it (shm v1 inflight_unproven)
    unproven: bool = False

    @property
    def is_coll(self) -> bool:
        return self.kind == shm_v1.RecordKind.COLL

    def signature(self) -> tuple:
        """What every rank must agree on for the same op index."""
        return (self.kind, self.func, self.count, self.datatype, self.peer)


@dataclass(frozen=True)
class CommMember:
    """One process's row for one communicator (comm_entry), progress copied consistently."""

    comm_id: int
    name: str
    rank: int
    nranks: int
    nnodes: int
    state: int  # shm_v1.CommState
    init_mono_ns: int
    coll_enqueued: int  # op indexes 0..coll_enqueued-1 were enqueued
    coll_enqueued_mono_ns: int
    coll_started: int
    coll_started_mono_ns: int
    coll_completed: int
    coll_completed_mono_ns: int
    p2p_enqueued: int
    p2p_completed: int
    inflight_count: int
    inflight: InflightOp | None
    hang_flagged_op_index: int | None
    process: ProcessView = field(repr=False)
    # proxy progress the Profiler recorded with the mask raised for this row (proxy_evidence)
    hang_evidence: EvidenceView | None = field(default=None, repr=False)
    finalize_mono_ns: int = 0  # when a FINALIZED row was finalized; 0 for an ACTIVE one
    # A row a relay passed up as its class's representative: the class's other ranks, in the
    # same state (relay.classes); empty for a rank's own row
    stands_for: RankRuns = field(default=EMPTY, repr=False)

    @property
    def size(self) -> int:
        """Ranks this row speaks for: its own, and its class's others."""
        return 1 + len(self.stands_for)

    def ranks(self) -> RankRuns:
        return (
            RankRuns.of((self.rank,)).union(self.stands_for)
            if self.stands_for
            else (RankRuns.of((self.rank,)))
        )

    @property
    def last_activity_mono_ns(self) -> int:
        """The last time this member did anything NCCL-visible on this communicator."""
        return max(self.init_mono_ns, self.coll_enqueued_mono_ns, self.coll_completed_mono_ns)


@dataclass(frozen=True)
class CommView:
    """A communicator as seen on this node: its member rows across processes, by rank."""

    comm_id: int
    name: str
    nranks: int
    nnodes: int
    members: tuple[CommMember, ...]
    # FINALIZED rows on this node (destroyed or aborted): ranks that left the communicator
    departed: tuple[CommMember, ...] = ()

    @property
    def comm_id_hex(self) -> str:
        return f"{self.comm_id:016x}"

    def member(self, rank: int) -> CommMember | None:
        """The row of `rank`, or of the class that holds it."""
        return next((m for m in self.members if m.rank == rank or rank in m.stands_for), None)

    @cached_property
    def ranks_present(self) -> int:
        """Ranks the members speak for (a class row speaks for all of its class)."""
        return sum(m.size for m in self.members)

    # Cached (a frozen view never changes): a master's diagnosis asks these of every
    # communicator of every snapshot in its history, thousands of ranks each.
    @cached_property
    def missing_ranks(self) -> list[int]:
        only = self.members[0] if len(self.members) == 1 else None
        if only is not None and only.size == self.nranks and only.rank < self.nranks:
            # one class of every rank (a relay's healthy communicator): its runs never hold its
            # representative (checked when they arrived), so it is the whole of 0..nranks-1
            return []
        classes = [m.stands_for for m in self.members if m.stands_for]
        if not classes:
            present = {m.rank for m in self.members}
            return [r for r in range(self.nranks) if r not in present]
        # runs, not a set of every rank: a class of a relay may stand for 100,000
        present = RankRuns.union_all([RankRuns.of(m.rank for m in self.members), *classes])
        return list(present.missing(self.nranks))

    @cached_property
    def join_points(self) -> tuple[tuple[int, dict[int, int]], ...]:
        """(op index, {rank: monotonic enqueue}) for the ops this view shows enqueued on every
        rank at once: the oldest op in flight (when all ranks are in flight at the same index)
        and the last op enqueued (when all ranks enqueued the same number); the straggler
        verdict joins them over the snapshots of its history. Monotonic, never real time:
        a node's processes share its clock, and a master's job view puts every node's on
        the master's, while real time carries each node's wall clock, which may be off by
        seconds (no NTP) and made a whole node's ranks 'join late'."""
        ms = self.members
        if self.missing_ranks or not ms:
            return ()
        out = []
        inflight = {m.inflight.op_index for m in ms if m.inflight and m.inflight.is_coll}
        if len(inflight) == 1 and all(m.inflight and m.inflight.is_coll for m in ms):
            out.append(
                (
                    inflight.pop(),
                    {m.rank: m.inflight.enqueue_mono_ns for m in ms},
                )
            )
        enqueued = {m.coll_enqueued for m in ms}
        if len(enqueued) == 1 and (n := enqueued.pop()) > 0:
            out.append((n - 1, {m.rank: m.coll_enqueued_mono_ns for m in ms}))
        return tuple(out)


@dataclass(frozen=True)
class NodeSnapshot:
    node_name: str
    taken_mono_ns: int
    taken_real_ns: int
    heartbeat_stale_ns: int
    processes: tuple[ProcessView, ...]
    comms: dict[int, CommView]  # active communicators by comm_id
    # communicators some rank here has finalized while others still hold ACTIVE rows: left
    # out of `comms` (a teardown waits for nobody), kept for the ranks that wait on one that
    # left (left_comm)
    torn_down: dict[int, CommView] = field(default_factory=dict)

    def members_of_process(self, process: ProcessView) -> list[CommMember]:
        """Its rows in every communicator. pids repeat across nodes, and across the PID
        namespaces of one node's pods: a process is told apart by its key."""
        return list(self._members_by_process.get(process.key, ()))

    @cached_property
    def _members_by_process(self) -> dict[tuple[str | None, int, int], list[CommMember]]:
        # built once per snapshot: diagnosis asks for the rows of every absent rank's process,
        # and a scan of all rows per question was quadratic (16 s for one verdict at 8192 ranks)
        index: dict[tuple[str | None, int, int], list[CommMember]] = {}
        for c in self.comms.values():
            for m in c.members:
                index.setdefault(m.process.key, []).append(m)
        return index


def pid_exists(pid: int) -> bool:
    return process_runs(pid)


def process_view(
    region: ShmRegion, now_mono_ns: int, stale_ns: int, exists: Callable[[int], bool]
) -> ProcessView:
    h = region.header
    off = getattr(region, "mono_offset_ns", 0)  # regions built by hand have none
    hb = on_reader_clock(int(h["heartbeat_mono_ns"]), off)
    age = max(0, now_mono_ns - hb)
    pid = int(h["pid"])
    return ProcessView(
        pid=pid,
        host=record_text(h["hostname"]),
        global_rank=rank_or_none(int(h["rank"])),
        local_rank=rank_or_none(int(h["local_rank"])),
        job_id=record_text(h["job_id"]),
        file_state=int(h["state"]),
        start_real_ns=int(h["start_real_ns"]),
        start_mono_ns=on_reader_clock(int(h["start_mono_ns"]), off),
        heartbeat_mono_ns=hb,
        heartbeat_age_ns=age,
        heartbeat_interval_ms=int(h["heartbeat_interval_ms"]),
        pid_exists=exists(pid),
        heartbeat_fresh=age <= stale_ns,
        pid_namespace=int(h["pid_namespace"]) if "pid_namespace" in h.dtype.names else 0,
        world_size=int(h["world_size"]) if int(h["world_size"]) > 0 else None,
    )


def inflight_op(row, off: int = 0) -> InflightOp | None:
    """The row's oldest op in flight, or None. The Profiler refreshes this view once per
    heartbeat while its counters move on every op, so a view the counters have overtaken (a
    process that died between refreshes, say) is stale and is not believed."""
    if int(row["inflight_count"]) == 0 or int(row["inflight_kind"]) == shm_v1.RecordKind.NONE:
        return None
    kind = int(row["inflight_kind"])
    completed = int(
        row["coll_completed"] if kind == shm_v1.RecordKind.COLL else row["p2p_completed"]
    )
    enqueued = int(row["coll_enqueued"] if kind == shm_v1.RecordKind.COLL else row["p2p_enqueued"])
    if not completed <= int(row["inflight_op_index"]) < enqueued:
        return None
    start = on_reader_clock(int(row["inflight_start_mono_ns"]), off)
    return InflightOp(
        kind=int(row["inflight_kind"]),
        func=enum_label(shm_v1.FUNC_LABELS, shm_v1.Func, int(row["inflight_func"])),
        datatype=enum_label(shm_v1.DATATYPE_LABELS, shm_v1.Datatype, int(row["inflight_datatype"])),
        seq=int(row["inflight_seq"]),
        op_index=int(row["inflight_op_index"]),
        count=int(row["inflight_count_elems"]),
        bytes=int(row["inflight_bytes"]),
        peer=rank_or_none(int(row["inflight_peer"])),
        n_channels=int(row["inflight_n_channels"]),
        channels_started=int(row["inflight_channels_started"]),
        channels_stopped=int(row["inflight_channels_stopped"]),
        enqueue_mono_ns=on_reader_clock(int(row["inflight_enqueue_mono_ns"]), off),
        start_mono_ns=start or None,
        unproven=bool(row["inflight_unproven"]),
    )


def comm_member(
    row, process: ProcessView, evidence: EvidenceView | None = None, off: int = 0
) -> CommMember:
    """off: the region's mono_offset_ns (its times go onto the reader's clock)."""
    flagged = int(row["hang_flagged_seq"])
    return CommMember(
        comm_id=int(row["comm_id"]),
        name=record_text(row["name"]),
        rank=int(row["rank"]),
        nranks=int(row["nranks"]),
        nnodes=int(row["nnodes"]),
        state=int(row["state"]),
        init_mono_ns=on_reader_clock(int(row["init_mono_ns"]), off),
        coll_enqueued=int(row["coll_enqueued"]),
        coll_enqueued_mono_ns=on_reader_clock(int(row["coll_enqueued_mono_ns"]), off),
        coll_started=int(row["coll_started"]),
        coll_started_mono_ns=on_reader_clock(int(row["coll_started_mono_ns"]), off),
        coll_completed=int(row["coll_completed"]),
        coll_completed_mono_ns=on_reader_clock(int(row["coll_completed_mono_ns"]), off),
        p2p_enqueued=int(row["p2p_enqueued"]),
        p2p_completed=int(row["p2p_completed"]),
        inflight_count=int(row["inflight_count"]),
        inflight=inflight_op(row, off),
        hang_flagged_op_index=None if flagged == NO_FLAGGED_SEQ else flagged,
        process=process,
        hang_evidence=evidence,
        finalize_mono_ns=on_reader_clock(int(row["finalize_mono_ns"]), off),
    )


def group_by_comm(members: Iterable[CommMember]) -> dict[int, CommView]:
    """Rows with the same comm_id are one communicator, whichever process they came from."""
    by_id: dict[int, list[CommMember]] = {}
    for m in members:
        by_id.setdefault(m.comm_id, []).append(m)
    comms = {}
    for comm_id, rows in by_id.items():
        rows.sort(key=lambda m: m.rank)
        first = rows[0]
        name = next((m.name for m in rows if m.name), "")
        comms[comm_id] = CommView(comm_id, name, first.nranks, first.nnodes, tuple(rows))
    return comms


def latest_runs(
    members: list[CommMember], finalized: list[CommMember], margin_ns: int
) -> tuple[list[CommMember], list[CommMember]]:
    """ACTIVE and FINALIZED rows, less those of an earlier run of their communicator id."""
    by_id: dict[int, list[CommMember]] = {}
    for m in (*members, *finalized):
        by_id.setdefault(m.comm_id, []).append(m)
    kept = {id(m) for rows in by_id.values() for m in current_run(rows, margin_ns)}
    return [m for m in members if id(m) in kept], [m for m in finalized if id(m) in kept]


@dataclass(frozen=True)
class RegionView:
    """What one region shows a snapshot taken at now_mono_ns."""

    process: ProcessView
    members: tuple[CommMember, ...]  # its ACTIVE rows
    finalized: tuple[CommMember, ...]  # its FINALIZED rows
    now_mono_ns: int
    stale_ns: int
    exists: Callable[[int], bool]


def region_view(
    region: ShmRegion, now_mono_ns: int, stale_ns: int, exists: Callable[[int], bool]
) -> RegionView:
    proc = process_view(region, now_mono_ns, stale_ns, exists)
    off = getattr(region, "mono_offset_ns", 0)  # regions built by hand have none
    evidence = evidence_by_row(region.evidence_entries(), off)
    members, finalized = [], []
    for row in region.comm_entries():
        state = int(row["state"])
        if state == shm_v1.CommState.ACTIVE:
            key = (int(row["comm_id"]), int(row["rank"]), int(row["generation"]))
            members.append(comm_member(row, proc, evidence.get(key), off))
        elif state == shm_v1.CommState.FINALIZED:
            finalized.append(comm_member(row, proc, off=off))
    return RegionView(proc, tuple(members), tuple(finalized), now_mono_ns, stale_ns, exists)


# The views of released regions (their processes ended, their records safe: nothing in them
# changes again), reused for ENDED_VIEW_REUSE_NS: a node remembers up to 64 ended processes
# for diagnosis, and reading each one's header and rows again on every pass was most of an
# idle Agent's CPU. Only the ages in the view grow meanwhile, by less than that.
ENDED_VIEW_REUSE_NS = 1_000_000_000
_ENDED_VIEWS: weakref.WeakKeyDictionary[ShmRegion, RegionView] = weakref.WeakKeyDictionary()


def _ended_view(
    region: ShmRegion, now_mono_ns: int, stale_ns: int, exists: Callable[[int], bool]
) -> RegionView | None:
    if not getattr(region, "released", False):
        return None
    view = _ENDED_VIEWS.get(region)
    if (
        view is None
        or view.stale_ns != stale_ns
        or view.exists is not exists
        or not 0 <= now_mono_ns - view.now_mono_ns < ENDED_VIEW_REUSE_NS
    ):
        return None
    return view


def build_snapshot(
    regions: Iterable[ShmRegion],
    *,
    node_name: str | None = None,
    heartbeat_stale_ms: int = 10_000,
    now_mono_ns: int | None = None,
    now_real_ns: int | None = None,
    exists: Callable[[int], bool] = pid_exists,
) -> NodeSnapshot:
    """Read every region once. Only ACTIVE communicator rows count as members: a FINALIZED
    row belongs to a communicator that was destroyed or aborted and waits for nobody, and a
    communicator that some rank has already finalized is being torn down, so it is left out
    (its remaining rows would look like members missing on other nodes). Of the rows of one
    communicator id only the latest run's count (core.current_run): a reused home still holds the
    regions of an earlier run, whose ids may repeat."""
    now_mono = time.monotonic_ns() if now_mono_ns is None else now_mono_ns
    now_real = time.time_ns() if now_real_ns is None else now_real_ns
    stale_ns = heartbeat_stale_ms * 1_000_000
    processes, members, finalized = [], [], []
    for region in regions:
        if region.state == shm_v1.FileState.CREATING:  # nothing in it can be trusted yet
            continue
        view = _ended_view(region, now_mono, stale_ns, exists)
        if view is None:
            view = region_view(region, now_mono, stale_ns, exists)
            if getattr(region, "released", False):
                _ENDED_VIEWS[region] = view
        processes.append(view.process)
        members += view.members
        finalized += view.finalized
    comms, torn_down = communicators(members, finalized, stale_ns)
    return NodeSnapshot(
        node_name=node_name or socket.gethostname(),
        taken_mono_ns=now_mono,
        taken_real_ns=now_real,
        heartbeat_stale_ns=stale_ns,
        processes=tuple(processes),
        comms=comms,
        torn_down=torn_down,
    )


def communicators(
    members: list[CommMember], finalized: list[CommMember], stale_ns: int
) -> tuple[dict[int, CommView], dict[int, CommView]]:
    """(active, torn down) communicators by id from ACTIVE and FINALIZED rows of the latest
    run of each id: one that some rank finalized is torn down, its FINALIZED rows departed."""
    members, finalized = latest_runs(members, finalized, stale_ns)
    departed: dict[int, list[CommMember]] = {}
    for m in finalized:
        departed.setdefault(m.comm_id, []).append(m)
    torn_down = group_by_comm(m for m in members if m.comm_id in departed)
    for comm_id, view in torn_down.items():
        left = tuple(sorted(departed[comm_id], key=lambda m: m.rank))
        torn_down[comm_id] = dataclasses.replace(view, departed=left)
    return group_by_comm(m for m in members if m.comm_id not in departed), torn_down
