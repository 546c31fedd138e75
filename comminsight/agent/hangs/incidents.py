"""Hang reports grouped by cause: one fault, one root, its consequences behind it.

One stuck rank stops its peers, and they stop theirs: a skipped all-reduce on a tensor-parallel
group leaves reports on the pipeline and data-parallel groups too, each true about its own
communicator. `group_reports` decides which report explains the others, by causality read
from the reports' own evidence (never by which came first):

- culprit_waits / p2p_peer: the ranks a report blames wait in another report's op; a rank
  stuck there cannot issue ops on this communicator (or answer this send/receive). An op not
  timed on the GPU (GPU timing sampled) that the other report shows is no such proof unless
  that report blames someone for it: it may have ended, and the rank may be stuck in its own
  code (as the blaming report says).
- same_culprit: two reports blame the same process; the more precise verdict explains it.
- waited_there_first: a report that blames no one, whose waiting ranks are stuck in another
  report's op: their kernel there runs and does not finish while their kernel here never
  started, or they have had that op in flight since before they enqueued this one.
- missing_member: a report waiting for ranks no data arrived from; if every process that
  could be them is blocked behind one root (or is its culprit), it is that root's.

A report with no such link is a root. Following the links from any report ends at its root;
reports that end at the same root are one `Group`. Links that form a cycle (ranks waiting on
each other across communicators) are cut at the report with the most precise verdict, which
becomes the root.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import msgspec
from msgspec import UNSET

from comminsight.agent.hangs.ties import Ties
from comminsight_gen.models.hang_report_v1 import (
    CauseLink,
    Culprit,
    HangReport,
    OpClass,
    RankEvidence,
    ReportStatus,
    Severity,
    Verdict,
)

MS = 1_000_000

# Most precise first: when two reports blame one process, or a cycle must be cut, the report
# whose verdict says most about the cause is the root.
PRECISION = {
    Verdict.process_died: 0,
    Verdict.op_mismatch: 1,
    Verdict.rank_left: 2,
    Verdict.stuck_outside_nccl: 3,
    Verdict.rank_not_joined: 4,
    Verdict.comm_init_stuck: 5,
    Verdict.all_joined_none_complete: 6,
    Verdict.inconclusive: 7,
}

# (node name, pid, PID namespace or 0): a process anywhere in the job. The namespace tells
# apart two pods' processes of one pid on one node.
Process = tuple[str, int, int]


@dataclass(frozen=True)
class Cause:
    """Why a report follows from another: the report it follows from directly, and how."""

    report_id: str
    link: CauseLink
    reason: str


@dataclass
class Group:
    """The reports of one incident: the root, and every consequence with its direct cause,
    nearest the root first."""

    root: HangReport
    consequences: list[tuple[HangReport, Cause]] = field(default_factory=list)

    @property
    def report_ids(self) -> set[str]:
        return {self.root.report_id, *(r.report_id for r, _ in self.consequences)}


@dataclass(frozen=True)
class Wait:
    report_id: str
    enqueued_ns: int  # on the diagnosing Agent's clock: detection time minus the op's age
    started: bool  # some channel's kernel started on the GPU
    label: str  # the rank as a person reads it
    # timed on the GPU, or held by the report's culprits: not an untimed op that may have ended
    proven: bool = True

    def sort_key(self) -> tuple:
        # where a process is stuck: the op whose kernel runs and does not finish; ops whose
        # kernels have not started are queued behind it
        return (not self.started, self.enqueued_ns, self.report_id)


def group_reports(
    reports: Iterable[HangReport], jobs: Callable[[], Mapping[Process, Process]] | None = None
) -> list[Group]:
    """Open hang reports (stragglers are no hang and stay out) grouped by root cause; groups
    in the order of their root's report id. jobs: for processes a report names no job of,
    which job each is in (unnamed_jobs: those that share a communicator are of one), asked
    only where a report of no job waits for ranks that sent no data."""
    hangs = [
        r for r in reports if r.verdict is not Verdict.straggler and r.status is ReportStatus.open
    ]
    index = _Index(hangs, jobs or dict)
    causes: dict[str, Cause] = {}
    for r in hangs:
        cause = _direct_cause(r, index)
        if cause is not None:
            causes[r.report_id] = cause
    # Reports waiting for ranks without data are placed once the others are: each placed
    # report can settle where a candidate process is blocked.
    changed = True
    while changed:
        changed = False
        for r in hangs:
            if r.report_id in causes or not index.unknown[r.report_id]:
                continue
            cause = _missing_member_cause(r, index, causes)
            if cause is not None:
                causes[r.report_id] = cause
                changed = True
    _cut_cycles(causes, index)
    by_root: dict[str, Group] = {}
    for r in sorted(hangs, key=lambda r: r.report_id):
        root = root_of(r.report_id, causes)
        if root == r.report_id:
            by_root.setdefault(root, Group(r)).root = r
    for r in hangs:
        if r.report_id in causes:
            group = by_root[root_of(r.report_id, causes)]
            group.consequences.append((r, causes[r.report_id]))
    for group in by_root.values():
        depth = {r.report_id: _depth(r.report_id, causes) for r, _ in group.consequences}
        group.consequences.sort(key=lambda rc: (depth[rc[0].report_id], rc[0].report_id))
    return [by_root[k] for k in sorted(by_root)]


def with_roles(
    reports: Iterable[HangReport], groups: Iterable[Group], ended: Iterable[Group] = ()
) -> list[HangReport]:
    """The reports with the severity their place in an incident gives: only a root pages
    (critical; warning when it is inconclusive), a consequence is info, and so is what is
    left of an incident whose processes ended (`ended`: the teardown's rest)."""
    role: dict[str, Severity] = {rid: Severity.info for g in ended for rid in g.report_ids}
    for g in groups:
        role[g.root.report_id] = (
            Severity.warning if g.root.verdict is Verdict.inconclusive else Severity.critical
        )
        for r, _ in g.consequences:
            role[r.report_id] = Severity.info
    out = []
    for r in reports:
        severity = role.get(r.report_id)
        out.append(
            msgspec.structs.replace(r, severity=severity)
            if severity is not None and severity is not r.severity
            else r
        )
    return out


def root_of(report_id: str, causes: dict[str, Cause]) -> str:
    """Where following the links from a report ends (a loop stops where it closes)."""
    seen = {report_id}
    while report_id in causes:
        nxt = causes[report_id].report_id
        if nxt in seen:
            return report_id
        seen.add(nxt)
        report_id = nxt
    return report_id


def _depth(report_id: str, causes: dict[str, Cause]) -> int:
    n, seen = 0, {report_id}
    while report_id in causes and causes[report_id].report_id not in seen:
        report_id = causes[report_id].report_id
        seen.add(report_id)
        n += 1
    return n


# ---- what the reports say about each process ----------------------------------------------


class _Index:
    def __init__(
        self, reports: list[HangReport], jobs: Callable[[], Mapping[Process, Process]]
    ) -> None:
        self.by_id = {r.report_id: r for r in reports}
        self._jobs = jobs
        self._unnamed_jobs: dict[Process, set[Process]] | None = None
        self.waits: dict[Process, list[Wait]] = {}
        self.blamed: dict[Process, list[str]] = {}  # process -> reports naming it a culprit
        self.culprits: dict[str, list[tuple[Process, str]]] = {}
        self.members: dict[str, set[Process]] = {}
        self.unknown: dict[str, list[int]] = {}  # report -> comm ranks with no data
        self.job_processes: dict[str | None, set[Process]] = {}
        for r in reports:
            members = set()
            for e in r.evidence:
                if e.pid is UNSET:
                    continue
                p = _process(e)
                members.add(p)
                if e.inflight is not UNSET:
                    self.waits.setdefault(p, []).append(
                        Wait(
                            r.report_id,
                            r.detected_mono_ns - e.inflight.age_ms * MS,
                            e.inflight.channels_started > 0,
                            _who(e),
                            e.inflight.gpu_timed is not False or bool(r.culprits),
                        )
                    )
            culprits = []
            unknown = {e.comm_rank for e in r.evidence if e.pid is UNSET}
            for c in r.culprits:
                if c.pid is UNSET:
                    unknown.add(c.comm_rank)
                    continue
                p = _process(c)
                members.add(p)
                culprits.append((p, _who(c)))
                self.blamed.setdefault(p, []).append(r.report_id)
            self.culprits[r.report_id] = culprits
            self.members[r.report_id] = members
            self.unknown[r.report_id] = sorted(unknown)
            self.job_processes.setdefault(_job(r), set()).update(members)

    def job_of(self, r: HangReport) -> set[Process]:
        """The processes of r's job that the reports show: those of its job id; without one
        (a launcher that names no job, as torchrun without --rdzv-id), r's, those that share
        a communicator with one of them (`jobs`), those that share a report with one, and
        theirs in turn. Two such jobs on one node share neither: one is never taken for the
        other's."""
        job = _job(r)
        if job is not None:
            return self.job_processes.get(job, set())
        if self._unnamed_jobs is None:
            self._unnamed_jobs = self._tie_unnamed()
        members = self.members[r.report_id]
        if not members:
            return set()
        return self._unnamed_jobs[next(iter(members))]

    def _tie_unnamed(self) -> dict[Process, set[Process]]:
        """Each process of the reports of no job, and the processes of its job (one set,
        shared by all of them): built once, as every report waiting for ranks without data
        asks."""
        jobs = self._jobs()
        ties = Ties()
        by_job: dict[Process, Process] = {}
        for rid, r in self.by_id.items():
            if _job(r) is not None:
                continue
            members = sorted(self.members[rid])
            for p in members:
                ties.tie(members[0], p)
                if p in jobs:
                    ties.tie(by_job.setdefault(jobs[p], p), p)
        return ties.groups()

    def stuck_in(self, p: Process, besides: str, proven: bool = False) -> Wait | None:
        """The op process p is stuck in, of the reports other than `besides` (`proven`: of
        the ops timed on the GPU only)."""
        waits = [
            w for w in self.waits.get(p, ()) if w.report_id != besides and (w.proven or not proven)
        ]
        return min(waits, key=Wait.sort_key, default=None)


def _direct_cause(r: HangReport, index: _Index) -> Cause | None:
    return _culprit_waits(r, index) or _same_culprit(r, index) or _waited_there_first(r, index)


def _culprit_waits(r: HangReport, index: _Index) -> Cause | None:
    culprits = index.culprits[r.report_id]
    if not culprits:
        return None
    waits = []
    for p, who in culprits:
        w = index.stuck_in(p, besides=r.report_id, proven=True)
        if w is None:
            return None  # this culprit is blocked by nothing reported: r explains itself
        waits.append((w, who))
    w, who = min(waits, key=lambda x: x[0].sort_key())
    other = index.by_id[w.report_id]
    p2p = r.op is not UNSET and r.op.kind is OpClass.p2p
    return Cause(
        w.report_id,
        CauseLink.p2p_peer if p2p else CauseLink.culprit_waits,
        f"{who}, {'the peer it waits for' if p2p else 'whom it blames'}, waits in "
        f"{_op_label(other)}",
    )


def _same_culprit(r: HangReport, index: _Index) -> Cause | None:
    mine = (PRECISION.get(r.verdict, 9), r.report_id)
    best = None
    for p, who in index.culprits[r.report_id]:
        for other_id in index.blamed.get(p, ()):
            other = index.by_id[other_id]
            key = (PRECISION.get(other.verdict, 9), other_id)
            if other_id != r.report_id and key < mine and (best is None or key < best[0]):
                best = (key, other, who)
    if best is None:
        return None
    _, other, who = best
    return Cause(
        other.report_id,
        CauseLink.same_culprit,
        f"it blames {who}, whom {_op_label(other)} names as {other.verdict.value}",
    )


def _waited_there_first(r: HangReport, index: _Index) -> Cause | None:
    if index.culprits[r.report_id]:
        return None  # its culprits are what it waits for
    best = None
    for p in sorted(index.members[r.report_id]):
        mine = next((w for w in index.waits.get(p, ()) if w.report_id == r.report_id), None)
        if mine is None:
            continue
        first = index.stuck_in(p, besides=r.report_id)
        if first is None or not (
            (first.started and not mine.started) or first.enqueued_ns < mine.enqueued_ns
        ):
            continue
        if best is None or first.sort_key() < best[0].sort_key():
            best = (first, mine)
    if best is None:
        return None
    first, mine = best
    there = _op_label(index.by_id[first.report_id])
    return Cause(
        first.report_id,
        CauseLink.waited_there_first,
        f"{mine.label} is stuck in {there}: its kernel there runs while its kernel here never "
        "started"
        if first.started and not mine.started
        else f"{mine.label} has had {there} in flight since "
        f"{(mine.enqueued_ns - first.enqueued_ns) / 1e9:.1f} s before it enqueued the op here "
        "(a process's ops run in order)",
    )


def _missing_member_cause(r: HangReport, index: _Index, causes: dict[str, Cause]) -> Cause | None:
    """Ranks of r's communicator sent no data (the communicator is created at first use and
    they never got there, or their node is not reporting). Whoever they are, they are among
    the job's other processes the reports show; when each of those that is placed at all is
    blocked behind one root (or is its culprit), the missing ranks are too."""
    pending = {
        rid
        for rid, unknown in index.unknown.items()
        if unknown and rid not in causes and rid != r.report_id
    }
    candidates = index.job_of(r) - index.members[r.report_id]
    roots = set()
    for p in sorted(candidates):
        placed = index.blamed.get(p) or [
            w.report_id for w in [index.stuck_in(p, besides="")] if w is not None
        ]
        if not placed:
            return None  # a process the reports show free: it could be the missing one
        root = root_of(
            min(placed, key=lambda rid: PRECISION.get(index.by_id[rid].verdict, 9)), causes
        )
        if root == r.report_id or root in pending:
            continue  # blocked behind r itself, or behind another unplaced report: no evidence
        roots.add(root)
    if len(roots) != 1:
        return None
    (root,) = roots
    ranks = ", ".join(str(x) for x in index.unknown[r.report_id])
    return Cause(
        root,
        CauseLink.missing_member,
        f"rank(s) {ranks} of {_comm(r)} sent no data; every other process of the job the "
        f"reports show is blocked behind {_op_label(index.by_id[root])} or is its culprit",
    )


def _cut_cycles(causes: dict[str, Cause], index: _Index) -> None:
    for start in sorted(causes):
        path, rid = [], start
        while rid in causes and rid not in path:
            path.append(rid)
            rid = causes[rid].report_id
        if rid in path:  # a loop: its most precise report becomes the root
            loop = path[path.index(rid) :]
            best = min(loop, key=lambda x: (PRECISION.get(index.by_id[x].verdict, 9), x))
            del causes[best]


# ---- words -------------------------------------------------------------------------------


def _who(x) -> str:
    rank = f"rank {x.global_rank}" if x.global_rank is not UNSET else f"comm rank {x.comm_rank}"
    where = x.host if x.host is not UNSET else x.node_name
    return f"{rank} ({where}, pid {x.pid})"


def pid_namespace_of(x: Culprit | RankEvidence) -> int:
    """The PID namespace of a culprit's or a rank's process; 0 where the report has none."""
    return x.pid_namespace if isinstance(x.pid_namespace, int) else 0


def _process(x: Culprit | RankEvidence) -> Process:
    """Of a culprit or a rank's evidence that names its pid."""
    return x.node_name, x.pid, pid_namespace_of(x)


def _comm(r: HangReport) -> str:
    return r.comm.comm_name if r.comm.comm_name is not UNSET else r.comm.comm_id


def _op_label(r: HangReport) -> str:
    op = f"{r.op.func} seq {r.op.seq} on " if r.op is not UNSET else ""
    return f"{op}{_comm(r)} ({r.verdict.value})"


def _job(r: HangReport) -> str | None:
    return r.job_id if r.job_id is not UNSET else None
