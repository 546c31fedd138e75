from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.producer_mode import ProducerMode






T = TypeVar("T", bound="Producer")



@_attrs_define
class Producer:
    """ The engine run that produced the record.

        Attributes:
            mode (ProducerMode): live: from the Agent's op stream; offline: from inspector_logs files.
            engine_version (str): Semantic Engine version.
     """

    mode: ProducerMode
    engine_version: str





    def to_dict(self) -> dict[str, Any]:
        mode = self.mode.value

        engine_version = self.engine_version


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "mode": mode,
            "engine_version": engine_version,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        mode = ProducerMode(d.pop("mode"))




        engine_version = d.pop("engine_version")

        producer = cls(
            mode=mode,
            engine_version=engine_version,
        )

        return producer

