"""Rule: a member's process is gone, or its heartbeat is stale, while its peers wait."""

from __future__ import annotations

from comminsight.agent.hangs.finding import Finding, comm_label, member_count, who
from comminsight.agent.state.snapshot import CommMember, CommView, InflightOp
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.hang_report_v1 import Verdict


def process_died(
    comm: CommView, waiting: list[CommMember], op_index: int, op: InflightOp, wait_s: float
) -> Finding | None:
    # Only members that still owe op N matter: a dead rank that completed it blocks no one.
    owing = [m for m in comm.members if not m.process.alive and m.coll_completed <= op_index]
    # One that joined op N and went silent in it (its heartbeat stale: frozen, or on a node
    # whose reports stopped) waited like the others: where a live rank never joined N, that
    # rank is where the hang starts (not_joined), and it stays so when the silence comes.
    dead = [m for m in owing if m.coll_enqueued <= op_index]
    if not dead and not any(m.process.alive and m.coll_enqueued <= op_index for m in comm.members):
        dead = owing
    if not dead:
        return None
    reasons = {m.rank: death_reason(m) for m in dead}
    waiters = [m for m in waiting if m.process.alive]
    return Finding(
        Verdict.process_died,
        comm,
        key=f"{op_index}:r" + ".".join(str(m.rank) for m in dead),
        summary=(
            f"{who(dead)} died ({reasons[dead[0].rank]}); {member_count(waiters)} rank(s) wait in "
            f"{op.func} #{op_index} (seq {op.seq}) on {comm_label(comm)} for {wait_s:.1f} s"
        ),
        culprits=reasons,
        op=op,
        joined_index=op_index,
    )


def death_reason(m: CommMember) -> str:
    p = m.process
    why = (
        f"pid {p.pid} is gone"
        if not p.pid_exists
        else f"pid {p.pid} closed its Profiler region (it is exiting)"
        if p.file_state == shm_v1.FileState.CLOSED
        else f"heartbeat stale for {p.heartbeat_age_ns / 1e9:.1f} s"
    )
    return f"{why}; last enqueued #{m.coll_enqueued - 1}, completed #{m.coll_completed - 1}"
