from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast






T = TypeVar("T", bound="JobStepGpu")



@_attrs_define
class JobStepGpu:
    """ 
        Attributes:
            node_name (str):
            global_rank (int):
            pid (int | None):
            local_step_index (int): The Step's index in this GPU's step summaries.
            start_real_ns (int):
            end_real_ns (int):
     """

    node_name: str
    global_rank: int
    pid: int | None
    local_step_index: int
    start_real_ns: int
    end_real_ns: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        node_name = self.node_name

        global_rank = self.global_rank

        pid: int | None
        pid = self.pid

        local_step_index = self.local_step_index

        start_real_ns = self.start_real_ns

        end_real_ns = self.end_real_ns


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "node_name": node_name,
            "global_rank": global_rank,
            "pid": pid,
            "local_step_index": local_step_index,
            "start_real_ns": start_real_ns,
            "end_real_ns": end_real_ns,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        node_name = d.pop("node_name")

        global_rank = d.pop("global_rank")

        def _parse_pid(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        pid = _parse_pid(d.pop("pid"))


        local_step_index = d.pop("local_step_index")

        start_real_ns = d.pop("start_real_ns")

        end_real_ns = d.pop("end_real_ns")

        job_step_gpu = cls(
            node_name=node_name,
            global_rank=global_rank,
            pid=pid,
            local_step_index=local_step_index,
            start_real_ns=start_real_ns,
            end_real_ns=end_real_ns,
        )


        job_step_gpu.additional_properties = d
        return job_step_gpu

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
