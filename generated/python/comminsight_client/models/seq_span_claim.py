from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.gpu_ref import GpuRef





T = TypeVar("T", bound="SeqSpanClaim")



@_attrs_define
class SeqSpanClaim:
    """ 
        Attributes:
            gpu (GpuRef):
            local_step_index (int):
            first_seq (int):
            last_seq (int):
     """

    gpu: GpuRef
    local_step_index: int
    first_seq: int
    last_seq: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.gpu_ref import GpuRef # noqa: PLC0415
        gpu = self.gpu.to_dict()

        local_step_index = self.local_step_index

        first_seq = self.first_seq

        last_seq = self.last_seq


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "gpu": gpu,
            "local_step_index": local_step_index,
            "first_seq": first_seq,
            "last_seq": last_seq,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.gpu_ref import GpuRef # noqa: PLC0415
        d = dict(src_dict)
        gpu = GpuRef.from_dict(d.pop("gpu"))




        local_step_index = d.pop("local_step_index")

        first_seq = d.pop("first_seq")

        last_seq = d.pop("last_seq")

        seq_span_claim = cls(
            gpu=gpu,
            local_step_index=local_step_index,
            first_seq=first_seq,
            last_seq=last_seq,
        )


        seq_span_claim.additional_properties = d
        return seq_span_claim

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
