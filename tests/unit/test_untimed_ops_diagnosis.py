"""Hang diagnosis with ops NCCL did not time on the GPU (GPU timing sampled): an untimed op
is presumed done where nothing shows it still runs, never where a rank has not joined it,
where the ranks' records differ, or where its rank enqueued it behind a wait elsewhere; a
rank that ran on past the op it waits in is put back in that op."""

from __future__ import annotations

import dataclasses

import pytest

from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.hangs.incidents import group_reports
from comminsight.agent.hangs.untimed_ops import presume_untimed_done
from comminsight.agent.state.snapshot import group_by_comm
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.hang_report_v1 import CauseLink, Verdict
from tests.hang_snapshots import (
    COMM,
    MS,
    NOW,
    THRESHOLD,
    S,
    culprit_ranks,
    member,
    only,
    op,
    p2p,
    proc,
    snapshot,
)

TP, DP, EMB, PP = 0x1111, 0x2222, 0x5555, 0x3333


def untimed(index: int, enqueued_at: int, **kw):
    """An op NCCL was not asked to time: no channel ever starts, the Profiler marks it."""
    return dataclasses.replace(op(index, enqueued_at, started=False, **kw), unproven=True)


def waits_untimed(rank: int, index: int, age: int = 3 * S, *, at=None, **kw):
    enqueued_at = NOW - age
    return member(rank, index + 1, index, untimed(index, enqueued_at), at=at or enqueued_at, **kw)


def test_an_untimed_op_a_peer_completed_is_done():
    # the embedding group's one all-reduce a Step: timed on rank 1, untimed on rank 0
    reports = diagnose(
        snapshot(
            waits_untimed(0, 1, comm_id=EMB, nranks=2),
            member(1, 2, 2, comm_id=EMB, nranks=2),
        ),
        NOW,
        THRESHOLD,
    )
    assert reports == []


def test_the_same_op_timed_and_unfinished_on_one_rank_is_a_hang():
    reports = diagnose(
        snapshot(
            member(0, 2, 1, op(1, NOW - 3 * S, started=True), nranks=2),
            waits_untimed(1, 1, nranks=2),
        ),
        NOW,
        THRESHOLD,
    )
    report = only(reports)
    assert report.verdict is Verdict.all_joined_none_complete
    gpu_timed = {e.comm_rank: e.inflight.gpu_timed for e in report.evidence}
    assert gpu_timed[1] is False and gpu_timed[0] is not False


def quiet_job(*extra):
    """Two ranks that joined an untimed all-reduce 10 s ago and issued nothing since on
    this communicator; `extra` are their rows of other communicators."""
    return snapshot(
        waits_untimed(0, 4, 10 * S, nranks=2),
        waits_untimed(1, 4, 10 * S, nranks=2),
        *extra,
    )


def test_untimed_ops_every_rank_joined_are_no_hang_however_quiet_the_job():
    # a checkpoint after the last all-reduce, or the job's end: nothing shows a kernel running
    assert diagnose(quiet_job(), NOW, THRESHOLD) == []


def test_a_proven_hang_is_reported_alone_beside_untimed_waits():
    # rank 1 never joined the data-parallel all-reduce rank 0 waits in (a timed one); its
    # only op in flight is the untimed one every rank joined, which nothing shows running:
    # it sits in its own code
    dp = [
        member(0, 8, 7, op(7, NOW - 5 * S), comm_id=DP, nranks=2, at=NOW - 5 * S),
        member(1, 7, 7, comm_id=DP, nranks=2, at=NOW - 9 * S),
    ]
    report = only(diagnose(quiet_job(*dp), NOW, THRESHOLD))
    assert report.verdict is Verdict.stuck_outside_nccl, report.summary
    assert report.comm.comm_id == f"{DP:016x}"
    assert culprit_ranks(report) == [1]


def test_an_untimed_op_a_rank_never_joined_still_waits_for_it():
    reports = diagnose(
        snapshot(
            waits_untimed(0, 6, nranks=2),
            member(1, 6, 6, nranks=2, at=NOW - 9 * S),
        ),
        NOW,
        THRESHOLD,
    )
    report = only(reports)
    assert report.verdict is Verdict.stuck_outside_nccl
    assert culprit_ranks(report) == [1]


def test_untimed_ops_that_differ_at_one_index_are_a_mismatch():
    report = only(
        diagnose(
            snapshot(
                waits_untimed(0, 3, nranks=3),
                waits_untimed(1, 3, nranks=3),
                member(2, 4, 3, untimed(3, NOW - 3 * S, count=7), nranks=3, at=NOW - 3 * S),
            ),
            NOW,
            THRESHOLD,
        )
    )
    assert report.verdict is Verdict.op_mismatch
    assert culprit_ranks(report) == [2]


def test_an_untimed_point_to_point_op_is_not_a_wait():
    send = dataclasses.replace(p2p("Send", 1), unproven=True, channels_started=0)
    recv = dataclasses.replace(p2p("Recv", 0), unproven=True, channels_started=0)
    reports = diagnose(
        snapshot(
            member(0, 0, 0, send, nranks=2, p2p_enqueued=8, p2p_completed=7),
            member(1, 0, 0, recv, nranks=2, p2p_enqueued=8, p2p_completed=7),
        ),
        NOW,
        THRESHOLD,
    )
    assert reports == []


@pytest.mark.parametrize("timed", [False, True])
def test_a_rank_that_skipped_an_op_is_found_past_the_untimed_ops_all_joined(timed):
    # rank 0 enqueued #3..#5 and shows #5 (its newest untimed op, or a timed one in flight);
    # rank 1 stopped after #4 in its own code: #4 is presumed done on both, and rank 1 never
    # joined #5
    waited = op(5, NOW - 3 * S, started=False) if timed else untimed(5, NOW - 3 * S)
    reports = diagnose(
        snapshot(
            member(0, 6, 3, waited, nranks=2, at=NOW - 3 * S),
            member(1, 5, 3, untimed(4, NOW - 4 * S), nranks=2, at=NOW - 4 * S),
        ),
        NOW,
        THRESHOLD,
    )
    report = only(reports)
    assert report.verdict is Verdict.stuck_outside_nccl, report.summary
    assert report.op.index == 5 and culprit_ranks(report) == [1]


def ran_on_past_a_skip():
    """Rank 1 stopped in its own code after #4; rank 0 enqueued #5 (which rank 1 never
    issued) and went on to #26, all untimed: its Profiler shows #26."""
    return snapshot(
        member(0, 27, 3, untimed(26, NOW - 2 * S), nranks=2, at=NOW - 2 * S),
        member(1, 5, 3, untimed(4, NOW - 9 * S), nranks=2, at=NOW - 9 * S),
    )


def records_of(ops_by_rank: dict[int, dict[int, object]]):
    return lambda m: ops_by_rank.get(m.rank, {})


def test_a_rank_that_ran_on_waits_in_the_op_its_peer_never_issued():
    records = {0: {i: untimed(i, NOW - 8 * S + i * MS) for i in range(0, 27)}}
    report = only(diagnose(ran_on_past_a_skip(), NOW, THRESHOLD, completed_ops=records_of(records)))
    assert report.verdict is Verdict.stuck_outside_nccl, report.summary
    assert report.op.index == 5 and culprit_ranks(report) == [1]
    # where its records no longer hold that op, the newer one it shows stands for it
    report = only(diagnose(ran_on_past_a_skip(), NOW, THRESHOLD))
    assert report.op.index == 26 and culprit_ranks(report) == [1]


def test_untimed_ops_the_ranks_records_show_different_are_a_mismatch():
    # three ranks ran on to #10; at #6 rank 2 issued another count (its records say so)
    rows = [member(r, 11, 5, untimed(10, NOW - 2 * S), nranks=3, at=NOW - 2 * S) for r in range(3)]
    records = {
        r: {i: untimed(i, NOW - 5 * S, count=7 if (r, i) == (2, 6) else 1024) for i in range(11)}
        for r in range(3)
    }
    report = only(diagnose(snapshot(*rows), NOW, THRESHOLD, completed_ops=records_of(records)))
    assert report.verdict is Verdict.op_mismatch, report.summary
    assert report.op.index == 6 and culprit_ranks(report) == [2]
    # records that agree: the untimed ops are presumed done
    agree = {r: {i: untimed(i, NOW - 5 * S) for i in range(11)} for r in range(3)}
    assert diagnose(snapshot(*rows), NOW, THRESHOLD, completed_ops=records_of(agree)) == []


def test_untimed_ops_enqueued_behind_a_wait_elsewhere_wait_too():
    # rank 0 waits in a tensor-parallel all-reduce its peer (pid 1002) never issued, then
    # enqueued a data-parallel all-reduce untimed behind it; its data-parallel peer did too
    tp = [
        member(0, 6, 5, op(5, NOW - 5 * S, started=False), comm_id=TP, nranks=2),
        member(1, 5, 5, comm_id=TP, nranks=2, process=proc(2), at=NOW - 9 * S),
    ]
    dp = [
        member(0, 8, 7, untimed(7, NOW - 4 * S), comm_id=DP, nranks=2, at=NOW - 4 * S),
        member(1, 8, 7, untimed(7, NOW - 4 * S), comm_id=DP, nranks=2, process=proc(1)),
    ]
    reports = diagnose(snapshot(*tp, *dp), NOW, THRESHOLD)
    by_comm = {r.comm.comm_id: r for r in reports}
    assert set(by_comm) == {f"{TP:016x}", f"{DP:016x}"}, [r.summary for r in reports]
    assert by_comm[f"{TP:016x}"].verdict is Verdict.stuck_outside_nccl
    dp_report = by_comm[f"{DP:016x}"]
    assert dp_report.op.index == 7 and "follows from" in dp_report.summary


def test_a_rank_that_ran_on_past_a_peer_that_left_waits_in_the_op_after_its_last():
    # rank 1 destroyed the communicator after #34; rank 0 enqueued #35..#44 untimed
    waiter = member(0, 45, 30, untimed(44, NOW - 2 * S), nranks=2, at=NOW - 2 * S)
    left = member(
        1,
        35,
        35,
        None,
        nranks=2,
        state=shm_v1.CommState.FINALIZED,
        finalize_mono_ns=NOW - 3 * S,
        process=proc(1, exists=False),
    )
    snap = snapshot(waiter, left)
    view = dataclasses.replace(group_by_comm([waiter])[COMM], departed=(left,))
    snap = dataclasses.replace(snap, comms={}, torn_down={COMM: view})
    records = {0: {i: untimed(i, NOW - 3 * S + i * MS) for i in range(30, 45)}}
    report = only(diagnose(snap, NOW, THRESHOLD, completed_ops=records_of(records)))
    assert report.verdict is Verdict.rank_left, report.summary
    assert report.op.index == 35 and culprit_ranks(report) == [1]


def test_a_timed_op_shown_past_untimed_ones_a_peer_never_joined_waits_in_the_first():
    # rank 0's #5..#8 were untimed, #9 timed (the period's sample): its row shows #9, and
    # has completed nothing since #4; rank 1 never issued #5
    rows = [
        member(0, 10, 5, op(9, NOW - 2 * S, started=False), nranks=2, at=NOW - 2 * S),
        member(1, 5, 5, nranks=2, at=NOW - 9 * S),
    ]
    records = {0: {i: untimed(i, NOW - 3 * S + i * MS) for i in range(5, 9)}}
    report = only(diagnose(snapshot(*rows), NOW, THRESHOLD, completed_ops=records_of(records)))
    assert report.verdict is Verdict.stuck_outside_nccl, report.summary
    assert report.op.index == 5 and culprit_ranks(report) == [1]


def test_a_rank_that_died_after_an_untimed_op_its_peers_wait_in_is_named():
    # an OOM kill while its peers block: nothing says the dead rank ran its untimed op
    for dead in (proc(1, exists=False), proc(1, hb_age=25 * S)):
        rows = [
            waits_untimed(0, 5, 30 * S, nranks=2),
            waits_untimed(1, 5, 30 * S, nranks=2, process=dead),
        ]
        report = only(diagnose(snapshot(*rows), NOW, THRESHOLD))
        assert report.verdict is Verdict.process_died, report.summary
        assert report.op.index == 5 and culprit_ranks(report) == [1]


def test_a_rank_of_another_node_may_not_have_joined_an_untimed_op():
    # a node's view of a data-parallel group with one rank per node: only a master can tell
    row = waits_untimed(0, 5, 30 * S, comm_id=DP, nranks=2, nnodes=2)
    report = only(diagnose(snapshot(row), NOW, THRESHOLD))
    assert report.verdict is Verdict.inconclusive and report.op.index == 5


def test_an_untimed_op_enqueued_behind_a_healthy_wait_elsewhere_is_no_hang():
    # a timed all-reduce queued on a busy GPU for 0.5 s, an untimed embedding all-reduce
    # enqueued after it on both ranks: the embedding group's last proven op is a minute old,
    # but only its newest op is queued behind the wait, and that one is young
    tp = [member(r, 6, 5, op(5, NOW - S // 2, started=False), comm_id=TP, nranks=2) for r in (0, 1)]
    emb = [
        member(r, 10, 3, untimed(9, NOW - S // 3), comm_id=EMB, nranks=2, at=NOW - S // 3)
        for r in (0, 1)
    ]
    records = {r: {i: untimed(i, NOW - 60 * S + i * 6 * S) for i in range(10)} for r in (0, 1)}
    assert diagnose(snapshot(*tp, *emb), NOW, THRESHOLD, completed_ops=records_of(records)) == []


def test_receives_facing_each_other_behind_untimed_ops_elsewhere_blame_no_call_order():
    # a pipeline pair's batched exchange does not finish; each rank also has an untimed
    # all-reduce of another group in flight, whose row shows the newest (enqueued later):
    # an older untimed one may be what the exchange is queued behind
    pp = [
        member(r, 0, 0, p2p("Recv", 1 - r, age=5 * S), nranks=2, p2p_enqueued=4, p2p_completed=2)
        for r in (0, 1)
    ]
    dp = [
        member(r, 10, 3, untimed(9, NOW - 4 * S), comm_id=DP, nranks=2, at=NOW - 4 * S)
        for r in (0, 1)
    ]
    reports = diagnose(snapshot(*pp, *dp), NOW, THRESHOLD)
    report = only(reports)
    assert report.verdict is Verdict.all_joined_none_complete, report.summary
    assert report.culprits == []


def test_each_rows_records_are_read_once_however_many_rounds():
    # three communicators each queued behind the next take several rounds to settle, and
    # every round looks at the same windows: a window is thousands of records, read once
    a, b, c = 0xA, 0xB, 0xC
    rows = [
        member(0, 6, 5, op(5, NOW - 9 * S, started=False), comm_id=a, nranks=2),
        member(1, 5, 5, comm_id=a, nranks=2, process=proc(2), at=NOW - 9 * S),
        member(0, 8, 3, untimed(7, NOW - 8 * S), comm_id=b, nranks=2, at=NOW - 8 * S),
        member(1, 8, 3, untimed(7, NOW - 7 * S), comm_id=b, nranks=2, process=proc(3)),
        member(0, 9, 2, untimed(8, NOW - 6 * S), comm_id=c, nranks=2, process=proc(3)),
        member(1, 9, 2, untimed(8, NOW - 5 * S), comm_id=c, nranks=2, process=proc(4)),
    ]
    asked = []

    def counted(m):
        asked.append((m.process.pid, m.comm_id))
        return {i: untimed(i, NOW - 10 * S + i * MS) for i in range(10)}

    presume_untimed_done(snapshot(*rows), counted)
    assert asked and len(asked) == len(set(asked)), asked


def test_a_culprit_shown_in_an_untimed_exchange_is_the_root_of_its_own_hang():
    """Rank 3 never joins a tensor-parallel all-reduce its peer waits in (untimed); its
    pipeline peer's Send toward it waits too, and rank 3's row there shows an untimed Recv,
    perhaps long done. The all-reduce's report, which blames rank 3, is the root: the
    exchange's untimed Recv does not show rank 3 stuck in it."""
    r1, r2, r3 = proc(1), proc(2), proc(3)
    recv = dataclasses.replace(p2p("Recv", 0, index=4, age=6 * S), unproven=True)
    recv = dataclasses.replace(recv, channels_started=0, start_mono_ns=None)
    snap = snapshot(
        waits_untimed(0, 25, 5 * S, comm_id=TP, name="tp:23", nranks=2, process=r2),
        member(1, 25, 25, comm_id=TP, name="tp:23", nranks=2, process=r3),
        member(0, 0, 0, p2p("Send", 1, index=5, age=4 * S), comm_id=PP, name="pp:27",
               nranks=2, process=r1, p2p_enqueued=7, p2p_completed=5),
        member(1, 0, 0, recv, comm_id=PP, name="pp:27", nranks=2, process=r3,
               p2p_enqueued=5, p2p_completed=3),
    )  # fmt: skip
    reports = {r.comm.comm_name: r for r in diagnose(snap, NOW, THRESHOLD)}
    assert culprit_ranks(reports["tp:23"]) == [1], reports["tp:23"].summary
    roots = {g.root.comm.comm_name for g in group_reports(reports.values())}
    assert "tp:23" in roots, roots


def test_an_untimed_wait_a_report_blames_someone_for_still_holds_its_rank():
    """Rank 0 waits (untimed) in an all-reduce rank 1 never joined; its later all-reduce on
    another group, whose kernel never started, blames rank 0: it follows from the first."""
    r0, r1, r2 = proc(0), proc(1), proc(2)
    snap = snapshot(
        waits_untimed(0, 5, 4 * S, comm_id=TP, name="tp:1", nranks=2, process=r0),
        member(1, 5, 5, comm_id=TP, name="tp:1", nranks=2, process=r1),
        member(0, 1, 0, op(0, NOW - 3 * S, started=False), comm_id=DP, name="dp:2",
               nranks=2, process=r0),
        member(1, 1, 0, op(0, NOW - 3 * S), comm_id=DP, name="dp:2", nranks=2, process=r2),
    )  # fmt: skip
    reports = {r.comm.comm_name: r for r in diagnose(snap, NOW, THRESHOLD)}
    (group,) = group_reports(reports.values())
    assert group.root.comm.comm_name == "tp:1"
    [(behind, cause)] = group.consequences
    assert behind.comm.comm_name == "dp:2" and cause.link is CauseLink.culprit_waits


def _pod(rank: int, pid: int, namespace: int, job: str):
    return dataclasses.replace(proc(rank), pid=pid, pid_namespace=namespace, job_id=job)


@pytest.mark.parametrize("same_pid", [True, False], ids=["pids-shared", "control"])
def test_a_wait_in_another_pod_of_the_same_pid_holds_back_no_untimed_op(same_pid):
    """Pod A's embedding all-reduce, untimed, joined by both its ranks and quiet for 10 s:
    no hang. Beside it pod B (another PID namespace) waits 20 s in a tensor-parallel op its
    rank 1 never issued, in a process whose pid is pod A's rank 0's. That wait is another
    process's: pod A's untimed op is no hang either way."""
    emb, tp = 0x5555, 0x1111
    pod_a = [
        waits_untimed(r, 4, 10 * S, comm_id=emb, nranks=2, process=_pod(r, 7 + r, 111, "jobA"))
        for r in (0, 1)
    ]
    pod_b = [
        member(0, 6, 5, op(5, NOW - 20 * S, started=False), comm_id=tp, nranks=2,
               process=_pod(0, 7 if same_pid else 70, 222, "jobB"), at=NOW - 20 * S),
        member(1, 5, 5, comm_id=tp, nranks=2, process=_pod(1, 20, 222, "jobB"),
               at=NOW - 30 * S),
    ]  # fmt: skip
    reports = diagnose(snapshot(*pod_a, *pod_b), NOW, THRESHOLD)
    assert f"{emb:016x}" not in [r.comm.comm_id for r in reports], [r.summary for r in reports]
    assert f"{tp:016x}" in [r.comm.comm_id for r in reports]
