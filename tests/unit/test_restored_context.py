"""A restarted Agent gives each GPU's live cut back the context it had: the ring records placed
before the checkpoint, labelled with the Steps the summaries written put them in
(restored_context). Only Steps found whole, in an unbroken run ending with the last op placed,
are taken back."""

from __future__ import annotations

import msgspec
import numpy as np
from engine_inputs import BUCKETS, COMMS, ddp_slots

from comminsight.agent.steps.restored_context import (
    PlacedRecords,
    StepSpan,
    labelled_context,
    newest_within,
    written_spans,
)
from comminsight.semantic.op_batch import CommTable, SegmentTable
from comminsight.semantic.shm_input import engine_batch
from comminsight_gen.models.step_summary_v1 import StepSummary

PER_STEP = len(BUCKETS)


def ops_of(slots):
    return engine_batch(slots, COMMS, 0, 0, CommTable(), SegmentTable())


def spans(first_step: int, steps: int) -> list[StepSpan]:
    """Steps as written for ddp_slots: Step k holds ring records 5k+1 .. 5k+5."""
    return [
        StepSpan(k, k * PER_STEP + 1, (k + 1) * PER_STEP, PER_STEP)
        for k in range(first_step, first_step + steps)
    ]


def test_the_ops_of_the_last_steps_come_back_in_placing_order_with_their_steps():
    slots = ddp_slots(10)
    shuffled = slots[np.random.default_rng(0).permutation(len(slots))]  # ring order aside
    got = labelled_context(ops_of(shuffled), spans(6, 4))
    assert got is not None
    ops, steps = got
    assert ops["ring_seq"].tolist() == list(range(6 * PER_STEP + 1, 10 * PER_STEP + 1))
    assert steps.tolist() == [k for k in range(6, 10) for _ in range(PER_STEP)]


def test_a_step_not_found_whole_ends_the_context_there():
    slots = ddp_slots(10)
    gone = slots[slots["seq"] != 4 * PER_STEP + 2]  # a record of Step 4 overwritten
    ops, steps = labelled_context(ops_of(gone), spans(2, 8))
    assert steps.tolist() == [k for k in range(5, 10) for _ in range(PER_STEP)]
    assert int(ops["ring_seq"][0]) == 5 * PER_STEP + 1


def test_no_context_when_the_last_op_placed_is_in_no_step_written():
    slots = ddp_slots(10)
    # the records placed go one op past the last Step written (placed in no Step)
    assert labelled_context(ops_of(slots[: 8 * PER_STEP + 1]), spans(0, 8)) is None
    assert labelled_context(ops_of(slots[:0]), spans(0, 8)) is None
    assert labelled_context(ops_of(slots), []) is None


def test_a_step_counting_other_ops_than_the_ring_holds_is_not_taken_back():
    slots = ddp_slots(4)
    wrong = spans(0, 4)
    wrong[-1] = StepSpan(3, 3 * PER_STEP + 1, 4 * PER_STEP, PER_STEP + 1)
    assert labelled_context(ops_of(slots), wrong) is None


def test_only_records_of_the_steps_wanted_are_gathered():
    placed = PlacedRecords(spans(6, 4), most_records=1000)
    placed.add(ddp_slots(10), COMMS)
    assert int(np.concatenate(placed.records)["seq"].min()) == 6 * PER_STEP + 1


def test_the_records_gathered_stay_bounded_whatever_the_summaries_claim():
    # a damaged summary file names ring record 1 as a Step's first: the whole ring would do
    claimed = [StepSpan(0, 1, 100 * PER_STEP, 100 * PER_STEP)]
    placed = PlacedRecords(claimed, most_records=12)
    slots = ddp_slots(100)
    for part in np.array_split(slots, 37):  # as the ring is read, a few records a pass
        placed.add(part, COMMS)
        assert placed.held == sum(len(r) for r in placed.records) <= 12
    kept = np.concatenate(placed.records)["seq"].tolist()
    assert kept == slots["seq"][-12:].tolist()  # the newest
    placed.add(ddp_slots(3)[:0], COMMS)
    assert placed.held == 12


def test_a_step_left_open_larger_than_the_context_gives_none():
    written = spans(0, 3)
    huge_open = StepSpan(3, 3 * PER_STEP + 1, 10**6, 10**6)
    assert newest_within([*written, huge_open], 4 * PER_STEP) == []
    assert newest_within(written, 2 * PER_STEP) == written[1:]


def _summary_line(k: int, ring_first: int, ring_last: int, ops: int) -> bytes:
    def op(ring: int) -> dict:
        return {"kind": "coll", "comm_id": "00000000000000c1", "seq": ring, "func": "AllReduce",
                "ring_seq": ring}  # fmt: skip

    summary = {
        "schema_version": 1, "host": "n", "global_rank": 0, "step_index": k,
        "start_real_ns": 1, "end_real_ns": 2, "duration_ns": 1, "op_count": ops,
        "warmup": False, "total_bytes": 0, "total_op_time_ns": 0, "busbw_gbs": 0.0,
        "roles": [{"role": "r", "op_count": ops, "time_ns": 0, "bytes": 0, "busbw_gbs": 0.0}],
        "slowest_op": {"kind": "coll", "func": "AllReduce", "seq": 0, "comm_id": "00000000000000c1",
                       "role": "r", "duration_ns": 1, "size_bytes": 0, "busbw_gbs": 0.0},
        "first_op": op(ring_first), "last_op": op(ring_last), "anomalies": [],
        "recovery": {"method": "job", "confidence": 1.0},
        "produced_by": {"mode": "live", "engine_version": "1.0.0"},
    }  # fmt: skip
    msgspec.convert(summary, StepSummary)  # what the engine writes
    return msgspec.json.encode(summary) + b"\n"


def test_the_written_steps_are_read_from_the_file_tail_as_far_as_the_checkpoint_counts(tmp_path):
    path = tmp_path / "live-n-1-1.jsonl.partial"
    lines = [_summary_line(k, 5 * k + 1, 5 * k + 5, 5) for k in range(20)]
    path.write_bytes(b"".join(lines) + b'{"torn after the checkpoint')
    size = sum(len(line) for line in lines[:18])  # the checkpoint counted 18 Steps
    got = written_spans(path, size, most_ops=5 * 6)
    assert [s.step for s in got] == list(range(12, 18))
    assert got[-1] == StepSpan(17, 86, 90, 5)
    # a line that is no summary: the Steps before it are not taken back
    lines[15] = b'{"not": "a summary"}\n'
    path.write_bytes(b"".join(lines))
    assert [s.step for s in written_spans(path, size, most_ops=1000)] == [16, 17]
