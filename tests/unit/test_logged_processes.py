"""Which processes an Agent finds in inspector_logs as having run since a given time."""

from __future__ import annotations

import time

import numpy as np
from home_files import write_segment

from comminsight.agent.steps.log_records import LogReader
from comminsight.agent.steps.logged_processes import logged_since, running_pids
from comminsight_gen.abi import shm_v1


def test_each_process_once_its_segments_in_order_a_sealed_one_over_its_partial(tmp_path):
    write_segment(tmp_path, 0, pid=4242)
    write_segment(tmp_path, 1, pid=4242)
    write_segment(tmp_path, 1, pid=4242, sealed=False)  # left beside its sealed copy
    write_segment(tmp_path, 0, pid=4343, sealed=False)
    found, skipped = logged_since(tmp_path / "inspector_logs", 0, 10)
    assert skipped == 0
    assert {p.pid: [x.name for x in p.segments.paths] for p in found} == {
        4242: ["ci-vm-4242-1000-000000.jsonl", "ci-vm-4242-1000-000001.jsonl"],
        4343: ["ci-vm-4343-1000-000000.jsonl.partial"],
    }
    p = found[0]
    assert (p.start_real_ns, p.global_rank, p.local_rank, p.job_id) == (
        1795985227154207755,
        0,
        0,
        None,
    )
    assert p.segments.start_mono_ns == 1000


def test_processes_last_written_before_the_time_are_left_out(tmp_path):
    write_segment(tmp_path, 0, pid=4242)
    later = time.time_ns() + 3600 * 10**9
    assert logged_since(tmp_path / "inspector_logs", later, 10) == ([], 0)


def test_past_the_limit_the_latest_are_kept_and_the_others_counted(tmp_path):
    for pid in (11, 12, 13):
        write_segment(tmp_path, 0, pid=pid, sealed=False)
        time.sleep(0.01)  # distinct change times: which are the latest is then known
    found, skipped = logged_since(tmp_path / "inspector_logs", 0, 2)
    assert (sorted(p.pid for p in found), skipped) == ([12, 13], 1)


def test_a_segment_that_names_no_process_or_another_is_skipped_and_named(tmp_path, caplog):
    write_segment(tmp_path, 0, pid=4242)
    logs = tmp_path / "inspector_logs"
    (logs / "ci-vm-77-1000-000000.jsonl").write_bytes(b"not json\n")
    other = write_segment(tmp_path, 0, pid=88, sealed=False)
    other.rename(logs / "ci-vm-99-1000-000000.jsonl.partial")  # its first line says pid 88
    found, _ = logged_since(logs, 0, 10)
    assert [p.pid for p in found] == [4242]
    assert "ci-vm-77-1000-000000.jsonl does not start with its segment_start" in caplog.text
    assert "ci-vm-99-1000-000000.jsonl.partial" in caplog.text


def test_a_logs_directory_that_is_not_there_has_no_processes(tmp_path):
    assert logged_since(tmp_path / "absent", 0, 10) == ([], 0)


def test_running_pids_come_from_the_shm_files_names():
    names = {"ci-vm-4242-123.shm", "ci-host-with-dashes-77-5.shm", "junk.shm", "ci-x.shm"}
    assert running_pids(names) == {4242, 77}


def test_a_log_reader_hands_records_on_by_when_they_completed():
    def chunk(times):
        slots = np.zeros(len(times), shm_v1.OP_SLOT_DTYPE)
        slots["complete_mono_ns"] = times
        return slots, {}

    reader = LogReader(iter([chunk([10, 20, 30]), chunk([]), chunk([40, 50])]))
    assert reader.next_complete() == 10
    got = [list(s["complete_mono_ns"]) for s, _ in reader.until(35)]
    assert got == [[10, 20, 30]] and reader.next_complete() == 40
    assert list(reader.until(40)) == []  # the next one completed at 40: not before it
    assert [list(s["complete_mono_ns"]) for s, _ in reader.until(10**9)] == [[40, 50]]
    assert reader.next_complete() is None and reader.read == 5
