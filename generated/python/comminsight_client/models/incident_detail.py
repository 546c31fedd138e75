from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.hang_report import HangReport
  from ..models.incident import Incident





T = TypeVar("T", bound="IncidentDetail")



@_attrs_define
class IncidentDetail:
    """ 
        Attributes:
            incident (Incident): Hang reports that follow from one cause: a root (the report whose culprits explain the
                others) and its consequences (reports of ranks and communicators blocked behind it through shared ranks, streams
                or pipeline dependencies). Opened once with a stable incident_id, updated as evidence arrives (new reports join;
                the root can change, root_changes says why), resolved when the root's op completes or its processes end, or by
                an operator. Only the root pages (severity critical); consequences are reports of severity info. Served by the
                Agent API and written as one JSON file per incident under metadata/incidents/.
            reports (list[HangReport]): The hang reports the incident groups that this agent still holds, the root first,
                then the consequences in the incident's order.
     """

    incident: Incident
    reports: list[HangReport]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.hang_report import HangReport # noqa: PLC0415
        from ..models.incident import Incident # noqa: PLC0415
        incident = self.incident.to_dict()

        reports = []
        for reports_item_data in self.reports:
            reports_item = reports_item_data.to_dict()
            reports.append(reports_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "incident": incident,
            "reports": reports,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.hang_report import HangReport # noqa: PLC0415
        from ..models.incident import Incident # noqa: PLC0415
        d = dict(src_dict)
        incident = Incident.from_dict(d.pop("incident"))




        reports = []
        _reports = d.pop("reports")
        for reports_item_data in (_reports):
            reports_item = HangReport.from_dict(reports_item_data)



            reports.append(reports_item)


        incident_detail = cls(
            incident=incident,
            reports=reports,
        )


        incident_detail.additional_properties = d
        return incident_detail

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
