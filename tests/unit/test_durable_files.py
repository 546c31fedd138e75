"""Atomic replacement: a planted link under the temporary name is never written through, and a
write that fails leaves neither a temporary file nor a changed target."""

from __future__ import annotations

import errno
import os

import pytest

from comminsight import durable_files
from comminsight.durable_files import write_atomically


def test_replaces_the_content_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "d" / "state.json"
    write_atomically(target, b"one")
    write_atomically(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]
    assert oct(target.stat().st_mode & 0o777) == "0o600"


def test_a_link_planted_under_the_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    target = tmp_path / "state.json"
    (tmp_path / "state.json.tmp").symlink_to(victim)
    write_atomically(target, b"new")
    assert victim.read_bytes() == b"untouched"
    assert target.read_bytes() == b"new" and not target.is_symlink()


def test_a_failed_write_removes_its_temporary_file_and_keeps_the_old_content(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    write_atomically(target, b"old")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(durable_files.os, "fsync", full)
    with pytest.raises(OSError) as raised:
        write_atomically(target, b"new")
    assert raised.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["state.json"]
