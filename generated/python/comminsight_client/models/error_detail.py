from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.error_location import ErrorLocation






T = TypeVar("T", bound="ErrorDetail")



@_attrs_define
class ErrorDetail:
    """ 
        Attributes:
            location (ErrorLocation):
            name (str): The parameter or header name, or a JSON Pointer into the body (e.g. /note).
            reason (str): What is wrong with it, e.g. "must match ^[0-9a-f]{16}$".
     """

    location: ErrorLocation
    name: str
    reason: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        location = self.location.value

        name = self.name

        reason = self.reason


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "location": location,
            "name": name,
            "reason": reason,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        location = ErrorLocation(d.pop("location"))




        name = d.pop("name")

        reason = d.pop("reason")

        error_detail = cls(
            location=location,
            name=name,
            reason=reason,
        )


        error_detail.additional_properties = d
        return error_detail

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
