from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.recovery_method import RecoveryMethod
from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="Recovery")



@_attrs_define
class Recovery:
    """ How the Step was recovered.

        Attributes:
            method (RecoveryMethod): template: a template's FSM placed the boundaries; period: no template fit and the
                engine found the repeating period of the op sequence itself; job: the boundaries are a consistent cut of the
                whole job, decided on the GPU whose ops show them best and carried to this GPU through the ops it shares with
                other ranks; marker: as job, with the phase taken from Inject's optimizer-step markers (every rank's
                optimizer.step() returned where its Step ends, past the update's own gathers); user_tag: as job, each Step the
                ops whose calls carried one userProfilerTag (NCCL 2.31+, ABI v7), the framework's own Step id.
            confidence (float): How sure the boundaries are: 1 = the evidence is unambiguous (and, with method job, every
                rank agrees), 0 = no fit. Below 1, `reasons` says why.
            template_name (str | Unset): Name of the template used; present when method is template.
            period_ops (int | Unset): Length in ops of the detected period; present when method is period.
            reasons (list[str] | Unset): Why confidence is below 1, each naming the GPU (log stream) and the evidence: a
                cycle covering its ops poorly, ranks that disagree, a boundary resting on idle time alone. Absent when there is
                nothing to say.
            job_steps (int | Unset): With method job: the number of Steps of the whole job; every GPU of a job whose ranks
                agree reports that many.
     """

    method: RecoveryMethod
    confidence: float
    template_name: str | Unset = UNSET
    period_ops: int | Unset = UNSET
    reasons: list[str] | Unset = UNSET
    job_steps: int | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        method = self.method.value

        confidence = self.confidence

        template_name = self.template_name

        period_ops = self.period_ops

        reasons: list[str] | Unset = UNSET
        if not isinstance(self.reasons, Unset):
            reasons = self.reasons



        job_steps = self.job_steps


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "method": method,
            "confidence": confidence,
        })
        if template_name is not UNSET:
            field_dict["template_name"] = template_name
        if period_ops is not UNSET:
            field_dict["period_ops"] = period_ops
        if reasons is not UNSET:
            field_dict["reasons"] = reasons
        if job_steps is not UNSET:
            field_dict["job_steps"] = job_steps

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        method = RecoveryMethod(d.pop("method"))




        confidence = d.pop("confidence")

        template_name = d.pop("template_name", UNSET)

        period_ops = d.pop("period_ops", UNSET)

        reasons = cast(list[str], d.pop("reasons", UNSET))


        job_steps = d.pop("job_steps", UNSET)

        recovery = cls(
            method=method,
            confidence=confidence,
            template_name=template_name,
            period_ops=period_ops,
            reasons=reasons,
            job_steps=job_steps,
        )

        return recovery

