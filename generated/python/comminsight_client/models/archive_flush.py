from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="ArchiveFlush")



@_attrs_define
class ArchiveFlush:
    """ 
        Attributes:
            queued_files (int):
            queued_bytes (int):
            requested_real_ns (int):
            already_running (bool): A flush was running; its queue now includes every sealed file.
     """

    queued_files: int
    queued_bytes: int
    requested_real_ns: int
    already_running: bool
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        queued_files = self.queued_files

        queued_bytes = self.queued_bytes

        requested_real_ns = self.requested_real_ns

        already_running = self.already_running


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "queued_files": queued_files,
            "queued_bytes": queued_bytes,
            "requested_real_ns": requested_real_ns,
            "already_running": already_running,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        queued_files = d.pop("queued_files")

        queued_bytes = d.pop("queued_bytes")

        requested_real_ns = d.pop("requested_real_ns")

        already_running = d.pop("already_running")

        archive_flush = cls(
            queued_files=queued_files,
            queued_bytes=queued_bytes,
            requested_real_ns=requested_real_ns,
            already_running=already_running,
        )


        archive_flush.additional_properties = d
        return archive_flush

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
