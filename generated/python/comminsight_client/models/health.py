from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.agent_mode import AgentMode
from ..models.health_status import HealthStatus
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.hang_threshold import HangThreshold
  from ..models.semantic_engine_health import SemanticEngineHealth





T = TypeVar("T", bound="Health")



@_attrs_define
class Health:
    """ 
        Attributes:
            status (HealthStatus):
            reasons (list[str]): Why the status is degraded (quarantined SHM files, stale slaves, archive errors, ...);
                empty when ok.
            mode (AgentMode): COMMINSIGHT_AGENT_MODE of an agent.
            node_name (str): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host name); unique in a job.
            agent_version (str):
            started_real_ns (int):
            uptime_s (float):
            processes_alive (int):
            processes_total (int):
            communicators_total (int):
            open_hangs (int):
            nodes_connected (int): Nodes whose data is current (this node included); 1 on a standalone agent.
            nodes_total (int): Nodes known to this agent; 1 on a standalone agent.
            ingest_lag_ms (float | None): How far SHM consumption trails the producers (worst process); null before any
                data.
            semantic_engine (SemanticEngineHealth | Unset): The live Semantic Engine: one engine per profiled process (GPU).
                An exception out of a GPU's engine is a failure; the engine is then restarted from that GPU's last checkpoint
                (no Step lost or written twice), at most a few times a minute per GPU, and backs off in between.
            hang_threshold (HangThreshold | Unset): One hang threshold per job. Every verdict uses the Agent's
                COMMINSIGHT_PROFILER_HANG_TIMEOUT_S, which the Agent publishes in <home>/metadata/agent-settings for the
                Profilers' watchdogs to follow. A process whose watchdog uses another value is listed (and named in reasons):
                one with the key in its own environment (kept over the Agent's), one that could not read the Agent's file, or a
                Profiler too old to follow it. A process is judged only once it has had a heartbeat since the Agent published
                (it looks at the file once per heartbeat).
     """

    status: HealthStatus
    reasons: list[str]
    mode: AgentMode
    node_name: str
    agent_version: str
    started_real_ns: int
    uptime_s: float
    processes_alive: int
    processes_total: int
    communicators_total: int
    open_hangs: int
    nodes_connected: int
    nodes_total: int
    ingest_lag_ms: float | None
    semantic_engine: SemanticEngineHealth | Unset = UNSET
    hang_threshold: HangThreshold | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.hang_threshold import HangThreshold # noqa: PLC0415
        from ..models.semantic_engine_health import SemanticEngineHealth # noqa: PLC0415
        status = self.status.value

        reasons = self.reasons



        mode = self.mode.value

        node_name = self.node_name

        agent_version = self.agent_version

        started_real_ns = self.started_real_ns

        uptime_s = self.uptime_s

        processes_alive = self.processes_alive

        processes_total = self.processes_total

        communicators_total = self.communicators_total

        open_hangs = self.open_hangs

        nodes_connected = self.nodes_connected

        nodes_total = self.nodes_total

        ingest_lag_ms: float | None
        ingest_lag_ms = self.ingest_lag_ms

        semantic_engine: dict[str, Any] | Unset = UNSET
        if not isinstance(self.semantic_engine, Unset):
            semantic_engine = self.semantic_engine.to_dict()

        hang_threshold: dict[str, Any] | Unset = UNSET
        if not isinstance(self.hang_threshold, Unset):
            hang_threshold = self.hang_threshold.to_dict()


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "status": status,
            "reasons": reasons,
            "mode": mode,
            "node_name": node_name,
            "agent_version": agent_version,
            "started_real_ns": started_real_ns,
            "uptime_s": uptime_s,
            "processes_alive": processes_alive,
            "processes_total": processes_total,
            "communicators_total": communicators_total,
            "open_hangs": open_hangs,
            "nodes_connected": nodes_connected,
            "nodes_total": nodes_total,
            "ingest_lag_ms": ingest_lag_ms,
        })
        if semantic_engine is not UNSET:
            field_dict["semantic_engine"] = semantic_engine
        if hang_threshold is not UNSET:
            field_dict["hang_threshold"] = hang_threshold

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.hang_threshold import HangThreshold # noqa: PLC0415
        from ..models.semantic_engine_health import SemanticEngineHealth # noqa: PLC0415
        d = dict(src_dict)
        status = HealthStatus(d.pop("status"))




        reasons = cast(list[str], d.pop("reasons"))


        mode = AgentMode(d.pop("mode"))




        node_name = d.pop("node_name")

        agent_version = d.pop("agent_version")

        started_real_ns = d.pop("started_real_ns")

        uptime_s = d.pop("uptime_s")

        processes_alive = d.pop("processes_alive")

        processes_total = d.pop("processes_total")

        communicators_total = d.pop("communicators_total")

        open_hangs = d.pop("open_hangs")

        nodes_connected = d.pop("nodes_connected")

        nodes_total = d.pop("nodes_total")

        def _parse_ingest_lag_ms(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        ingest_lag_ms = _parse_ingest_lag_ms(d.pop("ingest_lag_ms"))


        _semantic_engine = d.pop("semantic_engine", UNSET)
        semantic_engine: SemanticEngineHealth | Unset
        if isinstance(_semantic_engine,  Unset):
            semantic_engine = UNSET
        else:
            semantic_engine = SemanticEngineHealth.from_dict(_semantic_engine)




        _hang_threshold = d.pop("hang_threshold", UNSET)
        hang_threshold: HangThreshold | Unset
        if isinstance(_hang_threshold,  Unset):
            hang_threshold = UNSET
        else:
            hang_threshold = HangThreshold.from_dict(_hang_threshold)




        health = cls(
            status=status,
            reasons=reasons,
            mode=mode,
            node_name=node_name,
            agent_version=agent_version,
            started_real_ns=started_real_ns,
            uptime_s=uptime_s,
            processes_alive=processes_alive,
            processes_total=processes_total,
            communicators_total=communicators_total,
            open_hangs=open_hangs,
            nodes_connected=nodes_connected,
            nodes_total=nodes_total,
            ingest_lag_ms=ingest_lag_ms,
            semantic_engine=semantic_engine,
            hang_threshold=hang_threshold,
        )


        health.additional_properties = d
        return health

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
