"""The Agent follows a region's link into a process's memfd only where it is that: a link
/proc/<pid>/fd/<n> from the region name of that very pid, to a regular file of the Agent's
user that the Profiler named as its region. Anything else is refused, and named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from comminsight.shm_reader import MEMFD_NAME, ShmError, ShmRegion, is_memfd_target


def link(shms: Path, pid: int, fd: int) -> Path:
    shms.mkdir(exist_ok=True)
    path = shms / f"ci-host-with-dashes-{pid}-123.shm"
    os.symlink(f"/proc/{pid}/fd/{fd}", path)
    return path


def test_a_memfd_of_the_named_process_is_opened(tmp_path):
    fd = os.memfd_create(MEMFD_NAME)
    os.fchmod(fd, 0o600)
    try:
        path = link(tmp_path, os.getpid(), fd)
        with pytest.raises(ShmError, match="empty, not yet sized") as e:
            ShmRegion(path)  # opened: what stops it is its (empty) content
        assert e.value.not_ready
    finally:
        os.close(fd)


def test_another_file_behind_the_descriptor_is_refused(tmp_path):
    other = tmp_path / "segment.jsonl"
    other.write_bytes(b"x" * 4096)
    fd = os.open(other, os.O_RDONLY)
    try:
        path = link(tmp_path / "shms", os.getpid(), fd)
        with pytest.raises(ShmError, match="not a CommInsight region's memfd"):
            ShmRegion(path)
    finally:
        os.close(fd)


def test_a_memfd_others_may_write_is_refused(tmp_path):
    fd = os.memfd_create(MEMFD_NAME)
    os.fchmod(fd, 0o666)
    try:
        with pytest.raises(ShmError, match="lets group or others write it"):
            ShmRegion(link(tmp_path, os.getpid(), fd))
    finally:
        os.close(fd)


def test_a_link_to_another_process_is_not_followed(tmp_path):
    fd = os.memfd_create(MEMFD_NAME)
    try:
        path = tmp_path / f"ci-host-{os.getpid()}-123.shm"
        os.symlink(f"/proc/{os.getppid()}/fd/{fd}", path)
        with pytest.raises(ShmError, match="not followed"):
            ShmRegion(path)
    finally:
        os.close(fd)


def test_the_link_of_an_ended_process_is_a_missing_region(tmp_path):
    pid = 2**22 + 7  # above the kernel's pid_max: no such process
    with pytest.raises(ShmError) as e:
        ShmRegion(link(tmp_path, pid, 3))
    assert e.value.missing


def test_only_a_process_descriptor_is_a_memfd_target():
    assert is_memfd_target(Path("/proc/12/fd/7"))
    assert not is_memfd_target(Path("/dev/shm/comminsight/ci-a-12-1.shm"))
    assert not is_memfd_target(Path("/proc/12/fd/7/x"))
