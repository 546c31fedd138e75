from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.error_code import ErrorCode
from typing import cast

if TYPE_CHECKING:
  from ..models.error_detail import ErrorDetail





T = TypeVar("T", bound="Error")



@_attrs_define
class Error:
    """ The one error body of this API.

        Attributes:
            code (ErrorCode): Machine-readable error class; the HTTP status says the same thing coarsely.
            message (str): Human-readable, one line.
            details (list[ErrorDetail]): One entry per offending parameter or body field; empty when none applies.
     """

    code: ErrorCode
    message: str
    details: list[ErrorDetail]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.error_detail import ErrorDetail # noqa: PLC0415
        code = self.code.value

        message = self.message

        details = []
        for details_item_data in self.details:
            details_item = details_item_data.to_dict()
            details.append(details_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "code": code,
            "message": message,
            "details": details,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.error_detail import ErrorDetail # noqa: PLC0415
        d = dict(src_dict)
        code = ErrorCode(d.pop("code"))




        message = d.pop("message")

        details = []
        _details = d.pop("details")
        for details_item_data in (_details):
            details_item = ErrorDetail.from_dict(details_item_data)



            details.append(details_item)


        error = cls(
            code=code,
            message=message,
            details=details,
        )


        error.additional_properties = d
        return error

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
