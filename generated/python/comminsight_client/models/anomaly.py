from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.anomaly_kind import AnomalyKind
from ..models.anomaly_unit import AnomalyUnit
from ..types import UNSET, Unset






T = TypeVar("T", bound="Anomaly")



@_attrs_define
class Anomaly:
    """ One unusual thing about the Step, with the measured value and the threshold it crossed.

        Attributes:
            kind (AnomalyKind): step_slow: Step duration far above the median of recent Steps; op_slow: an op far slower
                than the median of its role; bandwidth_low: a role's bus bandwidth far below its median; records_lost: op
                records were lost inside the Step (a gap in the log), so totals are low; unexpected_ops: ops the template did
                not expect (e.g. evaluation or checkpoint barriers); missing_ops: fewer ops of a role than the template's steady
                pattern.
            description (str): One human-readable line, e.g. "step took 2.4x the median of the last 50 steps".
            value (float): The measured value, in unit.
            threshold (float): The threshold it crossed, in unit.
            unit (AnomalyUnit): Unit of an anomaly's value and threshold: ns (nanoseconds), gbs (GB/s), count, or ratio
                (dimensionless).
            role (str | Unset): A role name from the template's role list (e.g. dp_grad_allreduce, tp_allreduce, pp_send,
                fsdp_param_allgather), or the reserved name `unmatched` for ops no role matched.
     """

    kind: AnomalyKind
    description: str
    value: float
    threshold: float
    unit: AnomalyUnit
    role: str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        kind = self.kind.value

        description = self.description

        value = self.value

        threshold = self.threshold

        unit = self.unit.value

        role = self.role


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "kind": kind,
            "description": description,
            "value": value,
            "threshold": threshold,
            "unit": unit,
        })
        if role is not UNSET:
            field_dict["role"] = role

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        kind = AnomalyKind(d.pop("kind"))




        description = d.pop("description")

        value = d.pop("value")

        threshold = d.pop("threshold")

        unit = AnomalyUnit(d.pop("unit"))




        role = d.pop("role", UNSET)

        anomaly = cls(
            kind=kind,
            description=description,
            value=value,
            threshold=threshold,
            unit=unit,
            role=role,
        )

        return anomaly

