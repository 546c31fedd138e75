from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset






T = TypeVar("T", bound="CommRef")



@_attrs_define
class CommRef:
    """ Identity of the communicator.

        Attributes:
            comm_id (str): Communicator id (NCCL commId / commHash) as 16 lowercase hex digits, zero padded (the agent-
                master-api CommId).
            nranks (int): Number of ranks in the communicator.
            comm_name (str | Unset): Communicator name; absent when there is none.
            nnodes (int | Unset): Number of nodes it spans; absent when unknown.
     """

    comm_id: str
    nranks: int
    comm_name: str | Unset = UNSET
    nnodes: int | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        comm_id = self.comm_id

        nranks = self.nranks

        comm_name = self.comm_name

        nnodes = self.nnodes


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "comm_id": comm_id,
            "nranks": nranks,
        })
        if comm_name is not UNSET:
            field_dict["comm_name"] = comm_name
        if nnodes is not UNSET:
            field_dict["nnodes"] = nnodes

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        comm_id = d.pop("comm_id")

        nranks = d.pop("nranks")

        comm_name = d.pop("comm_name", UNSET)

        nnodes = d.pop("nnodes", UNSET)

        comm_ref = cls(
            comm_id=comm_id,
            nranks=nranks,
            comm_name=comm_name,
            nnodes=nnodes,
        )

        return comm_ref

