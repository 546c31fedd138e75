from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast






T = TypeVar("T", bound="JobRef")



@_attrs_define
class JobRef:
    """ 
        Attributes:
            job_id (None | str): null for summaries without a job_id.
            nodes (int):
            gpus (int):
            latest_end_real_ns (int): End of the latest Step any of its GPUs reported.
     """

    job_id: None | str
    nodes: int
    gpus: int
    latest_end_real_ns: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        job_id: None | str
        job_id = self.job_id

        nodes = self.nodes

        gpus = self.gpus

        latest_end_real_ns = self.latest_end_real_ns


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "job_id": job_id,
            "nodes": nodes,
            "gpus": gpus,
            "latest_end_real_ns": latest_end_real_ns,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        def _parse_job_id(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        job_id = _parse_job_id(d.pop("job_id"))


        nodes = d.pop("nodes")

        gpus = d.pop("gpus")

        latest_end_real_ns = d.pop("latest_end_real_ns")

        job_ref = cls(
            job_id=job_id,
            nodes=nodes,
            gpus=gpus,
            latest_end_real_ns=latest_end_real_ns,
        )


        job_ref.additional_properties = d
        return job_ref

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
