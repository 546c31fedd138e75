"""What a GPU's live cut goes on from after the Agent restarted: the ops its engine had placed
before the checkpoint, read again from the SHM ring (a restarted Agent reads each ring from
its oldest record), each labelled with the Step that the summaries already written put it in.

Without it, the first cuts after a restart see each GPU's ops only from where that GPU's
checkpoint lies, and those points need not be the same Step on every GPU (a GPU whose reorder
window straddled the last checkpoints keeps an older one; an Agent restarted near the job's
end sees only its last Steps). A job-wide cut of windows that begin at other Steps on other
ranks matches ops across their heads badly: Steps merge or split around the restart, and a
rank whose window began far from its peers' can be cut at the wrong phase from then on.

A Step is taken back only where its first and last op (by ring record, as its summary names
them) are found with as many ops between them as it counts, and the Steps taken back are the
unbroken run of such Steps that ends with the last op placed (the Step left open at the
checkpoint included). Anything less (records overwritten in the ring, a summary without ring
records, an op placed in no Step) gives a shorter context or none, and the cut goes on as it
would without.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from comminsight.line_reader import complete_lines
from comminsight.safe_open import open_regular
from comminsight.semantic.op_batch import OpBatch
from comminsight.semantic.step_builder import OpenStep
from comminsight.step_file_bounds import STEP_FILE_BYTES_MAX, STEP_LINE_BYTES_MAX
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen.models.step_summary_v1 import StepSummary

# A summary line is a few KiB; the context the cut keeps (MAX_CONTEXT_OPS ops) spans at most
# that many Steps, so the tail read back is bounded by the Steps it can use, not the file.
TAIL_BYTES_MAX = 8 << 20


@dataclass(frozen=True)
class StepSpan:
    """A Step as written: its index, the ring records of its first and last op, its ops."""

    step: int
    first_ring: int
    last_ring: int
    op_count: int


def written_spans(path: Path, size: int, most_ops: int) -> list[StepSpan]:
    """The last Steps of a GPU's summary file (its first `size` bytes: what the checkpoint
    counts), oldest first, as many as hold at most `most_ops` ops. Lines that are no summary
    end the run there (the Steps after them are kept)."""
    decoder = msgspec.json.Decoder(StepSummary)
    start = max(0, size - TAIL_BYTES_MAX)
    spans: list[StepSpan] = []
    with open_regular(path, STEP_FILE_BYTES_MAX) as f:
        for k, line in enumerate(complete_lines(f.fileno(), start, size, STEP_LINE_BYTES_MAX)):
            if k == 0 and start:
                continue  # the end of a line cut by the tail's start
            span = _span_of(decoder, line.data)
            if span is None:
                spans.clear()
            else:
                spans.append(span)
    return newest_within(spans, most_ops)


def newest_within(spans: list[StepSpan], most_ops: int) -> list[StepSpan]:
    """The newest of `spans` that hold at most `most_ops` ops together."""
    total, keep = 0, len(spans)
    while keep and total + spans[keep - 1].op_count <= most_ops:
        keep -= 1
        total += spans[keep].op_count
    return spans[keep:]


def _span_of(decoder: msgspec.json.Decoder, data: bytes | None) -> StepSpan | None:
    if not data or not data.strip():
        return None
    try:
        s = decoder.decode(data)
    except NOT_JSON:
        return None
    first, last = s.first_op.ring_seq, s.last_op.ring_seq
    if not isinstance(first, int) or not isinstance(last, int):
        return None
    return StepSpan(s.step_index, first, last, s.op_count)


def open_span(step: OpenStep | None) -> StepSpan | None:
    """The Step left open at the checkpoint (its ops placed, its summary not yet written)."""
    if step is None or step.first_op.ring_seq is None or step.last_op.ring_seq is None:
        return None
    return StepSpan(step.step_index, step.first_op.ring_seq, step.last_op.ring_seq, step.op_count)


@dataclass
class PlacedRecords:
    """The ring records of a restored GPU that its engine had placed before the checkpoint,
    gathered while the hook skips them: those from the first record of the Steps in `spans`
    on, and never more than `most_records` (the newest kept), whatever a summary file says
    its Steps' records are (one read back from a damaged file may name record 0)."""

    spans: list[StepSpan]
    most_records: int
    records: list[np.ndarray] = field(default_factory=list)
    comms: dict = field(default_factory=dict)
    held: int = 0

    @property
    def lowest_ring(self) -> int:
        return min(s.first_ring for s in self.spans)

    def add(self, records: np.ndarray, comms: dict) -> None:
        wanted = records[records["seq"] >= self.lowest_ring][-self.most_records :]
        if not len(wanted):
            return
        self.records.append(wanted)
        self.comms.update(comms)
        self.held += len(wanted)
        while self.held - len(self.records[0]) >= self.most_records:
            self.held -= len(self.records.pop(0))
        if self.held > self.most_records:
            self.records[0] = self.records[0][self.held - self.most_records :]
            self.held = self.most_records


def labelled_context(ops: OpBatch, spans: list[StepSpan]) -> tuple[OpBatch, np.ndarray] | None:
    """The ops of the longest run of `spans` found in `ops` (the records placed before the
    checkpoint) that ends with the last op placed, in the order the engine placed them, and
    each op's Step; None when not even the last Step is found whole."""
    if not len(ops) or not spans:
        return None
    arrival = np.arange(len(ops), dtype=np.int64)
    ops.cols["arrival"] = arrival
    # the engine places ops in issue order, ties in the order they came (ring order)
    ordered = ops.take(np.lexsort((ops["ring_seq"], ops["issue"])))
    ring = np.asarray(ordered["ring_seq"], np.int64)
    by_ring = np.argsort(ring, kind="stable")
    end, found = len(ordered), []
    for span in reversed(spans):
        first, last = _index(ring, by_ring, span.first_ring), _index(ring, by_ring, span.last_ring)
        if first is None or last != end - 1 or last - first + 1 != span.op_count:
            break
        found.append((first, span.step))
        end = first
    if not found:
        return None
    steps = np.empty(len(ordered) - end, np.int64)
    stop = len(ordered)
    for first, step in found:
        steps[first - end : stop - end] = step
        stop = first
    return ordered.take(slice(end, None)), steps


def _index(ring: np.ndarray, by_ring: np.ndarray, seq: int) -> int | None:
    i = int(np.searchsorted(ring, seq, sorter=by_ring))
    if i < len(ring) and ring[by_ring[i]] == seq:
        return int(by_ring[i])
    return None
