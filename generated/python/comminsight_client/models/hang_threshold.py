from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.threshold_difference import ThresholdDifference





T = TypeVar("T", bound="HangThreshold")



@_attrs_define
class HangThreshold:
    """ One hang threshold per job. Every verdict uses the Agent's COMMINSIGHT_PROFILER_HANG_TIMEOUT_S, which the Agent
    publishes in <home>/metadata/agent-settings for the Profilers' watchdogs to follow. A process whose watchdog uses
    another value is listed (and named in reasons): one with the key in its own environment (kept over the Agent's), one
    that could not read the Agent's file, or a Profiler too old to follow it. A process is judged only once it has had a
    heartbeat since the Agent published (it looks at the file once per heartbeat).

        Attributes:
            verdict_threshold_ms (int): The threshold every verdict of this Agent uses (its
                COMMINSIGHT_PROFILER_HANG_TIMEOUT_S), in ms; 0 when hang diagnosis is off.
            published (bool): The Agent's value is in <home>/metadata/agent-settings for the Profilers to follow (false when
                it could not be written, which reasons says).
            processes_agreeing (int): Live profiled processes whose watchdog uses the verdicts' threshold.
            processes_differing (int): Live profiled processes whose watchdog uses another threshold (differing lists the
                first of them).
            differing (list[ThresholdDifference]): The processes whose watchdog uses another threshold, by pid, at most 64.
     """

    verdict_threshold_ms: int
    published: bool
    processes_agreeing: int
    processes_differing: int
    differing: list[ThresholdDifference]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.threshold_difference import ThresholdDifference # noqa: PLC0415
        verdict_threshold_ms = self.verdict_threshold_ms

        published = self.published

        processes_agreeing = self.processes_agreeing

        processes_differing = self.processes_differing

        differing = []
        for differing_item_data in self.differing:
            differing_item = differing_item_data.to_dict()
            differing.append(differing_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "verdict_threshold_ms": verdict_threshold_ms,
            "published": published,
            "processes_agreeing": processes_agreeing,
            "processes_differing": processes_differing,
            "differing": differing,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.threshold_difference import ThresholdDifference # noqa: PLC0415
        d = dict(src_dict)
        verdict_threshold_ms = d.pop("verdict_threshold_ms")

        published = d.pop("published")

        processes_agreeing = d.pop("processes_agreeing")

        processes_differing = d.pop("processes_differing")

        differing = []
        _differing = d.pop("differing")
        for differing_item_data in (_differing):
            differing_item = ThresholdDifference.from_dict(differing_item_data)



            differing.append(differing_item)


        hang_threshold = cls(
            verdict_threshold_ms=verdict_threshold_ms,
            published=published,
            processes_agreeing=processes_agreeing,
            processes_differing=processes_differing,
            differing=differing,
        )


        hang_threshold.additional_properties = d
        return hang_threshold

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
