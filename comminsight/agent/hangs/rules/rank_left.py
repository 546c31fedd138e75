"""Rule: a rank left the communicator (destroyed, aborted, or its row gone) while its peers wait;
an op mismatch where its completed ops show another op at the index they wait in."""

from __future__ import annotations

import dataclasses

from comminsight.agent.hangs.finding import (
    CompletedOps,
    Finding,
    StepCycleOf,
    comm_label,
    majority_op,
    member_count,
    op_text,
    who,
)
from comminsight.agent.hangs.left_comm import MembersSeen, left_members
from comminsight.agent.hangs.odd_ranks import odd_ranks
from comminsight.agent.hangs.op_rhythm import rhythm_key
from comminsight.agent.hangs.rules.op_mismatch import rhythm_at
from comminsight.agent.state.snapshot import CommMember, CommView
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.hang_report_v1 import Verdict


def left_comm(
    comm: CommView,
    seen: MembersSeen,
    waiting: list[CommMember],
    now: int,
    threshold_ns: int,
    completed_ops: CompletedOps | None = None,
    step_cycles: StepCycleOf | None = None,
) -> Finding | None:
    """Ranks wait past the threshold in op N of a communicator some rank left for good
    (left_comm.left_for_good: not the teardown of a hang already there): no op of it can
    complete again, and the rank that left is where the hang starts (rank_left). Where its
    completed ops (the Profiler completes a finalized row's ops in flight) show it issued a
    different op N, and a majority or the rhythm says its op is the odd one, the verdict is
    op_mismatch: that mismatch is why it left (NCCL failed it)."""
    op_index = min(m.inflight.op_index for m in waiting)
    stuck = [m for m in waiting if m.inflight.op_index == op_index]
    wait_began = min(m.inflight.enqueue_mono_ns for m in stuck)
    left = left_members(comm, seen, op_index, wait_began, now, threshold_ns)
    if not left:
        return None
    op = majority_op([m.inflight for m in stuck], [m.size for m in stuck])
    wait_s = max(now - m.inflight.enqueue_mono_ns for m in waiting) / 1e9
    waiters = ", ".join(str(m.rank) for m in stuck)
    label = comm_label(comm)
    reasons = {
        m.rank: f"left {label}: {left_how(m, comm, now)}; last enqueued "
        f"#{m.coll_enqueued - 1}, while rank(s) {waiters} wait in #{op_index}"
        for m in left
    }
    view = dataclasses.replace(comm, departed=tuple(left))
    issued = {
        m.rank: o
        for m in left
        if completed_ops is not None and (o := completed_ops(m).get(op_index)) is not None
    }
    # rhythm_key, not signature: the in-flight view carries an all-reduce's root argument,
    # the completed window does not, and the same op must not read as a different one
    if any(rhythm_key(o) != rhythm_key(op) for o in issued.values()):
        ops = {**{m.rank: m.inflight for m in stuck}, **issued}
        weights = {m.rank: m.size for m in stuck if m.stands_for}
        decided = odd_ranks(
            ops, lambda: rhythm_at(comm, op_index, completed_ops, step_cycles), weights
        )
        if decided.odd and decided.odd <= set(issued):
            culprits = {
                r: f"issued {op_text(issued[r])} as op #{op_index} where rank(s) {waiters} "
                f"issued {op_text(decided.right)}, then {reasons[r]}"
                for r in sorted(decided.odd)
            }
            odd = [m for m in left if m.rank in decided.odd]
            return Finding(
                Verdict.op_mismatch,
                view,
                key=f"{op_index}:left",
                summary=f"op #{op_index} on {label} differs across ranks: {who(odd)} "
                f"{culprits[odd[0].rank]}",
                culprits=culprits,
                op=decided.right,
                joined_index=op_index,
                culprit_basis=decided.basis,
            )
        for r, o in issued.items():
            reasons[r] += f"; it issued {op_text(o)} as op #{op_index}"
    return Finding(
        Verdict.rank_left,
        view,
        key=f"{op_index}:left:r" + ".".join(str(m.rank) for m in left),
        summary=(
            f"{who(left)} {left_what(left, comm, label)}: {member_count(stuck)} rank(s) wait in "
            f"{op.func} #{op_index} (seq {op.seq}) for {wait_s:.1f} s, which can never complete"
        ),
        culprits=reasons,
        op=op,
        joined_index=op_index,
    )


def left_how(m: CommMember, comm: CommView, now: int) -> str:
    """What this node saw of a rank that left, and whether its process is still there."""
    p = m.process
    if m.state == shm_v1.CommState.FINALIZED:
        # "destroyed or aborted": the Profiler's finalize is called for both
        how = "it finalized the communicator (destroyed or aborted)"
        if m.finalize_mono_ns:
            how += f" {max(0, now - m.finalize_mono_ns) / 1e9:.1f} s ago"
        return how + (" and exited" if exited(m, comm) else f"; pid {p.pid} still runs")
    if not p.pid_exists:
        return f"its row is gone: pid {p.pid} ended"
    return "its row is gone from this node"


def left_what(left: list[CommMember], comm: CommView, label: str) -> str:
    """The summary's verb: what the ranks that left did, as far as all of them did it."""
    if any(m.state != shm_v1.CommState.FINALIZED for m in left):
        return f"left {label}"
    return f"finalized {label}" + (" and exited" if all(exited(m, comm) for m in left) else "")


def exited(m: CommMember, comm: CommView) -> bool:
    """Its process is over: its row says so, or its row is gone from this node (the Agent
    retires a region only once its process ended; a departed row is still there). A row gone
    from a master's view of another node says nothing of the kind (a late report)."""
    vanished = m.rank in comm.missing_ranks and all(d.rank != m.rank for d in comm.departed)
    return m.process.ended or (vanished and m.process.node_name is None)
