"""Incidents over time: `<home>/metadata/incidents/<incident_id>.json`, one hang-report v1
Incident each.

Every diagnosis pass hands `update` the pass's groups (incidents.group_reports). A group
continues the open incident that holds any of its reports; one that holds none opens a new
incident with an id derived from its root report, so an incident opens once and keeps its id
while reports join it and its root changes (each change recorded with its reason). When a
group spans two open incidents, evidence has shown they have one cause: the older one takes
the other's reports, the other is resolved as superseded and names it (merged_into).

An incident resolves when its root report does (the op completed, the communicator was torn
down, the processes exited: the root report's resolution says which), or when an operator
resolves it. A root report superseded by another verdict on the same communicator is a root
change, not an end. A resolved incident never reopens.

Stacks are attached from outside (the Python stack capture) through `attach_stacks`; those
who capture them learn of new roots through `subscribe`.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import msgspec
from msgspec import UNSET

from comminsight.agent.hangs.incidents import Cause, Group
from comminsight.durable_files import make_private_dirs, write_atomically
from comminsight.safe_open import read_regular
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.models.hang_report_v1 import (
    CauseLink,
    HangReport,
    Incident,
    IncidentConsequence,
    IncidentRoot,
    IncidentStack,
    IncidentStatus,
    ReportStatus,
    Resolution,
    RootChange,
    Severity,
    Verdict,
)

log = logging.getLogger(__name__)

INVALID = "invalid"
INCIDENT_BYTES_MAX = 256 << 20  # as for hang reports: a file refused beyond it, not read
MAX_STACKS = 256  # the schema's bound on Incident.stacks
MAX_ENDED_REPORTS = 4096  # reports of ended incidents remembered (a bound for long runs)
# the hang-report v1 pattern of ids: no '/', no leading '.', so a file name in this directory
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-")


class UnknownIncident(KeyError):
    """No incident with this id."""

    def __str__(self) -> str:
        return f"no incident {self.args[0]}"


class IncidentStore:
    def __init__(self, home: str | Path, node_name: str) -> None:
        self.dir = Path(home) / home_names.METADATA / home_names.INCIDENTS
        self.node_name = node_name
        self.incidents: dict[str, Incident] = {}
        self.errors: dict[str, str] = {}  # file name -> why it was not loaded
        self.opened_total: Counter[str] = Counter()  # root verdict -> incidents opened
        self._listeners: list[Callable[[Incident], None]] = []
        # reports of incidents that ended with their processes: the teardown ends the reports
        # one pass after another, and one still open is no new cause (report id -> incident)
        self._ended_with: OrderedDict[str, str] = OrderedDict()

    # ---- what others call ------------------------------------------------------------

    def subscribe(self, listener: Callable[[Incident], None]) -> None:
        """listener(incident) after an incident opens or its root changes (on the Agent's
        loop; it must not block: capture stacks elsewhere, then attach_stacks)."""
        self._listeners.append(listener)

    def attach_stacks(
        self, incident_id: str, stacks: Iterable[IncidentStack], now_real_ns: int
    ) -> Incident:
        """Add Python stacks to an incident: an entry for a process (node, pid) and thread
        replaces the one it had. UnknownIncident when there is no such incident; ValueError
        when the stacks would pass the schema's bound."""
        incident = self._get(incident_id)
        new = list(stacks)
        keys = {_stack_key(s) for s in new}
        kept = [s for s in incident.stacks if _stack_key(s) not in keys]
        if len(kept) + len(new) > MAX_STACKS:
            raise ValueError(
                f"incident {incident_id} would hold {len(kept) + len(new)} stacks; at most "
                f"{MAX_STACKS}"
            )
        return self._put(
            msgspec.structs.replace(incident, stacks=kept + new, updated_real_ns=now_real_ns)
        )

    def resolve_by_operator(
        self, incident_id: str, note: str | None, now_mono_ns: int, now_real_ns: int
    ) -> Incident:
        """Idempotent: a resolved incident is returned unchanged."""
        incident = self._get(incident_id)
        if incident.status is IncidentStatus.resolved:
            return incident
        return self._put(_resolved(incident, Resolution.operator, now_mono_ns, now_real_ns, note))

    def open_incidents(self) -> list[Incident]:
        return [i for i in self.incidents.values() if i.status is IncidentStatus.open]

    def open_by_verdict(self) -> Counter[str]:
        return Counter(i.root.verdict.value for i in self.open_incidents())

    def report_ids(self, incident: Incident) -> list[str]:
        """The root first, then the consequences in the incident's order."""
        return [incident.root.report_id, *(c.report_id for c in incident.consequences)]

    # ---- a diagnosis pass ------------------------------------------------------------

    def update(
        self,
        groups: list[Group],
        reports: Mapping[str, HangReport],
        now_mono_ns: int,
        now_real_ns: int,
    ) -> list[Incident]:
        """Fold one pass's groups in; `reports` are all the reports the Agent holds (for the
        resolution of a root that was not diagnosed again). The incidents that changed."""
        self._forget_ended_resolved(reports)
        current = {rid for g in groups for rid in g.report_ids}
        changed: dict[str, Incident] = {}
        superseded_roots: dict[str, Incident] = {}  # comm id -> open incident whose root went
        for incident in list(self._open()):
            if incident.root.report_id in current:
                continue
            root = reports.get(incident.root.report_id)
            why = (
                root.resolution
                if root is not None and root.status is ReportStatus.resolved
                else Resolution.op_completed
            )
            if why is Resolution.superseded:
                superseded_roots[incident.root.comm.comm_id] = incident
                continue
            changed[incident.incident_id] = self._put(
                _resolved(incident, why, now_mono_ns, now_real_ns, None)
            )
            if why is Resolution.comm_finalized:
                self._remember_ended(incident)
        for group in groups:
            ids = group.report_ids
            if self.ended_rest(group):
                continue
            matches = [
                i
                for i in self._open()
                if ids & set(self.report_ids(i))
                or any(
                    superseded_roots.get(r.comm.comm_id) is i
                    for r in [group.root, *(c for c, _ in group.consequences)]
                )
            ]
            if not matches:
                incident = self._open_new(group, now_mono_ns, now_real_ns)
                changed[incident.incident_id] = incident
                continue
            keep, *others = sorted(matches, key=lambda i: (i.opened_mono_ns, i.incident_id))
            for other in others:
                changed[other.incident_id] = self._merge_away(
                    other, keep, group, now_mono_ns, now_real_ns
                )
            updated = self._continue(keep, others, group, reports, now_real_ns)
            if updated is not None:
                changed[updated.incident_id] = updated
        # a root that was superseded and whose communicator no group continued has ended
        for incident in superseded_roots.values():
            if self.incidents[incident.incident_id].status is IncidentStatus.open and not (
                set(self.report_ids(self.incidents[incident.incident_id])) & current
            ):
                changed[incident.incident_id] = self._put(
                    _resolved(incident, Resolution.superseded, now_mono_ns, now_real_ns, None)
                )
        return list(changed.values())

    def ended_rest(self, group: Group) -> bool:
        """Whether every report of the group belonged to an incident that ended with its
        processes: what is left of it as the teardown goes on, no new cause."""
        ids = group.report_ids
        return bool(ids) and all(rid in self._ended_with for rid in ids)

    def _forget_ended_resolved(self, reports: Mapping[str, HangReport]) -> None:
        """A report of an ended incident that has since been resolved is no teardown left
        over: diagnosed again (the next run of a job in the same home, its communicator id
        repeated), it is a new cause and opens an incident of its own."""
        for rid in list(self._ended_with):
            report = reports.get(rid)
            if report is not None and report.status is ReportStatus.resolved:
                del self._ended_with[rid]

    def _remember_ended(self, incident: Incident) -> None:
        for rid in self.report_ids(incident):
            self._ended_with[rid] = incident.incident_id
            self._ended_with.move_to_end(rid)
        while len(self._ended_with) > MAX_ENDED_REPORTS:
            self._ended_with.popitem(last=False)

    def _open_new(self, group: Group, now_mono_ns: int, now_real_ns: int) -> Incident:
        root = group.root
        incident = Incident(
            schema_version=1,
            incident_id=self._new_id(root.report_id),
            job_id=root.job_id,
            diagnosed_by=self.node_name,
            status=IncidentStatus.open,
            severity=_severity(root),
            root=_root(root),
            consequences=[_consequence(r, c) for r, c in group.consequences],
            root_changes=[],
            opened_mono_ns=now_mono_ns,
            opened_real_ns=now_real_ns,
            updated_real_ns=now_real_ns,
            stacks=[],
        )
        self.opened_total[root.verdict.value] += 1
        log.warning(
            "incident %s opened: %s (%d consequence(s))",
            incident.incident_id,
            root.summary,
            len(incident.consequences),
        )
        put = self._put(incident)
        self._notify(put)
        return put

    def _continue(
        self,
        incident: Incident,
        merged: list[Incident],
        group: Group,
        reports: Mapping[str, HangReport],
        now_real_ns: int,
    ) -> Incident | None:
        root = group.root
        changes = list(incident.root_changes)
        for other in merged:
            changes.extend(other.root_changes)
        new_root = root.report_id != incident.root.report_id
        if new_root:
            changes.append(
                RootChange(
                    at_real_ns=now_real_ns,
                    from_report_id=incident.root.report_id,
                    to_report_id=root.report_id,
                    reason=_why_root_changed(incident, group, reports),
                )
            )
        by_id = {c.report_id: c for c in incident.consequences}
        for other in merged:
            for c in other.consequences:
                by_id.setdefault(c.report_id, c)
        for r, cause in group.consequences:
            by_id[r.report_id] = _consequence(r, cause)
        for old_root in [incident, *merged]:
            rid = old_root.root.report_id
            if rid != root.report_id and rid not in by_id and rid in reports:
                # a former root no longer diagnosed stays listed with why it was replaced
                by_id[rid] = IncidentConsequence(
                    report_id=rid,
                    verdict=old_root.root.verdict,
                    comm=old_root.root.comm,
                    follows_from=root.report_id,
                    link=_former_root_link(rid, group),
                    reason=changes[-1].reason if changes else "replaced by a better root",
                )
        by_id.pop(root.report_id, None)
        order = [r.report_id for r, _ in group.consequences]
        consequences = [by_id[rid] for rid in order] + [
            c for rid, c in sorted(by_id.items()) if rid not in set(order)
        ]
        updated = msgspec.structs.replace(
            incident,
            severity=_severity(root),
            root=_root(root),
            consequences=consequences,
            root_changes=changes,
            stacks=_merged_stacks(incident, merged),
        )
        if _same_but_time(updated, incident):
            return None
        updated = self._put(msgspec.structs.replace(updated, updated_real_ns=now_real_ns))
        if new_root:
            log.warning(
                "incident %s: root now %s (%s)",
                updated.incident_id,
                root.report_id,
                changes[-1].reason,
            )
            self._notify(updated)
        return updated

    def _merge_away(
        self, incident: Incident, into: Incident, group: Group, now_mono_ns: int, now_real_ns: int
    ) -> Incident:
        note = (
            f"merged into {into.incident_id}: its reports follow from "
            f"{group.root.report_id} ({group.root.verdict.value})"
        )
        log.warning("incident %s %s", incident.incident_id, note)
        resolved = _resolved(incident, Resolution.superseded, now_mono_ns, now_real_ns, note)
        return self._put(msgspec.structs.replace(resolved, merged_into=into.incident_id))

    def _new_id(self, root_report_id: str) -> str:
        base = "inc-" + hashlib.sha1(root_report_id.encode()).hexdigest()[:12]
        n, incident_id = 1, base
        while incident_id in self.incidents:  # that root's earlier incident ended: a new one
            n += 1
            incident_id = f"{base}-{n}"
        return incident_id

    # ---- files -------------------------------------------------------------------------

    def path_of(self, incident_id: str) -> Path:
        if not incident_id or incident_id[0] in "._:-" or not set(incident_id) <= _ID_CHARS:
            raise ValueError(f"incident id {incident_id!r} does not match the Incident id pattern")
        return self.dir / f"{incident_id}.json"

    def load(self) -> None:
        """Every incident an earlier run left; invalid files are set aside and named."""
        if not self.dir.is_dir():
            return
        decoder = msgspec.json.Decoder(Incident)
        for path in sorted(self.dir.glob("*.json")):
            try:
                incident = decoder.decode(read_regular(path, INCIDENT_BYTES_MAX))
                if path.stem != incident.incident_id:
                    raise ValueError(f"holds incident {incident.incident_id!r}, not {path.stem!r}")
            except (OSError, *NOT_JSON) as err:
                self._set_aside(path, str(err))
                continue
            self.incidents[incident.incident_id] = incident

    def _put(self, incident: Incident) -> Incident:
        self.incidents[incident.incident_id] = incident
        try:
            write_atomically(self.path_of(incident.incident_id), msgspec.json.encode(incident))
        except OSError as e:  # served from memory; the next change writes it again
            log.error("cannot write incident %s under %s: %s", incident.incident_id, self.dir, e)
        return incident

    def _get(self, incident_id: str) -> Incident:
        incident = self.incidents.get(incident_id)
        if incident is None:
            raise UnknownIncident(incident_id)
        return incident

    def _open(self) -> list[Incident]:
        return sorted(
            (i for i in self.incidents.values() if i.status is IncidentStatus.open),
            key=lambda i: (i.opened_mono_ns, i.incident_id),
        )

    def _notify(self, incident: Incident) -> None:
        for listener in self._listeners:
            try:
                listener(incident)
            except Exception:  # a listener's bug must not stop the diagnosis
                log.exception("incident listener failed for %s", incident.incident_id)

    def _set_aside(self, path: Path, reason: str) -> None:
        self.errors[path.name] = reason
        log.error("incident %s is not a valid Incident (%s); moved to %s/", path, reason, INVALID)
        target = self.dir / INVALID
        try:
            make_private_dirs(target)
            # a rename, never a copy: what is set aside may be a FIFO or a link
            os.replace(path, target / path.name)
        except OSError as err:
            log.error("cannot move %s aside: %s", path, err)


# ---- building the record -------------------------------------------------------------------


def _root(r: HangReport) -> IncidentRoot:
    return IncidentRoot(
        report_id=r.report_id,
        verdict=r.verdict,
        comm=r.comm,
        op=r.op,
        culprits=list(r.culprits),
        summary=r.summary,
    )


def _consequence(r: HangReport, cause: Cause) -> IncidentConsequence:
    return IncidentConsequence(
        report_id=r.report_id,
        verdict=r.verdict,
        comm=r.comm,
        follows_from=cause.report_id,
        link=cause.link,
        reason=cause.reason[:1024],
    )


def _severity(root: HangReport) -> Severity:
    return Severity.warning if root.verdict is Verdict.inconclusive else Severity.critical


def _resolved(
    incident: Incident, why: Resolution, now_mono_ns: int, now_real_ns: int, note: str | None
) -> Incident:
    return msgspec.structs.replace(
        incident,
        status=IncidentStatus.resolved,
        resolution=why,
        resolved_mono_ns=max(now_mono_ns, incident.opened_mono_ns),
        resolved_real_ns=max(now_real_ns, incident.opened_real_ns),
        updated_real_ns=max(now_real_ns, incident.opened_real_ns),
        **({"resolution_note": note[:1024]} if note else {}),
    )


def _why_root_changed(incident: Incident, group: Group, reports: Mapping[str, HangReport]) -> str:
    old = incident.root.report_id
    for r, cause in group.consequences:
        if r.report_id == old:
            return f"{old} follows from {cause.report_id}: {cause.reason}"[:1024]
    old_report = reports.get(old)
    if old_report is not None and old_report.resolution is Resolution.superseded:
        return (
            f"the diagnosis of {incident.root.comm.comm_name or incident.root.comm.comm_id} "
            f"changed from {incident.root.verdict.value} to {group.root.verdict.value}"
        )[:1024]
    return (
        f"{old} is no longer diagnosed; {group.root.report_id} ({group.root.verdict.value}) "
        "explains the incident's remaining reports"
    )[:1024]


def _former_root_link(rid: str, group: Group) -> CauseLink:
    for r, cause in group.consequences:
        if r.report_id == rid:
            return cause.link
    return CauseLink.same_culprit


def _merged_stacks(incident: Incident, merged: list[Incident]) -> list[IncidentStack]:
    stacks = list(incident.stacks)
    keys = {_stack_key(s) for s in stacks}
    for other in merged:
        for s in other.stacks:
            if _stack_key(s) not in keys and len(stacks) < MAX_STACKS:
                stacks.append(s)
                keys.add(_stack_key(s))
    return stacks


def _stack_key(s: IncidentStack) -> tuple:
    """One thread of one process: pods of a node share pids, not their host names."""
    node = s.node_name if s.node_name is not UNSET else s.host
    thread = s.thread_id if s.thread_id is not UNSET else None
    return node, s.host, s.pid, thread


def _same_but_time(a: Incident, b: Incident) -> bool:
    return msgspec.structs.replace(a, updated_real_ns=0) == msgspec.structs.replace(
        b, updated_real_ns=0
    )
