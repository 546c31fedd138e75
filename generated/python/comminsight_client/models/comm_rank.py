from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.comm_progress import CommProgress





T = TypeVar("T", bound="CommRank")



@_attrs_define
class CommRank:
    """ One rank of a communicator, where it runs, and its live progress.

        Attributes:
            comm_rank (int): A rank (global rank in the job unless the field name says comm_rank).
            global_rank (int | None):
            local_rank (int | None):
            node_name (str): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host name); unique in a job.
            pid (int):
            cuda_device (int | None):
            device_uuid (None | str):
            alive (bool):
            progress (CommProgress): Live progress of one rank in one communicator, from the profiler's communicator table
                (shm v1 comm_entry). Collectives and point-to-point ops are counted separately because
                only collective sequence numbers line up across all ranks of a communicator; hang
                diagnosis compares `collectives` across ranks and `p2p` between peers.
            pid_namespace (int | None | Unset): Inode of the PID namespace pid is numbered in: pods on one node each number
                their own, so with pid it names the process. Null where the Profiler did not record it.
            same_state_ranks (None | str | Unset): On a master fed through relays: the other ranks this entry stands for,
                which a relay
                found in the same state (same counts, same op in flight), as runs ("0-6,8-99999");
                null for a rank's own entry. Their own rows stay on their nodes' Agents.
            same_state_count (int | Unset): Ranks this entry stands for, itself included (1 for a rank's own entry).
                Default: 1.
     """

    comm_rank: int
    global_rank: int | None
    local_rank: int | None
    node_name: str
    pid: int
    cuda_device: int | None
    device_uuid: None | str
    alive: bool
    progress: CommProgress
    pid_namespace: int | None | Unset = UNSET
    same_state_ranks: None | str | Unset = UNSET
    same_state_count: int | Unset = 1
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.comm_progress import CommProgress # noqa: PLC0415
        comm_rank = self.comm_rank

        global_rank: int | None
        global_rank = self.global_rank

        local_rank: int | None
        local_rank = self.local_rank

        node_name = self.node_name

        pid = self.pid

        cuda_device: int | None
        cuda_device = self.cuda_device

        device_uuid: None | str
        device_uuid = self.device_uuid

        alive = self.alive

        progress = self.progress.to_dict()

        pid_namespace: int | None | Unset
        if isinstance(self.pid_namespace, Unset):
            pid_namespace = UNSET
        else:
            pid_namespace = self.pid_namespace

        same_state_ranks: None | str | Unset
        if isinstance(self.same_state_ranks, Unset):
            same_state_ranks = UNSET
        else:
            same_state_ranks = self.same_state_ranks

        same_state_count = self.same_state_count


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "comm_rank": comm_rank,
            "global_rank": global_rank,
            "local_rank": local_rank,
            "node_name": node_name,
            "pid": pid,
            "cuda_device": cuda_device,
            "device_uuid": device_uuid,
            "alive": alive,
            "progress": progress,
        })
        if pid_namespace is not UNSET:
            field_dict["pid_namespace"] = pid_namespace
        if same_state_ranks is not UNSET:
            field_dict["same_state_ranks"] = same_state_ranks
        if same_state_count is not UNSET:
            field_dict["same_state_count"] = same_state_count

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.comm_progress import CommProgress # noqa: PLC0415
        d = dict(src_dict)
        comm_rank = d.pop("comm_rank")

        def _parse_global_rank(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        global_rank = _parse_global_rank(d.pop("global_rank"))


        def _parse_local_rank(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        local_rank = _parse_local_rank(d.pop("local_rank"))


        node_name = d.pop("node_name")

        pid = d.pop("pid")

        def _parse_cuda_device(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        cuda_device = _parse_cuda_device(d.pop("cuda_device"))


        def _parse_device_uuid(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        device_uuid = _parse_device_uuid(d.pop("device_uuid"))


        alive = d.pop("alive")

        progress = CommProgress.from_dict(d.pop("progress"))




        def _parse_pid_namespace(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        pid_namespace = _parse_pid_namespace(d.pop("pid_namespace", UNSET))


        def _parse_same_state_ranks(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        same_state_ranks = _parse_same_state_ranks(d.pop("same_state_ranks", UNSET))


        same_state_count = d.pop("same_state_count", UNSET)

        comm_rank = cls(
            comm_rank=comm_rank,
            global_rank=global_rank,
            local_rank=local_rank,
            node_name=node_name,
            pid=pid,
            cuda_device=cuda_device,
            device_uuid=device_uuid,
            alive=alive,
            progress=progress,
            pid_namespace=pid_namespace,
            same_state_ranks=same_state_ranks,
            same_state_count=same_state_count,
        )


        comm_rank.additional_properties = d
        return comm_rank

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
