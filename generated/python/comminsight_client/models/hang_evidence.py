from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.hang_evidence_end import HangEvidenceEnd
from ..models.hang_evidence_state import HangEvidenceState
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.proxy_progress import ProxyProgress





T = TypeVar("T", bound="HangEvidence")



@_attrs_define
class HangEvidence:
    """ Network proxy progress a rank's Profiler recorded after its watchdog flagged this communicator and raised the
    activation mask by ProxyOp|ProxyStep. NCCL fixes an op's mask when the op is issued, so the op that was in flight at
    the raise gets no proxy events: the channels describe the communicator's ops issued after it
    (first_proxy_op..last_proxy_op), which queue behind the stuck one.

        Attributes:
            state (HangEvidenceState): raised: the rank's Profiler has NCCL's activation mask raised and records proxy
                progress; lowered: it stopped (end_reason says why) and is back on the normal mask.
            evidence_mask (int): The activation mask NCCL was given while raised.
            flagged_op (int): Op index the watchdog flagged (the communicator's op index, as in ProgressMark.seq).
            raised_age_ms (int): How long before detection recording began, in milliseconds.
            proxy_events (int): Proxy events recorded.
            channels (list[ProxyProgress]): Every channel and direction with a proxy op recorded, by channel then send
                before recv; empty when no proxy op was issued since the raise.
            end_reason (HangEvidenceEnd | Unset): Why recording stopped: the flagged op completed, the communicator was
                finalized, or the configured bound (COMMINSIGHT_PROFILER_HANG_EVIDENCE_MAX_S) passed.
            raised_at_real_ns (int | Unset): When recording began, wall clock ns.
            lowered_at_real_ns (int | Unset): When recording stopped, wall clock ns; absent while raised.
            first_proxy_op (int | Unset): Lowest op index whose proxy ops were recorded; absent when none were.
            last_proxy_op (int | Unset): Highest such op index; absent when none were.
            last_event_age_ms (int | Unset): Time since the last proxy op start/stop or step completion recorded, in
                milliseconds; absent when none was.
            events_dropped (int | Unset): Proxy events not recorded (a channel id beyond the recorded range).
     """

    state: HangEvidenceState
    evidence_mask: int
    flagged_op: int
    raised_age_ms: int
    proxy_events: int
    channels: list[ProxyProgress]
    end_reason: HangEvidenceEnd | Unset = UNSET
    raised_at_real_ns: int | Unset = UNSET
    lowered_at_real_ns: int | Unset = UNSET
    first_proxy_op: int | Unset = UNSET
    last_proxy_op: int | Unset = UNSET
    last_event_age_ms: int | Unset = UNSET
    events_dropped: int | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.proxy_progress import ProxyProgress # noqa: PLC0415
        state = self.state.value

        evidence_mask = self.evidence_mask

        flagged_op = self.flagged_op

        raised_age_ms = self.raised_age_ms

        proxy_events = self.proxy_events

        channels = []
        for channels_item_data in self.channels:
            channels_item = channels_item_data.to_dict()
            channels.append(channels_item)



        end_reason: str | Unset = UNSET
        if not isinstance(self.end_reason, Unset):
            end_reason = self.end_reason.value


        raised_at_real_ns = self.raised_at_real_ns

        lowered_at_real_ns = self.lowered_at_real_ns

        first_proxy_op = self.first_proxy_op

        last_proxy_op = self.last_proxy_op

        last_event_age_ms = self.last_event_age_ms

        events_dropped = self.events_dropped


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "state": state,
            "evidence_mask": evidence_mask,
            "flagged_op": flagged_op,
            "raised_age_ms": raised_age_ms,
            "proxy_events": proxy_events,
            "channels": channels,
        })
        if end_reason is not UNSET:
            field_dict["end_reason"] = end_reason
        if raised_at_real_ns is not UNSET:
            field_dict["raised_at_real_ns"] = raised_at_real_ns
        if lowered_at_real_ns is not UNSET:
            field_dict["lowered_at_real_ns"] = lowered_at_real_ns
        if first_proxy_op is not UNSET:
            field_dict["first_proxy_op"] = first_proxy_op
        if last_proxy_op is not UNSET:
            field_dict["last_proxy_op"] = last_proxy_op
        if last_event_age_ms is not UNSET:
            field_dict["last_event_age_ms"] = last_event_age_ms
        if events_dropped is not UNSET:
            field_dict["events_dropped"] = events_dropped

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.proxy_progress import ProxyProgress # noqa: PLC0415
        d = dict(src_dict)
        state = HangEvidenceState(d.pop("state"))




        evidence_mask = d.pop("evidence_mask")

        flagged_op = d.pop("flagged_op")

        raised_age_ms = d.pop("raised_age_ms")

        proxy_events = d.pop("proxy_events")

        channels = []
        _channels = d.pop("channels")
        for channels_item_data in (_channels):
            channels_item = ProxyProgress.from_dict(channels_item_data)



            channels.append(channels_item)


        _end_reason = d.pop("end_reason", UNSET)
        end_reason: HangEvidenceEnd | Unset
        if isinstance(_end_reason,  Unset):
            end_reason = UNSET
        else:
            end_reason = HangEvidenceEnd(_end_reason)




        raised_at_real_ns = d.pop("raised_at_real_ns", UNSET)

        lowered_at_real_ns = d.pop("lowered_at_real_ns", UNSET)

        first_proxy_op = d.pop("first_proxy_op", UNSET)

        last_proxy_op = d.pop("last_proxy_op", UNSET)

        last_event_age_ms = d.pop("last_event_age_ms", UNSET)

        events_dropped = d.pop("events_dropped", UNSET)

        hang_evidence = cls(
            state=state,
            evidence_mask=evidence_mask,
            flagged_op=flagged_op,
            raised_age_ms=raised_age_ms,
            proxy_events=proxy_events,
            channels=channels,
            end_reason=end_reason,
            raised_at_real_ns=raised_at_real_ns,
            lowered_at_real_ns=lowered_at_real_ns,
            first_proxy_op=first_proxy_op,
            last_proxy_op=last_proxy_op,
            last_event_age_ms=last_event_age_ms,
            events_dropped=events_dropped,
        )

        return hang_evidence

