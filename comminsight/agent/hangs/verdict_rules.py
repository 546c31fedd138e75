"""The hang verdicts as data: which rule decides a communicator, in what order.

Per communicator, in this order (the first that applies wins, because later ones would only
be a less precise description of the same stall):
  process_died     a member's process is gone or its heartbeat is stale while peers wait
  rank_left / op_mismatch (left)
                   a rank left the communicator (its row FINALIZED: destroyed or aborted, or
                   its row seen here before and gone now) while peers wait, not as part of
                   the teardown of a hang already there (left_comm.left_for_good); op_mismatch
                   when its completed ops show it issued a different op at the index they wait
                   in
  op_mismatch      members in flight at the same op index disagree on func/count/type/root;
                   the culprits are the minority, or where no majority decides (two ranks, an
                   even split) the ranks that broke the job's rhythm (odd_ranks), or none
  stuck_outside_nccl / rank_not_joined
                   peers wait in op N past the threshold; some members never enqueued N.
                   stuck_outside_nccl when every such member has nothing in flight on any of
                   its communicators (it is in host code: the peers' wait past the threshold
                   is the evidence, its own idle time is reported); rank_not_joined when one
                   is still inside NCCL (behind on this communicator, or blocked in another
                   communicator's op)
  op_mismatch (diverged)
                   the ranks' recent records disagree at an op before the one they wait in
                   (a mismatched call that only the records show)
  all_joined_none_complete
                   every rank enqueued op N and all of them have it in flight past the threshold
  inconclusive     local members all wait past the threshold, the others are on other nodes
                   (never a rank this node saw in the communicator: that one left)
  comm_init_stuck  single-node communicator with fewer member rows than nranks, no op yet
  straggler        no hang, but a rank joins ops consistently later than its peers (needs
                   earlier snapshots: `history`)

Each rule is a function of its own module under rules/ that returns a Finding or nothing; the
tables below set their order (this list describes it). A rule is looked up in its module when
it runs, so a test can replace one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from comminsight.agent.hangs.finding import CompletedOps, Finding, StepCycleOf
from comminsight.agent.hangs.left_comm import MembersSeen
from comminsight.agent.hangs.rules import (
    all_joined,
    comm_init,
    diverged,
    not_joined,
    op_mismatch,
    p2p,
    process_died,
    rank_left,
    straggler,
)
from comminsight.agent.state.snapshot import CommMember, CommView, InflightOp, NodeSnapshot


@dataclass(frozen=True)
class Straggling:
    """When a rank counts as a straggler: it joins ops `factor` x its peers' median delay
    later, and at least `min_lag_ns`, over at least `min_ops` ops of `history`."""

    history: Sequence[NodeSnapshot]
    factor: float
    min_lag_ns: int
    min_ops: int


@dataclass(frozen=True)
class CommPass:
    """What every rule reads of one communicator in one pass."""

    comm: CommView
    snapshot: NodeSnapshot  # with untimed ops presumed done (untimed_ops)
    as_shown: NodeSnapshot  # as the Profilers showed it
    now: int
    threshold_ns: int
    completed_ops: CompletedOps | None
    step_cycles: StepCycleOf | None
    seen: MembersSeen | None
    straggling: Straggling
    # members whose collective is in flight past the threshold, the earliest op index they
    # wait in, the op as most of them enqueued it there, and the longest wait in seconds
    waiting: list[CommMember]
    op_index: int = -1
    stuck_op: InflightOp | None = None
    wait_s: float = 0.0


Rule = tuple[str, Callable[[CommPass], Finding | None]]

# Ranks wait in a collective past the threshold.
COLLECTIVE_RULES: tuple[Rule, ...] = (
    (
        "process_died",
        lambda p: process_died.process_died(p.comm, p.waiting, p.op_index, p.stuck_op, p.wait_s),
    ),
    (
        "rank_left",
        lambda p: (
            p.seen is not None
            and rank_left.left_comm(
                p.comm, p.seen, p.waiting, p.now, p.threshold_ns, p.completed_ops, p.step_cycles
            )
        ),
    ),
    (
        "op_mismatch",
        lambda p: op_mismatch.op_mismatch(
            p.comm, p.op_index, p.stuck_op, p.completed_ops, p.step_cycles
        ),
    ),
    (
        "not_joined",
        lambda p: not_joined.not_joined(
            p.comm, p.snapshot, p.now, p.op_index, p.stuck_op, p.wait_s
        ),
    ),
    (
        "diverged",
        lambda p: diverged.diverged(
            p.comm,
            p.waiting,
            p.op_index,
            p.stuck_op,
            p.wait_s,
            p.completed_ops,
            p.step_cycles,
        ),
    ),
    (
        "all_joined",
        lambda p: all_joined.all_joined(
            p.comm, p.waiting, p.op_index, p.stuck_op, p.wait_s, p.snapshot
        ),
    ),
)

# No rank waits in a collective past the threshold: what else holds a communicator.
IDLE_RULES: tuple[Rule, ...] = (
    ("p2p_wait", lambda p: p2p.p2p_wait(p.comm, p.snapshot, p.now, p.threshold_ns, p.as_shown)),
    ("comm_init_stuck", lambda p: comm_init.comm_init_stuck(p.comm, p.now, p.threshold_ns)),
)

# Where no rule above found a hang: a rank that keeps joining late.
NO_HANG_RULES: tuple[Rule, ...] = (
    (
        "straggler",
        lambda p: straggler.find_straggler(
            p.comm,
            [*p.straggling.history, p.snapshot],
            p.straggling.factor,
            p.straggling.min_lag_ns,
            p.straggling.min_ops,
        ),
    ),
)

# A torn-down communicator waits for nobody: only a rank still waiting on one that left.
TORN_DOWN_RULES: tuple[Rule, ...] = (
    (
        "rank_left",
        lambda p: (
            bool(p.waiting)
            and rank_left.left_comm(
                p.comm, p.seen, p.waiting, p.now, p.threshold_ns, p.completed_ops, p.step_cycles
            )
        ),
    ),
)


def first_finding(rules: tuple[Rule, ...], p: CommPass) -> Finding | None:
    """The finding of the first rule in `rules` that has one."""
    for _, rule in rules:
        finding = rule(p)
        if finding:
            return finding
    return None
