"""The Agent Master API's answers, rendered from agent-master-slave v1 rows, as generated models.

The rows (`ProcessInfo`, `CommunicatorMember`, `CommProgress`: core.node_state) are the one
model of a node's state: a node reads its own from its regions (`OwnRows`) and a master holds
every node's (master.job_view); both answer through these functions, which write nothing.
Sequence numbers in progress (`SeqProgress`) are the communicator's op indexes, as in hang
reports (hang-report v1 ProgressMark): they line up across ranks, whereas NCCL's per-function
seq, given with every op (`InflightOp.seq`), does not.

Clocks: a row's `*_mono_ns` count on its node's monotonic clock, and the API shows them so;
ages are measured on the answering Agent's clock (`NodeOfRows.to_master`: a master shifts a
slave's times onto its own, a node's own need no shift); real times come from each process's
own (real, monotonic) start pair, never from another node's wall clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from comminsight.agent.state.node_state import ProcessRows
from comminsight.agent.state.rank_runs import RankRuns
from comminsight.shm_reader import ROOTED_FUNCS
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api

MS = 1_000_000
_INGEST = {
    pb.INGEST_STATE_ACTIVE: api.IngestState.active,
    pb.INGEST_STATE_DRAINING: api.IngestState.draining,
    pb.INGEST_STATE_RETIRED: api.IngestState.retired,
    pb.INGEST_STATE_QUARANTINED: api.IngestState.quarantined,
}
_NAME_SOURCE = {
    pb.NAME_SOURCE_NCCL: api.NameSource.nccl,
    pb.NAME_SOURCE_INJECT: api.NameSource.inject,
}


class NodeOfRows(Protocol):
    """The node rows came from (a master's NodeRecord, or OwnNode)."""

    @property
    def name(self) -> str: ...

    def to_master(self, mono_ns: int) -> int:
        """A time of the node's clock on the answering Agent's; 0 (never) stays 0."""
        ...


@dataclass(frozen=True)
class OwnNode:
    """The answering Agent's own node: its rows are on its own clock already."""

    name: str

    def to_master(self, mono_ns: int) -> int:
        return mono_ns


@dataclass(frozen=True)
class MemberRow:
    """One communicator row of one process on one node; or a class a relay passed up, its
    representative's rows standing for the class's other ranks."""

    node: NodeOfRows
    process: pb.ProcessInfo
    member: pb.CommunicatorMember
    progress: pb.CommProgress
    origin: str | None = None  # the node that runs it, when `node` is the relay that sent it
    stands_for: RankRuns = RankRuns()
    ops_completed: int | None = None  # the class's sums, when a class
    bytes_completed: int | None = None

    @property
    def node_name(self) -> str:
        return self.origin or self.node.name

    @property
    def size(self) -> int:
        return 1 + len(self.stands_for)


@dataclass(frozen=True)
class OwnRows:
    """The answering Agent's own node as read at one moment (now_*): each process with its
    own rows, as read from its region, not joined by pid (ProcessRows says why)."""

    node: OwnNode
    processes: tuple[ProcessRows, ...]
    now_mono_ns: int
    now_real_ns: int

    def member_rows(self) -> list[MemberRow]:
        return [
            MemberRow(self.node, read.process, member, progress)
            for read in self.processes
            for member, progress in read.comms
        ]


def _opt(msg, name: str) -> int | None:
    return getattr(msg, name) if msg.HasField(name) else None


def _seq(n: int) -> int | None:
    return n - 1 if n > 0 else None


# ---- processes ----------------------------------------------------------------------------


def process_model(
    node: NodeOfRows, p: pb.ProcessInfo, comm_ids: Iterable[int], now: int
) -> api.Process:
    """comm_ids: of the process's communicator rows."""
    hb = node.to_master(p.heartbeat_mono_ns)
    world = _opt(p, "world_size")
    return api.Process(
        pid=max(1, p.pid),
        pid_namespace=p.pid_namespace or None,
        node_name=node.name,
        process_name=p.process_name[:256],
        job_id=p.job_id or None,
        global_rank=_opt(p, "global_rank"),
        local_rank=_opt(p, "local_rank"),
        world_size=world if world else None,
        cuda_device=_opt(p, "cuda_device"),
        device_uuid=p.device_uuid or None,
        comm_ids=sorted({f"{comm_id:016x}" for comm_id in comm_ids}),
        shm_file=p.shm_file[:4096],
        shm_abi_version=p.shm_abi_version,
        ingest_state=_INGEST.get(p.ingest_state, api.IngestState.active),
        ingest_state_reason=p.ingest_state_reason or None,
        alive=p.alive,
        # the node's own clock, as the API documents *_mono_ns
        heartbeat_mono_ns=p.heartbeat_mono_ns or None,
        heartbeat_age_ms=max(0, now - hb) // MS if hb else None,
        started_real_ns=p.started_real_ns,
        nccl_profiler_abi_version=p.nccl_profiler_abi_version or None,
        event_mask=p.event_mask,
        records_read_total=p.records_read_total,
        records_overwritten_total=p.records_overwritten_total,
        fifo_events_dropped_total=p.fifo_events_dropped_total,
    )


def by_rank(models: Iterable[api.Process]) -> list[api.Process]:
    """Processes by global rank (those without one last), then pid."""
    return sorted(models, key=lambda p: (p.global_rank is None, p.global_rank or 0, p.pid))


def own_processes(own: OwnRows) -> list[api.Process]:
    return by_rank(
        process_model(own.node, read.process, (m.comm_id for m, _ in read.comms), own.now_mono_ns)
        for read in own.processes
    )


# ---- progress and in-flight ops -----------------------------------------------------------


def seq_progress(s: pb.StageCounters) -> api.SeqProgress:
    """Each stage's count and when the last op reached it; op index = count - 1."""
    return api.SeqProgress(
        last_enqueued_seq=_seq(s.enqueued),
        last_enqueued_mono_ns=s.enqueued_mono_ns or None,
        last_gpu_started_seq=_seq(s.gpu_started),
        last_gpu_started_mono_ns=s.gpu_started_mono_ns or None,
        last_completed_seq=_seq(s.completed),
        last_completed_mono_ns=s.completed_mono_ns or None,
    )


def to_real(p: pb.ProcessInfo, mono_ns: int) -> int:
    """A node monotonic time as real time, by the process's own clock pair."""
    return max(0, p.started_real_ns + (mono_ns - p.started_mono_ns))


def inflight_model(row: MemberRow, now: int) -> api.InflightOp | None:
    g = row.progress
    if not g.HasField("oldest_inflight"):
        return None
    op, node, p = g.oldest_inflight, row.node, row.process
    is_coll = op.kind == pb.OP_KIND_COLL
    peer = op.peer_or_root if op.HasField("peer_or_root") else None
    flagged = g.hang_flagged_seq if g.HasField("hang_flagged_seq") else None
    return api.InflightOp(
        comm_id=f"{row.member.comm_id:016x}",
        comm_rank=row.member.comm_rank,
        global_rank=_opt(p, "global_rank"),
        node_name=row.node_name,
        pid=max(1, p.pid),
        pid_namespace=p.pid_namespace or None,
        seq=op.seq,
        kind=api.OpKind.coll if is_coll else api.OpKind.p2p,
        func=op.func,
        datatype=op.datatype[:32],
        count=op.count,
        size_bytes=op.size_bytes,
        root=peer if is_coll and op.func in ROOTED_FUNCS else None,
        peer=None if is_coll else peer,
        algo=op.algo or None,
        proto=op.proto or None,
        n_channels=op.n_channels or None,
        channels_started=op.channels_started,
        channels_completed=op.channels_completed,
        state=api.InflightState.gpu_started
        if op.channels_started or op.gpu_started_mono_ns
        else api.InflightState.enqueued,
        inflight_count=max(1, g.inflight_count),
        enqueued_mono_ns=op.enqueued_mono_ns,
        enqueued_real_ns=to_real(p, op.enqueued_mono_ns),
        gpu_started_mono_ns=op.gpu_started_mono_ns or None,
        age_ms=max(0, now - node.to_master(op.enqueued_mono_ns)) // MS,
        hang_flagged=flagged is not None and flagged == op.op_index,
    )


def inflight_ops(rows: Iterable[MemberRow], now: int) -> list[api.InflightOp]:
    """One entry per process and communicator with ops in flight, oldest first."""
    ops = [op for row in rows if (op := inflight_model(row, now)) is not None]
    return sorted(ops, key=lambda o: (-o.age_ms, o.comm_id, o.comm_rank))


def comm_progress(row: MemberRow, now: int) -> api.CommProgress:
    g, node = row.progress, row.node
    last = max(
        g.collectives.enqueued_mono_ns,
        g.collectives.gpu_started_mono_ns,
        g.collectives.completed_mono_ns,
        g.p2p.enqueued_mono_ns,
        g.p2p.gpu_started_mono_ns,
        g.p2p.completed_mono_ns,
    )
    return api.CommProgress(
        collectives=seq_progress(g.collectives),
        p2p=seq_progress(g.p2p),
        last_progress_real_ns=to_real(row.process, last) if last else None,
        last_progress_age_ms=max(0, now - node.to_master(last)) // MS if last else None,
        inflight_count=g.inflight_count,
        oldest_inflight=inflight_model(row, now),
    )


# ---- communicators ------------------------------------------------------------------------


def comm_rank(row: MemberRow, now: int) -> api.CommRank:
    m, p = row.member, row.process
    return api.CommRank(
        comm_rank=m.comm_rank,
        global_rank=_opt(p, "global_rank"),
        local_rank=_opt(m, "local_rank"),
        node_name=row.node_name,
        pid=max(1, p.pid),
        pid_namespace=p.pid_namespace or None,
        cuda_device=_opt(m, "cuda_device"),
        # the rank's own GPU; a slave whose rows predate the field gave its process's (its
        # first communicator's GPU)
        device_uuid=m.device_uuid or p.device_uuid or None,
        alive=p.alive,
        progress=comm_progress(row, now),
        same_state_ranks=row.stands_for.text(max_runs=256)[:4096] if row.stands_for else None,
        same_state_count=row.size,
    )


def communicator(
    rows: list[MemberRow], report_ids: list[str], full: bool, now: int
) -> api.Communicator:
    rows = sorted(rows, key=lambda r: (r.member.comm_rank, r.node.name))
    first = rows[0].member
    named = next((r.member for r in rows if r.member.name), None)
    finalized = all(r.member.finalize_mono_ns for r in rows)
    nranks = max(1, first.nranks)
    seen = RankRuns.union_all(
        [RankRuns.of(r.member.comm_rank for r in rows), *(r.stands_for for r in rows)]
    )
    inflight = [(r, op) for r in rows if (op := inflight_model(r, now)) is not None]
    finalize_times = [
        to_real(r.process, r.member.finalize_mono_ns)
        for r in rows
        if r.member.finalize_mono_ns > 1  # 1: finalized at a time not known
    ]
    return api.Communicator(
        comm_id=f"{first.comm_id:016x}",
        name=named.name[:1024] if named is not None else None,
        name_source=_NAME_SOURCE.get(named.name_source, api.NameSource.none)
        if named is not None
        else api.NameSource.none,
        nranks=nranks,
        nnodes=first.nnodes or None,
        state=api.CommunicatorState.finalized if finalized else api.CommunicatorState.active,
        ranks_seen=list(seen),
        # every rank 0..nranks-1 seen, whatever else a row claims
        complete=seen.starts[:1] == (0,) and seen.ends[0] >= nranks,
        nodes=sorted({r.node_name for r in rows}),
        created_real_ns=min(r.member.init_real_ns for r in rows),
        finalized_real_ns=max(finalize_times) if finalized and finalize_times else None,
        ops_completed_total=sum(
            r.progress.ops_completed_total if r.ops_completed is None else r.ops_completed
            for r in rows
        ),
        bytes_completed_total=sum(
            r.progress.bytes_completed_total if r.bytes_completed is None else r.bytes_completed
            for r in rows
        ),
        ranks_inflight=sum(r.size for r in {op.comm_rank: r for r, op in inflight}.values()),
        oldest_inflight_age_ms=max((op.age_ms for _, op in inflight), default=None),
        open_hang_report_ids=sorted(report_ids),
        ranks=[comm_rank(r, now) for r in rows] if full else None,
    )


def communicators(
    rows: list[MemberRow], open_reports: dict[str, list[str]], full: bool, now: int
) -> list[api.Communicator]:
    """Every communicator the rows hold, by comm_id; open_reports maps a comm_id to its open
    hang report ids."""
    by_id: dict[int, list[MemberRow]] = {}
    for r in rows:
        by_id.setdefault(r.member.comm_id, []).append(r)
    return [
        communicator(group, open_reports.get(f"{cid:016x}", []), full, now)
        for cid, group in sorted(by_id.items())
    ]
