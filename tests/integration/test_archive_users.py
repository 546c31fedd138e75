"""A shared node Agent archives every user's sealed segments as well as its own: each checked
against the user whose directory it is in, and removed for the disk budget as that user; a
file in one user's directory that another owns is refused and named, never archived."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import zstandard

from comminsight.agent.archive.archiver import Archiver
from comminsight.agent.archive.local import DEFAULT_KINDS, USERS_INSPECTOR_LOGS
from comminsight.agent.archive.providers import LocalDirectoryProvider
from comminsight.agent.receivers.tenants import prepare_shared_home
from comminsight.config import load_settings

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="other users' files are made by chown")
ALICE, BOB = 41001, 41002


def users_segment(home: Path, owner: int, name: str, dir_of: int | None = None) -> Path:
    """A sealed segment of `owner` in the directory of user `dir_of` (default: their own)."""
    directory = home / "users" / str(dir_of or owner)
    logs = directory / "inspector_logs"
    if not directory.exists():
        directory.mkdir(mode=0o700)
        os.chown(directory, dir_of or owner, dir_of or owner)
    logs.mkdir(mode=0o700, exist_ok=True)
    os.chown(logs, dir_of or owner, dir_of or owner)
    path = logs / name
    path.write_bytes(f'{{"ci":"segment","owner":{owner}}}\n'.encode() * 64)
    os.chown(path, owner, owner)
    return path


def test_each_users_segments_are_archived_and_anothers_file_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    prepare_shared_home(home)
    alice = users_segment(home, ALICE, "a-000000.jsonl")
    bob = users_segment(home, BOB, "b-000000.jsonl")
    planted = users_segment(home, ALICE, "planted-000000.jsonl", dir_of=BOB)
    archive = tmp_path / "archive"
    archiver = Archiver(
        home,
        LocalDirectoryProvider(archive),
        kinds=(*DEFAULT_KINDS, USERS_INSPECTOR_LOGS),
        prefix="node-a",
        sleep=lambda s: None,
    )
    report = archiver.run_once()
    assert report.uploaded_files == 2 and not report.failed_files
    for path, uid in ((alice, ALICE), (bob, BOB)):
        entry = archiver.ledger.get(f"users/{uid}/inspector_logs/{path.name}")
        assert entry is not None
        with archiver.provider.open_for_read(entry.remote) as f:
            assert zstandard.ZstdDecompressor().stream_reader(f).read() == path.read_bytes()
    assert archiver.ledger.get(f"users/{BOB}/inspector_logs/{planted.name}") is None
    (why,) = [w for s, w in archiver.local.refused.items() if planted.name in s]
    assert f"owned by uid {ALICE}" in why and f"uid {BOB}" in why


@pytest.fixture
def open_tmp():
    """A directory other users can enter, as a shared home's parents are (pytest's own
    directories are root's, 0700: a user could not reach their files under them)."""
    path = Path(tempfile.mkdtemp(prefix="ci-archive-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_disk_budget_removes_a_users_archived_segments_as_that_user(open_tmp):
    tmp_path = open_tmp
    home = tmp_path / "home"
    home.mkdir()
    prepare_shared_home(home)
    alice = users_segment(home, ALICE, "a-000000.jsonl")
    archiver = Archiver(
        home,
        LocalDirectoryProvider(tmp_path / "archive"),
        kinds=(USERS_INSPECTOR_LOGS,),
        disk_budget_bytes=1,
        sleep=lambda s: None,
    )
    report = archiver.run_once()
    assert report.uploaded_files == 1 and report.deleted_files == 1
    assert not alice.exists()


def test_only_a_shared_agent_archives_users_directories(tmp_path):
    def kinds(**env):
        settings = load_settings(
            env={
                "COMMINSIGHT_HOME": str(tmp_path),
                "COMMINSIGHT_COMMON_ARCHIVE_URL": f"file://{tmp_path / 'a'}",
                **env,
            },
            conf_path=None,
        )
        return Archiver.from_settings(settings).local.kinds

    assert USERS_INSPECTOR_LOGS not in kinds()
    assert USERS_INSPECTOR_LOGS in kinds(COMMINSIGHT_AGENT_SHARED_HOME="1")
