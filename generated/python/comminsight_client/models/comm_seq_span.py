from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.op_class import OpClass






T = TypeVar("T", bound="CommSeqSpan")



@_attrs_define
class CommSeqSpan:
    """ The ops of one Step on one communicator, as seq numbers: a boundary candidate (comm_id, seq) at each end. Within a
    communicator seq counts up in issue order, so first_seq is the lowest seq of the Step's ops on it and last_seq the
    highest.

        Attributes:
            kind (OpClass): coll = a collective; p2p = a send or receive.
            comm_id (str): Communicator id, 16 lowercase hex digits, zero padded.
            first_seq (int): Seq of the Step's first op on the communicator (as in OpRef.seq).
            last_seq (int): Seq of the Step's last op on the communicator; equals first_seq when the Step had one op there.
            op_count (int): The Step's ops on the communicator of this kind; less than last_seq - first_seq + 1 when records
                were lost.
     """

    kind: OpClass
    comm_id: str
    first_seq: int
    last_seq: int
    op_count: int





    def to_dict(self) -> dict[str, Any]:
        kind = self.kind.value

        comm_id = self.comm_id

        first_seq = self.first_seq

        last_seq = self.last_seq

        op_count = self.op_count


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "kind": kind,
            "comm_id": comm_id,
            "first_seq": first_seq,
            "last_seq": last_seq,
            "op_count": op_count,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        kind = OpClass(d.pop("kind"))




        comm_id = d.pop("comm_id")

        first_seq = d.pop("first_seq")

        last_seq = d.pop("last_seq")

        op_count = d.pop("op_count")

        comm_seq_span = cls(
            kind=kind,
            comm_id=comm_id,
            first_seq=first_seq,
            last_seq=last_seq,
            op_count=op_count,
        )

        return comm_seq_span

