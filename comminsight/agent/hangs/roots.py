"""Which findings start a hang (roots) and which follow from one: one stuck rank blocks its
peers' streams, and their other communicators hang behind them."""

from __future__ import annotations

import dataclasses

from comminsight.agent.hangs.finding import Finding
from comminsight.agent.state.snapshot import NodeSnapshot
from comminsight_gen.models.hang_report_v1 import Verdict

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
        rows = snapshot.members_of_process(m.process)
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
        rows = snapshot.members_of_process(m.process)
        for r in roots:
            for row in rows:
                if (
                    row.comm_id == r.comm.comm_id
                    and row.inflight is not None
                    and row.inflight.enqueue_mono_ns < m.inflight.enqueue_mono_ns
                ):
                    return r
    return None
