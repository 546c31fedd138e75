"""Rule: peers wait in op N past the threshold and some members never enqueued it: stuck outside
NCCL (nothing in flight anywhere) or not joined (still inside NCCL)."""

from __future__ import annotations

from comminsight.agent.hangs.finding import Finding, comm_label, comm_label_id, member_count, who
from comminsight.agent.state.snapshot import CommMember, CommView, InflightOp, NodeSnapshot
from comminsight_gen.models.hang_report_v1 import Verdict


def not_joined(
    comm: CommView,
    snapshot: NodeSnapshot,
    now: int,
    op_index: int,
    op: InflightOp,
    wait_s: float,
) -> Finding | None:
    absent = [m for m in comm.members if m.coll_enqueued <= op_index]
    if not absent:
        return None
    outside = [m for m in absent if outside_nccl(m, snapshot)]
    # The precise verdict: every missing rank sits in host code -> stuck outside NCCL.
    verdict = Verdict.stuck_outside_nccl if len(outside) == len(absent) else Verdict.rank_not_joined
    reasons = {m.rank: absent_reason(m, snapshot, now, op_index, wait_s) for m in absent}
    where = (
        "is stuck outside NCCL (nothing in flight on any communicator)"
        if verdict is Verdict.stuck_outside_nccl
        else "has not joined"
    )
    return Finding(
        verdict,
        comm,
        key=str(op_index),
        summary=(
            f"{who(absent)} {where}: {comm.ranks_present - member_count(absent)} rank(s) wait in "
            f"{op.func} #{op_index} (seq {op.seq}) on {comm_label(comm)} for {wait_s:.1f} s"
        ),
        culprits=reasons,
        op=op,
        joined_index=op_index,
    )


def outside_nccl(m: CommMember, snapshot: NodeSnapshot) -> bool:
    """No op in flight on any of the process's communicators, by the counters that move with
    every op (the row's inflight_count is refreshed only at heartbeats). Not a time test: the
    missing rank's last completion can come after its peers enqueued the op they wait in (the
    enqueue is asynchronous), so an idle-time rule gave a different verdict depending on which
    poll saw the hang first."""
    rows = snapshot.members_of_process(m.process) or [m]
    return all(
        r.coll_enqueued <= r.coll_completed and r.p2p_enqueued <= r.p2p_completed for r in rows
    )


def absent_reason(
    m: CommMember, snapshot: NodeSnapshot, now: int, op_index: int, wait_s: float
) -> str:
    last = f"last enqueued #{m.coll_enqueued - 1}" if m.coll_enqueued else "enqueued nothing"
    idle_s = (now - m.last_activity_mono_ns) / 1e9
    elsewhere = [
        r
        for r in snapshot.members_of_process(m.process)
        if r.comm_id != m.comm_id and r.inflight is not None
    ]
    state = (
        f"in flight on {comm_label_id(elsewhere[0].comm_id, elsewhere[0].name)} "
        f"#{elsewhere[0].inflight.op_index}"
        if elsewhere
        else f"nothing in flight, idle {idle_s:.1f} s"
    )
    return f"{last}; others are in #{op_index} for {wait_s:.1f} s; {state}"
