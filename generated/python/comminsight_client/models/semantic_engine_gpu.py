from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.semantic_engine_gpu_state import SemanticEngineGpuState
from typing import cast

if TYPE_CHECKING:
  from ..models.semantic_engine_failure import SemanticEngineFailure





T = TypeVar("T", bound="SemanticEngineGpu")



@_attrs_define
class SemanticEngineGpu:
    """ 
        Attributes:
            pid (int):
            global_rank (int | None):
            state (SemanticEngineGpuState): running; backing_off (failed and restarted too often lately: its ops wait for
                the next restart); finished (the process is gone and its summaries are sealed: a value the metrics use).
            lag_ms (float | None): How far this GPU's engine trails its input (as SemanticEngineHealth.lag_ms); null before
                any op and once finished.
            steps_written (int): Step summaries in this GPU's file.
            failures (int):
            restarts (int):
            retry_in_ms (float | None): When backing off, how long until the next restart; else null.
            last_failure (None | SemanticEngineFailure):
     """

    pid: int
    global_rank: int | None
    state: SemanticEngineGpuState
    lag_ms: float | None
    steps_written: int
    failures: int
    restarts: int
    retry_in_ms: float | None
    last_failure: None | SemanticEngineFailure
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.semantic_engine_failure import SemanticEngineFailure # noqa: PLC0415
        pid = self.pid

        global_rank: int | None
        global_rank = self.global_rank

        state = self.state.value

        lag_ms: float | None
        lag_ms = self.lag_ms

        steps_written = self.steps_written

        failures = self.failures

        restarts = self.restarts

        retry_in_ms: float | None
        retry_in_ms = self.retry_in_ms

        last_failure: dict[str, Any] | None
        if isinstance(self.last_failure, SemanticEngineFailure):
            last_failure = self.last_failure.to_dict()
        else:
            last_failure = self.last_failure


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "pid": pid,
            "global_rank": global_rank,
            "state": state,
            "lag_ms": lag_ms,
            "steps_written": steps_written,
            "failures": failures,
            "restarts": restarts,
            "retry_in_ms": retry_in_ms,
            "last_failure": last_failure,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.semantic_engine_failure import SemanticEngineFailure # noqa: PLC0415
        d = dict(src_dict)
        pid = d.pop("pid")

        def _parse_global_rank(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        global_rank = _parse_global_rank(d.pop("global_rank"))


        state = SemanticEngineGpuState(d.pop("state"))




        def _parse_lag_ms(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        lag_ms = _parse_lag_ms(d.pop("lag_ms"))


        steps_written = d.pop("steps_written")

        failures = d.pop("failures")

        restarts = d.pop("restarts")

        def _parse_retry_in_ms(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        retry_in_ms = _parse_retry_in_ms(d.pop("retry_in_ms"))


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


        semantic_engine_gpu = cls(
            pid=pid,
            global_rank=global_rank,
            state=state,
            lag_ms=lag_ms,
            steps_written=steps_written,
            failures=failures,
            restarts=restarts,
            retry_in_ms=retry_in_ms,
            last_failure=last_failure,
        )


        semantic_engine_gpu.additional_properties = d
        return semantic_engine_gpu

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
