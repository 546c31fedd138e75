"""Archive Providers: sealed segments and summaries reach the archive exactly once, compressed,
across crashes and restarts; failures are retried and reported; the disk budget deletes only
archived files, oldest first. Local directories and fsspec memory:// / file://, no network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest
import zstandard
from home_files import write_segment
from live_agent import LiveAgent
from waiting import wait_until

from comminsight.agent.archive.archiver import (
    ArchiveConfigError,
    ArchiveKind,
    Archiver,
    FsspecProvider,
    LocalDirectoryProvider,
    Provider,
    RetryPolicy,
    provider_for_url,
)
from comminsight.agent.archive.ledger import ArchiveLedger
from comminsight.config import load_settings
from comminsight_gen.models.agent_master_api_v1 import ArchiveFlush, ArchiveStatus

ROOT = Path(__file__).resolve().parents[2]


def write_summary(home: Path, name: str, mtime_s: int = 100) -> Path:
    path = home / "semantics" / "step" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n')
    os.utime(path, ns=(mtime_s * 10**9, mtime_s * 10**9))
    return path


# -- providers that record, fail or crash -----------------------------------------------------


class SimulatedCrash(BaseException):
    """Stands for the agent being killed: not an Exception, so no retry catches it."""


class RecordingProvider(Provider):
    """Wraps a provider; counts commits per object and can fail or crash on chosen writes."""

    def __init__(self, inner: Provider, fail_writes: int = 0, crash_after_bytes: int | None = None):
        self.inner = inner
        self.kind, self.url = inner.kind, inner.url
        self.commits: list[str] = []
        self.fail_writes = fail_writes  # this many writes raise OSError
        self.crash_after_bytes = crash_after_bytes  # the next write crashes after this many

    @contextmanager
    def open_for_write(self, name):
        if self.fail_writes:
            self.fail_writes -= 1
            raise OSError(f"injected archive failure writing {name}")
        crash_at, self.crash_after_bytes = self.crash_after_bytes, None
        with self.inner.open_for_write(name) as f:
            yield _CrashingWriter(f, crash_at) if crash_at is not None else f

    def commit(self, temp_name, name):
        self.inner.commit(temp_name, name)
        self.commits.append(name)

    def size(self, name):
        return self.inner.size(name)

    def open_for_read(self, name):
        return self.inner.open_for_read(name)

    def remove(self, name):
        self.inner.remove(name)


class _CrashingWriter:
    def __init__(self, f, crash_after: int):
        self.f, self.left = f, crash_after

    def write(self, data):
        if len(data) >= self.left:
            self.f.write(bytes(data[: self.left]))
            self.f.flush()
            raise SimulatedCrash("killed mid-write")
        self.left -= len(data)
        return self.f.write(data)


def archived_content(provider: Provider, name: str) -> bytes:
    with provider.open_for_read(name) as f:
        return zstandard.ZstdDecompressor().stream_reader(f).read()


def assert_archive_matches(archiver: Archiver, sources: list[Path]) -> None:
    """Every source has a ledger entry and decompresses from the archive byte-identical."""
    for path in sources:
        source = path.relative_to(archiver.home).as_posix()
        entry = archiver.ledger.get(source)
        assert entry is not None, f"{source} was never archived"
        original = path.read_bytes()
        assert archived_content(archiver.provider, entry.remote) == original
        assert entry.source_bytes == len(original)
        assert archiver.provider.size(entry.remote) == entry.archived_bytes


def make_archiver(home: Path, provider: Provider, **kw) -> Archiver:
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("prefix", "node-a")
    return Archiver(home, provider, **kw)


def memory_provider() -> FsspecProvider:
    return FsspecProvider(f"memory://archive-{uuid.uuid4().hex}")


# -- exactly once ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["local", "memory", "file"])
def test_sealed_segments_uploaded_exactly_once_compressed(tmp_path, where):
    home = tmp_path / "home"
    inner = {
        "local": lambda: LocalDirectoryProvider(tmp_path / "archive"),
        "memory": memory_provider,
        "file": lambda: FsspecProvider(f"file://{tmp_path / 'archive'}"),
    }[where]()
    provider = RecordingProvider(inner)
    sealed = [write_segment(home, i) for i in range(3)]
    open_segment = write_segment(home, 3, sealed=False)
    summary = write_summary(home, "rank0.jsonl")
    archiver = make_archiver(home, provider, zstd_level=5)

    report = archiver.run_once()
    assert report.uploaded_files == 4 and not report.failed_files
    assert sorted(provider.commits) == sorted(
        [f"node-a/inspector_logs/{p.name}.zst" for p in sealed]
        + ["node-a/semantics/step/rank0.jsonl.zst"]
    )
    assert_archive_matches(archiver, [*sealed, summary])
    assert all(e.zstd_level == 5 for e in archiver.ledger.entries())
    assert provider.size(f"node-a/inspector_logs/{open_segment.name}.zst") is None

    # A second pass, and a restarted agent, upload nothing again; a new segment goes once.
    assert archiver.run_once().uploaded_files == 0
    restarted = make_archiver(home, provider)
    new = write_segment(home, 4)
    assert restarted.run_once().uploaded_files == 1
    assert len(provider.commits) == len(set(provider.commits)) == 5
    assert_archive_matches(restarted, [*sealed, summary, new])

    status = restarted.status()
    assert (status.pending_files, status.uploaded_files_total) == (0, 5)
    assert status.provider == ("local" if where == "local" else "fsspec")
    # The snapshot is exactly what the API's ArchiveStatus model accepts.
    msgspec.convert(status.to_dict(), ArchiveStatus)


def test_open_segment_is_never_uploaded_until_sealed(tmp_path):
    home = tmp_path / "home"
    open_segment = write_segment(home, 0, sealed=False)
    archiver = make_archiver(home, RecordingProvider(memory_provider()))
    assert archiver.run_once().uploaded_files == 0
    assert archiver.status().pending_files == 0
    assert archiver.status().disk_used_bytes == open_segment.stat().st_size
    # The Profiler seals by appending the seal and renaming: only then is it archived.
    open_segment.unlink()
    sealed = write_segment(home, 0)
    assert archiver.run_once().uploaded_files == 1
    assert_archive_matches(archiver, [sealed])


def test_registered_kind_is_archived(tmp_path):
    home = tmp_path / "home"
    extra = home / "metadata" / "hangs" / "h1.json"
    extra.parent.mkdir(parents=True)
    extra.write_text('{"verdict": "rank_missing"}')
    archiver = make_archiver(home, memory_provider())
    archiver.register_kind(ArchiveKind("hang_reports", "metadata/hangs/*.json"))
    assert archiver.run_once().uploaded_files == 1
    assert_archive_matches(archiver, [extra])


# -- restarts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["local", "memory"])
def test_crash_after_commit_before_ledger_is_adopted_not_resent(tmp_path, monkeypatch, where):
    home = tmp_path / "home"
    segments = [write_segment(home, i) for i in range(3)]
    inner = LocalDirectoryProvider(tmp_path / "archive") if where == "local" else None
    provider = RecordingProvider(inner or memory_provider())
    archiver = make_archiver(home, provider)

    real_record = ArchiveLedger.record
    calls = []

    def crash_on_second(self, entry):
        calls.append(entry.source)
        if len(calls) == 2:
            raise SimulatedCrash("killed between the commit and the ledger write")
        real_record(self, entry)

    monkeypatch.setattr(ArchiveLedger, "record", crash_on_second)
    with pytest.raises(SimulatedCrash):
        archiver.run_once()
    monkeypatch.setattr(ArchiveLedger, "record", real_record)
    assert len(provider.commits) == 2  # the second object is in the archive, unrecorded

    restarted = make_archiver(home, provider)
    report = restarted.run_once()
    assert (report.adopted_files, report.uploaded_files) == (1, 1)
    assert len(provider.commits) == len(set(provider.commits)) == 3  # nothing sent twice
    assert_archive_matches(restarted, segments)
    assert restarted.status().uploaded_files_total == 3


def test_crash_mid_write_is_redone_and_leaves_no_temporary_object(tmp_path):
    home = tmp_path / "home"
    segments = [write_segment(home, i, lines=200) for i in range(2)]
    archive = tmp_path / "archive"
    provider = RecordingProvider(LocalDirectoryProvider(archive), crash_after_bytes=100)
    archiver = make_archiver(home, provider)
    with pytest.raises(SimulatedCrash):
        archiver.run_once()
    assert provider.commits == []
    leftovers = list(archive.rglob("*.uploading"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size == 100
    assert not list(archive.rglob("*.zst"))  # a partial upload never looks complete

    restarted = make_archiver(home, provider)
    assert restarted.run_once().uploaded_files == 2
    assert len(provider.commits) == len(set(provider.commits)) == 2
    assert not list(archive.rglob("*.uploading"))
    assert_archive_matches(restarted, segments)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_garbage_object_without_ledger_entry_is_overwritten(tmp_path, where):
    home = tmp_path / "home"
    segment = write_segment(home, 0)
    local = LocalDirectoryProvider(tmp_path / "archive")
    provider = local if where == "local" else memory_provider()
    with provider.open_for_write(f"node-a/inspector_logs/{segment.name}.zst") as f:
        f.write(b"not zstd")
    archiver = make_archiver(home, provider)
    assert archiver.run_once().uploaded_files == 1
    assert_archive_matches(archiver, [segment])


def test_ledger_write_failure_is_retried_by_adopting_the_committed_object(tmp_path, monkeypatch):
    home = tmp_path / "home"
    segment = write_segment(home, 0)
    provider = RecordingProvider(memory_provider())
    archiver = make_archiver(home, provider)
    real_record, calls = ArchiveLedger.record, []

    def disk_full_once(self, entry):
        calls.append(entry)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        real_record(self, entry)

    monkeypatch.setattr(ArchiveLedger, "record", disk_full_once)
    report = archiver.run_once()
    assert (report.uploaded_files, report.adopted_files) == (0, 1)
    assert len(provider.commits) == 1
    assert archiver.status().failed_uploads_total == 1
    assert_archive_matches(archiver, [segment])


def test_private_permissions_and_own_files_never_archived(tmp_path):
    home = tmp_path / "home"
    write_segment(home, 0)
    archiver = make_archiver(home, LocalDirectoryProvider(home / "archives"))
    archiver.register_kind(ArchiveKind("everything", "**/*"))  # a careless, too broad glob
    assert archiver.run_once().uploaded_files == 1
    assert archiver.run_once().uploaded_files == 0  # the ledger and archive are not data
    for d in (home / "metadata", home / "metadata" / "archive-ledger", home / "archives"):
        assert d.stat().st_mode & 0o777 == 0o700, d
    for f in [*home.joinpath("archives").rglob("*.zst"), *home.rglob("*.jsonl.json")]:
        assert f.stat().st_mode & 0o777 == 0o600, f


_KILLED_AGENT = """
import os, sys
from comminsight.agent.archive.archiver import Archiver, LocalDirectoryProvider
from comminsight.agent.archive.ledger import ArchiveLedger
home, archive, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
real_record, count = ArchiveLedger.record, [0]
def record(self, entry):
    count[0] += 1
    if count[0] == kill_at:
        os._exit(137)  # like SIGKILL: no cleanup, no exception handlers
    real_record(self, entry)
ArchiveLedger.record = record
Archiver(home, LocalDirectoryProvider(archive), prefix="node-a").run_once()
"""


def test_agent_killed_and_restarted_uploads_nothing_twice_and_loses_nothing(tmp_path):
    home, archive = tmp_path / "home", tmp_path / "archive"
    segments = [write_segment(home, i) for i in range(4)]
    run = [sys.executable, "-c", _KILLED_AGENT, str(home), str(archive), "3"]
    assert subprocess.run(run, cwd=ROOT, timeout=60).returncode == 137
    committed = {p: p.stat().st_mtime_ns for p in archive.rglob("*.zst")}
    assert len(committed) == 3  # the third object was committed, its entry never written

    provider = RecordingProvider(LocalDirectoryProvider(archive))
    restarted = make_archiver(home, provider)
    report = restarted.run_once()
    assert (report.adopted_files, report.uploaded_files) == (1, 1)
    assert provider.commits == [f"node-a/inspector_logs/{segments[3].name}.zst"]
    assert all(p.stat().st_mtime_ns == t for p, t in committed.items())  # none rewritten
    assert_archive_matches(restarted, segments)


# -- failures ----------------------------------------------------------------------------------


def test_failing_provider_retries_with_backoff_and_reports_the_error(tmp_path):
    home = tmp_path / "home"
    segments = [write_segment(home, i) for i in range(2)]
    provider = RecordingProvider(memory_provider(), fail_writes=100)
    sleeps: list[float] = []
    archiver = make_archiver(
        home,
        provider,
        retry=RetryPolicy(max_attempts=4, base_delay_s=0.5, max_delay_s=1.5),
        sleep=sleeps.append,
        clock_ns=lambda: 123,
    )
    report = archiver.run_once()
    assert sleeps == [0.5, 1.0, 1.5]  # exponential, capped, none after the last attempt
    assert report.uploaded_files == 0 and len(report.failed_files) == 1
    assert archiver.ledger.entries() == [] and provider.commits == []
    status = archiver.status()
    assert status.failed_uploads_total == 4
    assert status.pending_files == 2
    assert status.last_error is not None
    assert status.last_error.attempts == 4
    assert status.last_error.file == f"inspector_logs/{segments[0].name}"
    assert "injected archive failure" in status.last_error.message
    assert status.last_error.at_real_ns == 123
    msgspec.convert(status.to_dict(), ArchiveStatus)

    # Two more failures, then the archive recovers: everything goes, the error clears.
    provider.fail_writes = 2
    report = archiver.run_once()
    assert report.uploaded_files == 2
    assert archiver.status().last_error is None
    assert archiver.status().failed_uploads_total == 6
    assert_archive_matches(archiver, segments)


# -- disk budget -------------------------------------------------------------------------------


def test_disk_budget_deletes_only_archived_files_oldest_first(tmp_path):
    home = tmp_path / "home"
    a, b, d = (write_segment(home, i) for i in (1, 2, 4))
    open_segment = write_segment(home, 5, sealed=False, lines=100)
    archiver = make_archiver(home, memory_provider())
    assert archiver.run_once().uploaded_files == 3  # budget 0: nothing deleted
    assert all(p.exists() for p in (a, b, d))

    c = write_segment(home, 0)  # the oldest file of all, not archived (the archive is down)
    archiver.provider = RecordingProvider(archiver.provider, fail_writes=100)
    archiver.retry = RetryPolicy(max_attempts=1)
    size = {p: p.stat().st_size for p in (a, b, c, d, open_segment)}
    archiver.disk_budget_bytes = sum(size.values()) - size[a] - size[b] // 2
    report = archiver.run_once()
    assert report.failed_files == [f"inspector_logs/{c.name}"]
    assert (report.deleted_files, report.deleted_bytes) == (2, size[a] + size[b])
    assert not a.exists() and not b.exists()  # the two oldest archived ones
    assert c.exists() and d.exists() and open_segment.exists()
    assert report.disk_used_bytes <= archiver.disk_budget_bytes
    status = archiver.status()
    assert status.local_deleted_files_total == 2
    assert status.disk_used_bytes == report.disk_used_bytes
    assert status.disk_budget_bytes == archiver.disk_budget_bytes

    # A budget below what unarchived and open files need: every archived file goes, no other.
    archiver.disk_budget_bytes = 1
    report = archiver.run_once()
    assert report.deleted_files == 1 and not d.exists()
    assert c.exists() and open_segment.exists()
    assert archiver.ledger.get(f"inspector_logs/{c.name}") is None


def test_deleted_local_files_stay_archived_after_restart(tmp_path):
    home = tmp_path / "home"
    segments = [write_segment(home, i) for i in range(3)]
    provider = RecordingProvider(memory_provider())
    archiver = make_archiver(home, provider, disk_budget_bytes=1)
    report = archiver.run_once()
    assert report.uploaded_files == 3 and report.deleted_files == 3
    restarted = make_archiver(home, provider, disk_budget_bytes=1)
    assert restarted.run_once().uploaded_files == 0
    assert restarted.status().local_deleted_files_total == 3
    assert len(provider.commits) == 3
    for path in segments:
        entry = restarted.ledger.get(path.relative_to(home).as_posix())
        assert entry is not None and entry.local_deleted_real_ns is not None
        assert provider.size(entry.remote) == entry.archived_bytes


# -- configuration, flush ----------------------------------------------------------------------


def test_from_settings_picks_the_provider(tmp_path):
    home = tmp_path / "home"
    env = {"COMMINSIGHT_HOME": str(home), "COMMINSIGHT_AGENT_NODE_NAME": "n1"}
    default = Archiver.from_settings(load_settings(env))
    assert isinstance(default.provider, LocalDirectoryProvider)
    assert default.provider.root == home / "archives"
    assert default.prefix == "n1"

    env |= {
        "COMMINSIGHT_COMMON_ARCHIVE_URL": f"file://{tmp_path / 'arch'}",
        "COMMINSIGHT_COMMON_ARCHIVE_ZSTD_LEVEL": "7",
        "COMMINSIGHT_COMMON_ARCHIVE_RETRY_MAX": "2",
        "COMMINSIGHT_COMMON_DISK_BUDGET_BYTES": "1000",
    }
    archiver = Archiver.from_settings(load_settings(env))
    assert archiver.provider.kind == "local"  # a plain file:// URL is a local directory
    assert (archiver.zstd_level, archiver.retry.max_attempts) == (7, 2)
    assert archiver.disk_budget_bytes == 1000
    write_segment(home, 0)
    assert archiver.run_once().uploaded_files == 1
    assert len(list((tmp_path / "arch" / "n1" / "inspector_logs").glob("*.zst"))) == 1

    assert isinstance(provider_for_url("/mnt/3fs/ci", home), LocalDirectoryProvider)


@pytest.mark.parametrize(
    "url",
    ["bogus://bucket/x", "relative/dir", "://x", "ftp:///x", "ftp://127.0.0.1:99999/x"],
)
def test_bad_archive_url_is_a_clear_error_naming_the_key(tmp_path, url):
    with pytest.raises(ArchiveConfigError) as err:
        provider_for_url(url, tmp_path)
    assert str(err.value).startswith(f"COMMINSIGHT_COMMON_ARCHIVE_URL={url!r}: ")


def _get_json(agent: LiveAgent, path: str) -> dict:
    with urllib.request.urlopen(agent.base_url + path, timeout=30) as r:
        return json.loads(r.read())


def test_an_unreachable_archive_does_not_stop_the_agent_and_is_reported(tmp_path):
    # nothing listens on port 1, and fsspec's ftp filesystem connects when it is made
    url = "ftp://127.0.0.1:1/x"
    home = tmp_path / "home"
    write_segment(home, 0)
    with LiveAgent(home, common_archive_url=url, common_archive_retry_max=1) as agent:
        assert agent.service.archive_error is None  # archiving is on: the URL is valid
        wait_until(lambda: agent.service.archiver.last_error, 60, "a failed upload")
        status = _get_json(agent, "/api/v1/archive")
        assert status["failed_uploads_total"] >= 1 and status["pending_files"] == 1
        message = status["last_error"]["message"]
        assert message == (
            f"ArchiveUnreachable: COMMINSIGHT_COMMON_ARCHIVE_URL={url!r}: cannot reach the "
            "archive: [Errno 111] Connection refused"
        )
        health = _get_json(agent, "/api/v1/health")
        assert health["status"] == "degraded"
        assert f"archive upload failing: {message}" in health["reasons"]


def test_url_credentials_are_not_shown(tmp_path):
    provider = FsspecProvider("memory://user:secret@bucket/prefix?token=abc")
    assert "secret" not in provider.url and "abc" not in provider.url


def test_an_upload_error_naming_the_remote_path_does_not_show_its_credentials(tmp_path):
    home = tmp_path / "home"
    write_segment(home, 0)
    provider = FsspecProvider("memory://user:s3cr3t@bucket/prefix")

    def refuse(name):
        raise PermissionError(f"access denied to {provider._raw_url}/{name}")

    provider.open_for_write = refuse
    archiver = make_archiver(home, provider)
    archiver.run_once()
    error = archiver.last_error
    assert error is not None and "access denied" in error.message
    assert "s3cr3t" not in error.message and "user:" not in error.message


def test_flush_uploads_now_or_joins_the_running_pass(tmp_path):
    home = tmp_path / "home"
    segments = [write_segment(home, i) for i in range(2)]
    archiver = make_archiver(home, memory_provider(), clock_ns=lambda: 7)
    with archiver._pass_lock:  # a pass is running
        joined = archiver.flush()
        assert joined.already_running and archiver.status().flush_in_progress
    assert archiver.ledger.entries() == []
    result = archiver.flush()
    assert not result.already_running
    assert (result.queued_files, result.queued_bytes, result.requested_real_ns) == (
        2,
        sum(p.stat().st_size for p in segments),
        7,
    )
    msgspec.convert(result.to_dict(), ArchiveFlush)
    assert_archive_matches(archiver, segments)


def test_run_once_from_a_thread(tmp_path):
    import asyncio

    home = tmp_path / "home"
    write_segment(home, 0)
    archiver = make_archiver(home, memory_provider())
    report = asyncio.run(asyncio.to_thread(archiver.run_once))
    assert report.uploaded_files == 1
