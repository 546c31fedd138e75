"""The Profiler's hang evidence (shm v1 evidence_entry), as plain values and as report evidence.

When its watchdog flags a communicator, a Profiler raises NCCL's activation mask by
ProxyOp|ProxyStep and records that communicator's network proxy progress per channel, until
the op completes, the communicator is finalized or a bound passes. NCCL fixes an op's mask
when the op is issued, so the stuck op itself gets no proxy events: the channels describe the
ops issued after the raise, queued behind it (which channels have steps posted, which got
data from the GPU or the network, which handed it on). An entry names its communicator row
by (comm_id, rank, comm_generation); `evidence_by_row` indexes a region's entries that way.

Everything here comes from SHM another process writes: values that break the protocol (a
negative peer, an unknown state) leave the channel or the entry out instead of reaching a
report that its schema would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

from msgspec import UNSET

from comminsight.agent.receivers.producer_clock import on_reader_clock
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.hang_report_v1 import (
    HangEvidence,
    HangEvidenceEnd,
    HangEvidenceState,
    ProxyDirection,
    ProxyProgress,
)

MS = 1_000_000
NO_OP_INDEX = shm_v1.NO_OP_INDEX
_STATES = {
    shm_v1.EvidenceState.RAISED: HangEvidenceState.raised,
    shm_v1.EvidenceState.LOWERED: HangEvidenceState.lowered,
}
_ENDS = {
    shm_v1.EvidenceEnd.OP_COMPLETED: HangEvidenceEnd.op_completed,
    shm_v1.EvidenceEnd.COMM_FINALIZED: HangEvidenceEnd.comm_finalized,
    shm_v1.EvidenceEnd.BOUND_REACHED: HangEvidenceEnd.bound_reached,
}


@dataclass(frozen=True)
class ChannelProgress:
    """One channel in one direction (shm v1 channel_progress), with a proxy op recorded."""

    channel: int
    is_send: bool
    peer: int
    ops_started: int
    ops_stopped: int
    steps_expected: int
    steps_posted: int
    steps_arrived: int
    steps_transmitted: int
    steps_done: int


@dataclass(frozen=True)
class EvidenceView:
    """One evidence entry of a process, bound to one communicator row."""

    raised: bool  # False: lowered (end_reason says why)
    end_reason: int  # shm_v1.EvidenceEnd
    evidence_mask: int
    flagged_op_index: int
    raised_mono_ns: int
    lowered_mono_ns: int  # 0 while raised
    first_proxy_op_index: int | None
    last_proxy_op_index: int | None
    last_event_mono_ns: int  # 0: none recorded
    proxy_events: int
    events_dropped: int
    channels: tuple[ChannelProgress, ...]


RowKey = tuple[int, int, int]  # (comm_id, rank, comm_entry.generation)


def evidence_by_row(entries, offset_ns: int = 0) -> dict[RowKey, EvidenceView]:
    """A region's evidence entries (ShmRegion.evidence_entries()) by the row each names; of
    two naming the same row, the later raise. offset_ns: how far the producer's monotonic
    clock runs ahead of the reader's (its times are put on the reader's)."""
    out: dict[RowKey, EvidenceView] = {}
    for entry in sorted(entries, key=lambda e: int(e["raised_mono_ns"])):
        view = evidence_view(entry, offset_ns)
        if view is not None:
            key = (int(entry["comm_id"]), int(entry["rank"]), int(entry["comm_generation"]))
            out[key] = view
    return out


def evidence_view(entry, offset_ns: int = 0) -> EvidenceView | None:
    state = int(entry["state"])
    if state not in _STATES:
        return None
    first, last = int(entry["first_proxy_op_index"]), int(entry["last_proxy_op_index"])
    return EvidenceView(
        raised=state == shm_v1.EvidenceState.RAISED,
        end_reason=int(entry["end_reason"]),
        evidence_mask=int(entry["evidence_mask"]),
        flagged_op_index=int(entry["flagged_op_index"]),
        raised_mono_ns=on_reader_clock(int(entry["raised_mono_ns"]), offset_ns),
        lowered_mono_ns=on_reader_clock(int(entry["lowered_mono_ns"]), offset_ns),
        first_proxy_op_index=None if first == NO_OP_INDEX else first,
        last_proxy_op_index=None if last == NO_OP_INDEX else last,
        last_event_mono_ns=on_reader_clock(int(entry["last_event_mono_ns"]), offset_ns),
        proxy_events=int(entry["proxy_events"]),
        events_dropped=int(entry["events_dropped"]),
        channels=tuple(_channels(entry)),
    )


def _channels(entry):
    for is_send, side in ((True, entry["send"]), (False, entry["recv"])):
        for channel, c in enumerate(side):
            if int(c["ops_started"]) == 0 or int(c["peer"]) < 0:
                continue  # no proxy op on it (or a peer no rank can be)
            yield ChannelProgress(
                channel=channel,
                is_send=is_send,
                peer=int(c["peer"]),
                ops_started=int(c["ops_started"]),
                ops_stopped=int(c["ops_stopped"]),
                steps_expected=int(c["steps_expected"]),
                steps_posted=int(c["steps_posted"]),
                steps_arrived=int(c["steps_arrived"]),
                steps_transmitted=int(c["steps_transmitted"]),
                steps_done=int(c["steps_done"]),
            )


def hang_evidence(view: EvidenceView, to_real_ns, now_mono_ns: int) -> HangEvidence:
    """The report's form: channels by channel id, send before recv. to_real_ns converts the
    producing process's monotonic times (ProcessView.to_real_ns); now_mono_ns is on its host."""
    channels = sorted(view.channels, key=lambda c: (c.channel, not c.is_send))
    ended = not view.raised and view.end_reason in _ENDS
    return HangEvidence(
        state=HangEvidenceState.raised if view.raised else HangEvidenceState.lowered,
        end_reason=_ENDS[view.end_reason] if ended else UNSET,
        evidence_mask=max(0, view.evidence_mask),
        flagged_op=view.flagged_op_index,
        raised_at_real_ns=to_real_ns(view.raised_mono_ns),
        raised_age_ms=max(0, now_mono_ns - view.raised_mono_ns) // MS,
        lowered_at_real_ns=to_real_ns(view.lowered_mono_ns) if view.lowered_mono_ns else UNSET,
        first_proxy_op=_or_unset(view.first_proxy_op_index),
        last_proxy_op=_or_unset(view.last_proxy_op_index),
        last_event_age_ms=max(0, now_mono_ns - view.last_event_mono_ns) // MS
        if view.last_event_mono_ns
        else UNSET,
        proxy_events=view.proxy_events,
        events_dropped=view.events_dropped,
        channels=[_progress(c) for c in channels[:128]],
    )


def _progress(c: ChannelProgress) -> ProxyProgress:
    return ProxyProgress(
        channel_id=c.channel,
        peer=c.peer,
        direction=ProxyDirection.send if c.is_send else ProxyDirection.recv,
        n_steps=c.steps_expected,
        steps_done=c.steps_done,
        proxy_ops_started=c.ops_started,
        proxy_ops_completed=c.ops_stopped,
        steps_posted=c.steps_posted,
        steps_arrived=c.steps_arrived,
        steps_transmitted=c.steps_transmitted,
    )


def _or_unset(value: int | None):
    return UNSET if value is None else value
