"""Hang diagnosis across the ranks of each communicator (docs/architecture.md §6), a pure
function.

`diagnose(snapshot, now_mono_ns, threshold_ns)` looks at every active communicator of a
`NodeSnapshot` and returns one `HangReport` per condition it finds; a healthy snapshot gives
none. Report ids depend only on the communicator, the verdict and the op index (or the ranks
blamed), so diagnosing the same hang on every poll names the same report.

Per communicator, the rules of verdict_rules.py in their order (the first that applies
wins); then findings that follow from another are linked to it (roots.py).

Before the verdicts, ops that were not timed on the GPU (GPU timing sampled) are presumed
done where nothing shows them still running, and a rank that ran on past the op it waits in
is put back in that op (untimed_ops). A kernel that hangs with every rank in it is then seen
only where it was timed: nothing tells an untimed one from a finished one.

Op indexes (comm_entry.coll_enqueued/inflight_op_index) identify an op across ranks; NCCL's
per-function seq is reported alongside as OpInfo.seq. ProgressMark.seq carries op indexes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from comminsight.agent.hangs.finding import (
    MS,
    CompletedOps,
    Finding,
    StepCycleOf,
    majority_op,
    waiting_members,
)
from comminsight.agent.hangs.finding_report import to_report
from comminsight.agent.hangs.left_comm import MembersSeen
from comminsight.agent.hangs.roots import follows_from
from comminsight.agent.hangs.untimed_ops import presume_untimed_done
from comminsight.agent.hangs.verdict_rules import (
    COLLECTIVE_RULES,
    IDLE_RULES,
    NO_HANG_RULES,
    TORN_DOWN_RULES,
    CommPass,
    Straggling,
    first_finding,
)
from comminsight.agent.state.snapshot import CommView, NodeSnapshot
from comminsight_gen.models.hang_report_v1 import HangReport


def diagnose(
    snapshot: NodeSnapshot,
    now_mono_ns: int,
    threshold_ns: int,
    *,
    history: Sequence[NodeSnapshot] = (),
    straggler_factor: float = 3.0,
    straggler_min_lag_ns: int = 50 * MS,
    straggler_min_ops: int = 5,
    now_real_ns: int | None = None,
    completed_ops: CompletedOps | None = None,
    step_cycles: StepCycleOf | None = None,
    members_seen: MembersSeen | None = None,
) -> list[HangReport]:
    """Reports for every communicator of `snapshot` that is hung or has a straggler.

    now_mono_ns is the snapshot host's CLOCK_MONOTONIC at diagnosis; threshold_ns the hang
    threshold (COMMINSIGHT_PROFILER_HANG_TIMEOUT_S); history earlier snapshots of the same
    node, oldest first, for the straggler verdict. completed_ops(member) gives a member's
    recently completed collectives by op index, where the caller keeps them (the Agent's
    recent-ops window), to find where ranks' sequences diverged. Both it and step_cycles
    (the engine's Step cycle of a member's GPU) give the job's rhythm, which names the odd
    rank where ranks disagree at an op and no majority decides. members_seen: the rows the
    caller has seen of each communicator's ranks (it must have noted `snapshot`); by default
    what history and snapshot show.
    """
    real = now_real_ns if now_real_ns is not None else _mono_to_real(snapshot, now_mono_ns)
    seen = members_seen or MembersSeen.from_snapshots([*history, snapshot])
    as_shown = snapshot
    snapshot = presume_untimed_done(snapshot, completed_ops)
    straggling = Straggling(history, straggler_factor, straggler_min_lag_ns, straggler_min_ops)

    def at(comm: CommView) -> CommPass:
        return comm_pass(
            comm,
            snapshot,
            as_shown,
            now_mono_ns,
            threshold_ns,
            completed_ops,
            step_cycles,
            seen,
            straggling,
        )

    findings = []
    for comm in sorted(snapshot.torn_down.values(), key=lambda c: c.comm_id):
        finding = first_finding(TORN_DOWN_RULES, at(comm))
        if finding:
            findings.append(finding)
    for comm in sorted(snapshot.comms.values(), key=lambda c: c.comm_id):
        finding = diagnose_comm(at(comm))
        if finding is not None:
            findings.append(finding)
    findings = follows_from(findings, snapshot)
    return [to_report(f, snapshot, now_mono_ns, real, threshold_ns) for f in findings]


def comm_pass(
    comm: CommView,
    snapshot: NodeSnapshot,
    as_shown: NodeSnapshot,
    now: int,
    threshold_ns: int,
    completed_ops: CompletedOps | None,
    step_cycles: StepCycleOf | None,
    seen: MembersSeen | None,
    straggling: Straggling,
) -> CommPass:
    """What the rules read of `comm` now: who waits past the threshold, and in which op."""
    p = CommPass(
        comm,
        snapshot,
        as_shown,
        now,
        threshold_ns,
        completed_ops,
        step_cycles,
        seen,
        straggling,
        waiting_members(comm, now, threshold_ns),
    )
    if not p.waiting:
        return p
    op_index = min(m.inflight.op_index for m in p.waiting)
    at_op = [m for m in p.waiting if m.inflight.op_index == op_index]
    return dataclasses.replace(
        p,
        op_index=op_index,
        stuck_op=majority_op([m.inflight for m in at_op], [m.size for m in at_op]),
        wait_s=max(now - m.inflight.enqueue_mono_ns for m in p.waiting) / 1e9,
    )


def diagnose_comm(p: CommPass) -> Finding | None:
    """The communicator's finding: by the collective rules where ranks wait in a collective,
    else by the idle ones; where neither finds a hang, whether a rank straggles."""
    rules = COLLECTIVE_RULES if p.waiting else IDLE_RULES
    return first_finding(rules, p) or first_finding(NO_HANG_RULES, p)


def _mono_to_real(snap: NodeSnapshot, mono: int) -> int:
    return max(0, snap.taken_real_ns + (mono - snap.taken_mono_ns))
