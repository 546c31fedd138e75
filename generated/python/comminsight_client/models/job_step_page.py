from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.job_ref import JobRef
  from ..models.job_step import JobStep
  from ..models.job_step_node import JobStepNode
  from ..models.step_disagreement import StepDisagreement





T = TypeVar("T", bound="JobStepPage")



@_attrs_define
class JobStepPage:
    """ 
        Attributes:
            job_id (None | str): The job answered; null for summaries that carry no job_id.
            jobs (list[JobRef]): Every job in the window, latest first (at most 64).
            nodes (list[JobStepNode]): The job's nodes by name, with their offsets.
            items (list[JobStep]): Job steps in ascending index.
            total (int): Job steps with index >= since_step (all pages).
            next_cursor (None | str): Pass as `cursor` for the next page; null on the last page.
            disagreements (list[StepDisagreement]): What does not reconcile, most serious first (at most 256;
                `disagreements_total` counts all).
            disagreements_total (int):
            window_steps_per_gpu (int): How many of each GPU's latest Steps the answer covers.
            invalid_lines (int): Lines of step-summary files read so far that were not step-summary v1 records (skipped).
     """

    job_id: None | str
    jobs: list[JobRef]
    nodes: list[JobStepNode]
    items: list[JobStep]
    total: int
    next_cursor: None | str
    disagreements: list[StepDisagreement]
    disagreements_total: int
    window_steps_per_gpu: int
    invalid_lines: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.job_ref import JobRef # noqa: PLC0415
        from ..models.job_step import JobStep # noqa: PLC0415
        from ..models.job_step_node import JobStepNode # noqa: PLC0415
        from ..models.step_disagreement import StepDisagreement # noqa: PLC0415
        job_id: None | str
        job_id = self.job_id

        jobs = []
        for jobs_item_data in self.jobs:
            jobs_item = jobs_item_data.to_dict()
            jobs.append(jobs_item)



        nodes = []
        for nodes_item_data in self.nodes:
            nodes_item = nodes_item_data.to_dict()
            nodes.append(nodes_item)



        items = []
        for items_item_data in self.items:
            items_item = items_item_data.to_dict()
            items.append(items_item)



        total = self.total

        next_cursor: None | str
        next_cursor = self.next_cursor

        disagreements = []
        for disagreements_item_data in self.disagreements:
            disagreements_item = disagreements_item_data.to_dict()
            disagreements.append(disagreements_item)



        disagreements_total = self.disagreements_total

        window_steps_per_gpu = self.window_steps_per_gpu

        invalid_lines = self.invalid_lines


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "job_id": job_id,
            "jobs": jobs,
            "nodes": nodes,
            "items": items,
            "total": total,
            "next_cursor": next_cursor,
            "disagreements": disagreements,
            "disagreements_total": disagreements_total,
            "window_steps_per_gpu": window_steps_per_gpu,
            "invalid_lines": invalid_lines,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.job_ref import JobRef # noqa: PLC0415
        from ..models.job_step import JobStep # noqa: PLC0415
        from ..models.job_step_node import JobStepNode # noqa: PLC0415
        from ..models.step_disagreement import StepDisagreement # noqa: PLC0415
        d = dict(src_dict)
        def _parse_job_id(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        job_id = _parse_job_id(d.pop("job_id"))


        jobs = []
        _jobs = d.pop("jobs")
        for jobs_item_data in (_jobs):
            jobs_item = JobRef.from_dict(jobs_item_data)



            jobs.append(jobs_item)


        nodes = []
        _nodes = d.pop("nodes")
        for nodes_item_data in (_nodes):
            nodes_item = JobStepNode.from_dict(nodes_item_data)



            nodes.append(nodes_item)


        items = []
        _items = d.pop("items")
        for items_item_data in (_items):
            items_item = JobStep.from_dict(items_item_data)



            items.append(items_item)


        total = d.pop("total")

        def _parse_next_cursor(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        next_cursor = _parse_next_cursor(d.pop("next_cursor"))


        disagreements = []
        _disagreements = d.pop("disagreements")
        for disagreements_item_data in (_disagreements):
            disagreements_item = StepDisagreement.from_dict(disagreements_item_data)



            disagreements.append(disagreements_item)


        disagreements_total = d.pop("disagreements_total")

        window_steps_per_gpu = d.pop("window_steps_per_gpu")

        invalid_lines = d.pop("invalid_lines")

        job_step_page = cls(
            job_id=job_id,
            jobs=jobs,
            nodes=nodes,
            items=items,
            total=total,
            next_cursor=next_cursor,
            disagreements=disagreements,
            disagreements_total=disagreements_total,
            window_steps_per_gpu=window_steps_per_gpu,
            invalid_lines=invalid_lines,
        )


        job_step_page.additional_properties = d
        return job_step_page

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
