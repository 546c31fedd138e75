from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.incident_stack_status import IncidentStackStatus
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.incident_stack_frame import IncidentStackFrame





T = TypeVar("T", bound="IncidentStack")



@_attrs_define
class IncidentStack:
    """ Where one thread of a rank's process was in Python when its stack was captured (one entry per thread, the main
    thread first), or why it was not (one entry for the process). The python-stack protocol's capture, as the incident
    carries it.

        Attributes:
            rank (int): Global rank of the process (RANK).
            host (str): Host name of the process.
            pid (int): Process id.
            status (IncidentStackStatus): captured: frames holds the process's Python stack; unavailable: no stack was
                captured (reason says why, e.g. Inject is not in the process).
            frames (list[IncidentStackFrame]): Innermost (the frame running now) first; empty when unavailable.
            node_name (str | Unset): Node name of the Agent that captured it.
            captured_at_real_ns (int | Unset): When the frames were taken, CLOCK_REALTIME nanoseconds; absent when
                unavailable.
            thread_id (int | Unset): Python thread identifier of these frames; absent when unavailable.
            thread_name (str | Unset): Thread name; absent when unknown.
            unavailable_reason (str | Unset): Why no stack was captured; present exactly when status is unavailable.
     """

    rank: int
    host: str
    pid: int
    status: IncidentStackStatus
    frames: list[IncidentStackFrame]
    node_name: str | Unset = UNSET
    captured_at_real_ns: int | Unset = UNSET
    thread_id: int | Unset = UNSET
    thread_name: str | Unset = UNSET
    unavailable_reason: str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.incident_stack_frame import IncidentStackFrame # noqa: PLC0415
        rank = self.rank

        host = self.host

        pid = self.pid

        status = self.status.value

        frames = []
        for frames_item_data in self.frames:
            frames_item = frames_item_data.to_dict()
            frames.append(frames_item)



        node_name = self.node_name

        captured_at_real_ns = self.captured_at_real_ns

        thread_id = self.thread_id

        thread_name = self.thread_name

        unavailable_reason = self.unavailable_reason


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "rank": rank,
            "host": host,
            "pid": pid,
            "status": status,
            "frames": frames,
        })
        if node_name is not UNSET:
            field_dict["node_name"] = node_name
        if captured_at_real_ns is not UNSET:
            field_dict["captured_at_real_ns"] = captured_at_real_ns
        if thread_id is not UNSET:
            field_dict["thread_id"] = thread_id
        if thread_name is not UNSET:
            field_dict["thread_name"] = thread_name
        if unavailable_reason is not UNSET:
            field_dict["unavailable_reason"] = unavailable_reason

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.incident_stack_frame import IncidentStackFrame # noqa: PLC0415
        d = dict(src_dict)
        rank = d.pop("rank")

        host = d.pop("host")

        pid = d.pop("pid")

        status = IncidentStackStatus(d.pop("status"))




        frames = []
        _frames = d.pop("frames")
        for frames_item_data in (_frames):
            frames_item = IncidentStackFrame.from_dict(frames_item_data)



            frames.append(frames_item)


        node_name = d.pop("node_name", UNSET)

        captured_at_real_ns = d.pop("captured_at_real_ns", UNSET)

        thread_id = d.pop("thread_id", UNSET)

        thread_name = d.pop("thread_name", UNSET)

        unavailable_reason = d.pop("unavailable_reason", UNSET)

        incident_stack = cls(
            rank=rank,
            host=host,
            pid=pid,
            status=status,
            frames=frames,
            node_name=node_name,
            captured_at_real_ns=captured_at_real_ns,
            thread_id=thread_id,
            thread_name=thread_name,
            unavailable_reason=unavailable_reason,
        )

        return incident_stack

