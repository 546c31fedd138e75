"""Where an op came from, so that a checkpoint can resume the input right after it: a line of
an inspector_logs segment (offline) or a slot of a producer's SHM ring (live). The
semantic-engine protocol's LogPosition and ShmPosition; every stage of the engine carries them
without knowing which input made them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class LogPosition(NamedTuple):
    """Where an op's line is: the checkpoint's `input` (semantic-engine LogPosition). A
    NamedTuple: one is made per op line, and tuples are the cheapest to make."""

    segment: str
    segment_index: int | None
    byte_offset: int
    record_index: int
    ring_seq: int | None
    end_offset: int = 0  # the byte after the line

    def order(self) -> tuple[int, int]:
        return (self.segment_index or 0, self.byte_offset)

    def resume_here(self) -> LogPosition:
        """The checkpoint position that re-reads this line first."""
        before = self.ring_seq - 1 if self.ring_seq else None  # the last ring record consumed
        return LogPosition(
            self.segment, self.segment_index, self.byte_offset, self.record_index, before
        )

    def after(self) -> LogPosition:
        """The position of the next line."""
        return LogPosition(
            self.segment,
            self.segment_index,
            self.end_offset,
            self.record_index + 1,
            self.ring_seq,
            self.end_offset,
        )


@dataclass(frozen=True)
class RingPosition:
    """Where an op is in its producer's ring (semantic-engine ShmPosition)."""

    ring_seq: int

    def order(self) -> tuple[int, int]:
        return (0, self.ring_seq)

    def after(self) -> RingPosition:
        return RingPosition(self.ring_seq + 1)

    def resume_here(self) -> RingPosition:
        return self
