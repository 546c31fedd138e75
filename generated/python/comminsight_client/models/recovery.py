from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.recovery_method import RecoveryMethod
from ..types import UNSET, Unset






T = TypeVar("T", bound="Recovery")



@_attrs_define
class Recovery:
    """ How the Step was recovered.

        Attributes:
            method (RecoveryMethod): template: a template's FSM placed the boundaries; period: no template fit and the
                engine found the repeating period of the op sequence itself.
            confidence (float): How well the op stream fits: 1 = every op matched the expected pattern, 0 = no fit.
            template_name (str | Unset): Name of the template used; present when method is template.
            period_ops (int | Unset): Length in ops of the detected period; present when method is period.
     """

    method: RecoveryMethod
    confidence: float
    template_name: str | Unset = UNSET
    period_ops: int | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        method = self.method.value

        confidence = self.confidence

        template_name = self.template_name

        period_ops = self.period_ops


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "method": method,
            "confidence": confidence,
        })
        if template_name is not UNSET:
            field_dict["template_name"] = template_name
        if period_ops is not UNSET:
            field_dict["period_ops"] = period_ops

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        method = RecoveryMethod(d.pop("method"))




        confidence = d.pop("confidence")

        template_name = d.pop("template_name", UNSET)

        period_ops = d.pop("period_ops", UNSET)

        recovery = cls(
            method=method,
            confidence=confidence,
            template_name=template_name,
            period_ops=period_ops,
        )

        return recovery

