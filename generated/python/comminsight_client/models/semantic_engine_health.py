from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.semantic_engine_failure import SemanticEngineFailure
  from ..models.semantic_engine_gpu import SemanticEngineGpu





T = TypeVar("T", bound="SemanticEngineHealth")



@_attrs_define
class SemanticEngineHealth:
    """ The live Semantic Engine: one engine per profiled process (GPU). An exception out of a GPU's engine is a failure;
    the engine is then restarted from that GPU's last checkpoint (no Step lost or written twice), at most a few times a
    minute per GPU, and backs off in between.

        Attributes:
            running (bool): The engine's worker thread is alive (false only if it stopped, which reasons then says).
            failures_total (int): Failures of any GPU's engine since the Agent started.
            restarts_total (int): Restarts of a GPU's engine from its checkpoint since the Agent started.
            lag_ms (float | None): How far the engine trails its input, worst running GPU (completion time of the newest op
                ingested minus that of the newest op placed into a Step); null before any op.
            last_failure (None | SemanticEngineFailure): The latest failure of any GPU's engine; null when there was none.
            gpus (list[SemanticEngineGpu]): One entry per profiled process whose engine runs or backs off (those whose
                process has finished are left out).
     """

    running: bool
    failures_total: int
    restarts_total: int
    lag_ms: float | None
    last_failure: None | SemanticEngineFailure
    gpus: list[SemanticEngineGpu]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.semantic_engine_failure import SemanticEngineFailure # noqa: PLC0415
        from ..models.semantic_engine_gpu import SemanticEngineGpu # noqa: PLC0415
        running = self.running

        failures_total = self.failures_total

        restarts_total = self.restarts_total

        lag_ms: float | None
        lag_ms = self.lag_ms

        last_failure: dict[str, Any] | None
        if isinstance(self.last_failure, SemanticEngineFailure):
            last_failure = self.last_failure.to_dict()
        else:
            last_failure = self.last_failure

        gpus = []
        for gpus_item_data in self.gpus:
            gpus_item = gpus_item_data.to_dict()
            gpus.append(gpus_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "running": running,
            "failures_total": failures_total,
            "restarts_total": restarts_total,
            "lag_ms": lag_ms,
            "last_failure": last_failure,
            "gpus": gpus,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.semantic_engine_failure import SemanticEngineFailure # noqa: PLC0415
        from ..models.semantic_engine_gpu import SemanticEngineGpu # noqa: PLC0415
        d = dict(src_dict)
        running = d.pop("running")

        failures_total = d.pop("failures_total")

        restarts_total = d.pop("restarts_total")

        def _parse_lag_ms(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        lag_ms = _parse_lag_ms(d.pop("lag_ms"))


        def _parse_last_failure(data: object) -> None | SemanticEngineFailure:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                last_failure_type_0 = SemanticEngineFailure.from_dict(data)



                return last_failure_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | SemanticEngineFailure, data)

        last_failure = _parse_last_failure(d.pop("last_failure"))


        gpus = []
        _gpus = d.pop("gpus")
        for gpus_item_data in (_gpus):
            gpus_item = SemanticEngineGpu.from_dict(gpus_item_data)



            gpus.append(gpus_item)


        semantic_engine_health = cls(
            running=running,
            failures_total=failures_total,
            restarts_total=restarts_total,
            lag_ms=lag_ms,
            last_failure=last_failure,
            gpus=gpus,
        )


        semantic_engine_health.additional_properties = d
        return semantic_engine_health

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
