from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.incident_status import IncidentStatus
from ..models.resolution import Resolution
from ..models.severity import Severity
from ..types import UNSET, Unset
from typing import cast
from typing import Literal, cast

if TYPE_CHECKING:
  from ..models.incident_consequence import IncidentConsequence
  from ..models.incident_root import IncidentRoot
  from ..models.incident_stack import IncidentStack
  from ..models.root_change import RootChange





T = TypeVar("T", bound="Incident")



@_attrs_define
class Incident:
    """ Hang reports that follow from one cause: a root (the report whose culprits explain the others) and its consequences
    (reports of ranks and communicators blocked behind it through shared ranks, streams or pipeline dependencies).
    Opened once with a stable incident_id, updated as evidence arrives (new reports join; the root can change,
    root_changes says why), resolved when the root's op completes or its processes end, or by an operator. Only the root
    pages (severity critical); consequences are reports of severity info. Served by the Agent API and written as one
    JSON file per incident under metadata/incidents/.

        Attributes:
            schema_version (Literal[1]): Version of this record format; readers refuse other versions.
            incident_id (str): Stable identifier, derived from the first root report's id.
            diagnosed_by (str): Node name of the Agent that grouped it (a master groups the whole job).
            status (IncidentStatus): open while its root's condition lasts; resolved once the root's op completed, its
                processes ended, it was merged into another incident, or an operator resolved it.
            severity (Severity): critical: training is stopped (a hang or a dead process); warning: training runs but
                degraded (straggler) or the diagnosis is uncertain; info: informational.
            root (IncidentRoot): The report that explains the others: its culprits, verdict, communicator and op.
            consequences (list[IncidentConsequence]): Reports blocked behind the root, each with the link that places it;
                every report ever grouped into the incident, including ones resolved since.
            root_changes (list[RootChange]): Earlier roots and why each was replaced, oldest first; empty when the root
                never changed.
            opened_mono_ns (int): CLOCK_MONOTONIC time (grouping Agent's host) the incident opened.
            opened_real_ns (int): CLOCK_REALTIME time the incident opened.
            updated_real_ns (int): CLOCK_REALTIME time of the latest change (a report joined, the root changed, stacks
                arrived, it resolved).
            stacks (list[IncidentStack]): Python stacks of the root's culprit ranks (and ranks waiting on them) when
                captured; empty until a capture is attached.
            job_id (str | Unset): Job identifier; absent when unknown.
            resolved_mono_ns (int | Unset): CLOCK_MONOTONIC time it resolved; present when status is resolved.
            resolved_real_ns (int | Unset): CLOCK_REALTIME time it resolved; present when status is resolved.
            resolution (Resolution | Unset): op_completed: the operation completed on every rank; comm_finalized: the
                communicator was finalized or aborted; process_exited: the processes exited; superseded: a later report with
                another verdict replaced this one; expired: no more data arrived (e.g. the job ended); operator: a person
                resolved it through the Agent API (resolution_note says why).
            resolution_note (str | Unset): Why it was resolved: an operator's note, or the incident it was merged into.
            merged_into (str | Unset): The incident that took over its reports when evidence showed both had one cause;
                present only then.
     """

    schema_version: Literal[1]
    incident_id: str
    diagnosed_by: str
    status: IncidentStatus
    severity: Severity
    root: IncidentRoot
    consequences: list[IncidentConsequence]
    root_changes: list[RootChange]
    opened_mono_ns: int
    opened_real_ns: int
    updated_real_ns: int
    stacks: list[IncidentStack]
    job_id: str | Unset = UNSET
    resolved_mono_ns: int | Unset = UNSET
    resolved_real_ns: int | Unset = UNSET
    resolution: Resolution | Unset = UNSET
    resolution_note: str | Unset = UNSET
    merged_into: str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.incident_consequence import IncidentConsequence # noqa: PLC0415
        from ..models.incident_root import IncidentRoot # noqa: PLC0415
        from ..models.incident_stack import IncidentStack # noqa: PLC0415
        from ..models.root_change import RootChange # noqa: PLC0415
        schema_version = self.schema_version

        incident_id = self.incident_id

        diagnosed_by = self.diagnosed_by

        status = self.status.value

        severity = self.severity.value

        root = self.root.to_dict()

        consequences = []
        for consequences_item_data in self.consequences:
            consequences_item = consequences_item_data.to_dict()
            consequences.append(consequences_item)



        root_changes = []
        for root_changes_item_data in self.root_changes:
            root_changes_item = root_changes_item_data.to_dict()
            root_changes.append(root_changes_item)



        opened_mono_ns = self.opened_mono_ns

        opened_real_ns = self.opened_real_ns

        updated_real_ns = self.updated_real_ns

        stacks = []
        for stacks_item_data in self.stacks:
            stacks_item = stacks_item_data.to_dict()
            stacks.append(stacks_item)



        job_id = self.job_id

        resolved_mono_ns = self.resolved_mono_ns

        resolved_real_ns = self.resolved_real_ns

        resolution: str | Unset = UNSET
        if not isinstance(self.resolution, Unset):
            resolution = self.resolution.value


        resolution_note = self.resolution_note

        merged_into = self.merged_into


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "schema_version": schema_version,
            "incident_id": incident_id,
            "diagnosed_by": diagnosed_by,
            "status": status,
            "severity": severity,
            "root": root,
            "consequences": consequences,
            "root_changes": root_changes,
            "opened_mono_ns": opened_mono_ns,
            "opened_real_ns": opened_real_ns,
            "updated_real_ns": updated_real_ns,
            "stacks": stacks,
        })
        if job_id is not UNSET:
            field_dict["job_id"] = job_id
        if resolved_mono_ns is not UNSET:
            field_dict["resolved_mono_ns"] = resolved_mono_ns
        if resolved_real_ns is not UNSET:
            field_dict["resolved_real_ns"] = resolved_real_ns
        if resolution is not UNSET:
            field_dict["resolution"] = resolution
        if resolution_note is not UNSET:
            field_dict["resolution_note"] = resolution_note
        if merged_into is not UNSET:
            field_dict["merged_into"] = merged_into

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.incident_consequence import IncidentConsequence # noqa: PLC0415
        from ..models.incident_root import IncidentRoot # noqa: PLC0415
        from ..models.incident_stack import IncidentStack # noqa: PLC0415
        from ..models.root_change import RootChange # noqa: PLC0415
        d = dict(src_dict)
        schema_version = cast(Literal[1] , d.pop("schema_version"))
        if schema_version != 1:
            raise ValueError(f"schema_version must match const 1, got '{schema_version}'")

        incident_id = d.pop("incident_id")

        diagnosed_by = d.pop("diagnosed_by")

        status = IncidentStatus(d.pop("status"))




        severity = Severity(d.pop("severity"))




        root = IncidentRoot.from_dict(d.pop("root"))




        consequences = []
        _consequences = d.pop("consequences")
        for consequences_item_data in (_consequences):
            consequences_item = IncidentConsequence.from_dict(consequences_item_data)



            consequences.append(consequences_item)


        root_changes = []
        _root_changes = d.pop("root_changes")
        for root_changes_item_data in (_root_changes):
            root_changes_item = RootChange.from_dict(root_changes_item_data)



            root_changes.append(root_changes_item)


        opened_mono_ns = d.pop("opened_mono_ns")

        opened_real_ns = d.pop("opened_real_ns")

        updated_real_ns = d.pop("updated_real_ns")

        stacks = []
        _stacks = d.pop("stacks")
        for stacks_item_data in (_stacks):
            stacks_item = IncidentStack.from_dict(stacks_item_data)



            stacks.append(stacks_item)


        job_id = d.pop("job_id", UNSET)

        resolved_mono_ns = d.pop("resolved_mono_ns", UNSET)

        resolved_real_ns = d.pop("resolved_real_ns", UNSET)

        _resolution = d.pop("resolution", UNSET)
        resolution: Resolution | Unset
        if isinstance(_resolution,  Unset):
            resolution = UNSET
        else:
            resolution = Resolution(_resolution)




        resolution_note = d.pop("resolution_note", UNSET)

        merged_into = d.pop("merged_into", UNSET)

        incident = cls(
            schema_version=schema_version,
            incident_id=incident_id,
            diagnosed_by=diagnosed_by,
            status=status,
            severity=severity,
            root=root,
            consequences=consequences,
            root_changes=root_changes,
            opened_mono_ns=opened_mono_ns,
            opened_real_ns=opened_real_ns,
            updated_real_ns=updated_real_ns,
            stacks=stacks,
            job_id=job_id,
            resolved_mono_ns=resolved_mono_ns,
            resolved_real_ns=resolved_real_ns,
            resolution=resolution,
            resolution_note=resolution_note,
            merged_into=merged_into,
        )

        return incident

