from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.job_step_node_state import JobStepNodeState
from typing import cast






T = TypeVar("T", bound="JobStepNode")



@_attrs_define
class JobStepNode:
    """ 
        Attributes:
            node_name (str): The step summaries' host (the Agent's node name).
            state (JobStepNodeState): reference: the node the offsets are measured from (its component's earliest); linked:
                its offset follows from communicator spans it shares with the reference; unlinked: no
                shared span links it to the reference (no common communicator, no coinciding span, or
                no comm_seqs in its summaries), so its Steps are not in `items`; silent: a master knows
                processes of this job on the node (its slave's state) but holds no Step of the job from
                it in the window (its engine has not cut one, or its summaries do not arrive).
            offset (int | None): job step index = local step index + offset; null when unlinked.
            gpus (int):
            first_local_step (int | None): Lowest local step index of its GPUs in the window.
            last_local_step (int | None): Highest local step index of its GPUs in the window.
            linked_through (None | str): The communicator (16 hex digits) whose spans gave its offset; null for the
                reference and unlinked nodes.
            votes (int): Shared spans that agree with its offset.
     """

    node_name: str
    state: JobStepNodeState
    offset: int | None
    gpus: int
    first_local_step: int | None
    last_local_step: int | None
    linked_through: None | str
    votes: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        node_name = self.node_name

        state = self.state.value

        offset: int | None
        offset = self.offset

        gpus = self.gpus

        first_local_step: int | None
        first_local_step = self.first_local_step

        last_local_step: int | None
        last_local_step = self.last_local_step

        linked_through: None | str
        linked_through = self.linked_through

        votes = self.votes


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "node_name": node_name,
            "state": state,
            "offset": offset,
            "gpus": gpus,
            "first_local_step": first_local_step,
            "last_local_step": last_local_step,
            "linked_through": linked_through,
            "votes": votes,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        node_name = d.pop("node_name")

        state = JobStepNodeState(d.pop("state"))




        def _parse_offset(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        offset = _parse_offset(d.pop("offset"))


        gpus = d.pop("gpus")

        def _parse_first_local_step(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        first_local_step = _parse_first_local_step(d.pop("first_local_step"))


        def _parse_last_local_step(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_local_step = _parse_last_local_step(d.pop("last_local_step"))


        def _parse_linked_through(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        linked_through = _parse_linked_through(d.pop("linked_through"))


        votes = d.pop("votes")

        job_step_node = cls(
            node_name=node_name,
            state=state,
            offset=offset,
            gpus=gpus,
            first_local_step=first_local_step,
            last_local_step=last_local_step,
            linked_through=linked_through,
            votes=votes,
        )


        job_step_node.additional_properties = d
        return job_step_node

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
