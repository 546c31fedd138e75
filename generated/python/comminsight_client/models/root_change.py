from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="RootChange")



@_attrs_define
class RootChange:
    """ The incident's root was replaced by a better explanation.

        Attributes:
            at_real_ns (int): When the Agent changed it, CLOCK_REALTIME nanoseconds.
            from_report_id (str): The former root report.
            to_report_id (str): The new root report.
            reason (str): Why: e.g. the former root's culprit turned out to wait in the new root's op.
     """

    at_real_ns: int
    from_report_id: str
    to_report_id: str
    reason: str





    def to_dict(self) -> dict[str, Any]:
        at_real_ns = self.at_real_ns

        from_report_id = self.from_report_id

        to_report_id = self.to_report_id

        reason = self.reason


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "at_real_ns": at_real_ns,
            "from_report_id": from_report_id,
            "to_report_id": to_report_id,
            "reason": reason,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        at_real_ns = d.pop("at_real_ns")

        from_report_id = d.pop("from_report_id")

        to_report_id = d.pop("to_report_id")

        reason = d.pop("reason")

        root_change = cls(
            at_real_ns=at_real_ns,
            from_report_id=from_report_id,
            to_report_id=to_report_id,
            reason=reason,
        )

        return root_change

