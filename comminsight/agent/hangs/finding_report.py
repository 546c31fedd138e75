"""A finding dressed as a HangReport: its id, the op, culprits and every rank's evidence."""

from __future__ import annotations

import hashlib
import re

from msgspec import UNSET

from comminsight.agent.hangs.finding import MS, Finding
from comminsight.agent.receivers.proxy_evidence import hang_evidence
from comminsight.agent.state.snapshot import (
    CommMember,
    CommView,
    InflightOp,
    NodeSnapshot,
    ProcessView,
)
from comminsight.shm_reader import ROOTED_FUNCS
from comminsight_gen.models.hang_report_v1 import (
    CommRef,
    Culprit,
    HangReport,
    InflightEvidence,
    OpClass,
    OpInfo,
    ProcessState,
    ProgressMark,
    RankEvidence,
    ReportStatus,
    Severity,
    Verdict,
)


def to_report(
    f: Finding, snap: NodeSnapshot, now_mono: int, now_real: int, threshold_ns: int
) -> HangReport:
    node = node_name(snap.node_name)
    members = {m.rank: m for m in (*f.comm.departed, *f.comm.members)}
    job = job_of(f.comm)
    data_age = max(0, now_mono - snap.taken_mono_ns)  # the snapshot was read this long ago
    return HangReport(
        schema_version=1,
        report_id=report_id(f),
        job_id=job if job else _unset(),
        diagnosed_by=node,
        detected_mono_ns=now_mono,
        detected_real_ns=now_real,
        verdict=f.verdict,
        # a hang behind another pages no one: only the root does (incidents decides finally)
        severity=Severity.info
        if f.cause is not None
        else Severity.warning
        if f.verdict in (Verdict.straggler, Verdict.inconclusive)
        else Severity.critical,
        comm=CommRef(
            comm_id=f.comm.comm_id_hex,
            nranks=max(1, f.comm.nranks),
            comm_name=f.comm.name or _unset(),
            nnodes=f.comm.nnodes if f.comm.nnodes >= 1 else _unset(),
        ),
        op=op_info(f.op) if f.op is not None else _unset(),
        culprits=[
            culprit(r, reason, members.get(r), node, (f.culprit_processes or {}).get(r))
            for r, reason in f.culprits.items()
        ],
        culprit_basis=f.culprit_basis if f.culprit_basis is not None else _unset(),
        # one entry per rank, but a relay's class is one entry for all its ranks
        evidence=[
            rank_evidence(r, members.get(r), f, node, now_mono, data_age)
            for r in sorted({*members, *f.comm.missing_ranks})
            if r < f.comm.nranks
        ]
        or [RankEvidence(comm_rank=0, node_name=node, process_state=ProcessState.unknown)],
        threshold_ms=max(1, (f.threshold_ns or threshold_ns) // MS),
        summary=f.summary
        + (f"; it follows from {report_id(f.cause)}" if f.cause is not None else ""),
        status=ReportStatus.open,
    )


def job_of(comm: CommView) -> str | None:
    """The job its rows' processes belong to (one: core.current_run keeps one run's rows)."""
    return next(
        (m.process.job_id for m in (*comm.members, *comm.departed) if m.process.job_id), None
    )


def report_id(f: Finding) -> str:
    """Stable across polls: the same comm, verdict and op (or ranks) give the same id. The job
    is part of it: a job that reuses a home and an earlier job's communicator id (the
    simulator's, from a seed) gets reports and incidents of its own, never the ended ones."""
    raw = f"{f.comm.comm_id_hex}:{f.verdict.value}:{f.key}"
    job = job_of(f.comm)
    if job:
        raw = f"{job}/{raw}"
    digest = hashlib.sha1(raw.encode()).hexdigest()[:12]
    return f"{f.comm.comm_id_hex}-{f.verdict.value}-{digest}"


def op_info(op: InflightOp) -> OpInfo:
    root, peer = _root_peer(op)
    return OpInfo(
        kind=OpClass.coll if op.is_coll else OpClass.p2p,
        func=op.func,
        seq=op.seq,
        index=op.op_index,
        count=op.count,
        datatype=op.datatype,
        size_bytes=op.bytes,
        root=root,
        peer=peer,
    )


def culprit(
    rank: int, reason: str, m: CommMember | None, node: str, process: ProcessView | None = None
) -> Culprit:
    """process: the culprit's when it has no row in the communicator, where that is known."""
    p = m.process if m is not None else process
    if p is None:
        return Culprit(comm_rank=rank, node_name=node, reason=reason)
    return Culprit(
        comm_rank=rank,
        node_name=node_name(p.node_name) if p.node_name else node,
        reason=reason,
        global_rank=p.global_rank if p.global_rank is not None else _unset(),
        host=p.host or _unset(),
        pid=p.pid if p.pid > 0 else _unset(),
        pid_namespace=p.pid_namespace or _unset(),
    )


def rank_evidence(
    rank: int, m: CommMember | None, f: Finding, node: str, now: int, data_age_ns: int
) -> RankEvidence:
    if m is None:
        return RankEvidence(comm_rank=rank, node_name=node, process_state=ProcessState.unknown)
    p = m.process
    delays = f.join_delays_ns or {}
    return RankEvidence(
        comm_rank=rank,
        node_name=node_name(p.node_name) if p.node_name else node,
        process_state=ProcessState.alive if p.alive else ProcessState.exited,
        global_rank=p.global_rank if p.global_rank is not None else _unset(),
        host=p.host or _unset(),
        pid=p.pid if p.pid > 0 else _unset(),
        pid_namespace=p.pid_namespace or _unset(),
        heartbeat_age_ms=p.heartbeat_age_ns // MS,
        data_age_ms=data_age_ns // MS,
        joined=m.coll_enqueued > f.joined_index if f.joined_index is not None else _unset(),
        join_delay_ms=delays[rank] // MS if rank in delays else _unset(),
        last_enqueued=mark(m, m.coll_enqueued, m.coll_enqueued_mono_ns, now),
        last_gpu_started=mark(m, m.coll_started, m.coll_started_mono_ns, now),
        last_completed=mark(m, m.coll_completed, m.coll_completed_mono_ns, now),
        inflight=inflight_evidence(m.inflight, now) if m.inflight else _unset(),
        inflight_count=m.inflight_count,
        hang_evidence=proxy_evidence(m, now),
        same_state_ranks=m.stands_for.text(max_runs=256)[:4096] if m.stands_for else _unset(),
        same_state_count=m.size if m.stands_for else _unset(),
    )


def proxy_evidence(m: CommMember, now: int):
    """The proxy progress its Profiler recorded for the hang it flagged on this row; absent
    when it raised no mask for that flag (evidence off, or an older raise for another op)."""
    ev = m.hang_evidence
    flagged = m.hang_flagged_op_index
    if ev is None or flagged is None or ev.flagged_op_index != flagged:
        return _unset()
    return hang_evidence(ev, m.process.to_real_ns, now)


def mark(m: CommMember, count: int, at_mono: int, now: int):
    """The latest op index reached at one stage; absent until the stage was reached once."""
    if count == 0 or at_mono == 0:
        return _unset()
    return ProgressMark(
        seq=count - 1,
        at_real_ns=m.process.to_real_ns(at_mono),
        age_ms=max(0, now - at_mono) // MS,
    )


def inflight_evidence(op: InflightOp, now: int) -> InflightEvidence:
    root, peer = _root_peer(op)
    return InflightEvidence(
        kind=OpClass.coll if op.is_coll else OpClass.p2p,
        func=op.func,
        seq=op.seq,
        count=op.count,
        datatype=op.datatype,
        size_bytes=op.bytes,
        age_ms=max(0, now - op.enqueue_mono_ns) // MS,
        n_channels=min(op.n_channels, 255),
        channels_started=min(op.channels_started, 255),
        channels_completed=min(op.channels_stopped, 255),
        root=root,
        peer=peer,
        gpu_timed=False if op.unproven else _unset(),
    )


def node_name(name: str) -> str:
    """COMMINSIGHT_AGENT_NODE_NAME or the host name, fitted to the schema's pattern."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip("._-")[:253]
    return cleaned or "node"


def _root_peer(op: InflightOp):
    if op.peer is None:
        return _unset(), _unset()
    if not op.is_coll:
        return _unset(), op.peer
    return (op.peer if op.func in ROOTED_FUNCS else _unset()), _unset()


def _unset():
    return UNSET
