from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="SemanticEngineFailure")



@_attrs_define
class SemanticEngineFailure:
    """ 
        Attributes:
            reason (str): The kind of failure, the exception's type (e.g. RecursionError): the reason label of
                comminsight_semantic_engine_failures_total.
            message (str): The exception, one line.
            pid (int): The process whose engine failed.
            failed_real_ns (int):
     """

    reason: str
    message: str
    pid: int
    failed_real_ns: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        reason = self.reason

        message = self.message

        pid = self.pid

        failed_real_ns = self.failed_real_ns


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "reason": reason,
            "message": message,
            "pid": pid,
            "failed_real_ns": failed_real_ns,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        reason = d.pop("reason")

        message = d.pop("message")

        pid = d.pop("pid")

        failed_real_ns = d.pop("failed_real_ns")

        semantic_engine_failure = cls(
            reason=reason,
            message=message,
            pid=pid,
            failed_real_ns=failed_real_ns,
        )


        semantic_engine_failure.additional_properties = d
        return semantic_engine_failure

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
