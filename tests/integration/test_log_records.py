"""A process's op records read back from its inspector_logs (log_records) are the ones its SHM
ring held, field for field as the engine reads them: each once, in ring order, whatever the
segment and chunk boundaries, with a writer's cut last line and foreign lines passed over.

The Profiler writes the logs of a simulated job while an Agent's lock is held (so its regions
stay on after the processes exit, with every record: the ring is larger than the run)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from agent_home import hold_agent_lock, run_sim

from comminsight.agent.node.ingest import comm_infos
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.agent.steps import log_records
from comminsight.agent.steps.log_records import (
    _FIELDS,
    ProcessSegments,
    covered_through,
    op_slots,
    process_segments,
)
from comminsight.log_segments import read_segment, segment_name
from comminsight.shm_reader import op_records
from comminsight_gen.abi import shm_v1

ENV = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    ("COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES", "16384"),  # a few dozen segments a process
    ("COMMINSIGHT_PROFILER_LOG_FLUSH_MS", "5"),
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Each process's ring records (ops and all) and its log segments."""
    home = tmp_path_factory.mktemp("home")
    lock = hold_agent_lock(home)
    run_sim(home, ranks=2, steps=40, time_scale=0.02, env=ENV)
    producers = ProducerSet(home)
    batches = producers.poll(time.monotonic_ns())
    out = []
    for p in producers.producers.values():
        ring = np.concatenate([b.records for b in batches if b.producer is p])
        start_real = int(p.region.header["start_real_ns"])
        segments = process_segments(home / "inspector_logs", p.pid, start_real)
        assert segments is not None and len(segments.paths) > 5
        out.append((ring, comm_infos(p.region.comm_entries()), segments))
    producers.close()
    lock.close()
    assert len(out) == 2
    return out


def read_back(segments: ProcessSegments, start: int = 0, end: int | None = None):
    chunks = list(op_slots(segments, start, end))
    records = (
        np.concatenate([c for c, _ in chunks]) if chunks else np.zeros(0, shm_v1.OP_SLOT_DTYPE)
    )
    comms = {}
    for _, c in chunks:
        comms.update(c)
    return records, comms, chunks


def assert_same_records(got: np.ndarray, want: np.ndarray) -> None:
    """Equal in every field the engine reads (shm_input.engine_batch: a collective's peer is
    not read; the ring leaves it 0 where no root is named)."""
    assert len(got) == len(want)
    differ = [
        n for n in (*_FIELDS, "raw_name") if n != "peer" and not np.array_equal(got[n], want[n])
    ]
    assert not differ
    p2p = want["kind"] == shm_v1.RecordKind.P2P
    assert np.array_equal(got["peer"][p2p], want["peer"][p2p])


def test_the_records_read_back_from_the_logs_are_the_rings(run):
    for ring, comms, segments in run:
        ops = op_records(ring)
        got, got_comms, _ = read_back(segments)
        assert_same_records(got, ops)
        assert got_comms == comms  # names and node counts, as the communicator table has them
        # every ring record is accounted for: the last one's seq
        assert covered_through(segments) == int(ring["seq"][-1])


def test_reading_from_and_up_to_any_ring_record_gives_those_records_once(run, monkeypatch):
    monkeypatch.setattr(log_records, "CHUNK_RECORDS", 7)
    ring, _, segments = run[0]
    ops = op_records(ring)
    seqs = ops["seq"]
    # around each segment's first record, and inside segments
    firsts = [log_records.segment_start(p).next_ring_seq for p in segments.paths]
    points = sorted({s + d for s in firsts for d in (-1, 0, 1)} | {1, int(seqs[-1])})
    for start in points[::3]:
        for end in (None, start + 1, start + 40):
            got, _, chunks = read_back(segments, start, end)
            want = ops[(seqs >= start) & ((seqs < end) if end is not None else True)]
            assert_same_records(got, want)
            assert all(0 < len(c) <= 7 for c, _ in chunks)


def test_the_ring_records_that_are_no_ops_are_named(run):
    ring, _, segments = run[0]
    not_ops: list[int] = []
    for _ in op_slots(segments, 0, None, not_ops):
        pass
    others = ring["seq"][~np.isin(ring["seq"], op_records(ring)["seq"])]
    assert not_ops == others.tolist() and not_ops  # the communicators' init and finalize


def test_cut_lines_foreign_lines_and_records_met_twice_are_passed_over(run, tmp_path):
    ring, _, segments = run[1]
    logs = tmp_path / "logs"
    logs.mkdir()
    paths = [copied(p, logs) for p in segments.paths]
    # a segment's lines again in the next one (each record is handed on once), a line that
    # is no JSON, and the last one cut where its writer died
    middle = paths[len(paths) // 2]
    lines = middle.read_bytes().splitlines(keepends=True)
    with paths[len(paths) // 2 + 1].open("ab") as f:
        f.write(b"not a line of ours\n" + b"".join(lines[1:]))
    with paths[-1].open("ab") as f:
        f.write(lines[-2][: len(lines[-2]) // 2])
    got, _, _ = read_back(ProcessSegments(segments.start_mono_ns, paths))
    assert_same_records(got, op_records(ring))


def copied(path, directory):
    """path copied into directory, uncompressed (the lines appended to it must be read)."""
    copy = directory / segment_name(path)
    copy.write_bytes(read_segment(path))
    return copy
