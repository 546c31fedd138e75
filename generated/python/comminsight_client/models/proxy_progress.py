from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.proxy_direction import ProxyDirection






T = TypeVar("T", bound="ProxyProgress")



@_attrs_define
class ProxyProgress:
    """ Network proxy progress of one channel of the in-flight op (from ProxyOp/ProxyStep events, when enabled).

        Attributes:
            channel_id (int): Channel index.
            peer (int): Peer rank the proxy sends to or receives from.
            direction (ProxyDirection): send or recv.
            n_steps (int): Steps the proxy op has to transfer.
            steps_done (int): Steps transferred so far.
            last_progress_age_ms (int): Time since the last step made progress, in milliseconds.
     """

    channel_id: int
    peer: int
    direction: ProxyDirection
    n_steps: int
    steps_done: int
    last_progress_age_ms: int





    def to_dict(self) -> dict[str, Any]:
        channel_id = self.channel_id

        peer = self.peer

        direction = self.direction.value

        n_steps = self.n_steps

        steps_done = self.steps_done

        last_progress_age_ms = self.last_progress_age_ms


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "channel_id": channel_id,
            "peer": peer,
            "direction": direction,
            "n_steps": n_steps,
            "steps_done": steps_done,
            "last_progress_age_ms": last_progress_age_ms,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        channel_id = d.pop("channel_id")

        peer = d.pop("peer")

        direction = ProxyDirection(d.pop("direction"))




        n_steps = d.pop("n_steps")

        steps_done = d.pop("steps_done")

        last_progress_age_ms = d.pop("last_progress_age_ms")

        proxy_progress = cls(
            channel_id=channel_id,
            peer=peer,
            direction=direction,
            n_steps=n_steps,
            steps_done=steps_done,
            last_progress_age_ms=last_progress_age_ms,
        )

        return proxy_progress

