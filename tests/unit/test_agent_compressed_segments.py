"""The node Agent's readers of inspector_logs read the segments the Profiler compressed
(`<name>.jsonl.zst`, one zstd frame of the same bytes) as they read sealed ones: the op
records read back (log_records), the processes found in the logs (logged_processes) and what
a dead process's logs account for before its recovered segment is written (log_recovery).
One file per segment, the uncompressed one while both are there; a `.jsonl` compressed
between the listing and the reading is read from its `.zst`; a damaged `.zst` is named and
the other segments are still read.

The segments are the recovery's own (log_recovery.recover writes a segment of what a ring
holds, line for line as the Profiler's writer does) from a ring built here, so they hold
real op lines with ring seqs that go on from one segment to the next."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest
import zstandard
from home_files import write_segment
from log_files import compress
from logged_ops import logged_ops

from comminsight.agent.receivers import log_recovery
from comminsight.agent.receivers.log_recovery import logged_through, recover, segment_prefix
from comminsight.agent.steps import logged_processes
from comminsight.agent.steps.log_records import (
    covered_through,
    op_slots,
    process_segments,
    segment_start,
)
from comminsight.agent.steps.logged_processes import logged_since
from comminsight.log_segments import verify_segment
from comminsight.shm_reader import COMM, HEADER, SLOT
from comminsight_gen.abi import shm_v1

PID, START_MONO, START_REAL = 4242, 1000, 1795985227154207755
COMM_ID = 0xFC85C3A0C15C8FE3
PER_SEGMENT = 10  # ring records of each segment


class Ring:
    """What recover() reads of an SHM region: a header, a communicator table and a ring of
    all-reduce records (ring seq n completes at n microseconds)."""

    def __init__(self, capacity: int = 64):
        self._header = np.zeros(1, HEADER)
        h = self.header
        h["flags"] = shm_v1.HeaderFlags.LOGS_ENABLED
        h["hostname"] = b"vm"
        h["pid"] = PID
        h["start_mono_ns"] = START_MONO
        h["start_real_ns"] = START_REAL
        h["plugin_version"] = 0x000100
        h["rank"], h["local_rank"], h["world_size"] = 0, 0, 2
        self.comms = np.zeros(1, COMM)
        c = self.comms[0]
        c["state"] = shm_v1.CommState.ACTIVE
        c["comm_id"], c["rank"], c["nranks"], c["nnodes"] = COMM_ID, 0, 2, 1
        c["local_rank"], c["cuda_device"], c["name"] = 0, 0, b"default_pg:0"
        self.ring_capacity = capacity
        self.ring = np.zeros(capacity, SLOT)

    @property
    def header(self):
        return self._header[0]

    def publish(self, head: int) -> None:
        """Ring records up to ring seq `head`."""
        for seq in range(int(self.header["ring_head"]) + 1, head + 1):
            s = self.ring[(seq - 1) % self.ring_capacity]
            s["seq"], s["kind"] = seq, shm_v1.RecordKind.COLL
            s["func"], s["comm_index"], s["comm_id"] = shm_v1.Func.ALL_REDUCE, 0, COMM_ID
            s["rank"], s["nranks"], s["op_seq"] = 0, 2, seq - 1
            s["count"], s["bytes"] = 256, 1024
            s["timing_source"] = shm_v1.TimingSource.COLLECTIVE_CPU
            s["host_start_mono_ns"] = seq * 1000 - 500
            s["host_stop_mono_ns"] = seq * 1000 - 400
            s["complete_mono_ns"] = seq * 1000
        self.header["ring_head"] = head


def write_logs(logs: Path, segments: int = 3) -> list[Path]:
    """Segments 0.. of one process, PER_SEGMENT ring records each (ring seqs 1..)."""
    ring = Ring()
    paths = []
    for k in range(segments):
        ring.publish((k + 1) * PER_SEGMENT)
        paths.append(recover(ring, logs).path)
    return paths


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def read_back(logs: Path, start: int = 0) -> tuple[list[int], list[int]]:
    """(op ring seqs, ring seqs of the records that are no op) read back from the logs."""
    segments = process_segments(logs, PID, START_REAL)
    assert segments is not None
    not_ops: list[int] = []
    seqs = [int(s) for slots, _ in op_slots(segments, start, None, not_ops) for s in slots["seq"]]
    return seqs, not_ops


ALL = list(range(1, 3 * PER_SEGMENT + 1))


@pytest.fixture
def logs(tmp_path) -> Path:
    return tmp_path / "inspector_logs"


# -- log_records ------------------------------------------------------------------------------


def test_compressed_segments_give_the_same_records(logs):
    paths = write_logs(logs)
    assert [verify_segment(p).seal.last_ring_seq for p in paths] == [10, 20, 30]
    seqs_before = read_back(logs)
    before = process_segments(logs, PID, START_REAL)
    compress(paths[0])
    compress(paths[1])
    segments = process_segments(logs, PID, START_REAL)
    assert [p.name for p in segments.paths] == [
        paths[0].name + ".zst",
        paths[1].name + ".zst",
        paths[2].name,
    ]
    assert segments.start_mono_ns == before.start_mono_ns == START_MONO
    assert read_back(logs) == seqs_before == (ALL, [])
    assert covered_through(segments) == 30
    # every one compressed: the newest segment's end is read from its frame too
    compress(paths[2])
    segments = process_segments(logs, PID, START_REAL)
    assert all(p.name.endswith(".jsonl.zst") for p in segments.paths)
    assert covered_through(segments) == 30
    assert segment_start(segments.paths[1]).next_ring_seq == 11
    assert read_back(logs, start=15) == (ALL[14:], [])


def test_a_segment_there_in_both_forms_is_read_once(logs):
    paths = write_logs(logs)
    compress(paths[0])
    compress(paths[1], keep=True)  # compressed, the raw copy not yet removed
    segments = process_segments(logs, PID, START_REAL)
    assert [p.name for p in segments.paths] == [paths[0].name + ".zst"] + [
        p.name for p in paths[1:]
    ]
    assert read_back(logs) == (ALL, [])


def test_a_sealed_segment_wins_over_its_compressed_copy_and_its_partial(logs):
    paths = write_logs(logs)
    compress(paths[1], keep=True)
    partial = paths[1].with_name(paths[1].name + ".partial")
    partial.write_bytes(paths[1].read_bytes().splitlines(keepends=True)[0])
    segments = process_segments(logs, PID, START_REAL)
    assert segments.paths[1] == paths[1]
    paths[1].unlink()  # compressed since: the compressed copy wins over the .partial
    assert process_segments(logs, PID, START_REAL).paths[1].name == paths[1].name + ".zst"


def test_a_segment_compressed_after_it_was_listed_is_read_from_its_copy(logs):
    paths = write_logs(logs)
    segments = process_segments(logs, PID, START_REAL)
    for path in paths:
        compress(path)  # after the listing, before any line is read
    assert all(not p.exists() for p in segments.paths)
    not_ops: list[int] = []
    got = [int(s) for slots, _ in op_slots(segments, 0, None, not_ops) for s in slots["seq"]]
    assert got == ALL
    assert covered_through(segments) == 30
    assert segment_start(segments.paths[2]).next_ring_seq == 21


def test_an_open_segment_sealed_and_compressed_after_it_was_listed_is_read(logs):
    paths = write_logs(logs)
    last = paths[2]
    partial = last.rename(last.with_name(last.name + ".partial"))
    segments = process_segments(logs, PID, START_REAL)
    assert segments.paths[2] == partial
    partial.rename(last)
    compress(last)
    assert read_back(logs) == (ALL, [])
    not_ops: list[int] = []
    got = [int(s) for slots, _ in op_slots(segments, 0, None, not_ops) for s in slots["seq"]]
    assert got == ALL and covered_through(segments) == 30


def test_a_damaged_compressed_segment_is_named_and_the_others_are_read(logs, caplog):
    paths = write_logs(logs)
    packed = compress(paths[1])
    truncate(packed)
    with caplog.at_level(logging.WARNING):
        seqs, _ = read_back(logs)
    assert seqs == ALL[:10] + ALL[20:]  # the records of segments 0 and 2
    assert any(str(packed) in r.getMessage() for r in caplog.records), caplog.text
    # its end cannot be read: the segment before it tells what the logs account for
    packed_last = compress(paths[2])
    packed_last.write_bytes(b"not zstd at all")
    segments = process_segments(logs, PID, START_REAL)
    assert covered_through(segments) == 10


# -- logged_processes -------------------------------------------------------------------------


def test_a_process_whose_segments_are_compressed_is_found(logs):
    paths = write_logs(logs)
    for path in paths:
        compress(path)
    found, skipped = logged_since(logs, 0, 10)
    assert skipped == 0 and len(found) == 1
    p = found[0]
    assert (p.pid, p.start_real_ns, p.global_rank) == (PID, START_REAL, 0)
    assert [x.name for x in p.segments.paths] == [x.name + ".zst" for x in paths]
    assert [int(s) for slots, _ in op_slots(p.segments, 0) for s in slots["seq"]] == ALL


def test_each_segment_once_whatever_forms_are_there(logs):
    paths = write_logs(logs)
    compress(paths[0])
    compress(paths[1], keep=True)
    write_segment(logs.parent, 0, pid=77)
    compress(logs / "ci-vm-77-1000-000000.jsonl")
    (logs / "ci-vm-77-1000-000001.jsonl.zst.partial").write_bytes(b"\x28\xb5")  # compressing
    found, _ = logged_since(logs, 0, 10)
    by_pid = {p.pid: [x.name for x in p.segments.paths] for p in found}
    assert by_pid == {
        PID: [paths[0].name + ".zst", paths[1].name, paths[2].name],
        77: ["ci-vm-77-1000-000000.jsonl.zst"],
    }


def test_the_time_of_a_compressed_copy_counts_as_the_process_writing(logs):
    """Its own writer compresses a process's segments while it runs: a copy made after the
    time says the process ran after it, as a segment sealed after it does."""
    paths = write_logs(logs)
    for path in paths:
        os.utime(path, ns=(10**9, 10**9))  # sealed long ago ...
    since = time.time_ns()
    time.sleep(0.05)
    compress(paths[2])  # ... and the last one compressed now, by the running process
    found, _ = logged_since(logs, since, 10)
    assert [p.pid for p in found] == [PID]
    assert logged_since(logs, time.time_ns() + 3600 * 10**9, 10) == ([], 0)


def test_a_segment_compressed_between_listing_and_stat_is_kept(logs, monkeypatch):
    paths = write_logs(logs)
    real = os.scandir

    def listing_then_compressing(path):
        entries = list(real(path))
        for p in paths:
            compress(p)  # after readdir, before each entry's stat
        return iter(entries)

    monkeypatch.setattr(logged_processes.os, "scandir", listing_then_compressing)
    found, _ = logged_since(logs, 0, 10)
    assert [x.name for x in found[0].segments.paths] == [p.name + ".zst" for p in paths]


def test_a_first_segment_that_is_no_zstd_frame_is_named(logs, caplog):
    paths = write_logs(logs)
    compress(paths[0]).write_bytes(b"garbage, not zstd")
    found, _ = logged_since(logs, 0, 10)
    assert found == []
    assert f"{paths[0].name}.zst does not start with its segment_start" in caplog.text


# -- log_recovery -----------------------------------------------------------------------------


def recovered_again(logs: Path, head: int):
    """The ring of write_logs published up to `head`, recovered once more into logs."""
    ring = Ring()
    ring.publish(head)
    return recover(ring, logs)


def ring_seqs(path: Path) -> list[int]:
    return [op.ring_seq for op in logged_ops(verify_segment(path).records, coll_only=True)]


def test_logged_through_reads_compressed_segments(logs):
    paths = write_logs(logs)
    prefix = segment_prefix(Ring())
    assert logged_through(logs, prefix) == (30, 3)
    compress(paths[2])
    assert logged_through(logs, prefix) == (30, 3)
    for path in paths[:2]:
        compress(path)
    assert logged_through(logs, prefix) == (30, 3)
    (logs / (paths[2].name.replace("000002", "000003") + ".zst.partial")).write_bytes(b"")
    assert logged_through(logs, prefix) == (30, 3)


def test_a_frame_its_killed_writer_left_unfinished_is_removed_and_nothing_else(logs):
    paths = write_logs(logs)
    unfinished = paths[2].with_name(paths[2].name + ".zst.partial")
    unfinished.write_bytes(zstandard.ZstdCompressor().compress(b"half")[:6])
    planted = paths[1].with_name(paths[1].name + ".zst.partial")
    planted.mkdir()
    other = logs / (paths[2].name.replace(f"-{PID}-", f"-{PID + 1}-") + ".zst.partial")
    other.write_bytes(b"another process's, still being written")
    recovered_again(logs, 40)
    assert not unfinished.exists() and paths[2].exists()
    assert planted.is_dir() and other.exists()


def test_the_recovered_segment_follows_a_compressed_last_segment(logs):
    paths = write_logs(logs)
    compress(paths[2])
    done = recovered_again(logs, 40)
    assert done.path.name.endswith("-000003.jsonl")
    assert done.first_ring_seq == 31 and ring_seqs(done.path) == list(range(31, 41))
    # nothing missing once it is compressed too
    compress(done.path)
    assert recovered_again(logs, 40).path is None


def test_the_recovered_segment_follows_when_both_forms_are_there(logs):
    paths = write_logs(logs, segments=4)
    compress(paths[2], keep=True)
    compress(paths[3])
    done = recovered_again(logs, 45)
    assert done.path.name.endswith("-000004.jsonl") and done.first_ring_seq == 41
    assert ring_seqs(done.path) == list(range(41, 46))


def test_only_the_compressed_segments_that_can_raise_the_answer_are_decompressed(logs, monkeypatch):
    paths = write_logs(logs)
    for path in paths:
        compress(path)
    read = []
    real = log_recovery.read_segment
    monkeypatch.setattr(log_recovery, "read_segment", lambda p: read.append(p.name) or real(p))
    assert logged_through(logs, segment_prefix(Ring())) == (30, 3)
    assert read == [paths[2].name + ".zst"]  # the newest one's seal says it all
    # a segment after them says more: none is decompressed
    recovered_again(logs, 35)
    read.clear()
    assert logged_through(logs, segment_prefix(Ring())) == (35, 4)
    assert read == []


def test_a_segment_compressed_after_it_was_listed_is_read_from_its_copy_by_recovery(
    logs, monkeypatch
):
    paths = write_logs(logs)
    real = os.listdir

    def listing_then_compressing(path):
        names = real(path)
        compress(paths[2])
        return names

    monkeypatch.setattr(log_recovery.os, "listdir", listing_then_compressing)
    assert logged_through(logs, segment_prefix(Ring())) == (30, 3)


def test_a_damaged_compressed_last_segment_is_named_and_taken_for_its_first_line(logs, caplog):
    paths = write_logs(logs)
    packed = compress(paths[2])
    data = packed.read_bytes()
    # no line of it decompresses: what the segment before it accounts for
    packed.write_bytes(b"not zstd")
    with caplog.at_level(logging.WARNING):
        assert logged_through(logs, segment_prefix(Ring())) == (20, 3)
    assert any(str(packed) in r.getMessage() for r in caplog.records), caplog.text
    caplog.clear()
    packed.write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING):
        done = recovered_again(logs, 30)
    assert any(str(packed) in r.getMessage() for r in caplog.records), caplog.text
    # it starts after ring seq 20 (its first line says so): its records are written again
    assert done.path.name.endswith("-000003.jsonl") and done.first_ring_seq == 21
    assert ring_seqs(done.path) == list(range(21, 31))
