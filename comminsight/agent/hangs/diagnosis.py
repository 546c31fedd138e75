"""Hang diagnosis across the ranks of each communicator (docs/architecture.md §6), a pure
function.

`diagnose(snapshot, now_mono_ns, threshold_ns)` looks at every active communicator of a
`NodeSnapshot` and returns one `HangReport` per condition it finds; a healthy snapshot gives
none. Report ids depend only on the communicator, the verdict and the op index (or the ranks
blamed), so diagnosing the same hang on every poll names the same report.

Per communicator, in order (the first that applies wins, because later ones would only be a
less precise description of the same stall):
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
  all_joined_none_complete
                   every rank enqueued op N and all of them have it in flight past the threshold
  inconclusive     local members all wait past the threshold, the others are on other nodes
                   (never a rank this node saw in the communicator: that one left)
  comm_init_stuck  single-node communicator with fewer member rows than nranks, no op yet
  straggler        no hang, but a rank joins ops consistently later than its peers (needs
                   earlier snapshots: `history`)

Before the verdicts, ops that were not timed on the GPU (GPU timing sampled) are presumed
done where nothing shows them still running, and a rank that ran on past the op it waits in
is put back in that op (untimed_ops). A kernel that hangs with every rank in it is then seen
only where it was timed: nothing tells an untimed one from a finished one.

Op indexes (comm_entry.coll_enqueued/inflight_op_index) identify an op across ranks; NCCL's
per-function seq is reported alongside as OpInfo.seq. ProgressMark.seq carries op indexes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from msgspec import UNSET

from comminsight.agent.core.proxy_evidence import hang_evidence
from comminsight.agent.core.rank_runs import RankRuns
from comminsight.agent.core.snapshot import CommMember, CommView, InflightOp, NodeSnapshot
from comminsight.agent.hangs.left_comm import MembersSeen, left_members
from comminsight.agent.hangs.odd_ranks import OddRanks, odd_ranks, rhythm_reason
from comminsight.agent.hangs.op_rhythm import (
    Expectation,
    StepCycle,
    Unknown,
    comm_history,
    expected_op,
    rhythm_key,
)
from comminsight.agent.hangs.untimed_ops import presume_untimed_done
from comminsight.shm_reader import ROOTED_FUNCS
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.hang_report_v1 import (
    CommRef,
    Culprit,
    CulpritBasis,
    HangReport,
    InflightEvidence,
    OpClass,
    OpInfo,
    ProcessState,
    ProgressMark,
    RankEvidence,
    ReportStatus,
    Severity,
    Verdict,
)

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


# ---- entry point ----


# A member's recently completed collectives on its communicator, by op index
# (RecentOps.collectives).
CompletedOps = Callable[[CommMember], dict[int, InflightOp]]
# The Step cycle the Semantic Engine learned on a member's GPU for its communicator, if any
# (step_cycles.StepCycles).
StepCycleOf = Callable[[CommMember], StepCycle | None]


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
    findings = []
    for comm in sorted(snapshot.torn_down.values(), key=lambda c: c.comm_id):
        # a teardown waits for nobody: only a rank still waiting on one that left is a hang
        waiting = waiting_members(comm, now_mono_ns, threshold_ns)
        finding = waiting and left_comm(
            comm, seen, waiting, now_mono_ns, threshold_ns, completed_ops, step_cycles
        )
        if finding:
            findings.append(finding)
    for comm in sorted(snapshot.comms.values(), key=lambda c: c.comm_id):
        finding = diagnose_comm(
            comm, snapshot, now_mono_ns, threshold_ns, completed_ops, step_cycles, seen, as_shown
        ) or find_straggler(
            comm,
            [*history, snapshot],
            straggler_factor,
            straggler_min_lag_ns,
            straggler_min_ops,
        )
        if finding is not None:
            findings.append(finding)
    findings = follows_from(findings, snapshot)
    return [to_report(f, snapshot, now_mono_ns, real, threshold_ns) for f in findings]


# Verdicts that name the rank a hang starts from.
ROOT_VERDICTS = (
    Verdict.process_died,
    Verdict.op_mismatch,
    Verdict.rank_left,
    Verdict.rank_not_joined,
    Verdict.stuck_outside_nccl,
)


def follows_from(findings: list[Finding], snapshot: NodeSnapshot) -> list[Finding]:
    """One stuck rank blocks its peers' streams, and their other communicators hang behind
    them. A root is a finding that names culprits which do not themselves wait in another
    finding's communicator (stuck outside NCCL, dead, a mismatched call). A finding follows
    from a root (its `cause`) when its culprits all wait in the root's communicator, or, for
    a finding without culprits, when a rank waiting in it had been waiting in the root's op
    since before (it got stuck there first)."""
    waits_in = {id(f): _culprits_wait_in(f, findings, snapshot) for f in findings}
    # A mismatched call starts a hang even where no one can tell whose call it was.
    roots = [
        f
        for f in findings
        if f.verdict in ROOT_VERDICTS
        and (f.culprits or f.verdict is Verdict.op_mismatch)
        and waits_in[id(f)] is None
    ]
    out = []
    for f in findings:
        cause = None
        if f.culprits and any(waits_in[id(f)] is r for r in roots):
            cause = waits_in[id(f)]
        elif not f.culprits and f.verdict is not Verdict.straggler:
            cause = _waited_there_first(f, roots, snapshot)
        out.append(dataclasses.replace(f, cause=cause) if cause is not None else f)
    return out


def _culprits_wait_in(
    f: Finding, findings: list[Finding], snapshot: NodeSnapshot
) -> Finding | None:
    """The other finding whose communicator every culprit of `f` has an op in flight in."""
    members = {m.rank: m for m in f.comm.members}
    found = None
    for rank in f.culprits:
        m = members.get(rank)
        if m is None:
            return None
        rows = snapshot.members_of_process(m.process.pid, m.process.node_name)
        busy = {r.comm_id for r in rows if r.inflight is not None and r.comm_id != f.comm.comm_id}
        there = [g for g in findings if g is not f and g.comm.comm_id in busy]
        if not there or (found is not None and there[0] is not found):
            return None
        found = there[0]
    return found


def _waited_there_first(f: Finding, roots: list[Finding], snapshot: NodeSnapshot):
    for m in f.comm.members:
        if m.inflight is None:
            continue
        rows = snapshot.members_of_process(m.process.pid, m.process.node_name)
        for r in roots:
            for row in rows:
                if (
                    row.comm_id == r.comm.comm_id
                    and row.inflight is not None
                    and row.inflight.enqueue_mono_ns < m.inflight.enqueue_mono_ns
                ):
                    return r
    return None


def diagnose_comm(
    comm: CommView,
    snapshot: NodeSnapshot,
    now: int,
    threshold_ns: int,
    completed_ops: CompletedOps | None = None,
    step_cycles: StepCycleOf | None = None,
    seen: MembersSeen | None = None,
    as_shown: NodeSnapshot | None = None,
) -> Finding | None:
    """as_shown: the snapshot before untimed ops were presumed done (diagnose), where a
    point-to-point verdict that would name culprits asks what else their ranks may wait in."""
    waiting = waiting_members(comm, now, threshold_ns)
    if not waiting:
        return p2p_wait(comm, snapshot, now, threshold_ns, as_shown) or comm_init_stuck(
            comm, now, threshold_ns
        )
    op_index = min(m.inflight.op_index for m in waiting)
    stuck_op = majority_op(
        [m.inflight for m in waiting if m.inflight.op_index == op_index],
        [m.size for m in waiting if m.inflight.op_index == op_index],
    )
    wait_s = max(now - m.inflight.enqueue_mono_ns for m in waiting) / 1e9
    return (
        process_died(comm, waiting, op_index, stuck_op, wait_s)
        or (
            seen is not None
            and left_comm(comm, seen, waiting, now, threshold_ns, completed_ops, step_cycles)
        )
        or op_mismatch(comm, op_index, stuck_op, completed_ops, step_cycles)
        or not_joined(comm, snapshot, now, op_index, stuck_op, wait_s)
        or diverged(comm, waiting, op_index, stuck_op, wait_s, completed_ops, step_cycles)
        or all_joined(comm, waiting, op_index, stuck_op, wait_s)
    )


# ---- verdicts ----


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
            f"{_who(dead)} died ({reasons[dead[0].rank]}); {_count(waiters)} rank(s) wait in "
            f"{op.func} #{op_index} (seq {op.seq}) on {_comm_label(comm)} for {wait_s:.1f} s"
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
    label = _comm_label(comm)
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
                r: f"issued {_op_text(issued[r])} as op #{op_index} where rank(s) {waiters} "
                f"issued {_op_text(decided.right)}, then {reasons[r]}"
                for r in sorted(decided.odd)
            }
            odd = [m for m in left if m.rank in decided.odd]
            return Finding(
                Verdict.op_mismatch,
                view,
                key=f"{op_index}:left",
                summary=f"op #{op_index} on {label} differs across ranks: {_who(odd)} "
                f"{culprits[odd[0].rank]}",
                culprits=culprits,
                op=decided.right,
                joined_index=op_index,
                culprit_basis=decided.basis,
            )
        for r, o in issued.items():
            reasons[r] += f"; it issued {_op_text(o)} as op #{op_index}"
    return Finding(
        Verdict.rank_left,
        view,
        key=f"{op_index}:left:r" + ".".join(str(m.rank) for m in left),
        summary=(
            f"{_who(left)} {left_what(left, comm, label)}: {_count(stuck)} rank(s) wait in "
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
    label = f"op #{op_index} on {_comm_label(comm)} differs across ranks"
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
        summary=f"{label}: {_who(odd)} {culprits[odd[0].rank]}",
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
    return "; ".join(f"{_who(ms)} issued {_op_text(ms[0].inflight)}" for ms in sides.values())


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
            f"{_who(absent)} {where}: {comm.ranks_present - _count(absent)} rank(s) wait in "
            f"{op.func} #{op_index} (seq {op.seq}) on {_comm_label(comm)} for {wait_s:.1f} s"
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
    rows = snapshot.members_of_process(m.process.pid, m.process.node_name) or [m]
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
        for r in snapshot.members_of_process(m.process.pid, m.process.node_name)
        if r.comm_id != m.comm_id and r.inflight is not None
    ]
    state = (
        f"in flight on {_comm_label_id(elsewhere[0].comm_id, elsewhere[0].name)} "
        f"#{elsewhere[0].inflight.op_index}"
        if elsewhere
        else f"nothing in flight, idle {idle_s:.1f} s"
    )
    return f"{last}; others are in #{op_index} for {wait_s:.1f} s; {state}"


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
        f"{_who(stuck)} wait(s) in {op.func} #{op_index} (seq {op.seq}) on "
        f"{_comm_label(comm)} for {wait_s:.1f} s, which {_who(others)} completed: the "
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
            f"rank {rank} {_op_text(o)}" for rank, o in sorted(ops.items())
        )
        if decided.basis is CulpritBasis.undecided:
            summary += f"; {decided.why}: no culprit named"
        else:  # the report's op is then the odd call's counterpart: where it went wrong
            op = decided.right
            culprits = {
                rank: (
                    f"at op #{index} " + rhythm_reason(ops[rank], decided, ops)
                    if decided.basis is CulpritBasis.rhythm
                    else f"issued {_op_text(ops[rank])} at op #{index} where the other ranks "
                    f"issued {_op_text(op)}"
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


def _op_text(op: InflightOp) -> str:
    # the in-flight view carries NCCL's root argument of every collective (0 for an all-reduce)
    rooted = op.peer is not None and (not op.is_coll or op.func in ROOTED_FUNCS)
    root = f", root {op.peer}" if rooted else ""
    return f"{op.func} seq {op.seq} (count {op.count}, {op.datatype}{root})"


def all_joined(
    comm: CommView, waiting: list[CommMember], op_index: int, op: InflightOp, wait_s: float
) -> Finding | None:
    if comm.missing_ranks and comm.nnodes == 1:
        return uninitialized(comm, op_index, op, wait_s)
    if comm.missing_ranks:  # the rest are on other nodes: only the master can conclude
        return inconclusive(comm, op_index, op, wait_s)
    if len(waiting) < len(comm.members):
        return None  # someone is not stuck yet: wait for the next poll
    # A member whose kernel never started while the others' did points at its GPU/launch.
    unstarted = [m for m in waiting if m.inflight.start_mono_ns is None]
    culprits = (
        {m.rank: "kernel never started while the other ranks' did" for m in unstarted}
        if 0 < len(unstarted) < len(waiting)
        else {}
    )
    channels = ", ".join(
        f"r{m.rank} {m.inflight.channels_started}/{m.inflight.channels_stopped}"
        f"/{m.inflight.n_channels}"
        for m in waiting
    )
    return Finding(
        Verdict.all_joined_none_complete,
        comm,
        key=str(op_index),
        summary=(
            f"all {comm.nranks} ranks joined {op.func} #{op_index} (seq {op.seq}) on "
            f"{_comm_label(comm)} and none completed in {wait_s:.1f} s "
            f"(channels started/stopped/total: {channels})"
        ),
        culprits=culprits,
        op=op,
        joined_index=op_index,
    )


def uninitialized(comm: CommView, op_index: int, op: InflightOp, wait_s: float) -> Finding:
    """Ranks of a single-node communicator with no row here that never had one have not
    initialized it (it is created at first use): they have not joined the op the others
    wait in. Unless a collective of it completed: that took every rank, so they had
    initialized it and their rows went (an Agent that started after they left never saw
    them)."""
    missing = comm.missing_ranks
    what = (
        f"have no row for {_comm_label(comm)} on this node, though they initialized it"
        if completed_everywhere(comm)
        else f"have not initialized {_comm_label(comm)}"
    )
    return Finding(
        Verdict.rank_not_joined,
        comm,
        key=str(op_index),
        summary=(
            f"ranks {_runs(missing)} {what}: {comm.ranks_present} rank(s) wait in {op.func} "
            f"#{op_index} (seq {op.seq}) for {wait_s:.1f} s"
        ),
        culprits={r: no_row_reason(comm) for r in missing},
        op=op,
        joined_index=op_index,
    )


def completed_everywhere(comm: CommView) -> int:
    """How many of the communicator's collectives completed, by its rows here: each took
    every rank, so every rank had initialized the communicator when one did."""
    return max((m.coll_completed for m in comm.members), default=0)


def no_row_reason(comm: CommView) -> str:
    """Why a rank of a single-node communicator has no row here, as far as the rows that are
    here tell."""
    done = completed_everywhere(comm)
    if not done:
        return "has not initialized the communicator (no row on this node)"
    return (
        f"has no row on this node, though it initialized the communicator (op #{done - 1} "
        "completed on every rank): its process ended and its region was retired, or its "
        "Profiler could not track the communicator"
    )


def inconclusive(comm: CommView, op_index: int, op: InflightOp, wait_s: float) -> Finding:
    return Finding(
        Verdict.inconclusive,
        comm,
        key=str(op_index),
        summary=(
            f"{comm.ranks_present} local rank(s) wait in {op.func} #{op_index} (seq {op.seq}) "
            f"on {_comm_label(comm)} for {wait_s:.1f} s; ranks {comm.missing_ranks} are on "
            "other nodes"
        ),
        culprits={},
        op=op,
        joined_index=op_index,
    )


def p2p_wait(
    comm: CommView,
    snapshot: NodeSnapshot,
    now: int,
    threshold_ns: int,
    as_shown: NodeSnapshot | None = None,
) -> Finding | None:
    """A rank waits past the threshold in a Send or Recv (a pipeline stage waiting for its
    neighbour's activations, say). Its peer is the rank to look at, and if that peer itself
    waits in a point-to-point op on this communicator, the peer's peer, down the chain of
    waits: the rank at the end of it is where the hang starts (dead, in host code, or busy in
    another communicator), and a chain that comes back on itself is a cycle of ranks that
    all wait to receive (or all wait to send): a mismatched call order.

    Point-to-point op indexes count each rank's own sends and receives, so unlike
    collectives they say nothing across ranks; the verdict rests on what the peers are
    doing now."""
    waits = [
        m
        for m in comm.members
        if m.inflight is not None
        and not m.inflight.is_coll
        and m.inflight.peer is not None
        and not m.inflight.unproven  # untimed: nothing shows it still runs
        and not m.process.ended  # see waiting_members
        and now - m.inflight.enqueue_mono_ns > threshold_ns
    ]
    if not waits:
        return None
    first = min(waits, key=lambda m: (m.inflight.enqueue_mono_ns, m.rank))
    op = first.inflight
    wait_s = (now - op.enqueue_mono_ns) / 1e9
    by_rank = {m.rank: m for m in comm.members}
    chain = [first]
    while True:
        m = chain[-1]
        peer = by_rank.get(m.inflight.peer)
        if peer is None or peer.inflight is None or peer.inflight.is_coll:
            break
        if peer in chain:
            cycle = chain[chain.index(peer) :]
            if len(cycle) == 2 and {x.inflight.func for x in cycle} == {"Send", "Recv"}:
                # a Send and its Recv, both posted: the transfer itself does not finish
                return p2p_stalled(comm, cycle, now, threshold_ns)
            # a batched exchange that cannot finish: behind another op, or with a rank whose
            # process ended (its other ops are no longer in view) - not a proven call order
            if all(m.p2p_enqueued - m.p2p_completed > 1 for m in cycle) and any(
                # an untimed op of another communicator, presumed done, may still be what
                # it waits in first: no call order is proven wrong while it may
                m.process.ended or blocked_elsewhere(m, as_shown or snapshot)
                for m in cycle
            ):
                return p2p_exchange(comm, cycle, op)
            return p2p_cycle(comm, cycle, op)
        chain.append(peer)
    last = chain[-1]
    path = " -> ".join(f"rank {m.rank} ({m.inflight.func})" for m in chain)
    culprit_rank = last.inflight.peer
    peer = by_rank.get(culprit_rank)
    head = (
        f"rank {first.rank} waits in {op.func} {'from' if op.func == 'Recv' else 'to'} rank "
        f"{op.peer} on {_comm_label(comm)} for {wait_s:.1f} s"
        + (f" (waits: {path} -> rank {culprit_rank})" if len(chain) > 1 else "")
    )
    if peer is None:
        if comm.nnodes > 1:
            return Finding(
                Verdict.inconclusive,
                comm,
                key=f"p2p:{first.rank}:{op.op_index}",
                summary=f"{head}; rank {culprit_rank} is on another node",
                culprits={},
                op=op,
            )
        why, verdict = no_row_reason(comm), None
    elif not peer.process.alive:
        why, verdict = death_reason(peer), Verdict.process_died
    elif outside_nccl(peer, snapshot):
        idle_s = (now - peer.last_activity_mono_ns) / 1e9
        why = (
            f"has no op in flight toward rank {last.rank} (nothing in flight on any "
            f"communicator, idle {idle_s:.1f} s)"
        )
        verdict = Verdict.stuck_outside_nccl
    elif peer.inflight is not None:  # a collective of this communicator
        why = (
            f"waits in {peer.inflight.func} #{peer.inflight.op_index} on this communicator "
            f"instead of the {'Send' if last.inflight.func == 'Recv' else 'Recv'} rank "
            f"{last.rank} waits for"
        )
        verdict = None
    else:
        elsewhere = [
            r
            for r in snapshot.members_of_process(peer.process.pid, peer.process.node_name)
            if r.comm_id != comm.comm_id and r.inflight is not None
        ]
        where = (
            f"{_comm_label_id(elsewhere[0].comm_id, elsewhere[0].name)} "
            f"#{elsewhere[0].inflight.op_index}"
            if elsewhere
            else "another communicator"
        )
        why = f"has no op in flight toward rank {last.rank}: in flight on {where}"
        verdict = None
    return Finding(
        verdict or Verdict.rank_not_joined,
        comm,
        key=f"p2p:{first.rank}:{op.op_index}",
        summary=f"{head}; rank {culprit_rank} {why.split(';')[0]}",
        culprits={culprit_rank: why},
        op=op,
    )


def p2p_stalled(
    comm: CommView, pair: list[CommMember], now: int, threshold_ns: int
) -> Finding | None:
    if any(now - m.inflight.enqueue_mono_ns <= threshold_ns for m in pair):
        return None  # the second side has just posted: give the transfer its time
    send = next(m for m in pair if m.inflight.func == "Send")
    recv = next(m for m in pair if m.inflight.func == "Recv")
    if (send.inflight.count, send.inflight.datatype) != (
        recv.inflight.count,
        recv.inflight.datatype,
    ):
        return Finding(
            Verdict.op_mismatch,
            comm,
            key=f"p2p:{send.rank}.{recv.rank}",
            summary=(
                f"rank {send.rank} sends {send.inflight.count} {send.inflight.datatype} to "
                f"rank {recv.rank}, which receives {recv.inflight.count} "
                f"{recv.inflight.datatype} on {_comm_label(comm)}"
            ),
            culprits={
                m.rank: f"{m.inflight.func} of {m.inflight.count} {m.inflight.datatype}"
                for m in pair
            },
            op=recv.inflight,
        )
    wait_s = (now - min(m.inflight.enqueue_mono_ns for m in pair)) / 1e9
    return Finding(
        Verdict.all_joined_none_complete,
        comm,
        key=f"p2p:{send.rank}.{recv.rank}",
        summary=(
            f"rank {send.rank}'s Send and rank {recv.rank}'s Recv on {_comm_label(comm)} are "
            f"both posted and not complete in {wait_s:.1f} s"
        ),
        culprits={},
        op=recv.inflight,
    )


def p2p_cycle(comm: CommView, cycle: list[CommMember], op: InflightOp) -> Finding:
    """Ranks each waiting in a point-to-point op on the next one's: a call-order mismatch
    (every one receives first, or every one sends a message too large to buffer first)."""
    path = " -> ".join(f"rank {m.rank} ({m.inflight.func})" for m in cycle)
    return Finding(
        Verdict.op_mismatch,
        comm,
        key="p2p-cycle:" + ".".join(str(m.rank) for m in sorted(cycle, key=lambda m: m.rank)),
        summary=(
            f"ranks wait on each other in point-to-point ops on {_comm_label(comm)}: {path} "
            f"-> rank {cycle[0].rank}: the calls are ordered so that none can proceed"
        ),
        culprits={
            m.rank: f"waits in {m.inflight.func} with rank {m.inflight.peer}, which waits in "
            f"{cycle[(i + 1) % len(cycle)].inflight.func} too"
            for i, m in enumerate(cycle)
        },
        op=op,
    )


def blocked_elsewhere(m: CommMember, snapshot: NodeSnapshot) -> bool:
    """m's process has an op of another communicator in flight that was enqueued before m's
    or whose kernel runs on the GPU and does not finish: what it waits in first (a batched
    exchange queued behind it, or beside it on the GPU, cannot finish either). An untimed op
    counts whenever it was enqueued: its row shows the newest of the untimed ops, and an older
    one may be the first."""
    mine = m.inflight.enqueue_mono_ns
    return any(
        other.inflight is not None
        and (
            other.inflight.enqueue_mono_ns < mine
            or other.inflight.channels_started > 0
            or other.inflight.unproven
        )
        for view in snapshot.comms.values()
        if view.comm_id != m.comm_id
        for other in view.members
        if other.process.pid == m.process.pid and other.process.node_name == m.process.node_name
    )


def p2p_exchange(comm: CommView, cycle: list[CommMember], op: InflightOp) -> Finding:
    """Ranks whose oldest ops are sends to each other (or receives) while each has more ops
    in flight: the view shows only the oldest op, and a batched exchange (Megatron's
    batch_isend_irecv: a Send and a Recv toward each neighbour in one NCCL group) looks so
    whenever it does not finish because one of the ranks is stuck in an op of another
    communicator queued before it (blocked_elsewhere; without one, two Sends facing each
    other are a call-order mismatch, as on real GPUs). No call order is proven wrong: no
    culprit here; incidents place it behind what the ranks wait in first."""
    path = " -> ".join(f"rank {m.rank} ({m.inflight.func})" for m in cycle)
    return Finding(
        Verdict.all_joined_none_complete,
        comm,
        key="p2p-exchange:" + ".".join(str(m.rank) for m in sorted(cycle, key=lambda m: m.rank)),
        summary=(
            f"ranks exchange point-to-point ops on {_comm_label(comm)} and none completes: "
            f"{path} -> rank {cycle[0].rank}, each with "
            + ", ".join(f"{m.p2p_enqueued - m.p2p_completed}" for m in cycle)
            + " op(s) in flight (a batched exchange, its other ops not shown)"
        ),
        culprits={},
        op=op,
    )


def comm_init_stuck(comm: CommView, now: int, threshold_ns: int) -> Finding | None:
    # Rows missing on a single-node communicator mean ranks that never initialized it; any op
    # enqueued proves init finished everywhere (NCCL init is collective), so require none.
    # cheapest first: the missing ranks of a relay's classes are computed from their runs
    if comm.nnodes != 1 or any(m.coll_enqueued or m.p2p_enqueued for m in comm.members):
        return None
    missing = comm.missing_ranks
    if not missing:
        return None
    waited_ns = now - min(m.init_mono_ns for m in comm.members)
    if waited_ns <= threshold_ns:
        return None
    return Finding(
        Verdict.comm_init_stuck,
        comm,
        key="init",
        summary=(
            f"{_comm_label(comm)}: ranks {missing} have not initialized the communicator; "
            f"{comm.ranks_present} of {comm.nranks} waiting for {waited_ns / 1e9:.1f} s"
        ),
        culprits={r: "no communicator row on this node (init not reached)" for r in missing},
    )


# ---- straggler ----


def join_samples(comm_id: int, snapshots: Sequence[NodeSnapshot]) -> dict[int, dict[int, int]]:
    """op index -> {rank: wall-clock enqueue time} for ops seen enqueued on every rank, over
    the snapshots, the oldest sample of an op kept (CommView.join_points)."""
    samples: dict[int, dict[int, int]] = {}
    for snap in snapshots:
        comm = snap.comms.get(comm_id)
        if comm is None:
            continue
        for op_index, times in comm.join_points:
            samples.setdefault(op_index, times)
    return samples


def find_straggler(
    comm: CommView,
    snapshots: Sequence[NodeSnapshot],
    factor: float,
    min_lag_ns: int,
    min_ops: int,
) -> Finding | None:
    # one member (a relay's class of every rank) is late to nobody: its samples are not read
    if comm.nranks < 2 or len(comm.members) < 2:
        return None
    samples = join_samples(comm.comm_id, snapshots)
    if len(samples) < min_ops:
        return None
    delays: dict[int, list[int]] = {m.rank: [] for m in comm.members}
    for times in samples.values():
        first = min(times.values())
        for rank, t in times.items():
            delays.setdefault(rank, []).append(t - first)
    median = {rank: int(statistics.median(d)) for rank, d in delays.items() if d}
    slow = {}
    for rank, lag in median.items():
        peers = [v for r, v in median.items() if r != rank]
        if not peers:  # one member: a relay's class of every rank, late to nobody
            continue
        limit = max(int(factor * statistics.median(peers)), min_lag_ns)
        if lag > limit:
            slow[rank] = (lag, limit)
    if not slow:
        return None
    limit_ns = min(limit for _, limit in slow.values())
    ranks = sorted(slow)
    return Finding(
        Verdict.straggler,
        comm,
        key="r" + ".".join(map(str, ranks)),
        summary=(
            f"rank(s) {ranks} on {_comm_label(comm)} join ops late: median "
            f"{', '.join(f'{slow[r][0] / MS:.0f} ms' for r in ranks)} after the first rank "
            f"over {len(samples)} ops"
        ),
        culprits={
            r: f"joins {slow[r][0] / MS:.0f} ms after the first rank (median of "
            f"{len(delays[r])} ops; limit {slow[r][1] / MS:.0f} ms)"
            for r in ranks
        },
        join_delays_ns=median,
        threshold_ns=limit_ns,
    )


# ---- building the report ----


def majority_op(ops: list[InflightOp], sizes: list[int] | None = None) -> InflightOp:
    """The op as most ranks enqueued it (ties: the one of the lowest rank's order); sizes:
    the ranks each op stands for (a relay's class), one each by default."""
    counts: Counter = Counter()
    for op, size in zip(ops, sizes or [1] * len(ops), strict=True):
        counts[op.signature()] += size
    best = max(counts.values())
    return next(op for op in ops if counts[op.signature()] == best)


def to_report(
    f: Finding, snap: NodeSnapshot, now_mono: int, now_real: int, threshold_ns: int
) -> HangReport:
    node = node_name(snap.node_name)
    members = {m.rank: m for m in (*f.comm.departed, *f.comm.members)}
    job = job_of(f.comm)
    data_age = max(0, now_mono - snap.taken_mono_ns)  # the snapshot was read this long ago
    return HangReport(
        schema_version=1,
        report_id=report_id(f),
        job_id=job if job else _unset(),
        diagnosed_by=node,
        detected_mono_ns=now_mono,
        detected_real_ns=now_real,
        verdict=f.verdict,
        # a hang behind another pages no one: only the root does (incidents decides finally)
        severity=Severity.info
        if f.cause is not None
        else Severity.warning
        if f.verdict in (Verdict.straggler, Verdict.inconclusive)
        else Severity.critical,
        comm=CommRef(
            comm_id=f.comm.comm_id_hex,
            nranks=max(1, f.comm.nranks),
            comm_name=f.comm.name or _unset(),
            nnodes=f.comm.nnodes if f.comm.nnodes >= 1 else _unset(),
        ),
        op=op_info(f.op) if f.op is not None else _unset(),
        culprits=[culprit(r, reason, members.get(r), node) for r, reason in f.culprits.items()],
        culprit_basis=f.culprit_basis if f.culprit_basis is not None else _unset(),
        # one entry per rank, but a relay's class is one entry for all its ranks
        evidence=[
            rank_evidence(r, members.get(r), f, node, now_mono, data_age)
            for r in sorted({*members, *f.comm.missing_ranks})
            if r < f.comm.nranks
        ]
        or [RankEvidence(comm_rank=0, node_name=node, process_state=ProcessState.unknown)],
        threshold_ms=max(1, (f.threshold_ns or threshold_ns) // MS),
        summary=f.summary
        + (f"; it follows from {report_id(f.cause)}" if f.cause is not None else ""),
        status=ReportStatus.open,
    )


def job_of(comm: CommView) -> str | None:
    """The job its rows' processes belong to (one: core.current_run keeps one run's rows)."""
    return next(
        (m.process.job_id for m in (*comm.members, *comm.departed) if m.process.job_id), None
    )


def report_id(f: Finding) -> str:
    """Stable across polls: the same comm, verdict and op (or ranks) give the same id. The job
    is part of it: a job that reuses a home and an earlier job's communicator id (the
    simulator's, from a seed) gets reports and incidents of its own, never the ended ones."""
    raw = f"{f.comm.comm_id_hex}:{f.verdict.value}:{f.key}"
    job = job_of(f.comm)
    if job:
        raw = f"{job}/{raw}"
    digest = hashlib.sha1(raw.encode()).hexdigest()[:12]
    return f"{f.comm.comm_id_hex}-{f.verdict.value}-{digest}"


def op_info(op: InflightOp) -> OpInfo:
    root, peer = _root_peer(op)
    return OpInfo(
        kind=OpClass.coll if op.is_coll else OpClass.p2p,
        func=op.func,
        seq=op.seq,
        index=op.op_index,
        count=op.count,
        datatype=op.datatype,
        size_bytes=op.bytes,
        root=root,
        peer=peer,
    )


def culprit(rank: int, reason: str, m: CommMember | None, node: str) -> Culprit:
    if m is None:
        return Culprit(comm_rank=rank, node_name=node, reason=reason)
    p = m.process
    return Culprit(
        comm_rank=rank,
        node_name=node_name(p.node_name) if p.node_name else node,
        reason=reason,
        global_rank=p.global_rank if p.global_rank is not None else _unset(),
        host=p.host or _unset(),
        pid=p.pid if p.pid > 0 else _unset(),
    )


def rank_evidence(
    rank: int, m: CommMember | None, f: Finding, node: str, now: int, data_age_ns: int
) -> RankEvidence:
    if m is None:
        return RankEvidence(comm_rank=rank, node_name=node, process_state=ProcessState.unknown)
    p = m.process
    delays = f.join_delays_ns or {}
    return RankEvidence(
        comm_rank=rank,
        node_name=node_name(p.node_name) if p.node_name else node,
        process_state=ProcessState.alive if p.alive else ProcessState.exited,
        global_rank=p.global_rank if p.global_rank is not None else _unset(),
        host=p.host or _unset(),
        pid=p.pid if p.pid > 0 else _unset(),
        heartbeat_age_ms=p.heartbeat_age_ns // MS,
        data_age_ms=data_age_ns // MS,
        joined=m.coll_enqueued > f.joined_index if f.joined_index is not None else _unset(),
        join_delay_ms=delays[rank] // MS if rank in delays else _unset(),
        last_enqueued=mark(m, m.coll_enqueued, m.coll_enqueued_mono_ns, now),
        last_gpu_started=mark(m, m.coll_started, m.coll_started_mono_ns, now),
        last_completed=mark(m, m.coll_completed, m.coll_completed_mono_ns, now),
        inflight=inflight_evidence(m.inflight, now) if m.inflight else _unset(),
        inflight_count=m.inflight_count,
        hang_evidence=proxy_evidence(m, now),
        same_state_ranks=m.stands_for.text(max_runs=256)[:4096] if m.stands_for else _unset(),
        same_state_count=m.size if m.stands_for else _unset(),
    )


def proxy_evidence(m: CommMember, now: int):
    """The proxy progress its Profiler recorded for the hang it flagged on this row; absent
    when it raised no mask for that flag (evidence off, or an older raise for another op)."""
    ev = m.hang_evidence
    flagged = m.hang_flagged_op_index
    if ev is None or flagged is None or ev.flagged_op_index != flagged:
        return _unset()
    return hang_evidence(ev, m.process.to_real_ns, now)


def mark(m: CommMember, count: int, at_mono: int, now: int):
    """The latest op index reached at one stage; absent until the stage was reached once."""
    if count == 0 or at_mono == 0:
        return _unset()
    return ProgressMark(
        seq=count - 1,
        at_real_ns=m.process.to_real_ns(at_mono),
        age_ms=max(0, now - at_mono) // MS,
    )


def inflight_evidence(op: InflightOp, now: int) -> InflightEvidence:
    root, peer = _root_peer(op)
    return InflightEvidence(
        kind=OpClass.coll if op.is_coll else OpClass.p2p,
        func=op.func,
        seq=op.seq,
        count=op.count,
        datatype=op.datatype,
        size_bytes=op.bytes,
        age_ms=max(0, now - op.enqueue_mono_ns) // MS,
        n_channels=min(op.n_channels, 255),
        channels_started=min(op.channels_started, 255),
        channels_completed=min(op.channels_stopped, 255),
        root=root,
        peer=peer,
        gpu_timed=False if op.unproven else _unset(),
    )


# ---- small helpers ----


def node_name(name: str) -> str:
    """COMMINSIGHT_AGENT_NODE_NAME or the host name, fitted to the schema's pattern."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip("._-")[:253]
    return cleaned or "node"


def _root_peer(op: InflightOp):
    if op.peer is None:
        return _unset(), _unset()
    if not op.is_coll:
        return _unset(), op.peer
    return (op.peer if op.func in ROOTED_FUNCS else _unset()), _unset()


def _who(members: list[CommMember]) -> str:
    """Each member by rank, node and pid; a class a relay passed up also by the ranks it
    stands for."""
    return ", ".join(
        f"rank {m.rank} ({m.process.node_name or m.process.host or '?'}, pid {m.process.pid})"
        + (
            f" and {len(m.stands_for)} more in its state ({_runs(m.stands_for)})"
            if m.stands_for
            else ""
        )
        for m in members
    )


def _count(members: list[CommMember]) -> int:
    """Ranks the members speak for (a class row, all of its class)."""
    return sum(m.size for m in members)


def _runs(ranks) -> str:
    """A few ranks as a list; many as runs ('[0-6,8-99999]'): a list of 100,000 would be the
    whole report."""
    ranks = sorted(ranks)
    return str(ranks) if len(ranks) <= 16 else "[" + RankRuns.of(ranks).text() + "]"


def _comm_label(comm: CommView) -> str:
    return _comm_label_id(comm.comm_id, comm.name)


def _comm_label_id(comm_id: int, name: str) -> str:
    return f"{name} ({comm_id:016x})" if name else f"comm {comm_id:016x}"


def _mono_to_real(snap: NodeSnapshot, mono: int) -> int:
    return max(0, snap.taken_real_ns + (mono - snap.taken_mono_ns))


def _unset():
    return UNSET
