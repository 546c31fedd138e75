from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.agent_mode import AgentMode
from ..models.node_state import NodeState
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.node_reject import NodeReject





T = TypeVar("T", bound="NodeSummary")



@_attrs_define
class NodeSummary:
    """ A node of the job as the answering agent knows it.

        Attributes:
            node_name (str): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host name); unique in a job.
            host (None | str):
            mode (AgentMode): COMMINSIGHT_AGENT_MODE of an agent.
            state (NodeState): local: the node this agent runs on; connected: a slave streaming now; stale: registered
                but no heartbeat within the stale threshold; disconnected: its stream ended;
                rejected: its last attempt to register was refused (see last_reject).
            agent_version (None | str):
            processes_alive (int):
            processes_total (int):
            global_ranks (list[int]): Global ranks of the node's processes, ascending.
            last_seen_real_ns (int | None): Last batch or heartbeat received (master clock).
            last_seen_age_ms (int | None):
            last_applied_batch_seq (int | None): agent-master-slave batch sequence the master applied last.
            rejects_total (int):
            last_reject (NodeReject | None):
            via (list[str] | Unset): The relays between the node and the answering master, nearest to the master first;
                empty for a node that streams to it directly. A node below a relay shows the
                relay's view of it (state, last seen), and its processes only as counts.
     """

    node_name: str
    host: None | str
    mode: AgentMode
    state: NodeState
    agent_version: None | str
    processes_alive: int
    processes_total: int
    global_ranks: list[int]
    last_seen_real_ns: int | None
    last_seen_age_ms: int | None
    last_applied_batch_seq: int | None
    rejects_total: int
    last_reject: NodeReject | None
    via: list[str] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.node_reject import NodeReject # noqa: PLC0415
        node_name = self.node_name

        host: None | str
        host = self.host

        mode = self.mode.value

        state = self.state.value

        agent_version: None | str
        agent_version = self.agent_version

        processes_alive = self.processes_alive

        processes_total = self.processes_total

        global_ranks = self.global_ranks



        last_seen_real_ns: int | None
        last_seen_real_ns = self.last_seen_real_ns

        last_seen_age_ms: int | None
        last_seen_age_ms = self.last_seen_age_ms

        last_applied_batch_seq: int | None
        last_applied_batch_seq = self.last_applied_batch_seq

        rejects_total = self.rejects_total

        last_reject: dict[str, Any] | None
        if isinstance(self.last_reject, NodeReject):
            last_reject = self.last_reject.to_dict()
        else:
            last_reject = self.last_reject

        via: list[str] | Unset = UNSET
        if not isinstance(self.via, Unset):
            via = self.via




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "node_name": node_name,
            "host": host,
            "mode": mode,
            "state": state,
            "agent_version": agent_version,
            "processes_alive": processes_alive,
            "processes_total": processes_total,
            "global_ranks": global_ranks,
            "last_seen_real_ns": last_seen_real_ns,
            "last_seen_age_ms": last_seen_age_ms,
            "last_applied_batch_seq": last_applied_batch_seq,
            "rejects_total": rejects_total,
            "last_reject": last_reject,
        })
        if via is not UNSET:
            field_dict["via"] = via

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.node_reject import NodeReject # noqa: PLC0415
        d = dict(src_dict)
        node_name = d.pop("node_name")

        def _parse_host(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        host = _parse_host(d.pop("host"))


        mode = AgentMode(d.pop("mode"))




        state = NodeState(d.pop("state"))




        def _parse_agent_version(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        agent_version = _parse_agent_version(d.pop("agent_version"))


        processes_alive = d.pop("processes_alive")

        processes_total = d.pop("processes_total")

        global_ranks = cast(list[int], d.pop("global_ranks"))


        def _parse_last_seen_real_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_seen_real_ns = _parse_last_seen_real_ns(d.pop("last_seen_real_ns"))


        def _parse_last_seen_age_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_seen_age_ms = _parse_last_seen_age_ms(d.pop("last_seen_age_ms"))


        def _parse_last_applied_batch_seq(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_applied_batch_seq = _parse_last_applied_batch_seq(d.pop("last_applied_batch_seq"))


        rejects_total = d.pop("rejects_total")

        def _parse_last_reject(data: object) -> NodeReject | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                last_reject_type_0 = NodeReject.from_dict(data)



                return last_reject_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(NodeReject | None, data)

        last_reject = _parse_last_reject(d.pop("last_reject"))


        via = cast(list[str], d.pop("via", UNSET))


        node_summary = cls(
            node_name=node_name,
            host=host,
            mode=mode,
            state=state,
            agent_version=agent_version,
            processes_alive=processes_alive,
            processes_total=processes_total,
            global_ranks=global_ranks,
            last_seen_real_ns=last_seen_real_ns,
            last_seen_age_ms=last_seen_age_ms,
            last_applied_batch_seq=last_applied_batch_seq,
            rejects_total=rejects_total,
            last_reject=last_reject,
            via=via,
        )


        node_summary.additional_properties = d
        return node_summary

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
