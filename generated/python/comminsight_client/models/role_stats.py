from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="RoleStats")



@_attrs_define
class RoleStats:
    """ Totals of one role's ops within the Step.

        Attributes:
            role (str): A role name from the template's role list (e.g. dp_grad_allreduce, tp_allreduce, pp_send,
                fsdp_param_allgather), or the reserved name `unmatched` for ops no role matched.
            op_count (int): Ops of this role in the Step.
            time_ns (int): Sum of their execution times in nanoseconds.
            bytes_ (int): Sum of their message sizes in bytes.
            busbw_gbs (float): Their time-weighted bus bandwidth in GB/s; 0 when time_ns is 0.
     """

    role: str
    op_count: int
    time_ns: int
    bytes_: int
    busbw_gbs: float





    def to_dict(self) -> dict[str, Any]:
        role = self.role

        op_count = self.op_count

        time_ns = self.time_ns

        bytes_ = self.bytes_

        busbw_gbs = self.busbw_gbs


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "role": role,
            "op_count": op_count,
            "time_ns": time_ns,
            "bytes": bytes_,
            "busbw_gbs": busbw_gbs,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        role = d.pop("role")

        op_count = d.pop("op_count")

        time_ns = d.pop("time_ns")

        bytes_ = d.pop("bytes")

        busbw_gbs = d.pop("busbw_gbs")

        role_stats = cls(
            role=role,
            op_count=op_count,
            time_ns=time_ns,
            bytes_=bytes_,
            busbw_gbs=busbw_gbs,
        )

        return role_stats

