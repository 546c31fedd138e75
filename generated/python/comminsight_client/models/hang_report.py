from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.culprit_basis import CulpritBasis
from ..models.report_status import ReportStatus
from ..models.resolution import Resolution
from ..models.severity import Severity
from ..models.verdict import Verdict
from ..types import UNSET, Unset
from typing import cast
from typing import Literal, cast

if TYPE_CHECKING:
  from ..models.comm_ref import CommRef
  from ..models.culprit import Culprit
  from ..models.op_info import OpInfo
  from ..models.rank_evidence import RankEvidence





T = TypeVar("T", bound="HangReport")



@_attrs_define
class HangReport:
    """ One hang (or slowness) diagnosis the Agent made across the ranks of one communicator: the verdict, who is to blame,
    and the evidence from every rank. Served by the Agent API, counted in metrics, and written as one JSON file per
    report under metadata/hangs/. A report is open while the condition lasts and is rewritten once as resolved when it
    ends; report_id stays the same. Events on a rank's host are given as wall-clock time (*_real_ns, comparable across
    hosts up to clock skew) with an age measured on that host's monotonic clock (*_age_ms, immune to skew), as in agent-
    master-api. comm_rank is a rank inside the communicator, global_rank the process's RANK. Its $defs also define the
    Incident record (reports grouped by one cause), written under metadata/incidents/ and served by the Agent API.

        Attributes:
            schema_version (Literal[1]): Version of this record format; readers refuse other versions.
            report_id (str): Stable identifier of the report, derived from communicator, sequence number and verdict so that
                diagnosing the same condition again updates the same report.
            diagnosed_by (str): Node name of the Agent that made the diagnosis (COMMINSIGHT_AGENT_NODE_NAME).
            detected_mono_ns (int): CLOCK_MONOTONIC time of the diagnosis on the diagnosing Agent's host.
            detected_real_ns (int): CLOCK_REALTIME time of the diagnosis, nanoseconds since the Unix epoch.
            verdict (Verdict): rank_not_joined: some ranks have not enqueued the operation (op.seq) while the others wait in
                it (culprits: the missing ranks). op_mismatch: ranks enqueued different operations (func, count, datatype or
                root/peer) at the same sequence number. all_joined_none_complete: every rank enqueued the op and none completes
                (culprits: a peer the proxy/network evidence points at, if any). stuck_outside_nccl: no op in flight and no
                progress for longer than the threshold while other ranks wait. process_died: a rank's process is gone or its
                heartbeat is stale. comm_init_stuck: communicator initialization has not finished on some ranks. straggler: no
                hang, but some ranks join ops consistently later than the others. inconclusive: the evidence is insufficient
                (e.g. ranks whose node Agent is unreachable). rank_left: ranks left the communicator while the others wait in
                the operation (op), which can therefore never complete: they finalized it (ncclCommDestroy or ncclCommAbort; the
                uneven-inputs end of data-parallel training, where a rank out of data destroys its process group and exits), or
                their process ended and its rows were retired (culprits: the ranks that left; the reason says how and whether
                the process exited). Added after release 0.1.0, as the last value: a reader of an earlier release does not know
                it.
            severity (Severity): critical: training is stopped (a hang or a dead process); warning: training runs but
                degraded (straggler) or the diagnosis is uncertain; info: informational.
            comm (CommRef): Identity of the communicator.
            culprits (list[Culprit]): Ranks blamed, most likely first; empty when the evidence names none (inconclusive).
            evidence (list[RankEvidence]): What each rank of the communicator last did, one entry per rank, ordered by rank.
                Ranks the Agent has no data for are listed with process_state unknown.
            threshold_ms (int): Hang threshold in force (COMMINSIGHT_PROFILER_HANG_TIMEOUT_S) in milliseconds; for
                straggler, the lag threshold.
            summary (str): One or two human-readable sentences, e.g. "rank 5 (node-a02, pid 7711) has not joined AllReduce
                #18607 on default_pg:0; 15 ranks waiting 312 s".
            status (ReportStatus): open or resolved.
            job_id (str | Unset): Job identifier; absent when unknown.
            op (OpInfo | Unset): An operation on the communicator, identified by its sequence number.
            culprit_basis (CulpritBasis | Unset): majority: most ranks issued one op, the culprits issued another. rhythm:
                no majority (two ranks, an even split); the culprits issued an op other than the one the communicator's cycle
                expects there (the job's Step cycle as the Semantic Engine learned it, or the repeating sequence of the ops the
                ranks completed before), which the other ranks issued; the culprit's reason names the evidence. undecided:
                neither could tell (no majority, and no rhythm known, or one that expects an op no rank issued); culprits is
                empty and the summary names each side's op and why nothing decided.
            resolved_mono_ns (int | Unset): CLOCK_MONOTONIC time (diagnosing Agent's host) the condition was seen to end;
                present when status is resolved.
            resolved_real_ns (int | Unset): CLOCK_REALTIME time the condition was seen to end, nanoseconds since the Unix
                epoch; present when status is resolved.
            resolution (Resolution | Unset): op_completed: the operation completed on every rank; comm_finalized: the
                communicator was finalized or aborted; process_exited: the processes exited; superseded: a later report with
                another verdict replaced this one; expired: no more data arrived (e.g. the job ended); operator: a person
                resolved it through the Agent API (resolution_note says why).
            resolution_note (str | Unset): Free text kept with the report when an operator resolved it through the API;
                absent otherwise.
     """

    schema_version: Literal[1]
    report_id: str
    diagnosed_by: str
    detected_mono_ns: int
    detected_real_ns: int
    verdict: Verdict
    severity: Severity
    comm: CommRef
    culprits: list[Culprit]
    evidence: list[RankEvidence]
    threshold_ms: int
    summary: str
    status: ReportStatus
    job_id: str | Unset = UNSET
    op: OpInfo | Unset = UNSET
    culprit_basis: CulpritBasis | Unset = UNSET
    resolved_mono_ns: int | Unset = UNSET
    resolved_real_ns: int | Unset = UNSET
    resolution: Resolution | Unset = UNSET
    resolution_note: str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.comm_ref import CommRef # noqa: PLC0415
        from ..models.culprit import Culprit # noqa: PLC0415
        from ..models.op_info import OpInfo # noqa: PLC0415
        from ..models.rank_evidence import RankEvidence # noqa: PLC0415
        schema_version = self.schema_version

        report_id = self.report_id

        diagnosed_by = self.diagnosed_by

        detected_mono_ns = self.detected_mono_ns

        detected_real_ns = self.detected_real_ns

        verdict = self.verdict.value

        severity = self.severity.value

        comm = self.comm.to_dict()

        culprits = []
        for culprits_item_data in self.culprits:
            culprits_item = culprits_item_data.to_dict()
            culprits.append(culprits_item)



        evidence = []
        for evidence_item_data in self.evidence:
            evidence_item = evidence_item_data.to_dict()
            evidence.append(evidence_item)



        threshold_ms = self.threshold_ms

        summary = self.summary

        status = self.status.value

        job_id = self.job_id

        op: dict[str, Any] | Unset = UNSET
        if not isinstance(self.op, Unset):
            op = self.op.to_dict()

        culprit_basis: str | Unset = UNSET
        if not isinstance(self.culprit_basis, Unset):
            culprit_basis = self.culprit_basis.value


        resolved_mono_ns = self.resolved_mono_ns

        resolved_real_ns = self.resolved_real_ns

        resolution: str | Unset = UNSET
        if not isinstance(self.resolution, Unset):
            resolution = self.resolution.value


        resolution_note = self.resolution_note


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "schema_version": schema_version,
            "report_id": report_id,
            "diagnosed_by": diagnosed_by,
            "detected_mono_ns": detected_mono_ns,
            "detected_real_ns": detected_real_ns,
            "verdict": verdict,
            "severity": severity,
            "comm": comm,
            "culprits": culprits,
            "evidence": evidence,
            "threshold_ms": threshold_ms,
            "summary": summary,
            "status": status,
        })
        if job_id is not UNSET:
            field_dict["job_id"] = job_id
        if op is not UNSET:
            field_dict["op"] = op
        if culprit_basis is not UNSET:
            field_dict["culprit_basis"] = culprit_basis
        if resolved_mono_ns is not UNSET:
            field_dict["resolved_mono_ns"] = resolved_mono_ns
        if resolved_real_ns is not UNSET:
            field_dict["resolved_real_ns"] = resolved_real_ns
        if resolution is not UNSET:
            field_dict["resolution"] = resolution
        if resolution_note is not UNSET:
            field_dict["resolution_note"] = resolution_note

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.comm_ref import CommRef # noqa: PLC0415
        from ..models.culprit import Culprit # noqa: PLC0415
        from ..models.op_info import OpInfo # noqa: PLC0415
        from ..models.rank_evidence import RankEvidence # noqa: PLC0415
        d = dict(src_dict)
        schema_version = cast(Literal[1] , d.pop("schema_version"))
        if schema_version != 1:
            raise ValueError(f"schema_version must match const 1, got '{schema_version}'")

        report_id = d.pop("report_id")

        diagnosed_by = d.pop("diagnosed_by")

        detected_mono_ns = d.pop("detected_mono_ns")

        detected_real_ns = d.pop("detected_real_ns")

        verdict = Verdict(d.pop("verdict"))




        severity = Severity(d.pop("severity"))




        comm = CommRef.from_dict(d.pop("comm"))




        culprits = []
        _culprits = d.pop("culprits")
        for culprits_item_data in (_culprits):
            culprits_item = Culprit.from_dict(culprits_item_data)



            culprits.append(culprits_item)


        evidence = []
        _evidence = d.pop("evidence")
        for evidence_item_data in (_evidence):
            evidence_item = RankEvidence.from_dict(evidence_item_data)



            evidence.append(evidence_item)


        threshold_ms = d.pop("threshold_ms")

        summary = d.pop("summary")

        status = ReportStatus(d.pop("status"))




        job_id = d.pop("job_id", UNSET)

        _op = d.pop("op", UNSET)
        op: OpInfo | Unset
        if isinstance(_op,  Unset):
            op = UNSET
        else:
            op = OpInfo.from_dict(_op)




        _culprit_basis = d.pop("culprit_basis", UNSET)
        culprit_basis: CulpritBasis | Unset
        if isinstance(_culprit_basis,  Unset):
            culprit_basis = UNSET
        else:
            culprit_basis = CulpritBasis(_culprit_basis)




        resolved_mono_ns = d.pop("resolved_mono_ns", UNSET)

        resolved_real_ns = d.pop("resolved_real_ns", UNSET)

        _resolution = d.pop("resolution", UNSET)
        resolution: Resolution | Unset
        if isinstance(_resolution,  Unset):
            resolution = UNSET
        else:
            resolution = Resolution(_resolution)




        resolution_note = d.pop("resolution_note", UNSET)

        hang_report = cls(
            schema_version=schema_version,
            report_id=report_id,
            diagnosed_by=diagnosed_by,
            detected_mono_ns=detected_mono_ns,
            detected_real_ns=detected_real_ns,
            verdict=verdict,
            severity=severity,
            comm=comm,
            culprits=culprits,
            evidence=evidence,
            threshold_ms=threshold_ms,
            summary=summary,
            status=status,
            job_id=job_id,
            op=op,
            culprit_basis=culprit_basis,
            resolved_mono_ns=resolved_mono_ns,
            resolved_real_ns=resolved_real_ns,
            resolution=resolution,
            resolution_note=resolution_note,
        )

        return hang_report

