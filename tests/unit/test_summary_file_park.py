"""A parked step-summary file holds no descriptor, and loses nothing for it: writes open it
and close it again, a failed write waits for the next, a failed seal is tried again."""

from __future__ import annotations

import errno
import json
import os

import pytest

from comminsight.semantic.offline import SummaryFile


def summaries(first: int, n: int) -> list[dict]:
    return [{"step": i} for i in range(first, first + n)]


def steps_in(path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_bytes().splitlines()]


def holds(path) -> bool:
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                return True
        except OSError:
            pass
    return False


def test_a_parked_file_is_open_only_while_written(tmp_path):
    path = tmp_path / "live-a.jsonl.partial"
    out = SummaryFile(path, 0, 0)
    out.add(summaries(0, 3))
    assert holds(path)
    out.park()
    assert not holds(path)
    out.add(summaries(3, 2))
    out.flush()
    assert not holds(path)
    assert out.sync() == path.stat().st_size
    assert not holds(path)
    assert steps_in(path) == list(range(5))
    sealed = out.seal()
    assert sealed == tmp_path / "live-a.jsonl" and not path.exists()
    assert steps_in(sealed) == list(range(5))
    assert not holds(sealed)


def test_a_write_that_fails_while_parked_waits_for_the_next(tmp_path, monkeypatch):
    path = tmp_path / "live-a.jsonl.partial"
    out = SummaryFile(path, 0, 0)
    out.add(summaries(0, 2))
    out.park()
    real = SummaryFile._reopen

    def full(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(SummaryFile, "_reopen", full)
    with pytest.raises(OSError):
        out.add(summaries(2, 2))
    assert out.pending == 2
    monkeypatch.setattr(SummaryFile, "_reopen", real)
    out.add(summaries(4, 1))
    assert out.pending == 0 and not holds(path)
    assert steps_in(path) == list(range(5))


def test_a_part_left_by_someone_else_is_cut_off_on_reopen(tmp_path):
    path = tmp_path / "live-a.jsonl.partial"
    out = SummaryFile(path, 0, 0)
    out.add(summaries(0, 2))
    out.park()
    with open(path, "ab") as f:
        f.write(b'{"step": 9')  # half a line
    out.add(summaries(2, 1))
    assert steps_in(path) == [0, 1, 2]


def test_a_seal_that_failed_is_done_by_the_next(tmp_path, monkeypatch):
    path = tmp_path / "live-a.jsonl.partial"
    out = SummaryFile(path, 0, 0)
    out.add(summaries(0, 2))
    real = os.replace

    def refuse(src, dst):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        out.seal()
    assert not holds(path)
    monkeypatch.setattr(os, "replace", real)
    sealed = out.seal()
    assert sealed == tmp_path / "live-a.jsonl"
    assert steps_in(sealed) == [0, 1]


def test_memory_only_files_are_not_touched_by_park():
    out = SummaryFile(None, 0, 0)
    out.park()
    out.add(summaries(0, 2))
    assert out.summaries() == summaries(0, 2)
    assert out.sync() == 0
