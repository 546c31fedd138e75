from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="ProgressMark")



@_attrs_define
class ProgressMark:
    """ The latest operation a rank reached at one stage, and when.

        Attributes:
            seq (int): Collective sequence number (NCCL's seqNumber, coll_sn).
            at_real_ns (int): CLOCK_REALTIME time on the rank's host, nanoseconds since the Unix epoch.
            age_ms (int): How long before detection it happened, in milliseconds, measured on the rank's host's
                CLOCK_MONOTONIC.
     """

    seq: int
    at_real_ns: int
    age_ms: int





    def to_dict(self) -> dict[str, Any]:
        seq = self.seq

        at_real_ns = self.at_real_ns

        age_ms = self.age_ms


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "seq": seq,
            "at_real_ns": at_real_ns,
            "age_ms": age_ms,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        seq = d.pop("seq")

        at_real_ns = d.pop("at_real_ns")

        age_ms = d.pop("age_ms")

        progress_mark = cls(
            seq=seq,
            at_real_ns=at_real_ns,
            age_ms=age_ms,
        )

        return progress_mark

