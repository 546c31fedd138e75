"""What a GPU's live engine was handed since its last checkpoint, so that it can be restarted.

The Agent's ingest cursor has moved past the records an engine already took, and the ring
may have overwritten them since; when the engine fails, it is restored from its last
checkpoint and handed these entries again, which gives the same Steps, byte for byte, as if
it had never failed. A checkpoint at ring position P drops every entry before P. The log is
bounded: past `max_records` the oldest entries go (and are counted), and a restart then
reports the records they held as lost in the Step it resumes in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

# Per GPU: 16 MiB of 256-byte slots. Until it has chosen a template the engine keeps up to
# PROBE_MAX (50,000) ops unplaced, and a restart must be able to hand all of them again.
DEFAULT_MAX_RECORDS = 1 << 16


@dataclass(eq=False)  # compared by identity: "the entry that failed"
class ReplayEntry:
    kind: str  # "ops", "lost" or "finished", as SemanticEngineHook queues them
    payload: object

    @property
    def records(self) -> int:
        return len(self.payload[0]) if self.kind == "ops" else 0


class ReplayLog:
    def __init__(self, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self.max_records = max_records
        self.entries: deque[ReplayEntry] = deque()
        self.records = 0  # op records held
        self.dropped = 0  # op records let go before a checkpoint covered them

    def add(self, kind: str, payload) -> ReplayEntry:
        entry = ReplayEntry(kind, payload)
        self.entries.append(entry)
        self.records += entry.records
        while self.records > self.max_records and len(self.entries) > 1:
            old = self.entries.popleft()
            self.records -= old.records
            self.dropped += old.records
        return entry

    @property
    def full(self) -> bool:
        """Over three quarters of the bound: time for a checkpoint, before entries are lost."""
        return self.records * 4 > self.max_records * 3

    def trim(self, ring_seq: int) -> None:
        """A checkpoint resumes at ring record `ring_seq`: drop what comes before it. A loss
        entry goes with the ops entry before it unless the next ops entry starts at or after
        `ring_seq`: the engine adds a loss to the first op it sees next."""
        self.dropped = 0  # a restart now resumes from this checkpoint; gaps after it show
        entries = self.entries
        while entries:
            head = entries[0]
            if head.kind == "ops":
                seqs = head.payload[0]["seq"]
                if int(seqs[-1]) >= ring_seq:
                    if int(seqs[0]) < ring_seq:  # a copy: the slice would keep the whole array
                        records, comms = head.payload
                        kept = records[seqs >= ring_seq].copy()
                        self.records -= len(records) - len(kept)
                        head.payload = (kept, comms)
                    return
            elif head.kind == "lost":
                following = next((e for e in entries if e.kind == "ops"), None)
                if following is None or int(following.payload[0]["seq"][0]) >= ring_seq:
                    return
            else:  # "finished": nothing comes after it
                return
            entries.popleft()
            self.records -= head.records

    def discard(self, entry: ReplayEntry) -> int:
        """Turn an ops entry that made the restarted engine fail again into a loss of as many
        records (the engine reports it in the Step it goes on in); the records it held."""
        n = entry.records
        if entry.kind == "ops":
            self.records -= n
            entry.kind, entry.payload = "lost", n
        return n


def newest_end(records: np.ndarray) -> int:
    """The latest completion time (CLOCK_MONOTONIC ns) of a batch of op slots."""
    return int(records["complete_mono_ns"].max()) if len(records) else 0
