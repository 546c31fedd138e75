from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.threshold_source import ThresholdSource
from typing import cast






T = TypeVar("T", bound="ThresholdDifference")



@_attrs_define
class ThresholdDifference:
    """ A profiled process whose watchdog uses another hang threshold than the verdicts.

        Attributes:
            pid (int):
            global_rank (int | None):
            host (str):
            watchdog_threshold_ms (int): The threshold its watchdog uses now, in ms (0 when its watchdog is off).
            source (ThresholdSource): Where a Profiler's hang threshold comes from: default, file (the configuration file),
                environment (the key in the process's own environment, kept over the Agent's), agent (the Agent's published
                value), unknown (a Profiler too old to say, which never follows the Agent's).
            own_threshold_ms (int | None): The process's own COMMINSIGHT_PROFILER_HANG_TIMEOUT_S in ms; null where the
                Profiler is too old to say.
            own_source (ThresholdSource): Where a Profiler's hang threshold comes from: default, file (the configuration
                file), environment (the key in the process's own environment, kept over the Agent's), agent (the Agent's
                published value), unknown (a Profiler too old to say, which never follows the Agent's).
            agent_file_refused (int): Times the process refused the Agent's file (a link, another owner, no valid value),
                from its SHM header.
     """

    pid: int
    global_rank: int | None
    host: str
    watchdog_threshold_ms: int
    source: ThresholdSource
    own_threshold_ms: int | None
    own_source: ThresholdSource
    agent_file_refused: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        pid = self.pid

        global_rank: int | None
        global_rank = self.global_rank

        host = self.host

        watchdog_threshold_ms = self.watchdog_threshold_ms

        source = self.source.value

        own_threshold_ms: int | None
        own_threshold_ms = self.own_threshold_ms

        own_source = self.own_source.value

        agent_file_refused = self.agent_file_refused


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "pid": pid,
            "global_rank": global_rank,
            "host": host,
            "watchdog_threshold_ms": watchdog_threshold_ms,
            "source": source,
            "own_threshold_ms": own_threshold_ms,
            "own_source": own_source,
            "agent_file_refused": agent_file_refused,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        pid = d.pop("pid")

        def _parse_global_rank(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        global_rank = _parse_global_rank(d.pop("global_rank"))


        host = d.pop("host")

        watchdog_threshold_ms = d.pop("watchdog_threshold_ms")

        source = ThresholdSource(d.pop("source"))




        def _parse_own_threshold_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        own_threshold_ms = _parse_own_threshold_ms(d.pop("own_threshold_ms"))


        own_source = ThresholdSource(d.pop("own_source"))




        agent_file_refused = d.pop("agent_file_refused")

        threshold_difference = cls(
            pid=pid,
            global_rank=global_rank,
            host=host,
            watchdog_threshold_ms=watchdog_threshold_ms,
            source=source,
            own_threshold_ms=own_threshold_ms,
            own_source=own_source,
            agent_file_refused=agent_file_refused,
        )


        threshold_difference.additional_properties = d
        return threshold_difference

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
