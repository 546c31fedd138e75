"""Rule: members in flight at the same op index disagree on function, count, type or root."""

from __future__ import annotations

from comminsight.agent.hangs.finding import (
    CompletedOps,
    Finding,
    StepCycleOf,
    comm_label,
    op_text,
    who,
)
from comminsight.agent.hangs.odd_ranks import odd_ranks, rhythm_reason
from comminsight.agent.hangs.op_rhythm import Expectation, Unknown, comm_history, expected_op
from comminsight.agent.state.snapshot import CommMember, CommView, InflightOp
from comminsight_gen.models.hang_report_v1 import CulpritBasis, Verdict


def op_mismatch(
    comm: CommView,
    op_index: int,
    majority: InflightOp,
    completed_ops: CompletedOps | None = None,
    step_cycles: StepCycleOf | None = None,
) -> Finding | None:
    at_index = [
        m
        for m in comm.members
        if m.inflight is not None and m.inflight.is_coll and m.inflight.op_index == op_index
    ]
    if all(m.inflight.signature() == majority.signature() for m in at_index):
        return None
    ops = {m.rank: m.inflight for m in at_index}
    weights = {m.rank: m.size for m in at_index if m.stands_for}
    decided = odd_ranks(ops, lambda: rhythm_at(comm, op_index, completed_ops, step_cycles), weights)
    label = f"op #{op_index} on {comm_label(comm)} differs across ranks"
    if decided.basis is CulpritBasis.undecided:
        return Finding(
            Verdict.op_mismatch,
            comm,
            key=str(op_index),
            summary=f"{label}: {_sides(at_index)}; {decided.why}: no culprit named",
            culprits={},
            op=majority,  # the lowest rank's: no side is known to be right
            joined_index=op_index,
            culprit_basis=decided.basis,
        )
    odd = [m for m in at_index if m.rank in decided.odd]
    if decided.basis is CulpritBasis.rhythm:
        culprits = {m.rank: rhythm_reason(m.inflight, decided, ops) for m in odd}
        label += " and no majority decides"
    else:
        culprits = {m.rank: mismatch_reason(m.inflight, decided.right) for m in odd}
    return Finding(
        Verdict.op_mismatch,
        comm,
        key=str(op_index),
        summary=f"{label}: {who(odd)} {culprits[odd[0].rank]}",
        culprits=culprits,
        op=decided.right,
        joined_index=op_index,
        culprit_basis=decided.basis,
    )


def rhythm_at(
    comm: CommView,
    op_index: int,
    completed_ops: CompletedOps | None,
    step_cycles: StepCycleOf | None,
) -> Expectation | Unknown:
    """What the communicator's rhythm expects at op_index, from the members' completed ops
    and their GPUs' Step cycles, where the caller keeps them."""
    if completed_ops is None:
        return Unknown("the Agent keeps no completed ops to learn the job's rhythm from")
    history = comm_history((completed_ops(m) for m in comm.members), op_index)
    cycles = [step_cycles(m) for m in comm.members] if step_cycles is not None else []
    return expected_op(history, op_index, cycles)


def _sides(members: list[CommMember]) -> str:
    """Each op the members issued, with the ranks that issued it."""
    sides: dict[tuple, list[CommMember]] = {}
    for m in members:
        sides.setdefault(m.inflight.signature(), []).append(m)
    return "; ".join(f"{who(ms)} issued {op_text(ms[0].inflight)}" for ms in sides.values())


def mismatch_reason(mine: InflightOp, majority: InflightOp) -> str:
    diffs = [
        f"{name} {getattr(mine, attr)} vs {getattr(majority, attr)}"
        for name, attr in (
            ("func", "func"),
            ("count", "count"),
            ("datatype", "datatype"),
            ("root/peer", "peer"),
        )
        if getattr(mine, attr) != getattr(majority, attr)
    ]
    return f"issued {', '.join(diffs)} (the other ranks)"
