from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast






T = TypeVar("T", bound="ArchiveError")



@_attrs_define
class ArchiveError:
    """ 
        Attributes:
            message (str):
            file (None | str): The file being uploaded, if any.
            at_real_ns (int):
            attempts (int): Attempts so far for that file.
     """

    message: str
    file: None | str
    at_real_ns: int
    attempts: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        message = self.message

        file: None | str
        file = self.file

        at_real_ns = self.at_real_ns

        attempts = self.attempts


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "message": message,
            "file": file,
            "at_real_ns": at_real_ns,
            "attempts": attempts,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        message = d.pop("message")

        def _parse_file(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        file = _parse_file(d.pop("file"))


        at_real_ns = d.pop("at_real_ns")

        attempts = d.pop("attempts")

        archive_error = cls(
            message=message,
            file=file,
            at_real_ns=at_real_ns,
            attempts=attempts,
        )


        archive_error.additional_properties = d
        return archive_error

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
