from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.inflight_op import InflightOp
  from ..models.seq_progress import SeqProgress





T = TypeVar("T", bound="CommProgress")



@_attrs_define
class CommProgress:
    """ Live progress of one rank in one communicator, from the profiler's communicator table
    (shm v1 comm_entry). Collectives and point-to-point ops are counted separately because
    only collective sequence numbers line up across all ranks of a communicator; hang
    diagnosis compares `collectives` across ranks and `p2p` between peers.

        Attributes:
            collectives (SeqProgress): How far one kind of op (collective, or point-to-point) got on one rank of one
                communicator. A `*_seq` is the sequence number of the last op that reached the stage:
                NCCL's seqNumber for collectives (from 0), the communicator's own counter for P2P
                (NCCL gives P2P none). Null while no op reached the stage. `*_mono_ns` is host time
                on the rank's node when the stage was seen.
            p2p (SeqProgress): How far one kind of op (collective, or point-to-point) got on one rank of one
                communicator. A `*_seq` is the sequence number of the last op that reached the stage:
                NCCL's seqNumber for collectives (from 0), the communicator's own counter for P2P
                (NCCL gives P2P none). Null while no op reached the stage. `*_mono_ns` is host time
                on the rank's node when the stage was seen.
            last_progress_real_ns (int | None): The latest enqueue, GPU start or completion of either kind, in real time;
                null before the first op.
            last_progress_age_ms (int | None):
            inflight_count (int): Ops enqueued and not completed.
            oldest_inflight (InflightOp | None): The oldest op in flight, null when none.
     """

    collectives: SeqProgress
    p2p: SeqProgress
    last_progress_real_ns: int | None
    last_progress_age_ms: int | None
    inflight_count: int
    oldest_inflight: InflightOp | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.inflight_op import InflightOp # noqa: PLC0415
        from ..models.seq_progress import SeqProgress # noqa: PLC0415
        collectives = self.collectives.to_dict()

        p2p = self.p2p.to_dict()

        last_progress_real_ns: int | None
        last_progress_real_ns = self.last_progress_real_ns

        last_progress_age_ms: int | None
        last_progress_age_ms = self.last_progress_age_ms

        inflight_count = self.inflight_count

        oldest_inflight: dict[str, Any] | None
        if isinstance(self.oldest_inflight, InflightOp):
            oldest_inflight = self.oldest_inflight.to_dict()
        else:
            oldest_inflight = self.oldest_inflight


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "collectives": collectives,
            "p2p": p2p,
            "last_progress_real_ns": last_progress_real_ns,
            "last_progress_age_ms": last_progress_age_ms,
            "inflight_count": inflight_count,
            "oldest_inflight": oldest_inflight,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.inflight_op import InflightOp # noqa: PLC0415
        from ..models.seq_progress import SeqProgress # noqa: PLC0415
        d = dict(src_dict)
        collectives = SeqProgress.from_dict(d.pop("collectives"))




        p2p = SeqProgress.from_dict(d.pop("p2p"))




        def _parse_last_progress_real_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_progress_real_ns = _parse_last_progress_real_ns(d.pop("last_progress_real_ns"))


        def _parse_last_progress_age_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_progress_age_ms = _parse_last_progress_age_ms(d.pop("last_progress_age_ms"))


        inflight_count = d.pop("inflight_count")

        def _parse_oldest_inflight(data: object) -> InflightOp | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                oldest_inflight_type_0 = InflightOp.from_dict(data)



                return oldest_inflight_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(InflightOp | None, data)

        oldest_inflight = _parse_oldest_inflight(d.pop("oldest_inflight"))


        comm_progress = cls(
            collectives=collectives,
            p2p=p2p,
            last_progress_real_ns=last_progress_real_ns,
            last_progress_age_ms=last_progress_age_ms,
            inflight_count=inflight_count,
            oldest_inflight=oldest_inflight,
        )


        comm_progress.additional_properties = d
        return comm_progress

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
