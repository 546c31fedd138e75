from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.inflight_op import InflightOp





T = TypeVar("T", bound="InflightOpList")



@_attrs_define
class InflightOpList:
    """ 
        Attributes:
            as_of_real_ns (int): When the snapshot was taken; ages are as of then.
            items (list[InflightOp]): One entry per rank and communicator with ops in flight (its oldest op), oldest first.
            total (int): Entries that matched before `limit`.
     """

    as_of_real_ns: int
    items: list[InflightOp]
    total: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.inflight_op import InflightOp # noqa: PLC0415
        as_of_real_ns = self.as_of_real_ns

        items = []
        for items_item_data in self.items:
            items_item = items_item_data.to_dict()
            items.append(items_item)



        total = self.total


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "as_of_real_ns": as_of_real_ns,
            "items": items,
            "total": total,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.inflight_op import InflightOp # noqa: PLC0415
        d = dict(src_dict)
        as_of_real_ns = d.pop("as_of_real_ns")

        items = []
        _items = d.pop("items")
        for items_item_data in (_items):
            items_item = InflightOp.from_dict(items_item_data)



            items.append(items_item)


        total = d.pop("total")

        inflight_op_list = cls(
            as_of_real_ns=as_of_real_ns,
            items=items,
            total=total,
        )


        inflight_op_list.additional_properties = d
        return inflight_op_list

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
