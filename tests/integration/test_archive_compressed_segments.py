"""The archive takes the segments the Profiler compressed (`inspector_logs/<name>.jsonl.zst`)
as the sealed segments they are: each exactly once, under the same ledger key and object name
as its `.jsonl` (so a segment archived uncompressed and compressed since is not sent again),
sent byte for byte rather than compressed twice, once checked to be one whole zstd frame (a
damaged one is refused and reported, never archived); the disk budget removes them too."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pytest
import zstandard
from home_files import write_segment
from log_files import compress

from comminsight.agent.archive.archiver import (
    Archiver,
    FsspecProvider,
    LocalDirectoryProvider,
    Provider,
    RetryPolicy,
)
from comminsight.agent.archive.ledger import ArchiveLedger


class Recording(Provider):
    """A provider that notes each object committed."""

    def __init__(self, inner: Provider):
        self.inner, self.kind, self.url = inner, inner.kind, inner.url
        self.commits: list[str] = []

    def open_for_write(self, name):
        return self.inner.open_for_write(name)

    def commit(self, temp_name, name):
        self.inner.commit(temp_name, name)
        self.commits.append(name)

    def size(self, name):
        return self.inner.size(name)

    def open_for_read(self, name):
        return self.inner.open_for_read(name)

    def remove(self, name):
        self.inner.remove(name)


def provider(tmp_path: Path, where: str) -> Recording:
    if where == "local":
        return Recording(LocalDirectoryProvider(tmp_path / "archive"))
    return Recording(FsspecProvider(f"memory://archive-{uuid.uuid4().hex}"))


def archiver(home: Path, p: Provider, **kw) -> Archiver:
    kw.setdefault("sleep", lambda s: None)
    return Archiver(home, p, prefix="node-a", **kw)


def stored(p: Provider, name: str) -> bytes:
    with p.open_for_read(name) as f:
        return f.read()


def remote(segment: Path) -> str:
    """The object of a segment, by its uncompressed name."""
    return f"node-a/inspector_logs/{segment.name.removesuffix('.zst')}.zst"


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_compressed_segment_is_archived_once_as_it_is(tmp_path, where):
    home = tmp_path / "home"
    raw = [write_segment(home, i) for i in range(3)]
    content = [p.read_bytes() for p in raw]
    packed = [compress(raw[0]), compress(raw[1])]
    p = provider(tmp_path, where)
    a = archiver(home, p, zstd_level=5)
    report = a.run_once()
    assert report.uploaded_files == 3 and not report.failed_files
    assert sorted(p.commits) == sorted(remote(s) for s in raw)
    for k, path in enumerate(packed):
        # the Profiler's frame, byte for byte: not compressed a second time
        assert stored(p, remote(path)) == path.read_bytes()
        entry = a.ledger.get(f"inspector_logs/{raw[k].name}")  # keyed by its .jsonl name
        assert entry is not None and entry.remote == remote(path)
        assert (entry.source_bytes, entry.source_sha256) == (
            len(content[k]),
            hashlib.sha256(content[k]).hexdigest(),
        )
        assert entry.archived_bytes == path.stat().st_size
        assert entry.archived_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert entry.zstd_level == 0  # the archive did not choose its level
    # the uncompressed one is compressed by the archive, as before
    archived = stored(p, remote(raw[2]))
    assert zstandard.ZstdDecompressor().decompressobj().decompress(archived) == content[2]
    assert a.ledger.get(f"inspector_logs/{raw[2].name}").zstd_level == 5
    assert a.run_once().uploaded_files == 0
    assert archiver(home, p).run_once().uploaded_files == 0  # nor after a restart
    assert len(p.commits) == 3
    status = a.status()
    assert (status.pending_files, status.uploaded_files_total) == (0, 3)


def test_a_segment_archived_then_compressed_is_not_sent_again(tmp_path):
    home = tmp_path / "home"
    segment = write_segment(home, 0)
    p = provider(tmp_path, "local")
    a = archiver(home, p)
    assert a.run_once().uploaded_files == 1
    packed = compress(segment)  # after it was archived
    for again in (a, archiver(home, p)):
        assert again.run_once().uploaded_files == 0
        assert again.status().pending_files == 0
        # the compressed copy is the segment's local data now
        assert again.status().disk_used_bytes == packed.stat().st_size
    assert p.commits == [remote(segment)]


def test_both_forms_of_a_segment_are_one_file_for_the_archive(tmp_path):
    home = tmp_path / "home"
    first = write_segment(home, 0)
    compress(first)
    segment = write_segment(home, 1)
    packed = compress(segment, keep=True)  # both there for a moment
    p = provider(tmp_path, "memory")
    a = archiver(home, p)
    status = a.status()
    assert status.pending_files == 2
    used = first.with_name(first.name + ".zst").stat().st_size
    assert status.disk_used_bytes == used + segment.stat().st_size + packed.stat().st_size
    assert a.run_once().uploaded_files == 2
    assert sorted(p.commits) == sorted([remote(first), remote(segment)])
    # the uncompressed copy was sent (compressed here): the same content either way
    entry = a.ledger.get(f"inspector_logs/{segment.name}")
    assert entry.source_sha256 == hashlib.sha256(segment.read_bytes()).hexdigest()
    segment.unlink()  # the Profiler removes the raw copy
    assert a.run_once().uploaded_files == 0 and len(p.commits) == 2


def test_a_damaged_compressed_segment_is_refused_and_the_others_are_archived(tmp_path):
    home = tmp_path / "home"
    good = compress(write_segment(home, 0))
    bad_raw = write_segment(home, 1)
    bad = compress(bad_raw)
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) - 10])  # truncated: its checksum and more are missing
    plain = write_segment(home, 2)
    p = provider(tmp_path, "local")
    a = archiver(home, p, retry=RetryPolicy(max_attempts=3))
    report = a.run_once()
    assert report.uploaded_files == 2 and not report.failed_files
    assert sorted(p.commits) == sorted([remote(good), remote(plain)])
    assert p.size(remote(bad)) is None and a.ledger.get(f"inspector_logs/{bad_raw.name}") is None
    refused = a.refused()
    assert list(refused) == [f"inspector_logs/{bad.name}"]  # named by its own file
    assert "zstd frame" in refused[f"inspector_logs/{bad.name}"]
    assert a.status().failed_uploads_total == 0 and a.last_error is None  # the archive is fine
    # refused while it stays as it is, at every pass; never archived
    assert a.run_once().uploaded_files == 0
    assert list(a.refused()) == [f"inspector_logs/{bad.name}"]
    # bytes after the frame, or no frame at all: refused too
    for damaged in (data + b"more", b"not zstd at all"):
        bad.write_bytes(damaged)
        fresh = archiver(home, p)
        assert fresh.run_once().uploaded_files == 0
        assert list(fresh.refused()) == [f"inspector_logs/{bad.name}"]
    # made whole again (another file now): archived
    whole = bad.with_name(bad.name + ".partial")
    whole.write_bytes(data)
    whole.rename(bad)
    assert a.run_once().uploaded_files == 1 and a.refused() == {}
    assert stored(p, remote(bad)) == data


def test_a_compressed_segment_committed_before_a_crash_is_adopted(tmp_path, monkeypatch):
    home = tmp_path / "home"
    packed = compress(write_segment(home, 0))
    p = provider(tmp_path, "local")
    real_record = ArchiveLedger.record

    def crash(self, entry):
        raise KeyboardInterrupt("killed between the commit and the ledger write")

    monkeypatch.setattr(ArchiveLedger, "record", crash)
    with pytest.raises(KeyboardInterrupt):
        archiver(home, p).run_once()
    monkeypatch.setattr(ArchiveLedger, "record", real_record)
    report = archiver(home, p).run_once()
    assert (report.adopted_files, report.uploaded_files) == (1, 0)
    assert p.commits == [remote(packed)]


def test_the_disk_budget_removes_compressed_segments_and_both_copies(tmp_path):
    home = tmp_path / "home"
    a_packed = compress(write_segment(home, 0))
    os.utime(a_packed, ns=(10**9, 10**9))  # oldest first: a, b, then the one kept
    b_raw = write_segment(home, 1)
    b_packed = compress(b_raw, keep=True)
    keep = write_segment(home, 2)
    os.utime(keep)
    p = provider(tmp_path, "memory")
    a = archiver(home, p)
    assert a.run_once().uploaded_files == 3
    sizes = a_packed.stat().st_size + b_raw.stat().st_size + b_packed.stat().st_size
    a.disk_budget_bytes = keep.stat().st_size
    report = a.run_once()
    assert (report.deleted_files, report.deleted_bytes) == (2, sizes)
    assert not a_packed.exists() and not b_raw.exists() and not b_packed.exists()
    assert keep.exists()
    assert report.disk_used_bytes == keep.stat().st_size
    assert a.status().local_deleted_files_total == 2
