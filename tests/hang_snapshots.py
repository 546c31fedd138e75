"""Hand-built node snapshots for hang diagnosis: processes, communicator members and the
ops they have in flight at a fixed NOW, with the scenarios of grouped incidents built from
them (a tensor-parallel hang that a data-parallel wait follows from)."""

from __future__ import annotations

import msgspec

from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.hangs.incident_store import IncidentStore
from comminsight.agent.state.snapshot import (
    CommMember,
    InflightOp,
    NodeSnapshot,
    ProcessView,
    group_by_comm,
)
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.hang_report_v1 import HangReport

S = 1_000_000_000
MS = 1_000_000
NOW = 1000 * S
THRESHOLD = 1 * S
COMM = 0xAE8B603A2E47EC5B


def proc(rank: int, *, exists=True, hb_age=10 * MS) -> ProcessView:
    return ProcessView(
        pid=1000 + rank,
        host="node-a",
        global_rank=rank,
        local_rank=rank,
        job_id="job1",
        file_state=shm_v1.FileState.LIVE,
        start_real_ns=1_700_000_000 * S,
        start_mono_ns=0,
        heartbeat_mono_ns=NOW - hb_age,
        heartbeat_age_ns=hb_age,
        heartbeat_interval_ms=50,
        pid_exists=exists,
        heartbeat_fresh=hb_age <= 10 * S,
    )


def op(index: int, enqueued_at: int, *, func="AllReduce", count=1024, started=True):
    return InflightOp(
        kind=shm_v1.RecordKind.COLL,
        func=func,
        datatype="ncclFloat32",
        seq=index // 2,
        op_index=index,
        count=count,
        bytes=count * 4,
        peer=None,
        n_channels=4,
        channels_started=4 if started else 0,
        channels_stopped=0,
        enqueue_mono_ns=enqueued_at,
        start_mono_ns=enqueued_at + MS if started else None,
    )


def member(rank: int, enqueued: int, completed: int, inflight=None, *, process=None, **kw):
    at = kw.pop("at", NOW - 5 * S)
    fields = dict(
        comm_id=COMM,
        name="default_pg:0",
        rank=rank,
        nranks=kw.pop("nranks", 4),
        nnodes=kw.pop("nnodes", 1),
        state=shm_v1.CommState.ACTIVE,
        init_mono_ns=NOW - 100 * S,
        coll_enqueued=enqueued,
        coll_enqueued_mono_ns=at if enqueued else 0,
        coll_started=completed,
        coll_started_mono_ns=at if completed else 0,
        coll_completed=completed,
        coll_completed_mono_ns=at if completed else 0,
        p2p_enqueued=0,
        p2p_completed=0,
        inflight_count=enqueued - completed,
        inflight=inflight,
        hang_flagged_op_index=None,
        process=process or proc(rank),
    )
    fields.update(kw)
    return CommMember(**fields)


def snapshot(*members: CommMember) -> NodeSnapshot:
    return NodeSnapshot(
        node_name="node-a",
        taken_mono_ns=NOW,
        taken_real_ns=1_700_000_000 * S + NOW,
        heartbeat_stale_ns=10 * S,
        processes=tuple({m.process.pid: m.process for m in members}.values()),
        comms=group_by_comm(members),
    )


def stuck_at(rank: int, index: int, age: int = 3 * S, **kw) -> CommMember:
    return member(rank, index + 1, index, op(index, NOW - age, **kw.pop("op_kw", {})), **kw)


def only(reports: list[HangReport]) -> HangReport:
    assert len(reports) == 1, [r.summary for r in reports]
    # every report validates against its own generated model, unknown fields refused
    return msgspec.json.decode(msgspec.json.encode(reports[0]), type=HangReport)


def culprit_ranks(report: HangReport) -> list[int]:
    return sorted(c.comm_rank for c in report.culprits)


def p2p(func: str, peer: int, index: int = 7, age: int = 3 * S, count: int = 1024):
    return InflightOp(
        kind=shm_v1.RecordKind.P2P,
        func=func,
        datatype="ncclFloat32",
        seq=index,
        op_index=index,
        count=count,
        bytes=count * 4,
        peer=peer,
        n_channels=1,
        channels_started=1,
        channels_stopped=0,
        enqueue_mono_ns=NOW - age,
        start_mono_ns=NOW - age + MS,
    )


# ---- incidents ----

REAL = 1_700_000_000 * S
TP, DP, PP, TP2 = 0x1111, 0x2222, 0x3333, 0x4444


def tp_then_dp(started: bool = False):
    """Rank 1 never issues op 5 on tp:1 (stuck outside NCCL); rank 0 waits there, and its
    later all-reduce on dp:2 with rank 2 cannot finish behind it (its kernel never starts,
    unless `started`)."""
    r0, r1, r2 = proc(0), proc(1), proc(2)
    return [
        stuck_at(0, 5, age=4 * S, comm_id=TP, name="tp:1", nranks=2, process=r0),
        member(1, enqueued=5, completed=5, comm_id=TP, name="tp:1", nranks=2, process=r1),
        member(
            0, 1, 0, op(0, NOW - 3 * S, started=started), comm_id=DP, name="dp:2", nranks=2,
            process=r0,
        ),
        member(1, 1, 0, op(0, NOW - 3 * S), comm_id=DP, name="dp:2", nranks=2, process=r2),
    ]  # fmt: skip


def reports_of(*members) -> list[HangReport]:
    return diagnose(snapshot(*members), NOW, THRESHOLD, now_real_ns=REAL)


def store_at(tmp_path) -> IncidentStore:
    return IncidentStore(tmp_path, "node-a")
