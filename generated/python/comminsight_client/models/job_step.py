from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.gpu_ref import GpuRef
  from ..models.job_step_gpu import JobStepGpu





T = TypeVar("T", bound="JobStep")



@_attrs_define
class JobStep:
    """ 
        Attributes:
            job_step_index (int):
            start_real_ns (int): Earliest start over its GPUs.
            end_real_ns (int): Latest end over its GPUs.
            gpus (list[JobStepGpu]): Each linked GPU's record of this Step, by node then global rank.
            missing (list[GpuRef]): Linked GPUs that reported Steps before and after this one but not this one.
     """

    job_step_index: int
    start_real_ns: int
    end_real_ns: int
    gpus: list[JobStepGpu]
    missing: list[GpuRef]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.gpu_ref import GpuRef # noqa: PLC0415
        from ..models.job_step_gpu import JobStepGpu # noqa: PLC0415
        job_step_index = self.job_step_index

        start_real_ns = self.start_real_ns

        end_real_ns = self.end_real_ns

        gpus = []
        for gpus_item_data in self.gpus:
            gpus_item = gpus_item_data.to_dict()
            gpus.append(gpus_item)



        missing = []
        for missing_item_data in self.missing:
            missing_item = missing_item_data.to_dict()
            missing.append(missing_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "job_step_index": job_step_index,
            "start_real_ns": start_real_ns,
            "end_real_ns": end_real_ns,
            "gpus": gpus,
            "missing": missing,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.gpu_ref import GpuRef # noqa: PLC0415
        from ..models.job_step_gpu import JobStepGpu # noqa: PLC0415
        d = dict(src_dict)
        job_step_index = d.pop("job_step_index")

        start_real_ns = d.pop("start_real_ns")

        end_real_ns = d.pop("end_real_ns")

        gpus = []
        _gpus = d.pop("gpus")
        for gpus_item_data in (_gpus):
            gpus_item = JobStepGpu.from_dict(gpus_item_data)



            gpus.append(gpus_item)


        missing = []
        _missing = d.pop("missing")
        for missing_item_data in (_missing):
            missing_item = GpuRef.from_dict(missing_item_data)



            missing.append(missing_item)


        job_step = cls(
            job_step_index=job_step_index,
            start_real_ns=start_real_ns,
            end_real_ns=end_real_ns,
            gpus=gpus,
            missing=missing,
        )


        job_step.additional_properties = d
        return job_step

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
