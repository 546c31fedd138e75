"""The pieces of one node Agent for many users: which users' directories a shared home holds
(and which it refuses), the modes that let users in without letting them see each other,
writing as a user, where Inject writes, who sees what, and the Agent's socket."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from comminsight.agent.api.readers import Reader, View, reader_for
from comminsight.agent.api.unix_socket import SocketError, bind_agent_socket
from comminsight.agent.receivers.acting_as import ActingAsError, files_as
from comminsight.agent.receivers.tenants import TenantDirs, prepare_shared_home
from comminsight.agent.state.owners import Owners, _Remembered
from comminsight.inject.tenant_home import TenantHomeError, writable_home

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="other users' files are made by chown")
ALICE, BOB = 41001, 41002


@pytest.fixture
def open_tmp():
    """A directory other users can enter (pytest's own are root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="ci-tenancy-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def shared_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    prepare_shared_home(home)
    return home


def user_dir(home: Path, name: str, owner: int, mode: int = 0o700) -> Path:
    path = home / "users" / name
    path.mkdir()
    os.chown(path, owner, owner)
    path.chmod(mode)
    return path


# ---- the shared home and its users' directories ----


def test_a_shared_home_lets_users_in_but_not_see_each_other(tmp_path):
    home = shared_home(tmp_path)
    modes = {p: stat.S_IMODE((home / p).stat().st_mode) for p in ("", "etc", "metadata", "users")}
    assert modes == {"": 0o755, "etc": 0o755, "metadata": 0o755, "users": 0o1733}


@needs_root
def test_each_users_directory_is_theirs_and_the_others_are_refused_and_named(tmp_path):
    home = shared_home(tmp_path)
    user_dir(home, str(ALICE), ALICE)
    user_dir(home, str(BOB), ALICE)  # Alice squats Bob's name
    user_dir(home, "41003", 41003, 0o777)  # open to everyone: anyone could plant files in it
    user_dir(home, "alice", ALICE)  # no uid
    user_dir(home, "041004", 41004)  # not the uid's own spelling
    (home / "users" / "41005").symlink_to(tmp_path)
    dirs = TenantDirs(home)
    tenants = dirs.scan()
    assert set(tenants) == {ALICE} and tenants[ALICE].home == home / "users" / str(ALICE)
    assert set(dirs.refused) == {str(BOB), "41003", "alice", "041004", "41005"}
    assert f"owned by uid {ALICE}, not by uid {BOB}" in dirs.refused[str(BOB)]
    assert "symbolic link" in dirs.refused["41005"]
    assert any(f"users/{BOB} refused" in p for p in dirs.problems())


@needs_root
def test_a_users_directory_others_could_replace_is_not_read(tmp_path):
    home = shared_home(tmp_path)
    user_dir(home, str(ALICE), ALICE)
    (home / "users").chmod(0o777)  # no sticky bit: anyone may rename Alice's entry away
    dirs = TenantDirs(home)
    assert dirs.scan() == {}
    assert "sticky" in dirs.problem


@needs_root
def test_a_user_whose_directory_goes_is_no_longer_served(tmp_path):
    home = shared_home(tmp_path)
    path = user_dir(home, str(ALICE), ALICE)
    dirs = TenantDirs(home)
    assert set(dirs.scan()) == {ALICE}
    path.rmdir()
    dirs.listing.forget()
    assert dirs.scan() == {}


# ---- writing as a user ----


@needs_root
def test_what_the_agent_writes_as_a_user_is_theirs_and_checked_as_theirs(open_tmp):
    tmp_path = open_tmp
    mine = tmp_path / "alice"
    mine.mkdir()
    os.chown(mine, ALICE, ALICE)
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    with files_as(ALICE, ALICE):
        (mine / "recovered.jsonl").write_text("x")
        # a link Alice planted cannot take a write where she may not write herself
        with pytest.raises(PermissionError):
            (private / "planted").write_text("x")
    assert (mine / "recovered.jsonl").stat().st_uid == ALICE
    (private / "after").write_text("root again")  # the thread's own rights are back


@needs_root
def test_acting_as_one_user_inside_another_is_refused(tmp_path):
    with files_as(ALICE):
        with pytest.raises(ActingAsError):
            with files_as(BOB):
                pass


def test_acting_as_the_agents_own_user_changes_nothing(tmp_path):
    with files_as(os.geteuid()):
        (tmp_path / "f").write_text("x")
    assert (tmp_path / "f").stat().st_uid == os.geteuid()


# ---- where Inject writes ----


def test_a_users_own_home_is_written_as_it_is(tmp_path):
    assert writable_home(tmp_path) == tmp_path


@needs_root
def test_in_a_shared_home_inject_writes_in_the_users_own_directory(open_tmp):
    home = shared_home(open_tmp)
    with files_as(ALICE):  # as Alice's own process makes it
        own = writable_home(home, uid=ALICE)
    assert own == home / "users" / str(ALICE)
    assert stat.S_IMODE(own.stat().st_mode) == 0o700


@needs_root
def test_inject_refuses_a_squatted_or_linked_directory(tmp_path):
    home = shared_home(tmp_path)
    user_dir(home, str(BOB), ALICE)
    with pytest.raises(TenantHomeError, match=f"owned by uid {ALICE}"):
        writable_home(home, uid=BOB)
    (home / "users" / "41003").symlink_to(tmp_path)
    with pytest.raises(TenantHomeError, match="not a directory"):
        writable_home(home, uid=41003)


@needs_root
def test_inject_refuses_a_users_directory_others_can_rename(tmp_path):
    home = shared_home(tmp_path)
    (home / "users").chmod(0o777)
    with pytest.raises(TenantHomeError, match="sticky"):
        writable_home(home, uid=ALICE)


# ---- who sees what ----


def owners_of(pids: dict[int, int], comms: dict[str, int], jobs: dict[str, int]) -> Owners:
    owners = Owners()
    for pid, uid in pids.items():
        owners.pids.note(pid, uid)
    for comm, uid in comms.items():
        owners.comms.note(comm, uid)
    for job, uid in jobs.items():
        owners.jobs.note(job, uid)
    return owners


def report(comm: str, *culprit_pids: int):
    culprits = [SimpleNamespace(node_name=None, pid=pid) for pid in culprit_pids]
    return SimpleNamespace(comm=SimpleNamespace(comm_id=comm), culprits=culprits)


def test_root_and_the_agents_user_see_all_and_others_their_own():
    assert reader_for(0, "socket").sees_all
    assert reader_for(os.geteuid(), "socket").sees_all
    assert reader_for(None, "tcp").sees_all
    assert reader_for(ALICE, "socket", agent_uid=10001) == Reader(ALICE, "socket")


def test_a_user_sees_their_processes_communicators_jobs_and_reports_only():
    owners = owners_of({10: ALICE, 20: BOB}, {"aa": ALICE, "bb": BOB}, {"j1": ALICE, "j2": BOB})
    alice = View(Reader(ALICE, "socket"), owners)
    assert alice.pid(10) and not alice.pid(20) and not alice.pid(30)
    assert alice.comm("aa") and not alice.comm("bb")
    assert alice.job("j1") and not alice.job("j2") and not alice.job(None)
    assert alice.report(report("aa", 10), "n") and not alice.report(report("bb", 20), "n")
    # a communicator id Bob chose to be Alice's does not show her Bob's report by it
    owners.comms.note("aa", BOB)
    assert not alice.report(report("aa", 20), "n")
    assert alice.step_file(10, None) and not alice.step_file(20, "j1")
    assert alice.step_file(None, "j1") and not alice.step_file(None, "j2")


def test_a_health_reason_about_another_user_is_not_shown():
    owners = owners_of({10: ALICE, 20: BOB}, {}, {})
    alice = View(Reader(ALICE, "socket"), owners)
    assert alice.health_reason(f"/h/users/{ALICE}/shms/x.shm refused: short")
    assert not alice.health_reason(f"/h/users/{BOB}/shms/x.shm refused: short")
    assert not alice.health_reason("profiled process(es) exited: pid 10, 20")
    assert alice.health_reason("profiled process(es) exited: pid 10")
    assert alice.health_reason("archiving is off: no URL")


def test_what_is_remembered_of_owners_is_bounded():
    remembered = _Remembered(limit=3)
    for key in range(10):
        remembered.note(key, ALICE)
    assert len(remembered) == 3 and remembered.of(9) == {ALICE} and not remembered.of(0)


# ---- the Agent's socket ----


def test_the_socket_is_open_to_all_in_a_shared_home_and_private_otherwise(tmp_path):
    for shared, mode in ((True, 0o666), (False, 0o600)):
        path = tmp_path / f"agent-{shared}.sock"
        sock = bind_agent_socket(path, shared)
        try:
            assert stat.S_ISSOCK(path.stat().st_mode)
            assert stat.S_IMODE(path.stat().st_mode) == mode
        finally:
            sock.close()


def test_a_socket_left_by_an_earlier_agent_is_replaced(tmp_path):
    path = tmp_path / "agent.sock"
    old = socket.socket(socket.AF_UNIX)
    old.bind(str(path))
    old.close()
    bind_agent_socket(path, False).close()


def test_what_is_no_socket_of_ours_is_not_replaced(tmp_path):
    path = tmp_path / "agent.sock"
    path.write_text("not a socket")
    with pytest.raises(SocketError, match="is no socket"):
        bind_agent_socket(path, False)
    assert path.read_text() == "not a socket"
    with pytest.raises(SocketError, match="longer than"):
        bind_agent_socket(tmp_path / ("x" * 120), False)


@needs_root
def test_another_users_socket_is_not_replaced(tmp_path):
    path = tmp_path / "agent.sock"
    theirs = socket.socket(socket.AF_UNIX)
    theirs.bind(str(path))
    theirs.close()
    os.chown(path, ALICE, ALICE, follow_symlinks=False)
    with pytest.raises(SocketError, match=f"uid {ALICE}"):
        bind_agent_socket(path, False)


def test_a_shared_agents_lock_is_on_what_no_user_can_open(tmp_path):
    from comminsight.agent.main import take_lock

    home = shared_home(tmp_path)
    held = take_lock(home, shared=True)
    try:
        assert held is not None
        lock_dir = home / "metadata" / "agent.d"
        assert stat.S_IMODE(lock_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((home / "metadata" / "agent.lock").stat().st_mode) == 0o600
        assert take_lock(home, shared=True) is None  # a second Agent of the home is kept out
    finally:
        if held is not None:
            os.close(held.directory_fd)
            held.lock_file.close()
