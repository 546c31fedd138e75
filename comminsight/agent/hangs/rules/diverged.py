"""Rule: the ranks' recent records disagree at an op before the one they wait in (a mismatched
call that only the records show)."""

from __future__ import annotations

import dataclasses

from comminsight.agent.hangs.finding import (
    CompletedOps,
    Finding,
    StepCycleOf,
    comm_label,
    op_text,
    who,
)
from comminsight.agent.hangs.odd_ranks import OddRanks, odd_ranks, rhythm_reason
from comminsight.agent.hangs.op_rhythm import Expectation, Unknown, comm_history, expected_op
from comminsight.agent.state.snapshot import CommMember, CommView, InflightOp
from comminsight.shm_reader import ROOTED_FUNCS
from comminsight_gen.models.hang_report_v1 import CulpritBasis, Verdict


def diverged(
    comm: CommView,
    waiting: list[CommMember],
    op_index: int,
    op: InflightOp,
    wait_s: float,
    completed_ops: CompletedOps | None = None,
    step_cycles: StepCycleOf | None = None,
) -> Finding | None:
    """Ranks wait in op N which every other rank has completed. Their N-th ops cannot be the
    same op: the ranks' collective sequences went apart earlier, in a mismatched call that
    NCCL completed anyway (a broadcast against an all-reduce of the same size does), and
    NCCL has been pairing different ops since. The progress counters cannot say which rank
    made the odd call; the ranks' completed ops (completed_ops) can: the first op index at
    which they differ, and there the rank whose op is the odd one out (odd_ranks)."""
    if comm.missing_ranks or not op.is_coll:
        return None
    stuck = [m for m in waiting if m.inflight.op_index == op_index]
    stuck_ids = {id(m) for m in stuck}
    others = [m for m in comm.members if id(m) not in stuck_ids]
    if not others or any(m.coll_completed <= op_index for m in others):
        return None
    summary = (
        f"{who(stuck)} wait(s) in {op.func} #{op_index} (seq {op.seq}) on "
        f"{comm_label(comm)} for {wait_s:.1f} s, which {who(others)} completed: the "
        "ranks' collective sequences diverged earlier (a mismatched call NCCL completed)"
    )
    culprits: dict[int, str] = {}
    first = (
        first_difference(comm, _with_waited_op(completed_ops, stuck, op_index), step_cycles)
        if completed_ops is not None
        else None
    )
    if first is None:
        summary += "; no completed ops of the ranks show where: no culprit named"
        basis = CulpritBasis.undecided
    else:
        index, ops, decided = first
        basis = decided.basis
        summary += f"; they first differ at op #{index}: " + ", ".join(
            f"rank {rank} {op_text(o)}" for rank, o in sorted(ops.items())
        )
        if decided.basis is CulpritBasis.undecided:
            summary += f"; {decided.why}: no culprit named"
        else:  # the report's op is then the odd call's counterpart: where it went wrong
            op = decided.right
            culprits = {
                rank: (
                    f"at op #{index} " + rhythm_reason(ops[rank], decided, ops)
                    if decided.basis is CulpritBasis.rhythm
                    else f"issued {op_text(ops[rank])} at op #{index} where the other ranks "
                    f"issued {op_text(op)}"
                )
                for rank in sorted(decided.odd)
            }
    return Finding(
        Verdict.op_mismatch,
        comm,
        key=str(op_index),
        summary=summary,
        culprits=culprits,
        op=op,
        joined_index=op_index,
        culprit_basis=basis,
    )


def _with_waited_op(
    completed_ops: CompletedOps, stuck: list[CommMember], op_index: int
) -> CompletedOps:
    """The stuck ranks' windows with the op they wait in as their op op_index: the odd call
    can be that very op (a rank issued it with another count, NCCL completed it on the other
    rank's side), and once the other rank has moved on only this pairing shows it. Added to
    a window that holds the op before it, in the window's form: a collective's root only
    where the function has one."""
    waited = {
        id(m): dataclasses.replace(
            m.inflight,
            peer=None
            if m.inflight.is_coll and m.inflight.func not in ROOTED_FUNCS
            else m.inflight.peer,
        )
        for m in stuck
    }

    def window(m: CommMember) -> dict[int, InflightOp]:
        ops = completed_ops(m)
        # only right after the rank's own completed ops: a window that ends earlier (or is
        # empty: a rank of another node) would compare the waited op alone and let the other
        # side's history decide
        if id(m) in waited and op_index - 1 in ops:
            return {**ops, op_index: waited[id(m)]}
        return ops

    return window


def first_difference(
    comm: CommView, completed_ops: CompletedOps, step_cycles: StepCycleOf | None = None
) -> tuple[int, dict[int, InflightOp], OddRanks] | None:
    """(op index, each rank's op there, which ranks are odd) at the first index every
    member's window holds and where their ops differ; None when the windows show no
    difference. The odd ranks: a minority that differs from the rest; between two ranks (or
    an even split), the ranks that broke the rhythm of the ops before that index; none when
    the rhythm cannot tell."""
    windows = {m.rank: completed_ops(m) for m in comm.members}
    if not windows or any(not w for w in windows.values()):
        return None
    shared = set.intersection(*(set(w) for w in windows.values()))
    for index in sorted(shared):
        ops = {rank: w[index] for rank, w in windows.items()}
        if len({o.signature() for o in ops.values()}) == 1:
            continue

        def expect(index=index) -> Expectation | Unknown:
            history = comm_history(windows.values(), index)
            cycles = [step_cycles(m) for m in comm.members] if step_cycles is not None else []
            return expected_op(history, index, cycles)

        weights = {m.rank: m.size for m in comm.members if m.stands_for}
        return index, ops, odd_ranks(ops, expect, weights)
    return None
