"""A dead process's ring is read back in chunks (log_recovery._slots): every ticket once, in
order, across chunk boundaries and the ring's wrap, each slot with its own timing; and a slot
no line can be made of loses that record alone."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np

from comminsight.agent.receivers import log_recovery
from comminsight.agent.receivers.inspector_lines import timings
from comminsight_gen.abi import shm_v1


def test_chunks_cover_every_ticket_once_in_order_across_the_wrap():
    cap = 8192
    ring = np.zeros(cap, shm_v1.OP_SLOT_DTYPE)
    ring["seq"] = np.arange(cap)  # slot i holds ticket ... + i: its index, to check the place
    ring["timing_source"] = shm_v1.TimingSource.KERNEL_GPU
    ring["gpu_end_ticks"] = np.arange(cap) * 1000  # a duration of its own per slot
    region = SimpleNamespace(ring=ring, ring_capacity=cap)
    first, end = 3000, 3000 + cap + 100 - 1  # more than a chunk, wrapping, not a multiple
    got = list(log_recovery._slots(region, first, end))
    assert [t for t, _, _ in got] == list(range(first, end))
    assert [int(s["seq"]) for _, s, _ in got] == [t % cap for t in range(first, end)]
    want = timings(ring[np.arange(first, end) % cap])
    assert [timing for _, _, timing in got] == want
    assert len({timing for _, _, timing in got}) == cap  # each slot's own


def test_a_record_no_line_can_be_made_of_is_lost_alone(tmp_path, monkeypatch, caplog):
    """One slot the line maker fails on (a bug, a value out of every range) is a gap of
    reason write_error in the recovered segment; the process's other records are all there."""
    from test_agent_compressed_segments import Ring

    from comminsight.agent.receivers.inspector_lines import ProcessLines
    from comminsight.log_segments import read_segment

    record = ProcessLines.record

    def failing(self, slot, seq, *args):
        if seq in (5, 6):
            raise ValueError("a value out of every range")
        return record(self, slot, seq, *args)

    monkeypatch.setattr(ProcessLines, "record", failing)
    ring = Ring()
    ring.publish(10)
    done = log_recovery.recover(ring, tmp_path)
    assert (done.records, done.lost) == (8, 2)
    lines = [json.loads(line)["ci"] for line in read_segment(done.path).splitlines()]
    gaps = [ci for ci in lines if ci["kind"] == "gap"]
    assert [(g["reason"], g["first_lost_ring_seq"], g["last_lost_ring_seq"]) for g in gaps] == [
        ("write_error", 5, 6)
    ]
    ops = [ci["q"] for ci in lines if ci["kind"] == "c"]
    assert ops == [1, 2, 3, 4, 7, 8, 9, 10]
    assert "ring seq 5 made no line" in caplog.text


def test_a_world_size_of_0_is_left_out_of_the_segment_start(tmp_path):
    """WORLD_SIZE=0 names no world: the line leaves world_size out (the schema's minimum is
    1), as the Profiler's writer does, and the segment_start reads."""
    import msgspec
    from test_agent_compressed_segments import Ring

    from comminsight.log_segments import read_segment
    from comminsight_gen.models.inspector_log_v1 import InspectorLogRecord

    ring = Ring()
    ring.header["world_size"] = 0
    ring.publish(3)
    first = read_segment(log_recovery.recover(ring, tmp_path).path).splitlines()[0]
    start = msgspec.json.decode(first, type=InspectorLogRecord).ci
    assert start.process.world_size is msgspec.UNSET and start.process.global_rank == 0
