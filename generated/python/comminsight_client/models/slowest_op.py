from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.op_class import OpClass
from ..types import UNSET, Unset






T = TypeVar("T", bound="SlowestOp")



@_attrs_define
class SlowestOp:
    """ The Step's slowest op and what it was.

        Attributes:
            kind (OpClass): coll = a collective; p2p = a send or receive.
            func (str): Function name, e.g. "ReduceScatter".
            seq (int): Sequence number in its communicator (as in OpRef.seq).
            comm_id (str): Communicator id, 16 lowercase hex digits, zero padded.
            role (str): A role name from the template's role list (e.g. dp_grad_allreduce, tp_allreduce, pp_send,
                fsdp_param_allgather), or the reserved name `unmatched` for ops no role matched.
            duration_ns (int): Its execution time in nanoseconds.
            size_bytes (int): Its message size in bytes.
            busbw_gbs (float): Its bus bandwidth in GB/s.
            comm_name (str | Unset): Communicator name; absent when unknown.
     """

    kind: OpClass
    func: str
    seq: int
    comm_id: str
    role: str
    duration_ns: int
    size_bytes: int
    busbw_gbs: float
    comm_name: str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        kind = self.kind.value

        func = self.func

        seq = self.seq

        comm_id = self.comm_id

        role = self.role

        duration_ns = self.duration_ns

        size_bytes = self.size_bytes

        busbw_gbs = self.busbw_gbs

        comm_name = self.comm_name


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "kind": kind,
            "func": func,
            "seq": seq,
            "comm_id": comm_id,
            "role": role,
            "duration_ns": duration_ns,
            "size_bytes": size_bytes,
            "busbw_gbs": busbw_gbs,
        })
        if comm_name is not UNSET:
            field_dict["comm_name"] = comm_name

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        kind = OpClass(d.pop("kind"))




        func = d.pop("func")

        seq = d.pop("seq")

        comm_id = d.pop("comm_id")

        role = d.pop("role")

        duration_ns = d.pop("duration_ns")

        size_bytes = d.pop("size_bytes")

        busbw_gbs = d.pop("busbw_gbs")

        comm_name = d.pop("comm_name", UNSET)

        slowest_op = cls(
            kind=kind,
            func=func,
            seq=seq,
            comm_id=comm_id,
            role=role,
            duration_ns=duration_ns,
            size_bytes=size_bytes,
            busbw_gbs=busbw_gbs,
            comm_name=comm_name,
        )

        return slowest_op

