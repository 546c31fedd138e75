"""The archive's local scan lists a directory again only when it changed, and never misses a
file or a swap because of that."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from comminsight.agent.archive.local import DEFAULT_KINDS, ArchiveKind, LocalData
from comminsight.agent.receivers import dir_listing

OLD_S = 3600  # a directory timestamp this far in the past: long settled


def age(path: Path, seconds: int = OLD_S) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


@pytest.fixture
def listings(monkeypatch) -> list[str]:
    """The directories os.scandir was asked to list."""
    seen: list[str] = []
    real = os.scandir

    def counting(path):
        seen.append(str(path))
        return real(path)

    monkeypatch.setattr(dir_listing.os, "scandir", counting)
    return seen


def segments(home: Path, *names: str) -> Path:
    logs = home / "inspector_logs"
    logs.mkdir(parents=True, exist_ok=True)
    for name in names:
        (logs / name).write_bytes(b"{}\n")
    return logs


def sources(data: LocalData) -> list[str]:
    return sorted(f.source for f in data.complete_files())


def test_an_unchanged_settled_directory_is_listed_once(tmp_path, listings):
    logs = segments(tmp_path, "a.jsonl", "b.jsonl", "c.jsonl.partial")
    age(logs)
    data = LocalData(tmp_path, DEFAULT_KINDS)
    for _ in range(5):
        assert sources(data) == ["inspector_logs/a.jsonl", "inspector_logs/b.jsonl"]
        assert data.used_bytes() == 3 * 3
    assert listings.count(str(logs)) == 1


def test_a_new_file_or_a_removed_one_is_seen_at_once(tmp_path, listings):
    logs = segments(tmp_path, "a.jsonl")
    age(logs)
    data = LocalData(tmp_path, DEFAULT_KINDS)
    assert sources(data) == ["inspector_logs/a.jsonl"]
    segments(tmp_path, "b.jsonl")
    assert sources(data) == ["inspector_logs/a.jsonl", "inspector_logs/b.jsonl"]
    (logs / "a.jsonl").unlink()
    assert sources(data) == ["inspector_logs/b.jsonl"]


def test_a_directory_changed_lately_is_listed_every_time(tmp_path, listings):
    """Two changes within one tick of the file system's clock leave one mtime: a listing
    taken between them is not believed until the directory has been still a while."""
    logs = segments(tmp_path, "a.jsonl")
    data = LocalData(tmp_path, DEFAULT_KINDS)
    sources(data)
    sources(data)
    assert listings.count(str(logs)) == 2


def test_same_mtime_after_a_change_is_still_seen_when_recent(tmp_path):
    """A file added and the directory's timestamp put back as it was: the listing was not
    settled, so the file is found."""
    logs = segments(tmp_path, "a.jsonl")
    data = LocalData(tmp_path, DEFAULT_KINDS)
    before = os.stat(logs)
    assert sources(data) == ["inspector_logs/a.jsonl"]
    segments(tmp_path, "b.jsonl")
    os.utime(logs, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert "inspector_logs/b.jsonl" in sources(data)


def test_listings_are_taken_again_after_the_relist_period(tmp_path, listings, monkeypatch):
    logs = segments(tmp_path, "a.jsonl")
    age(logs)
    data = LocalData(tmp_path, DEFAULT_KINDS)
    sources(data)
    sources(data)
    assert listings.count(str(logs)) == 1
    later = time.monotonic_ns() + dir_listing.REFRESH_NS + 1
    monkeypatch.setattr(dir_listing.time, "monotonic_ns", lambda: later)
    sources(data)
    assert listings.count(str(logs)) == 2


def test_a_file_swapped_for_a_link_is_refused_at_once(tmp_path):
    logs = segments(tmp_path, "a.jsonl", "secret")
    age(logs)
    data = LocalData(tmp_path, DEFAULT_KINDS)
    assert sources(data) == ["inspector_logs/a.jsonl"]
    (logs / "a.jsonl").unlink()
    (logs / "a.jsonl").symlink_to(logs / "secret")
    age(logs)  # even with the directory's timestamp put back into the past
    assert sources(data) == []
    assert data.refused == {"inspector_logs/a.jsonl": "is a symbolic link"}


def test_a_directory_swapped_for_a_link_is_refused(tmp_path):
    outside = segments(tmp_path / "outside", "a.jsonl").parent
    home = tmp_path / "home"
    segments(home, "a.jsonl")
    data = LocalData(home, DEFAULT_KINDS)
    assert sources(data) == ["inspector_logs/a.jsonl"]
    (home / "inspector_logs" / "a.jsonl").unlink()
    (home / "inspector_logs").rmdir()
    (home / "inspector_logs").symlink_to(outside / "inspector_logs")
    assert sources(data) == []
    assert "a symbolic link" in data.refused["inspector_logs/a.jsonl"]


def test_a_glob_with_wildcard_directories_is_scanned_as_before(tmp_path):
    segments(tmp_path, "a.jsonl")
    (tmp_path / "semantics" / "step").mkdir(parents=True)
    (tmp_path / "semantics" / "step" / "s.jsonl").write_bytes(b"{}\n")
    kind = ArchiveKind("everything", "**/*.jsonl")
    assert kind.directory is None
    data = LocalData(tmp_path, [kind])
    assert sources(data) == ["inspector_logs/a.jsonl", "semantics/step/s.jsonl"]


def test_a_missing_directory_is_no_files(tmp_path):
    assert LocalData(tmp_path, DEFAULT_KINDS).complete_files() == []
