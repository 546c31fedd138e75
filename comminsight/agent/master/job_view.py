"""The whole job as a master sees it: every node's state rows, joined by communicator id.

Each node (the master's own, and every slave that registered) is a `NodeRecord` holding the
latest agent-master-slave rows of that node. From them this module builds, for one instant:
- the job-wide `NodeSnapshot` that hang diagnosis reads, so a verdict can name a culprit on any
  node (`ProcessView.node_name` says which);
- the job's communicator rows (`MemberRow`), which the API renders as a node Agent renders its
  own (api.views: communicators, ranks, in-flight ops), and the nodes' summaries.

Clocks: a node's `*_mono_ns` count from its own boot. Every batch and heartbeat brings a clock
sample of the slave; `offset_ns` (master monotonic minus slave monotonic at receipt) is the
smallest seen in the session, since network delay only adds to it. Times are converted to the
master's monotonic clock with it, so ages grow on the master even while a slave, having
nothing new to say, sends nothing; real time is never compared across nodes.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from comminsight.agent.api.views import MemberRow
from comminsight.agent.state.node_state import NodeRows, process_key
from comminsight.agent.state.rank_runs import EMPTY, BadRuns, RankRuns
from comminsight.agent.state.snapshot import (
    CommMember,
    InflightOp,
    NodeSnapshot,
    ProcessView,
)
from comminsight.agent.state.snapshot import communicators as snapshot_communicators
from comminsight_gen.abi import shm_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api

MS = 1_000_000


@dataclass
class NodeRecord:
    name: str
    mode: api.AgentMode
    local: bool = False
    identity: pb.NodeIdentity | None = None
    rows: NodeRows = field(default_factory=NodeRows)
    offset_ns: int | None = None  # master monotonic - node monotonic; 0 for the local node
    state: api.NodeState = api.NodeState.disconnected
    session_id: int = 0
    epoch: int = 0
    last_applied: int | None = None
    last_seen_mono_ns: int | None = None  # master clock
    last_seen_real_ns: int | None = None
    rejects_total: int = 0
    last_reject: api.NodeReject | None = None
    counters: pb.AgentCounters = field(default_factory=pb.AgentCounters)
    metric_totals: pb.NodeMetricTotals | None = None  # the latest the node sent
    has_state: bool = False  # rows are the node's (a full state arrived since master start)
    full_state_keys: set | None = None  # keys of a full state spanning several batches
    # a relay's reduction of the nodes below it (agent-master-slave RankClass, SubtreeNode),
    # replaced whole by each full state; the pending ones while a full state spans batches
    classes: list[pb.RankClass] = field(default_factory=list)
    class_runs: list[RankRuns] = field(default_factory=list)  # each class's, parsed once
    subtree: dict[str, pb.SubtreeNode] = field(default_factory=dict)
    pending_classes: list[pb.RankClass] | None = None
    pending_subtree: dict[str, pb.SubtreeNode] | None = None
    pending_runs: list[RankRuns] | None = None
    # when each of its waits in flight began (master clock, ascending), as its latest rows
    # and classes show: when one crosses the hang threshold, the master diagnoses at once
    wait_starts: list[int] = field(default_factory=list)
    # a relay's classes as its recent full states had them, checked: most are the same from
    # one report to the next, and are not parsed again
    checked: CheckedClasses = field(default_factory=lambda: CheckedClasses())

    def note_waits(self) -> None:
        waits = {
            g.oldest_inflight.enqueued_mono_ns
            for g in self.rows.progress.values()
            if g.HasField("oldest_inflight")
        }
        waits.update(
            c.progress.oldest_inflight.enqueued_mono_ns
            for c in self.classes
            if c.progress.HasField("oldest_inflight")
        )
        self.wait_starts = sorted(self.to_master(t) for t in waits)

    def wait_crosses(self, after_ns: int, until_ns: int, threshold_ns: int) -> bool:
        """One of its waits crosses the threshold in (after_ns, until_ns]."""
        starts = self.wait_starts
        return bisect.bisect_right(starts, until_ns - threshold_ns) > bisect.bisect_right(
            starts, after_ns - threshold_ns
        )

    def clock_sample(self, sample: pb.ClockSample, master_mono_ns: int) -> None:
        offset = master_mono_ns - sample.mono_ns
        self.offset_ns = offset if self.offset_ns is None else min(self.offset_ns, offset)

    def to_master(self, mono_ns: int) -> int:
        """A node monotonic time on the master's clock; 0 (never) stays 0."""
        if not mono_ns:
            return 0
        t = mono_ns + (self.offset_ns or 0)
        return t if t > 0 else 1  # not max(): called for every time of every row, every rebuild

    @property
    def host(self) -> str:
        return self.identity.host if self.identity is not None else ""

    @property
    def is_relay(self) -> bool:
        return self.identity is not None and self.identity.relay


# ---- the job-wide snapshot for hang diagnosis ---------------------------------------------


def process_view(
    node: NodeRecord,
    p: pb.ProcessInfo,
    now: int,
    stale_ns: int,
    node_name: str | None = None,
    host: str | None = None,
) -> ProcessView:
    """node_name, host: where the process runs when `node` is the relay that passed it up."""
    hb = node.to_master(p.heartbeat_mono_ns)
    age = max(0, now - hb) if hb else 0
    return ProcessView(
        pid=p.pid,
        host=node.host if host is None else host,
        global_rank=p.global_rank if p.HasField("global_rank") else None,
        local_rank=p.local_rank if p.HasField("local_rank") else None,
        job_id=p.job_id,
        file_state=shm_v1.FileState.LIVE,
        start_real_ns=p.started_real_ns,
        start_mono_ns=node.to_master(p.started_mono_ns),
        heartbeat_mono_ns=hb,
        heartbeat_age_ns=age,
        heartbeat_interval_ms=0,
        # The slave probed the pid (its node's process table); DRAINING means it is gone.
        pid_exists=p.ingest_state == pb.INGEST_STATE_ACTIVE,
        heartbeat_fresh=age <= stale_ns,
        node_name=node.name if node_name is None else node_name,
        pid_namespace=p.pid_namespace,
        world_size=p.world_size if p.HasField("world_size") else None,
    )


def inflight_of(node: NodeRecord, op: pb.InflightOp) -> InflightOp:
    return InflightOp(
        kind=shm_v1.RecordKind.COLL if op.kind == pb.OP_KIND_COLL else shm_v1.RecordKind.P2P,
        func=op.func,
        datatype=op.datatype,
        seq=op.seq,
        op_index=op.op_index,
        count=op.count,
        bytes=op.size_bytes,
        peer=op.peer_or_root if op.HasField("peer_or_root") else None,
        n_channels=op.n_channels,
        channels_started=op.channels_started,
        channels_stopped=op.channels_completed,
        enqueue_mono_ns=node.to_master(op.enqueued_mono_ns),
        start_mono_ns=node.to_master(op.gpu_started_mono_ns) or None,
        unproven=op.unproven,
    )


def comm_member(
    node: NodeRecord,
    m: pb.CommunicatorMember,
    g: pb.CommProgress,
    proc: ProcessView,
    stands_for: RankRuns = EMPTY,
) -> CommMember:
    c, p2p = g.collectives, g.p2p
    return CommMember(
        comm_id=m.comm_id,
        name=m.name,
        rank=m.comm_rank,
        nranks=m.nranks,
        nnodes=m.nnodes,
        state=shm_v1.CommState.FINALIZED if m.finalize_mono_ns else shm_v1.CommState.ACTIVE,
        init_mono_ns=node.to_master(m.init_mono_ns),
        coll_enqueued=c.enqueued,
        coll_enqueued_mono_ns=node.to_master(c.enqueued_mono_ns),
        coll_started=c.gpu_started,
        coll_started_mono_ns=node.to_master(c.gpu_started_mono_ns),
        coll_completed=c.completed,
        coll_completed_mono_ns=node.to_master(c.completed_mono_ns),
        p2p_enqueued=p2p.enqueued,
        p2p_completed=p2p.completed,
        inflight_count=g.inflight_count,
        inflight=inflight_of(node, g.oldest_inflight) if g.HasField("oldest_inflight") else None,
        hang_flagged_op_index=g.hang_flagged_seq if g.HasField("hang_flagged_seq") else None,
        process=proc,
        # when it left, on the master's clock: whether it left before its peers' wait
        # reached the threshold (a hang's cause) or after (a teardown) (left_comm)
        finalize_mono_ns=node.to_master(m.finalize_mono_ns),
        stands_for=stands_for,
    )


# How long the classes of a relay that went quiet keep counting for nodes not heard again
# elsewhere (a node that died with it never is): then they go, like any silent data
QUIET_RELAY_KEPT_NS = 60_000_000_000
_HEARD = ("connected", "stale")  # SubtreeNode states of a node its relay still counts


def counted_sources(
    nodes: Iterable[NodeRecord], now_mono_ns: int | None = None
) -> tuple[list[NodeRecord], set[str]]:
    """The records whose rows and classes a job view counts, and the node names left out
    meanwhile. A node is counted once, where it reports now: a slave that went quiet keeps its
    rows (its ranks are still the job's) unless it reports through a relay now; a relay that
    went quiet keeps its classes until every node below it is heard again, directly or
    through another relay, or for QUIET_RELAY_KEPT_NS, and until then the new rows of the
    nodes that moved are left out, so that no rank is counted twice, in its old class and in
    its new row. The master's own node is never left out. (Nodes that moved to another relay
    are in both that relay's classes and the old ones meanwhile.)"""
    nodes = list(nodes)
    local = {n.name for n in nodes if n.local}
    reporting = {n.name for n in nodes if n.state in (api.NodeState.local, api.NodeState.connected)}
    below_relays = {
        name
        for n in nodes
        if n.is_relay and n.name in reporting
        for name, below in n.subtree.items()
        if below.state in _HEARD and name not in local
    }
    heard = reporting | below_relays
    kept, shadowed = [], set()
    for n in nodes:
        if n.name in reporting:
            kept.append(n)
        elif n.is_relay:
            quiet_ns = (
                now_mono_ns - n.last_seen_mono_ns
                if now_mono_ns is not None and n.last_seen_mono_ns is not None
                else 0
            )
            if n.classes and not n.subtree.keys() <= heard and quiet_ns < QUIET_RELAY_KEPT_NS:
                kept.append(n)
                shadowed |= (n.subtree.keys() & reporting) - local
        elif n.name not in below_relays:
            kept.append(n)
    return [n for n in kept if n.name not in shadowed], shadowed


def job_snapshot(
    nodes: Iterable[NodeRecord], master_name: str, now_mono: int, now_real: int, stale_ns: int
) -> NodeSnapshot:
    """Like snapshot.build_snapshot, over every node: only ACTIVE rows are members, a
    communicator some rank finalized is kept apart as torn down (its FINALIZED rows the ranks
    that left), and of the rows of one communicator id only the latest run's count (a reused
    home's earlier run). A relay's classes count as their representatives' rows, each standing
    for its class's other ranks."""
    processes, members, finalized = [], [], []
    for node in counted_sources(nodes, now_mono)[0]:
        views = {}
        for pkey, p in node.rows.processes.items():
            views[pkey] = process_view(node, p, now_mono, stale_ns)
            processes.append(views[pkey])
        for key, m in node.rows.members.items():
            g = node.rows.progress.get(key)
            proc = views.get(process_key(m))
            if g is None or proc is None:
                continue
            (finalized if m.finalize_mono_ns else members).append(comm_member(node, m, g, proc))
        class_views: dict[tuple[str, int, int], ProcessView] = {}
        for rc, runs in zip(node.classes, node.class_runs, strict=True):
            where = (rc.node_name, *process_key(rc.process))
            proc = class_views.get(where)
            if proc is None:
                below = node.subtree.get(rc.node_name)
                host = below.host if below is not None else ""
                proc = process_view(node, rc.process, now_mono, stale_ns, rc.node_name, host)
                class_views[where] = proc
                processes.append(proc)
            m = comm_member(node, rc.member, rc.progress, proc, runs)
            (finalized if rc.member.finalize_mono_ns else members).append(m)
    # kept apart, not dropped: a rank whose peers wait on it after it left is named by them
    comms, torn_down = snapshot_communicators(members, finalized, stale_ns)
    return NodeSnapshot(
        node_name=master_name,
        taken_mono_ns=now_mono,
        taken_real_ns=now_real,
        heartbeat_stale_ns=stale_ns,
        processes=tuple(processes),
        comms=comms,
        torn_down=torn_down,
    )


class CheckedClasses:
    """What checking a relay's classes found, by what was checked (a class's runs with its
    communicator's size and representative; a node name): a relay sends every class every
    report interval, and at 100,000 ranks parsing them all again took a third of the master's
    time. Bounded: emptied once it holds many more entries than one full state has."""

    MIN_KEPT = 4096

    def __init__(self) -> None:
        self.runs: dict[tuple, RankRuns | str] = {}
        self.names: set[str] = set()

    def runs_of(self, rc: pb.RankClass) -> RankRuns | str:
        key = (rc.member.nranks, rc.member.comm_rank, tuple(rc.rank_runs))
        found = self.runs.get(key)
        if found is None:
            found = self.runs[key] = checked_runs(rc)
        return found

    def name_ok(self, name: str, pattern: re.Pattern) -> bool:
        if name in self.names:
            return True
        if not pattern.fullmatch(name):
            return False
        self.names.add(name)
        return True

    def bound(self, classes: int) -> None:
        """After a batch of `classes` classes: forget everything once it is far more."""
        limit = max(self.MIN_KEPT, 4 * classes)
        if len(self.runs) > limit:
            self.runs.clear()
        if len(self.names) > limit:
            self.names.clear()


def checked_runs(rc: pb.RankClass) -> RankRuns | str:
    """The class's other ranks, or why they do not fit its communicator."""
    try:
        runs = RankRuns.from_flat(rc.rank_runs, rc.member.nranks)
    except BadRuns as e:
        return str(e)
    if rc.member.comm_rank >= rc.member.nranks or rc.member.comm_rank in runs:
        return (
            f"representative rank {rc.member.comm_rank} is outside its {rc.member.nranks} ranks "
            "or in its runs"
        )
    return runs


def class_runs(rc: pb.RankClass) -> RankRuns:
    """The class's other ranks; none for a class that does not fit (the master drops such a
    class when its batch is checked, before this is asked)."""
    runs = checked_runs(rc)
    return runs if isinstance(runs, RankRuns) else EMPTY


# ---- for the API: the job's rows (api.views renders them) and its nodes ------------------


def job_rows(nodes: Iterable[NodeRecord], now_mono_ns: int | None = None) -> list[MemberRow]:
    out = []
    for node in counted_sources(nodes, now_mono_ns)[0]:
        for key, m in node.rows.members.items():
            p = node.rows.processes.get(process_key(m))
            g = node.rows.progress.get(key)
            if p is not None and g is not None:
                out.append(MemberRow(node, p, m, g))
        for rc, runs in zip(node.classes, node.class_runs, strict=True):
            out.append(
                MemberRow(
                    node,
                    rc.process,
                    rc.member,
                    rc.progress,
                    origin=rc.node_name,
                    stands_for=runs,
                    ops_completed=rc.ops_completed_sum,
                    bytes_completed=rc.bytes_completed_sum,
                )
            )
    return out


def node_summary(node: NodeRecord, now_mono: int, now_real: int) -> api.NodeSummary:
    procs = list(node.rows.processes.values())
    seen = node.last_seen_mono_ns
    return api.NodeSummary(
        node_name=node.name,
        host=node.host or None,
        mode=node.mode,
        state=node.state,
        agent_version=node.identity.agent_version if node.identity is not None else None,
        processes_alive=sum(1 for p in procs if p.alive),
        processes_total=len(procs),
        global_ranks=sorted({p.global_rank for p in procs if p.HasField("global_rank")}),
        last_seen_real_ns=node.last_seen_real_ns,
        last_seen_age_ms=max(0, now_mono - seen) // MS if seen is not None else None,
        last_applied_batch_seq=node.last_applied,
        rejects_total=node.rejects_total,
        last_reject=node.last_reject,
    )


def below_relays(nodes: Iterable[NodeRecord], now_real: int) -> list[api.NodeSummary]:
    """The nodes below the relays that report now, as the relays see them, less any node that
    reports to this master directly (its own record says more)."""
    nodes = list(nodes)
    direct = {n.name for n in nodes if n.state in (api.NodeState.local, api.NodeState.connected)}
    out: dict[str, api.NodeSummary] = {}
    for relay in nodes:
        if not relay.is_relay or relay.state is not api.NodeState.connected:
            continue
        for below in relay.subtree.values():
            if below.node_name in direct or below.node_name in out:
                continue
            age = below.last_seen_age_ms if below.HasField("last_seen_age_ms") else None
            out[below.node_name] = api.NodeSummary(
                node_name=below.node_name,
                host=below.host[:253] or None,
                mode=_MODE.get(below.mode, api.AgentMode.slave),
                state=_NODE_STATE.get(below.state, api.NodeState.disconnected),
                agent_version=None,
                processes_alive=0,
                processes_total=below.processes,
                global_ranks=[],
                last_seen_real_ns=now_real - age * MS if age is not None else None,
                last_seen_age_ms=age,
                last_applied_batch_seq=None,
                rejects_total=0,
                last_reject=None,
                via=[relay.name, *below.via[:15]],
            )
    return list(out.values())


_MODE = {m.value: m for m in api.AgentMode}
_NODE_STATE = {s.value: s for s in api.NodeState}
