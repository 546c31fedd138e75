"""rank_left: a rank that finalized a communicator (ncclCommDestroy, the Profiler's finalize)
and exited while its peers wait in the next op is named as soon as they have waited the
threshold, from its FINALIZED row, whether the Agent still holds its region or has retired
it; a master names it too. The uneven-inputs end of DDP: rank 1 ran out of data after op #34
and destroyed its process group; rank 0 went on into all-reduce #35."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from hang_snapshots import (
    COMM,
    MS,
    NOW,
    THRESHOLD,
    S,
    culprit_ranks,
    member,
    only,
    proc,
    snapshot,
    stuck_at,
)

from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.hangs.incidents import group_reports
from comminsight.agent.hangs.left_comm import MembersSeen
from comminsight.agent.master.job_view import NodeRecord, job_snapshot
from comminsight.agent.state.node_state import NodeRows
from comminsight.agent.state.snapshot import NodeSnapshot, group_by_comm
from comminsight_gen.abi import shm_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api
from comminsight_gen.models.hang_report_v1 import Verdict

FINALIZED = shm_v1.CommState.FINALIZED


def waiter(age: int = 3 * S):
    """Rank 0 in all-reduce #35 for `age`; ops #0..#34 completed on both ranks."""
    return stuck_at(0, 35, age, nranks=2)


def rank1_finalized(ago: int, *, exited: bool = True):
    """Rank 1's row after it destroyed the communicator `ago` before NOW: it never enqueued
    #35. Its exit handler closed its region and its pid is gone, unless not `exited`."""
    process = proc(1, exists=not exited)
    return member(
        1, 35, 35, None, nranks=2, state=FINALIZED, finalize_mono_ns=NOW - ago, process=process
    )


def torn(*members, departed=()) -> NodeSnapshot:
    """A snapshot as build_snapshot makes it when some row of the communicator is FINALIZED."""
    snap = snapshot(*members, *departed)
    view = dataclasses.replace(group_by_comm(members)[COMM], departed=tuple(departed))
    return dataclasses.replace(snap, comms={}, torn_down={COMM: view})


# ---- the region still held ----


def test_a_rank_that_finalized_and_exited_before_its_peer_waited_is_rank_left():
    report = only(diagnose(torn(waiter(), departed=[rank1_finalized(4 * S)]), NOW, THRESHOLD))
    assert report.verdict is Verdict.rank_left
    assert culprit_ranks(report) == [1]
    reason = report.culprits[0].reason
    assert "finalized the communicator" in reason and "and exited" in reason, reason
    assert "last enqueued #34" in reason and "wait in #35" in reason, reason
    assert "finalized default_pg:0" in report.summary and "and exited" in report.summary
    assert report.op.index == 35 and report.op.func == "AllReduce"
    assert report.severity.value == "critical"


def test_no_grace_for_a_rank_that_left_while_the_job_ran():
    """Rank 1 finalized 0.5 s ago, a moment after rank 0 entered #35: a teardown's ranks
    leave within moments of each other, but no hang was there to tear down when it left, so
    the verdict comes as soon as rank 0 has waited the threshold, not a threshold later."""
    snap = torn(waiter(age=THRESHOLD + 200 * MS), departed=[rank1_finalized(500 * MS)])
    report = only(diagnose(snap, NOW, THRESHOLD))
    assert report.verdict is Verdict.rank_left
    assert culprit_ranks(report) == [1]


def test_a_rank_whose_process_still_runs_is_rank_left_and_said_to_run():
    departed = [rank1_finalized(4 * S, exited=False)]
    report = only(diagnose(torn(waiter(), departed=departed), NOW, THRESHOLD))
    assert report.verdict is Verdict.rank_left
    assert "pid 1001 still runs" in report.culprits[0].reason
    assert "exited" not in report.summary


def test_a_rank_that_left_after_the_hang_was_there_is_a_teardown():
    """Rank 0 had waited 3 s (the threshold is 1 s) when rank 1, which never joined #35,
    finalized: an aborted job's teardown, whose hang was diagnosed while rank 1 was there."""
    snap = torn(waiter(age=3 * S), departed=[rank1_finalized(500 * MS)])
    assert diagnose(snap, NOW, THRESHOLD) == []


def test_before_the_threshold_nothing_is_reported():
    snap = torn(waiter(age=THRESHOLD // 2), departed=[rank1_finalized(4 * S)])
    assert diagnose(snap, NOW, THRESHOLD) == []


def test_rank_left_is_the_root_of_its_incident():
    (group,) = group_reports(
        diagnose(torn(waiter(), departed=[rank1_finalized(4 * S)]), NOW, THRESHOLD)
    )
    assert group.root.verdict is Verdict.rank_left and group.consequences == []


# ---- the region retired ----


def test_once_the_region_is_retired_the_same_report_goes_on():
    """The Agent retired rank 1's region (its process ended): only rank 0's row is left. The
    FINALIZED row it saw before still says what happened: the same report, not a rank that
    'has not initialized the communicator'."""
    seen = MembersSeen()
    before = torn(waiter(), departed=[rank1_finalized(4 * S)])
    seen.note(before)
    first = only(diagnose(before, NOW, THRESHOLD, members_seen=seen))
    after = snapshot(waiter())
    seen.note(after)
    report = only(diagnose(after, NOW, THRESHOLD, members_seen=seen))
    assert report.verdict is Verdict.rank_left
    assert report.report_id == first.report_id
    assert "and exited" in report.culprits[0].reason


def test_an_agent_that_never_saw_the_rank_does_not_say_it_never_initialized():
    """An Agent started after rank 1's region was retired never saw its row. Ops #0..#34
    completed on both ranks, which every rank had to join: it had initialized the
    communicator."""
    report = only(diagnose(snapshot(waiter()), NOW, THRESHOLD))
    assert report.verdict is Verdict.rank_not_joined
    assert culprit_ranks(report) == [1]
    text = report.summary + report.culprits[0].reason
    assert "not initialized" not in text, text
    assert "initialized the communicator (op #34 completed on every rank)" in text, text


def test_a_rank_that_never_completed_an_op_has_not_initialized():
    report = only(diagnose(snapshot(stuck_at(0, 0, nranks=2)), NOW, THRESHOLD))
    assert "has not initialized the communicator" in report.culprits[0].reason


# ---- the master's job view ----


def slave_node(finalize_mono_ns: int, *, alive: bool) -> NodeRecord:
    """node-b as the master holds it: rank 1's process (pid 5001) with its FINALIZED row;
    rank 0 (pid 5000) in all-reduce #35 for 3 s."""
    rec = NodeRecord(name="node-b", mode=api.AgentMode.slave)
    rec.offset_ns, rec.state = 0, api.NodeState.connected
    rows = NodeRows()
    for rank, (enqueued, completed) in enumerate([(36, 35), (35, 35)]):
        pid = 5000 + rank
        ingest = pb.INGEST_STATE_ACTIVE if rank == 0 or alive else pb.INGEST_STATE_DRAINING
        rows.processes[(pid, 0)] = pb.ProcessInfo(
            pid=pid,
            ingest_state=ingest,
            alive=ingest == pb.INGEST_STATE_ACTIVE,
            heartbeat_mono_ns=NOW - 10 * MS,
            started_mono_ns=1,
            global_rank=rank,
            job_id="job1",
        )
        key = (COMM, pid, rank, 1)
        rows.members[key] = pb.CommunicatorMember(
            comm_id=COMM,
            pid=pid,
            comm_rank=rank,
            nranks=2,
            nnodes=2,
            name="default_pg:0",
            init_mono_ns=NOW - 100 * S,
            finalize_mono_ns=finalize_mono_ns if rank == 1 else 0,
        )
        rows.progress[key] = pb.CommProgress(
            comm_id=COMM,
            pid=pid,
            comm_rank=rank,
            collectives=pb.StageCounters(
                enqueued=enqueued,
                enqueued_mono_ns=NOW - 3 * S,
                completed=completed,
                completed_mono_ns=NOW - 4 * S,
            ),
            inflight_count=enqueued - completed,
        )
        if enqueued > completed:
            rows.progress[key].oldest_inflight.CopyFrom(
                pb.InflightOp(
                    kind=pb.OP_KIND_COLL,
                    func="AllReduce",
                    datatype="ncclFloat32",
                    seq=35,
                    op_index=35,
                    count=1024,
                    size_bytes=4096,
                    enqueued_mono_ns=NOW - 3 * S,
                )
            )
    rec.rows = rows
    return rec


def test_the_master_names_a_rank_that_left_on_a_slave():
    snap = job_snapshot([slave_node(NOW - 4 * S, alive=False)], "node-a", NOW, NOW, 10 * S)
    report = only(diagnose(snap, NOW, THRESHOLD))
    assert report.verdict is Verdict.rank_left
    assert culprit_ranks(report) == [1]
    assert report.culprits[0].node_name == "node-b"
    assert "and exited" in report.culprits[0].reason


def test_the_master_keeps_a_slow_teardown_apart():
    """The master's view carries when the rank finalized, on its own clock: a rank that left
    after its peer had waited the threshold is the teardown of an earlier hang."""
    snap = job_snapshot([slave_node(NOW - 500 * MS, alive=False)], "node-a", NOW, NOW, 10 * S)
    assert diagnose(snap, NOW, THRESHOLD) == []


def test_the_master_remembers_a_finalized_row_once_the_slave_retired_it():
    """The slave retired rank 1's process and its rows went from the master's view: the
    FINALIZED row seen before is still the evidence (an ACTIVE one would not be: a node's
    late report loses its rows too)."""
    seen = MembersSeen()
    node = slave_node(NOW - 4 * S, alive=False)
    seen.note(job_snapshot([node], "node-a", NOW, NOW, 10 * S))
    node.rows.processes.pop((5001, 0))
    after = job_snapshot([node], "node-a", NOW, NOW, 10 * S)
    seen.note(after)
    report = only(diagnose(after, NOW, THRESHOLD, members_seen=seen))
    assert report.verdict is Verdict.rank_left
    assert culprit_ranks(report) == [1]


# ---- a rank that never reached its first collective on the world ----


def _world(p1_busy: bool = False, world_size: int | None = 4, subgroup: bool = False):
    """Ranks 0, 2 and 3 of a 4-rank world wait in its op #0 (the communicator is made at
    first use); rank 1's process made only its own 1-rank communicator, where it is idle
    (or has an op in flight: `p1_busy`). `subgroup`: the communicator's ranks are not the
    processes' global ranks (a group, not the world)."""
    procs = {
        r: dataclasses.replace(proc(r), world_size=world_size, global_rank=r + 4 * subgroup)
        for r in range(4)
    }
    rows = [stuck_at(r, 0, comm_id=0xAAAA, name="world", nranks=4, process=procs[r])
            for r in (0, 2, 3)]  # fmt: skip
    own = member(0, 4, 3 if p1_busy else 4, comm_id=0xBBBB, name="solo", nranks=1,
                 process=procs[1])  # fmt: skip
    return snapshot(*rows, own), procs[1]


def test_a_rank_stuck_before_its_first_world_collective_is_named_by_its_process():
    snap, p1 = _world()
    (report,) = [r for r in diagnose(snap, NOW, THRESHOLD) if r.comm.comm_name == "world"]
    assert report.verdict is Verdict.stuck_outside_nccl, report.summary
    (culprit,) = report.culprits
    assert (culprit.comm_rank, culprit.global_rank, culprit.pid) == (1, 1, p1.pid)
    assert "before their first collective" in report.summary


@pytest.mark.parametrize(
    "case",
    [{"p1_busy": True}, {"world_size": None}, {"subgroup": True}],
    ids=["busy-elsewhere", "world-size-unknown", "not-the-world"],
)
def test_a_rank_without_a_row_is_named_only_where_the_world_tells_it(case):
    snap, _ = _world(**case)
    (report,) = [r for r in diagnose(snap, NOW, THRESHOLD) if r.comm.comm_name == "world"]
    assert report.verdict is Verdict.rank_not_joined, report.summary
    assert report.culprits[0].pid is msgspec.UNSET
