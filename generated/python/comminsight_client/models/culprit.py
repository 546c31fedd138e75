from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset






T = TypeVar("T", bound="Culprit")



@_attrs_define
class Culprit:
    """ A rank the diagnosis blames.

        Attributes:
            comm_rank (int): Rank within the communicator.
            node_name (str): Node name of the rank's Agent (COMMINSIGHT_AGENT_NODE_NAME).
            reason (str): One line saying why this rank is blamed, e.g. "last enqueued #18606; others are in #18607 for 312
                s".
            global_rank (int | Unset): Global rank of the process (RANK); absent when unknown.
            host (str | Unset): Host name the rank's process reported; absent when no data arrived from it.
            pid (int | Unset): Process id; absent when no data arrived from it.
            pid_namespace (int | Unset): Inode of the PID namespace the pid is numbered in (pods on one node each have their
                own, so a pid alone may name two processes); absent where the Profiler did not record it or no data arrived.
     """

    comm_rank: int
    node_name: str
    reason: str
    global_rank: int | Unset = UNSET
    host: str | Unset = UNSET
    pid: int | Unset = UNSET
    pid_namespace: int | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        comm_rank = self.comm_rank

        node_name = self.node_name

        reason = self.reason

        global_rank = self.global_rank

        host = self.host

        pid = self.pid

        pid_namespace = self.pid_namespace


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "comm_rank": comm_rank,
            "node_name": node_name,
            "reason": reason,
        })
        if global_rank is not UNSET:
            field_dict["global_rank"] = global_rank
        if host is not UNSET:
            field_dict["host"] = host
        if pid is not UNSET:
            field_dict["pid"] = pid
        if pid_namespace is not UNSET:
            field_dict["pid_namespace"] = pid_namespace

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        comm_rank = d.pop("comm_rank")

        node_name = d.pop("node_name")

        reason = d.pop("reason")

        global_rank = d.pop("global_rank", UNSET)

        host = d.pop("host", UNSET)

        pid = d.pop("pid", UNSET)

        pid_namespace = d.pop("pid_namespace", UNSET)

        culprit = cls(
            comm_rank=comm_rank,
            node_name=node_name,
            reason=reason,
            global_rank=global_rank,
            host=host,
            pid=pid,
            pid_namespace=pid_namespace,
        )

        return culprit

