from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="NodeReject")



@_attrs_define
class NodeReject:
    """ Why the master refused a slave (as sent to the slave over agent-master-slave).

        Attributes:
            reason (str): The agent-master-slave RejectReason, lower case without its prefix (wrong_token, version_mismatch,
                oversized, malformed, ...). The proto enum is the one list of reasons.
            message (str):
            at_real_ns (int):
            peer (str): The slave's address as gRPC saw it.
     """

    reason: str
    message: str
    at_real_ns: int
    peer: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        reason = self.reason

        message = self.message

        at_real_ns = self.at_real_ns

        peer = self.peer


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "reason": reason,
            "message": message,
            "at_real_ns": at_real_ns,
            "peer": peer,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        reason = d.pop("reason")

        message = d.pop("message")

        at_real_ns = d.pop("at_real_ns")

        peer = d.pop("peer")

        node_reject = cls(
            reason=reason,
            message=message,
            at_real_ns=at_real_ns,
            peer=peer,
        )


        node_reject.additional_properties = d
        return node_reject

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
