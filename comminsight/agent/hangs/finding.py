"""A verdict on one communicator before it is dressed as a report (Finding), the callbacks the
rules read the job's history through, and how findings name ranks, communicators and ops."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from comminsight.agent.hangs.op_rhythm import StepCycle
from comminsight.agent.state.rank_runs import RankRuns
from comminsight.agent.state.snapshot import CommMember, CommView, InflightOp, ProcessView
from comminsight.shm_reader import ROOTED_FUNCS
from comminsight_gen.models.hang_report_v1 import CulpritBasis, Verdict

MS = 1_000_000


@dataclass(frozen=True)
class Finding:
    """A verdict on one communicator before it is dressed as a HangReport."""

    verdict: Verdict
    comm: CommView
    key: str  # what makes the report id unique besides comm and verdict
    summary: str
    culprits: dict[int, str]  # comm rank -> reason
    op: InflightOp | None = None
    joined_index: int | None = None  # op index whose `joined` flag the evidence carries
    join_delays_ns: dict[int, int] | None = None
    threshold_ns: int | None = None
    cause: Finding | None = None  # the hang this one follows from (see follows_from)
    culprit_basis: CulpritBasis | None = None  # op_mismatch of collectives: how it was decided
    # the processes of culprits with no row in the communicator, where known (world_ranks)
    culprit_processes: dict[int, ProcessView] | None = None


# A member's recently completed collectives on its communicator, by op index
# (RecentOps.collectives).
CompletedOps = Callable[[CommMember], dict[int, InflightOp]]

# The Step cycle the Semantic Engine learned on a member's GPU for its communicator, if any
# (step_cycles.StepCycles).
StepCycleOf = Callable[[CommMember], StepCycle | None]


def waiting_members(comm: CommView, now: int, threshold_ns: int) -> list[CommMember]:
    """Members whose oldest collective in flight is older than the threshold. A member whose
    process ended waits for nothing: a job killed whole leaves every rank's last op in
    flight in its rows until the Agent retires the regions, and nobody waits for anybody."""
    return [
        m
        for m in comm.members
        if m.inflight is not None
        and m.inflight.is_coll
        and not m.process.ended
        and now - m.inflight.enqueue_mono_ns > threshold_ns
    ]


def majority_op(ops: list[InflightOp], sizes: list[int] | None = None) -> InflightOp:
    """The op as most ranks enqueued it (ties: the one of the lowest rank's order); sizes:
    the ranks each op stands for (a relay's class), one each by default."""
    counts: Counter = Counter()
    for op, size in zip(ops, sizes or [1] * len(ops), strict=True):
        counts[op.signature()] += size
    best = max(counts.values())
    return next(op for op in ops if counts[op.signature()] == best)


def who(members: list[CommMember]) -> str:
    """Each member by rank, node and pid; a class a relay passed up also by the ranks it
    stands for."""
    return ", ".join(
        f"rank {m.rank} ({m.process.node_name or m.process.host or '?'}, pid {m.process.pid})"
        + (
            f" and {len(m.stands_for)} more in its state ({rank_list(m.stands_for)})"
            if m.stands_for
            else ""
        )
        for m in members
    )


def member_count(members: list[CommMember]) -> int:
    """Ranks the members speak for (a class row, all of its class)."""
    return sum(m.size for m in members)


def rank_list(ranks) -> str:
    """A few ranks as a list; many as runs ('[0-6,8-99999]'): a list of 100,000 would be the
    whole report."""
    ranks = sorted(ranks)
    return str(ranks) if len(ranks) <= 16 else "[" + RankRuns.of(ranks).text() + "]"


def comm_label(comm: CommView) -> str:
    return comm_label_id(comm.comm_id, comm.name)


def comm_label_id(comm_id: int, name: str) -> str:
    return f"{name} ({comm_id:016x})" if name else f"comm {comm_id:016x}"


def op_text(op: InflightOp) -> str:
    # the in-flight view carries NCCL's root argument of every collective (0 for an all-reduce)
    rooted = op.peer is not None and (not op.is_coll or op.func in ROOTED_FUNCS)
    root = f", root {op.peer}" if rooted else ""
    return f"{op.func} seq {op.seq} (count {op.count}, {op.datatype}{root})"
