"""A rank that left a communicator (its row finalized by an abort or destroy, its region
closed, or its row gone once the Agent retired its region) while its peers wait is the
culprit, never a rank "on other nodes"; a job whose ranks all finalize opens nothing.

The case behind it: two ranks on one GPU host whose NCCL reports nnodes=2 (socket transport,
distinct host ids). Rank 1 issued an extra 1-element all-reduce as op #35; NCCL failed it on
rank 1, whose communicator was aborted (row FINALIZED, its ops force-completed), while rank 0
waits in its 6558208-element all-reduce #35 for ever."""

from __future__ import annotations

import dataclasses

import numpy as np
from hang_snapshots import (
    COMM,
    MS,
    NOW,
    THRESHOLD,
    S,
    culprit_ranks,
    member,
    only,
    op,
    proc,
    snapshot,
    stuck_at,
)

from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.hangs.left_comm import MembersSeen
from comminsight.agent.state.snapshot import NodeSnapshot, build_snapshot, group_by_comm
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.hang_report_v1 import CulpritBasis, ProcessState, Verdict

BIG = 6558208
FINALIZED = shm_v1.CommState.FINALIZED


def waiter(age: int = 3 * S):
    """Rank 0 in its all-reduce #35 (NCCL says two nodes, both ranks are on this one)."""
    return stuck_at(0, 35, age, nranks=2, nnodes=2, op_kw={"count": BIG})


def rank1_before():
    """Rank 1 as the Agent saw it before it left: busy in op #34."""
    return member(1, 35, 34, op(34, NOW - 4 * S, count=BIG), nranks=2, nnodes=2)


def rank1_left(finalized_ago: int = 2 * S, **kw):
    """Rank 1's row after its communicator was aborted: op #35 enqueued, then completed by
    the Profiler's finalize sweep."""
    at = NOW - finalized_ago
    return member(1, 36, 36, None, nranks=2, nnodes=2, state=FINALIZED, finalize_mono_ns=at, **kw)


def torn(*members, departed=()) -> NodeSnapshot:
    """A snapshot as build_snapshot makes it when some row of the communicator is FINALIZED."""
    snap = snapshot(*members, *departed)
    view = dataclasses.replace(group_by_comm(members)[COMM], departed=tuple(departed))
    return dataclasses.replace(snap, comms={}, torn_down={COMM: view})


def completed_1(count: int):
    """Rank 1's completed ops: op #35 as it issued it; rank 0 completed nothing at #35."""

    def ops(m):
        return {35: op(35, NOW - 3 * S, count=count)} if m.rank == 1 else {}

    return ops


# ---- a finalized row ----


def test_finalized_row_while_peer_waits_names_the_rank_that_left():
    report = only(diagnose(torn(waiter(), departed=[rank1_left()]), NOW, THRESHOLD))
    assert report.verdict is Verdict.rank_left
    assert culprit_ranks(report) == [1]
    reason = report.culprits[0].reason
    assert "left default_pg:0" in reason and "destroyed or aborted" in reason
    assert "wait in #35" in reason
    assert "other nodes" not in report.summary
    assert report.op.index == 35 and report.op.count == BIG
    evidence = {e.comm_rank: e for e in report.evidence}
    assert evidence[1].process_state is ProcessState.alive  # its pid still lingers
    assert report.culprits[0].pid == 1001


def test_finalized_row_that_issued_a_different_op_says_so():
    """Rank 1's completed ops show the 1-element all-reduce at #35. With two ranks no
    majority decides and here no rhythm is known (rank 0 completed nothing): the rank that
    left stays the culprit and its reason says what it issued."""
    snap = torn(waiter(), departed=[rank1_left()])
    report = only(diagnose(snap, NOW, THRESHOLD, completed_ops=completed_1(1)))
    assert report.verdict is Verdict.rank_left
    assert culprit_ranks(report) == [1]
    assert "it issued AllReduce seq 17 (count 1," in report.culprits[0].reason


def test_a_majority_names_the_rank_that_left_after_issuing_a_different_op():
    waiters = [stuck_at(r, 35, nranks=3, nnodes=1, op_kw={"count": BIG}) for r in (0, 1)]
    left = member(2, 36, 36, None, nranks=3, state=FINALIZED, finalize_mono_ns=NOW - 2 * S)

    def ops(m):
        return {35: op(35, NOW - 3 * S, count=1 if m.rank == 2 else BIG)}

    report = only(diagnose(torn(*waiters, departed=[left]), NOW, THRESHOLD, completed_ops=ops))
    assert report.verdict is Verdict.op_mismatch
    assert report.culprit_basis is CulpritBasis.majority
    assert culprit_ranks(report) == [2]
    assert "count 1," in report.culprits[0].reason and "then left" in report.culprits[0].reason


def test_same_op_in_completed_ops_stays_a_rank_that_left():
    snap = torn(waiter(), departed=[rank1_left()])
    report = only(diagnose(snap, NOW, THRESHOLD, completed_ops=completed_1(BIG)))
    assert report.verdict is Verdict.rank_left
    assert culprit_ranks(report) == [1]


def test_finalized_row_before_the_threshold_reports_nothing():
    assert diagnose(torn(waiter(age=THRESHOLD // 2), departed=[rank1_left()]), NOW, THRESHOLD) == []


# ---- the teardown rule ----


def test_a_rank_that_finalized_within_the_threshold_is_a_teardown_under_way():
    """An aborted job tears down: one rank finalizes moments before the others, which still
    show the op they waited in. Only a departure older than the threshold is a hang's cause."""
    snap = torn(waiter(), departed=[rank1_left(finalized_ago=THRESHOLD // 2)])
    assert diagnose(snap, NOW, THRESHOLD) == []


def test_all_ranks_finalized_reports_nothing():
    rows = [
        member(r, 40, 40, None, nranks=2, nnodes=2, state=FINALIZED, process=proc(r))
        for r in (0, 1)
    ]
    snap = dataclasses.replace(snapshot(*rows), comms={}, torn_down={})
    assert diagnose(snap, NOW, THRESHOLD) == []


def test_a_teardown_in_progress_reports_nothing():
    """Rank 1 destroyed the communicator first; rank 0, about to, waits in nothing."""
    idle = member(0, 40, 40, None, nranks=2, nnodes=2)
    assert diagnose(torn(idle, departed=[rank1_left()]), NOW, THRESHOLD) == []


def test_a_finalized_rank_that_never_joined_the_op_is_left_to_the_teardown():
    """The first rank of an aborted job's teardown may be the one that never joined: its
    departure says nothing new (it was diagnosed before it left)."""
    early = member(
        1, 35, 35, None, nranks=2, nnodes=2, state=FINALIZED, finalize_mono_ns=NOW - 2 * S
    )
    assert diagnose(torn(waiter(), departed=[early]), NOW, THRESHOLD) == []


# ---- a vanished row ----


def test_row_that_vanished_is_a_rank_that_left_not_one_on_another_node():
    """The Agent retired rank 1's region (its process ended): only rank 0's row is left, and
    NCCL's nnodes=2 must not make rank 1 a rank on another node."""
    before = snapshot(waiter(age=1 * S), rank1_before())
    now = snapshot(waiter())
    report = only(diagnose(now, NOW, THRESHOLD, history=[before]))
    assert report.verdict is Verdict.rank_left
    assert culprit_ranks(report) == [1]
    assert "left default_pg:0" in report.culprits[0].reason
    assert "other nodes" not in report.summary


def test_members_seen_outlive_the_history():
    """The region is retired a minute after the process ended, long after the snapshots
    that showed it left the history: the memory keeps its row while the comm is shown."""
    seen = MembersSeen()
    seen.note(snapshot(waiter(age=1 * S), rank1_before()))
    for _ in range(3):
        seen.note(snapshot(waiter()))
    report = only(diagnose(snapshot(waiter()), NOW, THRESHOLD, members_seen=seen))
    assert report.verdict is Verdict.rank_left
    assert culprit_ranks(report) == [1]


def test_members_seen_forgets_communicators_no_longer_shown():
    seen = MembersSeen()
    seen.note(snapshot(waiter(), rank1_before()))
    seen.note(dataclasses.replace(snapshot(waiter()), comms={}))
    assert seen.of(COMM) == {}


def test_a_rank_never_seen_here_is_still_on_another_node():
    report = only(diagnose(snapshot(waiter()), NOW, THRESHOLD))
    assert report.verdict is Verdict.inconclusive
    assert culprit_ranks(report) == []


def test_a_vanished_row_of_another_node_is_no_evidence_in_a_job_snapshot():
    """A master's job snapshot loses a node's rows when its report is late."""
    remote = dataclasses.replace(proc(1), node_name="node-b")
    before = snapshot(waiter(age=1 * S), member(1, 35, 34, nranks=2, nnodes=2, process=remote))
    report = only(diagnose(snapshot(waiter()), NOW, THRESHOLD, history=[before]))
    assert report.verdict is Verdict.inconclusive


# ---- a closed region ----


def test_closed_region_with_a_live_pid_is_a_process_that_died():
    """Rank 1's exit handler closed its region (its rows still ACTIVE) and its pid lingers
    in NCCL teardown, heartbeat still fresh: it will never join."""
    closing = dataclasses.replace(proc(1), file_state=shm_v1.FileState.CLOSED)
    rank1 = member(1, 35, 35, None, nranks=2, nnodes=2, process=closing)
    report = only(diagnose(snapshot(waiter(), rank1), NOW, THRESHOLD))
    assert report.verdict is Verdict.process_died
    assert culprit_ranks(report) == [1]
    assert "closed its Profiler region" in report.culprits[0].reason


def test_closed_regions_after_a_clean_end_report_nothing():
    """Both ranks exited without destroying the communicator: ACTIVE rows, closed regions,
    nothing in flight."""
    rows = [
        member(
            r,
            40,
            40,
            None,
            nranks=2,
            nnodes=2,
            process=dataclasses.replace(proc(r), file_state=shm_v1.FileState.CLOSED),
        )
        for r in (0, 1)
    ]
    assert diagnose(snapshot(*rows), NOW, THRESHOLD) == []


# ---- build_snapshot keeps a torn-down communicator apart ----


class Region:
    """What build_snapshot reads of an ShmRegion: a header and comm rows."""

    def __init__(self, pid: int, rows: list[dict], state=shm_v1.FileState.LIVE):
        self.header = np.zeros(1, dtype=shm_v1.HEADER_DTYPE)[0]
        self.header["pid"], self.header["state"] = pid, state
        self.header["heartbeat_mono_ns"] = NOW - 10 * MS
        self.header["rank"] = self.header["local_rank"] = shm_v1.NO_RANK
        self._rows = np.zeros(len(rows), dtype=shm_v1.COMM_ENTRY_DTYPE)
        for i, fields in enumerate(rows):
            self._rows[i]["hang_flagged_seq"] = (1 << 64) - 1
            for k, v in fields.items():
                self._rows[i][k] = v

    @property
    def state(self) -> int:
        return int(self.header["state"])

    def comm_entries(self):
        return self._rows

    def evidence_entries(self):
        return np.zeros(0, dtype=shm_v1.EVIDENCE_ENTRY_DTYPE)


def row(rank: int, state, enqueued: int, completed: int) -> dict:
    return dict(
        comm_id=COMM,
        rank=rank,
        nranks=2,
        nnodes=2,
        state=state,
        coll_enqueued=enqueued,
        coll_completed=completed,
    )


def test_build_snapshot_keeps_a_finalized_communicator_apart():
    regions = [
        Region(1000, [row(0, shm_v1.CommState.ACTIVE, 36, 35)]),
        Region(1001, [row(1, FINALIZED, 36, 36)]),
    ]
    snap = build_snapshot(regions, node_name="n", now_mono_ns=NOW, exists=lambda _pid: True)
    assert snap.comms == {}  # a teardown is not diagnosed as an active communicator
    view = snap.torn_down[COMM]
    assert [m.rank for m in view.members] == [0]
    assert [m.rank for m in view.departed] == [1]


def test_build_snapshot_drops_a_communicator_every_rank_finalized():
    regions = [Region(1000 + r, [row(r, FINALIZED, 40, 40)]) for r in (0, 1)]
    snap = build_snapshot(regions, node_name="n", now_mono_ns=NOW, exists=lambda _pid: True)
    assert snap.comms == {} and snap.torn_down == {}


def test_a_closed_region_is_not_alive_though_its_pid_runs():
    region = Region(1001, [row(1, shm_v1.CommState.ACTIVE, 35, 35)], shm_v1.FileState.CLOSED)
    snap = build_snapshot([region], node_name="n", now_mono_ns=NOW, exists=lambda _pid: True)
    assert not snap.processes[0].alive
