from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.agent_mode import AgentMode
from typing import cast

if TYPE_CHECKING:
  from ..models.process import Process





T = TypeVar("T", bound="Node")



@_attrs_define
class Node:
    """ The node this agent runs on and the profiled processes it maps.

        Attributes:
            node_name (str): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host name); unique in a job.
            host (str): The host name.
            boot_id (None | str): Kernel boot id; *_mono_ns values are comparable only under one node_name and boot_id.
            mode (AgentMode): COMMINSIGHT_AGENT_MODE of an agent.
            agent_version (str):
            agent_pid (int):
            comminsight_home (str): COMMINSIGHT_HOME of this agent.
            started_real_ns (int):
            now_mono_ns (int): CLOCK_MONOTONIC when this answer was built; with now_real_ns it converts this node's
                *_mono_ns to real time.
            now_real_ns (int):
            processes (list[Process]):
     """

    node_name: str
    host: str
    boot_id: None | str
    mode: AgentMode
    agent_version: str
    agent_pid: int
    comminsight_home: str
    started_real_ns: int
    now_mono_ns: int
    now_real_ns: int
    processes: list[Process]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.process import Process # noqa: PLC0415
        node_name = self.node_name

        host = self.host

        boot_id: None | str
        boot_id = self.boot_id

        mode = self.mode.value

        agent_version = self.agent_version

        agent_pid = self.agent_pid

        comminsight_home = self.comminsight_home

        started_real_ns = self.started_real_ns

        now_mono_ns = self.now_mono_ns

        now_real_ns = self.now_real_ns

        processes = []
        for processes_item_data in self.processes:
            processes_item = processes_item_data.to_dict()
            processes.append(processes_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "node_name": node_name,
            "host": host,
            "boot_id": boot_id,
            "mode": mode,
            "agent_version": agent_version,
            "agent_pid": agent_pid,
            "comminsight_home": comminsight_home,
            "started_real_ns": started_real_ns,
            "now_mono_ns": now_mono_ns,
            "now_real_ns": now_real_ns,
            "processes": processes,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.process import Process # noqa: PLC0415
        d = dict(src_dict)
        node_name = d.pop("node_name")

        host = d.pop("host")

        def _parse_boot_id(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        boot_id = _parse_boot_id(d.pop("boot_id"))


        mode = AgentMode(d.pop("mode"))




        agent_version = d.pop("agent_version")

        agent_pid = d.pop("agent_pid")

        comminsight_home = d.pop("comminsight_home")

        started_real_ns = d.pop("started_real_ns")

        now_mono_ns = d.pop("now_mono_ns")

        now_real_ns = d.pop("now_real_ns")

        processes = []
        _processes = d.pop("processes")
        for processes_item_data in (_processes):
            processes_item = Process.from_dict(processes_item_data)



            processes.append(processes_item)


        node = cls(
            node_name=node_name,
            host=host,
            boot_id=boot_id,
            mode=mode,
            agent_version=agent_version,
            agent_pid=agent_pid,
            comminsight_home=comminsight_home,
            started_real_ns=started_real_ns,
            now_mono_ns=now_mono_ns,
            now_real_ns=now_real_ns,
            processes=processes,
        )


        node.additional_properties = d
        return node

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
