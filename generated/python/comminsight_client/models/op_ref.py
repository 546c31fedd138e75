from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.op_class import OpClass
from ..types import UNSET, Unset






T = TypeVar("T", bound="OpRef")



@_attrs_define
class OpRef:
    """ Points at one op of this GPU's stream: the communicator, and the op's sequence number in it.

        Attributes:
            kind (OpClass): coll = a collective; p2p = a send or receive.
            comm_id (str): Communicator id (NCCL commId / commHash) as 16 lowercase hex digits, zero padded, as in every
                CommInsight protocol.
            seq (int): The op's sequence number in the communicator: NCCL's seqNumber (coll_sn) for a collective, the
                communicator's P2P counter (p2p_sn) for a send/receive.
            func (str): Function name as recorded, e.g. "AllReduce", "Send".
            ring_seq (int | Unset): The op record's ring_seq in its producer's log, when the input had one (CommInsight
                logs).
     """

    kind: OpClass
    comm_id: str
    seq: int
    func: str
    ring_seq: int | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        kind = self.kind.value

        comm_id = self.comm_id

        seq = self.seq

        func = self.func

        ring_seq = self.ring_seq


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "kind": kind,
            "comm_id": comm_id,
            "seq": seq,
            "func": func,
        })
        if ring_seq is not UNSET:
            field_dict["ring_seq"] = ring_seq

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        kind = OpClass(d.pop("kind"))




        comm_id = d.pop("comm_id")

        seq = d.pop("seq")

        func = d.pop("func")

        ring_seq = d.pop("ring_seq", UNSET)

        op_ref = cls(
            kind=kind,
            comm_id=comm_id,
            seq=seq,
            func=func,
            ring_seq=ring_seq,
        )

        return op_ref

