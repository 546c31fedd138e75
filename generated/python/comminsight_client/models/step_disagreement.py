from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.disagreement_kind import DisagreementKind
from typing import cast

if TYPE_CHECKING:
  from ..models.seq_span_claim import SeqSpanClaim





T = TypeVar("T", bound="StepDisagreement")



@_attrs_define
class StepDisagreement:
    """ 
        Attributes:
            kind (DisagreementKind): offset_conflict: shared spans link two nodes with different offsets (no offset
                reconciles them); unlinked: a node no shared span links to the reference;
                boundary_mismatch: at one job step two GPUs of one communicator hold different coll spans
                on it (their nodes cut the Step at different ops); node_numbering: GPUs of one node
                number the same iteration differently; no_comm_seqs: a GPU's summaries have no
                comm_seqs (an older engine), so only its node's other GPUs can place it; silent_node:
                a node runs processes of the job but none of its Steps is in the window.
            description (str): One line naming what disagrees.
            nodes (list[str]):
            comm_id (None | str):
            job_step_index (int | None):
            spans (list[SeqSpanClaim]): The coll seq spans that disagree (at most 8).
     """

    kind: DisagreementKind
    description: str
    nodes: list[str]
    comm_id: None | str
    job_step_index: int | None
    spans: list[SeqSpanClaim]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.seq_span_claim import SeqSpanClaim # noqa: PLC0415
        kind = self.kind.value

        description = self.description

        nodes = self.nodes



        comm_id: None | str
        comm_id = self.comm_id

        job_step_index: int | None
        job_step_index = self.job_step_index

        spans = []
        for spans_item_data in self.spans:
            spans_item = spans_item_data.to_dict()
            spans.append(spans_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "kind": kind,
            "description": description,
            "nodes": nodes,
            "comm_id": comm_id,
            "job_step_index": job_step_index,
            "spans": spans,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.seq_span_claim import SeqSpanClaim # noqa: PLC0415
        d = dict(src_dict)
        kind = DisagreementKind(d.pop("kind"))




        description = d.pop("description")

        nodes = cast(list[str], d.pop("nodes"))


        def _parse_comm_id(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        comm_id = _parse_comm_id(d.pop("comm_id"))


        def _parse_job_step_index(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        job_step_index = _parse_job_step_index(d.pop("job_step_index"))


        spans = []
        _spans = d.pop("spans")
        for spans_item_data in (_spans):
            spans_item = SeqSpanClaim.from_dict(spans_item_data)



            spans.append(spans_item)


        step_disagreement = cls(
            kind=kind,
            description=description,
            nodes=nodes,
            comm_id=comm_id,
            job_step_index=job_step_index,
            spans=spans,
        )


        step_disagreement.additional_properties = d
        return step_disagreement

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
