from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.op_class import OpClass
from ..types import UNSET, Unset






T = TypeVar("T", bound="OpInfo")



@_attrs_define
class OpInfo:
    """ An operation on the communicator, identified by its sequence number.

        Attributes:
            kind (OpClass): coll = a collective; p2p = a send or receive.
            func (str): Function name as NCCL reported it, e.g. "AllReduce", "Send".
            seq (int): Sequence number: NCCL's seqNumber for a collective (coll_sn), the communicator's own counter for a
                send/receive (p2p_sn).
            count (int): Element count.
            datatype (str): NCCL datatype name, e.g. "ncclBfloat16".
            size_bytes (int): Message size: element count times datatype size.
            index (int | Unset): The op's index on the communicator, as summaries print it (#N): the communicator's ops
                counted in issue order, every function together (NCCL's seq counts each collective function apart); the same op
                has the same index on every rank. Absent in reports from Agents that did not record it.
            root (int | Unset): Root rank of a rooted collective; absent otherwise.
            peer (int | Unset): Peer rank of a send/receive; absent otherwise.
     """

    kind: OpClass
    func: str
    seq: int
    count: int
    datatype: str
    size_bytes: int
    index: int | Unset = UNSET
    root: int | Unset = UNSET
    peer: int | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        kind = self.kind.value

        func = self.func

        seq = self.seq

        count = self.count

        datatype = self.datatype

        size_bytes = self.size_bytes

        index = self.index

        root = self.root

        peer = self.peer


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "kind": kind,
            "func": func,
            "seq": seq,
            "count": count,
            "datatype": datatype,
            "size_bytes": size_bytes,
        })
        if index is not UNSET:
            field_dict["index"] = index
        if root is not UNSET:
            field_dict["root"] = root
        if peer is not UNSET:
            field_dict["peer"] = peer

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        kind = OpClass(d.pop("kind"))




        func = d.pop("func")

        seq = d.pop("seq")

        count = d.pop("count")

        datatype = d.pop("datatype")

        size_bytes = d.pop("size_bytes")

        index = d.pop("index", UNSET)

        root = d.pop("root", UNSET)

        peer = d.pop("peer", UNSET)

        op_info = cls(
            kind=kind,
            func=func,
            seq=seq,
            count=count,
            datatype=datatype,
            size_bytes=size_bytes,
            index=index,
            root=root,
            peer=peer,
        )

        return op_info

