"""A reused home: the rows of an earlier run of a communicator id (its regions not yet retired,
its reports on disk) never join the current run's communicator, so a verdict never names a
process of the earlier run (core.current_run, core.snapshot.communicators, left_comm.MembersSeen,
finding_report.report_id)."""

from __future__ import annotations

import dataclasses

import msgspec
from hang_snapshots import (
    COMM,
    NOW,
    REAL,
    THRESHOLD,
    S,
    culprit_ranks,
    member,
    only,
    proc,
    reports_of,
    store_at,
    stuck_at,
    tp_then_dp,
)

from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.hangs.incidents import group_reports
from comminsight.agent.hangs.left_comm import MembersSeen
from comminsight.agent.master.job_view import NodeRecord, job_snapshot
from comminsight.agent.state.current_run import current_run
from comminsight.agent.state.snapshot import NodeSnapshot, communicators
from comminsight_gen.abi import shm_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api
from comminsight_gen.models.hang_report_v1 import (
    IncidentStatus,
    ReportStatus,
    Resolution,
    Verdict,
)

MARGIN = 10 * S
FINALIZED = shm_v1.CommState.FINALIZED
CLOSED = shm_v1.FileState.CLOSED


def earlier(rank: int, job: str = "job-a", **kw):
    """A process of a run that ended: it started long ago and closed its region at its exit,
    its last heartbeat 200 s before NOW."""
    p = proc(rank, exists=False, hb_age=200 * S)
    return dataclasses.replace(
        p, pid=500 + rank, job_id=job, file_state=CLOSED, start_mono_ns=NOW - 400 * S, **kw
    )


def later(rank: int, job: str = "job-b"):
    """A process of the run going on now, started after the earlier one ended."""
    return dataclasses.replace(proc(rank), pid=900 + rank, job_id=job, start_mono_ns=NOW - 60 * S)


def finished_row(rank: int, **kw):
    """The earlier run's row of a rank: the communicator finalized when that run ended."""
    return member(
        rank,
        40,
        40,
        process=kw.pop("process", None) or earlier(rank),
        state=FINALIZED,
        init_mono_ns=NOW - 390 * S,
        finalize_mono_ns=NOW - 201 * S,
        at=NOW - 202 * S,
        **kw,
    )


def waiting_job_b(skipper: int = 1, job: str = "job-b"):
    """The current run's four ranks: all but `skipper` wait in op #5, which it never issued."""
    rows = []
    for r in range(4):
        if r == skipper:
            rows.append(member(r, 5, 5, process=later(r, job), init_mono_ns=NOW - 50 * S))
        else:
            rows.append(stuck_at(r, 5, process=later(r, job), init_mono_ns=NOW - 50 * S))
    return rows


def snapshot_of(rows) -> NodeSnapshot:
    active = [m for m in rows if m.state == shm_v1.CommState.ACTIVE]
    finalized = [m for m in rows if m.state == FINALIZED]
    comms, torn_down = communicators(active, finalized, MARGIN)
    return NodeSnapshot(
        node_name="node-a",
        taken_mono_ns=NOW,
        taken_real_ns=1_700_000_000 * S + NOW,
        heartbeat_stale_ns=MARGIN,
        processes=tuple({m.process.pid: m.process for m in rows}.values()),
        comms=comms,
        torn_down=torn_down,
    )


def pids(rows) -> list[int]:
    return sorted(m.process.pid for m in rows)


# ---- current_run ----


def test_rows_of_another_job_under_the_same_id_are_an_earlier_run():
    old = [finished_row(r) for r in range(4)]
    new = waiting_job_b()
    assert pids(current_run([*old, *new], MARGIN)) == [900, 901, 902, 903]


def test_of_two_rows_of_one_rank_the_later_process_holds_it():
    """The same job id again (a rerun): each rank's row of the later process is the run's."""
    old = [finished_row(r, process=earlier(r, job="job-b")) for r in range(4)]
    new = waiting_job_b()
    assert pids(current_run([*old, *new], MARGIN)) == [900, 901, 902, 903]


def test_a_process_that_ended_before_the_communicator_began_never_shared_it():
    """Same job, and the current run's rank 3 has no row yet: the earlier run's rank 3 ended
    long before the others initialized the communicator, so it is not their missing rank."""
    old = finished_row(3, process=earlier(3, job="job-b"))
    new = waiting_job_b()[:3]
    assert pids(current_run([old, *new], MARGIN)) == [900, 901, 902]


def test_a_rank_that_died_after_the_init_stays_a_member():
    """A rank of this run that died (its pid gone, its last heartbeat moments after the
    init the others made) is this run's: process_died must still name it."""
    dead = dataclasses.replace(later(3), pid_exists=False, heartbeat_mono_ns=NOW - 49 * S)
    rows = [*waiting_job_b()[:3], member(3, 5, 5, process=dead, init_mono_ns=NOW - 50 * S)]
    assert pids(current_run(rows, MARGIN)) == [900, 901, 902, 903]


def test_a_rank_whose_init_came_within_the_margin_of_a_peers_death_stays_a_member():
    """Ranks return from NCCL's init at different moments: a rank that died right after its
    own init, before a slower peer's init was recorded, shared the communicator all the same."""
    dead = dataclasses.replace(later(3), pid_exists=False, heartbeat_mono_ns=NOW - 55 * S)
    rows = [
        *waiting_job_b()[:3],
        member(3, 0, 0, process=dead, init_mono_ns=NOW - 56 * S),
    ]
    assert pids(current_run(rows, MARGIN)) == [900, 901, 902, 903]


def test_one_run_alone_is_kept_whole():
    rows = waiting_job_b()
    assert current_run(rows, MARGIN) == rows


def test_a_run_that_ended_whole_is_its_own_latest_run():
    """Only the earlier run's rows: they are the latest run of the id (nobody waits in them)."""
    rows = [finished_row(r) for r in range(4)]
    assert current_run(rows, MARGIN) == rows


# ---- the verdict ----


def test_an_earlier_jobs_finalized_rows_do_not_tear_down_the_next_jobs_communicator():
    """The case seen: job A ended (rows FINALIZED, regions not yet retired), job B in the same
    home with the same communicator id hangs because rank 1 skipped op #5. The verdict was
    'ranks 0, 1, 3 (job A's pids) left'; it is job B's rank 1, stuck outside NCCL."""
    snap = snapshot_of([*(finished_row(r) for r in range(4)), *waiting_job_b(skipper=1)])
    assert not snap.torn_down and list(snap.comms) == [COMM]
    report = only(diagnose(snap, NOW, THRESHOLD))
    assert report.verdict is Verdict.stuck_outside_nccl
    assert culprit_ranks(report) == [1]
    assert [c.pid for c in report.culprits] == [901]
    assert report.job_id == "job-b"
    named = {e.pid for e in report.evidence} | {c.pid for c in report.culprits}
    assert named == {900, 901, 902, 903}
    assert "pid 5" not in report.summary


def test_a_rank_remembered_from_an_earlier_run_did_not_leave_this_one():
    """The Agent saw job A's rank 3; job B's rank 3 has no row yet while its peers wait: that
    is a rank not initialized (or on its way), never job A's process 'that left'."""
    seen = MembersSeen()
    seen.note(snapshot_of([stuck_at(r, 40, process=earlier(r)) for r in range(4)]))
    rows = [*waiting_job_b(skipper=9)[:3]]
    snap = snapshot_of(rows)
    seen.note(snap)
    assert sorted(seen.of(COMM)) == [0, 1, 2]
    for report in diagnose(snap, NOW, THRESHOLD, members_seen=seen):
        assert all(not isinstance(c.pid, int) or c.pid >= 900 for c in report.culprits), (
            report.summary
        )
        assert "pid 50" not in report.summary


def test_report_ids_of_two_jobs_on_one_communicator_id_differ():
    """Job B's hang on the id job A used is its own report (and incident), never job A's
    resolved one taken up again."""
    a = only(diagnose(snapshot_of(waiting_job_b(job="job-a")), NOW, THRESHOLD))
    b = only(diagnose(snapshot_of(waiting_job_b(job="job-b")), NOW, THRESHOLD))
    assert a.verdict is b.verdict and a.comm.comm_id == b.comm.comm_id
    assert a.report_id != b.report_id
    assert (a.job_id, b.job_id) == ("job-a", "job-b")


# ---- incidents ----


def test_a_rerun_that_repeats_an_ended_incidents_reports_opens_its_own_incident(tmp_path):
    """Job id and communicator ids alike (the simulator run twice): the second run's reports
    carry the first one's ids. Once those reports were resolved with the first run's end,
    the second run's hang is a new cause with an incident of its own, not the rest of a
    teardown to leave out."""
    store = store_at(tmp_path)
    reports = reports_of(*tp_then_dp())
    (first,) = store.update(group_reports(reports), {}, NOW, REAL)
    ended = {r.report_id: resolved(r, Resolution.comm_finalized) for r in reports}
    (closed,) = store.update([], ended, NOW + S, REAL + S)
    assert closed.resolution is Resolution.comm_finalized
    assert store.update([], ended, NOW + 2 * S, REAL + 2 * S) == []  # the runs in between
    held = {r.report_id: r for r in reports}  # diagnosed again: open, as the Agent saves them
    (second,) = store.update(group_reports(reports), held, NOW + 3 * S, REAL + 3 * S)
    assert second.incident_id == f"{first.incident_id}-2"
    assert second.status is IncidentStatus.open


def test_the_rest_of_a_teardown_still_open_opens_nothing(tmp_path):
    """The other side: reports of the ended incident that were never resolved are its
    teardown going on, no new cause."""
    store = store_at(tmp_path)
    reports = reports_of(*tp_then_dp())
    store.update(group_reports(reports), {}, NOW, REAL)
    held = {r.report_id: r for r in reports}
    held = {
        rid: resolved(r, Resolution.comm_finalized)
        if r.verdict is not Verdict.all_joined_none_complete
        else r
        for rid, r in held.items()
    }
    store.update([], held, NOW + S, REAL + S)
    store.update([], held, NOW + 2 * S, REAL + 2 * S)
    still = [r for r in reports if held[r.report_id].status is ReportStatus.open]
    assert still and store.update(group_reports(still), held, NOW + 3 * S, REAL + 3 * S) == []


def resolved(report, why):
    return msgspec.structs.replace(
        report,
        status=ReportStatus.resolved,
        resolution=why,
        resolved_mono_ns=NOW + S,
        resolved_real_ns=REAL + S,
    )


# ---- a master's job view ----


def test_a_masters_job_view_keeps_only_the_latest_run_of_a_communicator_id():
    """The slave's rows of job A (its processes drained, its communicator finalized) and of
    job B on the same id: the master's snapshot holds job B's communicator, not torn down."""
    node = NodeRecord("node-a", api.AgentMode.slave, offset_ns=0)
    for rank in range(4):
        for pid, job, started, finalized, state in (
            (500 + rank, "job-a", 100 * S, 300 * S, pb.INGEST_STATE_DRAINING),
            (900 + rank, "job-b", 600 * S, 0, pb.INGEST_STATE_ACTIVE),
        ):
            node.rows.processes[(pid, 0)] = pb.ProcessInfo(
                pid=pid,
                ingest_state=state,
                job_id=job,
                started_mono_ns=started,
                heartbeat_mono_ns=finalized or NOW,
                global_rank=rank,
            )
            key = (COMM, pid, 1)
            node.rows.members[key] = pb.CommunicatorMember(
                comm_id=COMM,
                pid=pid,
                generation=1,
                comm_rank=rank,
                nranks=4,
                nnodes=1,
                init_mono_ns=started + S,
                finalize_mono_ns=finalized,
            )
            node.rows.progress[key] = pb.CommProgress(comm_id=COMM, pid=pid, generation=1)
    snap = job_snapshot([node], "master", NOW, REAL, MARGIN)
    assert list(snap.comms) == [COMM]
    assert pids(snap.comms[COMM].members) == [900, 901, 902, 903]
