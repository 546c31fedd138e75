from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.proxy_direction import ProxyDirection
from ..types import UNSET, Unset






T = TypeVar("T", bound="ProxyProgress")



@_attrs_define
class ProxyProgress:
    """ Network proxy progress of one channel in one direction (from ProxyOp/ProxyStep events), summed over the proxy ops
    the counters cover. Steps follow NCCL's proxy: posted, arrived (send: the GPU filled the buffer; recv: data came
    from the network), transmitted (send: handed to the network; recv: handed to the GPU), done.

        Attributes:
            channel_id (int): Channel index.
            peer (int): Peer rank the proxy sends to or receives from (of the last proxy op seen).
            direction (ProxyDirection): send or recv.
            n_steps (int): Steps the proxy ops have to transfer (the sum of their nSteps).
            steps_done (int): Steps completed so far.
            last_progress_age_ms (int | Unset): Time since the last step made progress, in milliseconds; absent when not
                known per channel.
            proxy_ops_started (int | Unset): Proxy ops started on this channel and direction.
            proxy_ops_completed (int | Unset): Proxy ops of them that completed.
            steps_posted (int | Unset): Steps the proxy posted.
            steps_arrived (int | Unset): Steps whose data arrived: from the GPU (send) or from the network (recv).
            steps_transmitted (int | Unset): Steps passed on: to the network (send) or to the GPU (recv).
     """

    channel_id: int
    peer: int
    direction: ProxyDirection
    n_steps: int
    steps_done: int
    last_progress_age_ms: int | Unset = UNSET
    proxy_ops_started: int | Unset = UNSET
    proxy_ops_completed: int | Unset = UNSET
    steps_posted: int | Unset = UNSET
    steps_arrived: int | Unset = UNSET
    steps_transmitted: int | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        channel_id = self.channel_id

        peer = self.peer

        direction = self.direction.value

        n_steps = self.n_steps

        steps_done = self.steps_done

        last_progress_age_ms = self.last_progress_age_ms

        proxy_ops_started = self.proxy_ops_started

        proxy_ops_completed = self.proxy_ops_completed

        steps_posted = self.steps_posted

        steps_arrived = self.steps_arrived

        steps_transmitted = self.steps_transmitted


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "channel_id": channel_id,
            "peer": peer,
            "direction": direction,
            "n_steps": n_steps,
            "steps_done": steps_done,
        })
        if last_progress_age_ms is not UNSET:
            field_dict["last_progress_age_ms"] = last_progress_age_ms
        if proxy_ops_started is not UNSET:
            field_dict["proxy_ops_started"] = proxy_ops_started
        if proxy_ops_completed is not UNSET:
            field_dict["proxy_ops_completed"] = proxy_ops_completed
        if steps_posted is not UNSET:
            field_dict["steps_posted"] = steps_posted
        if steps_arrived is not UNSET:
            field_dict["steps_arrived"] = steps_arrived
        if steps_transmitted is not UNSET:
            field_dict["steps_transmitted"] = steps_transmitted

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        channel_id = d.pop("channel_id")

        peer = d.pop("peer")

        direction = ProxyDirection(d.pop("direction"))




        n_steps = d.pop("n_steps")

        steps_done = d.pop("steps_done")

        last_progress_age_ms = d.pop("last_progress_age_ms", UNSET)

        proxy_ops_started = d.pop("proxy_ops_started", UNSET)

        proxy_ops_completed = d.pop("proxy_ops_completed", UNSET)

        steps_posted = d.pop("steps_posted", UNSET)

        steps_arrived = d.pop("steps_arrived", UNSET)

        steps_transmitted = d.pop("steps_transmitted", UNSET)

        proxy_progress = cls(
            channel_id=channel_id,
            peer=peer,
            direction=direction,
            n_steps=n_steps,
            steps_done=steps_done,
            last_progress_age_ms=last_progress_age_ms,
            proxy_ops_started=proxy_ops_started,
            proxy_ops_completed=proxy_ops_completed,
            steps_posted=steps_posted,
            steps_arrived=steps_arrived,
            steps_transmitted=steps_transmitted,
        )

        return proxy_progress

