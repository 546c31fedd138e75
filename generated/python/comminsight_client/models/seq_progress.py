from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast






T = TypeVar("T", bound="SeqProgress")



@_attrs_define
class SeqProgress:
    """ How far one kind of op (collective, or point-to-point) got on one rank of one
    communicator. A `*_seq` is the sequence number of the last op that reached the stage:
    NCCL's seqNumber for collectives (from 0), the communicator's own counter for P2P
    (NCCL gives P2P none). Null while no op reached the stage. `*_mono_ns` is host time
    on the rank's node when the stage was seen.

        Attributes:
            last_enqueued_seq (int | None):
            last_enqueued_mono_ns (int | None):
            last_gpu_started_seq (int | None): Last op whose first GPU channel was seen starting.
            last_gpu_started_mono_ns (int | None):
            last_completed_seq (int | None): Last op completed (all channels stopped); ops complete in sequence order.
            last_completed_mono_ns (int | None):
     """

    last_enqueued_seq: int | None
    last_enqueued_mono_ns: int | None
    last_gpu_started_seq: int | None
    last_gpu_started_mono_ns: int | None
    last_completed_seq: int | None
    last_completed_mono_ns: int | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        last_enqueued_seq: int | None
        last_enqueued_seq = self.last_enqueued_seq

        last_enqueued_mono_ns: int | None
        last_enqueued_mono_ns = self.last_enqueued_mono_ns

        last_gpu_started_seq: int | None
        last_gpu_started_seq = self.last_gpu_started_seq

        last_gpu_started_mono_ns: int | None
        last_gpu_started_mono_ns = self.last_gpu_started_mono_ns

        last_completed_seq: int | None
        last_completed_seq = self.last_completed_seq

        last_completed_mono_ns: int | None
        last_completed_mono_ns = self.last_completed_mono_ns


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "last_enqueued_seq": last_enqueued_seq,
            "last_enqueued_mono_ns": last_enqueued_mono_ns,
            "last_gpu_started_seq": last_gpu_started_seq,
            "last_gpu_started_mono_ns": last_gpu_started_mono_ns,
            "last_completed_seq": last_completed_seq,
            "last_completed_mono_ns": last_completed_mono_ns,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        def _parse_last_enqueued_seq(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_enqueued_seq = _parse_last_enqueued_seq(d.pop("last_enqueued_seq"))


        def _parse_last_enqueued_mono_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_enqueued_mono_ns = _parse_last_enqueued_mono_ns(d.pop("last_enqueued_mono_ns"))


        def _parse_last_gpu_started_seq(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_gpu_started_seq = _parse_last_gpu_started_seq(d.pop("last_gpu_started_seq"))


        def _parse_last_gpu_started_mono_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_gpu_started_mono_ns = _parse_last_gpu_started_mono_ns(d.pop("last_gpu_started_mono_ns"))


        def _parse_last_completed_seq(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_completed_seq = _parse_last_completed_seq(d.pop("last_completed_seq"))


        def _parse_last_completed_mono_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_completed_mono_ns = _parse_last_completed_mono_ns(d.pop("last_completed_mono_ns"))


        seq_progress = cls(
            last_enqueued_seq=last_enqueued_seq,
            last_enqueued_mono_ns=last_enqueued_mono_ns,
            last_gpu_started_seq=last_gpu_started_seq,
            last_gpu_started_mono_ns=last_gpu_started_mono_ns,
            last_completed_seq=last_completed_seq,
            last_completed_mono_ns=last_completed_mono_ns,
        )


        seq_progress.additional_properties = d
        return seq_progress

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
