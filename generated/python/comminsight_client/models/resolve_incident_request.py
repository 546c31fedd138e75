from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset






T = TypeVar("T", bound="ResolveIncidentRequest")



@_attrs_define
class ResolveIncidentRequest:
    """ 
        Attributes:
            note (str | Unset): Why it is resolved, kept with the incident and its reports.
     """

    note: str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        note = self.note


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if note is not UNSET:
            field_dict["note"] = note

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        note = d.pop("note", UNSET)

        resolve_incident_request = cls(
            note=note,
        )

        return resolve_incident_request

