"""The Profiler against hostile homes, full disks and other processes' leftovers.

Every case runs the real plugin in a fresh process (tests/hostile_scenarios.py, or the
simulated NCCL for whole training runs) and checks three things: the named error, that
training completed every op, and that nothing else was lost or touched. Ownership cases use
uid 65534 (nobody) for "another user"; the suite runs as root, as training often does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import forked_python
import numpy as np
import pytest
from logged_ops import is_coll, logged_ops, ring_seq
from profiler_builds import builds
from waiting import wait_until

from comminsight.log_segments import segments_in, verify_segment
from comminsight.shm_reader import ShmRegion
from comminsight.sim import SimConfig, read_ground_truth, run_simulation
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.inspector_log_v1 import CiGap

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "hostile_scenarios.py"
NOBODY = 65534
OPS = 40
DEADLINE_S = 60.0

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="ownership cases need root (chown)"),
    pytest.mark.slow,  # a minute or more of plugin runs: scheduled first (conftest)
]


# ---- running the plugin ----


def scenario_env(home: Path, tmp_path: Path, **env) -> dict:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_HEARTBEAT_MS": "50",
        "COMMINSIGHT_PROFILER_LOG_FLUSH_MS": "20",
        "COMMINSIGHT_PROFILER_RING_SLOTS": "4096",
        "COMMINSIGHT_PROFILER_EVENT_POOL": "1024",
        "XDG_RUNTIME_DIR": str(xdg),  # where a refused home's replacement goes
        "PYTHONPATH": str(ROOT / "tests"),
        "SCENARIO_OPS": str(OPS),
        **env,
    }


def start(
    scenario: str, home: Path, tmp_path: Path, build: str = "plain", cwd=None, pass_fds=(), **env
):
    b = builds()[build]
    return forked_python.popen(
        [sys.executable, str(SCENARIOS), scenario, str(b.path)],
        env={**scenario_env(home, tmp_path, **env), **b.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        pass_fds=pass_fds,
    )


def finish(proc, expect_rc: int = 0) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == expect_rc, f"exit {proc.returncode}:\n{err[-4000:]}"
    assert "ERROR: AddressSanitizer" not in err and "runtime error" not in err
    lines = out.strip().splitlines()
    return (json.loads(lines[-1]) if lines else {}), err


def run(scenario: str, home: Path, tmp_path: Path, cwd=None, **env) -> tuple[dict, str]:
    return finish(start(scenario, home, tmp_path, cwd=cwd, **env))


def private_homes(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "xdg").glob("comminsight-*"))


def ops_in(log_dir: Path) -> list:
    assert not list(log_dir.glob("*.jsonl.partial")), "a segment was left unsealed"
    return [op for p in segments_in(log_dir) for op in logged_ops(verify_segment(p).records, True)]


def tree(path: Path) -> dict:
    """Every entry below path with what a write would change: kind, size, mode, owner, mtime."""
    out = {}
    for p in [path, *path.rglob("*")]:
        st = p.lstat()
        out[str(p)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mode, st.st_uid, st.st_mtime_ns)
    return out


def said(stderr: str, pattern: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.search(pattern, line)]


# ---- 1. a home that is not ours ----


@pytest.mark.parametrize(
    ("owner", "mode", "reason"),
    [
        (NOBODY, 0o700, f"owned by uid {NOBODY}"),
        (0, 0o777, "mode 0777 writable by group and others"),
        (0, 0o770, "mode 0770 writable by group"),
    ],
    ids=["other-owner", "world-writable", "group-writable"],
)
def test_a_home_not_ours_is_refused_and_training_goes_on(owner, mode, reason, tmp_path):
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True)
    # what the home's owner planted: a config that would shrink the comm table
    (home / "etc" / "comminsight.conf").write_text("COMMINSIGHT_PROFILER_COMM_SLOTS=8\n")
    for p in (home, home / "etc", home / "etc" / "comminsight.conf"):
        os.chown(p, owner, owner)
    home.chmod(mode)
    before = tree(home)
    out, err = run("train", home, tmp_path)
    refusals = said(err, rf"home {re.escape(str(home))} refused: {reason}")
    assert len(refusals) == 1, err  # said once, by name
    assert out["init_result"] == 0 and out["comm_capacity"] == 256  # the planted file was not read
    (private,) = private_homes(tmp_path)
    assert stat.S_IMODE(private.stat().st_mode) == 0o700 and str(private) in refusals[0]
    assert sorted(r.seq for r in ops_in(private / "inspector_logs")) == list(range(OPS))
    assert tree(home) == before, "something was written into the refused home"


def _parent_owned_by_another_user(tmp_path: Path) -> tuple[Path, str]:
    parent = tmp_path / "theirs"
    parent.mkdir()
    os.chown(parent, NOBODY, NOBODY)
    return parent / "home", f"{parent} \\(a parent of {parent / 'home'}\\) is owned by uid {NOBODY}"


def _parent_anyone_can_write(tmp_path: Path) -> tuple[Path, str]:
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    return parent / "deep" / "home", f"{parent} .* without the sticky bit \\(mode 0777\\)"


def _link_of_another_user_on_the_way(tmp_path: Path) -> tuple[Path, str]:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # /tmp-like: the sticky bit keeps others from renaming what is ours
    target = tmp_path / "target"
    target.mkdir()
    link = shared / "link"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    return link / "home", f"{link} \\(on the way to .*\\) is a symbolic link owned by uid {NOBODY}"


def _root_link_into_a_directory_of_another_user(tmp_path: Path) -> tuple[Path, str]:
    theirs = tmp_path / "theirs"
    (theirs / "home").mkdir(parents=True)
    os.chown(theirs, NOBODY, NOBODY)  # they can swap theirs/home for a link to anything
    link = tmp_path / "link"
    link.symlink_to("theirs/home")
    return link, f"{theirs} \\(a parent of {link}\\) is owned by uid {NOBODY}"


@pytest.mark.parametrize(
    "make",
    [
        _parent_owned_by_another_user,
        _parent_anyone_can_write,
        _link_of_another_user_on_the_way,
        _root_link_into_a_directory_of_another_user,
    ],
    ids=["parent-other-owner", "parent-world-writable", "link-of-another-user", "final-link"],
)
def test_a_home_whose_parents_others_control_is_refused(make, tmp_path):
    """Whoever can rename the home's parent (or re-point a link on its way) can swap the home
    for one of their own between the check and a write: refused like a home not ours."""
    home, reason = make(tmp_path)
    out, err = run("train", home, tmp_path)
    refusals = said(err, rf"home {re.escape(str(home))} refused: {reason}")
    assert len(refusals) == 1, err
    assert out["init_result"] == 0
    (private,) = private_homes(tmp_path)
    assert sorted(r.seq for r in ops_in(private / "inspector_logs")) == list(range(OPS))
    assert not home.exists() or not list(home.iterdir()), "the refused home was written"


def test_a_home_under_a_sticky_directory_through_roots_links_is_used(tmp_path):
    """/tmp-like parents (others write, the sticky bit protects each entry) and links made by
    this user or root, relative ones and '..' included, are what real homes sit behind."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "real").mkdir()
    (tmp_path / "via").symlink_to("sticky/real/../real")
    home = tmp_path / "via" / "home"
    out, err = run("train", home, tmp_path)
    assert not said(err, "refused"), err
    assert not private_homes(tmp_path)
    assert sorted(r.seq for r in ops_in(sticky / "real" / "home" / "inspector_logs")) == (
        list(range(OPS))
    )


@pytest.mark.parametrize(
    ("owner", "mode", "through_link"),
    [(NOBODY, 0o777, False), (NOBODY, 0o1777, False), (0, 0o777, False), (0, 0o700, True)],
)
def test_a_shm_dir_others_control_is_refused_for_the_home_shms(owner, mode, through_link, tmp_path):
    """COMMINSIGHT_PROFILER_SHM_DIR where another user could rename or replace the region
    (their directory, one anyone may write without the sticky bit, or ours reached through a
    link into their directory): named, and the region is a file in the home's shms/
    instead. /dev/shm (root's, 1777) is what is meant."""
    shm_dir = tmp_path / "their-shm"
    shm_dir.mkdir()
    os.chown(shm_dir, owner, owner)
    shm_dir.chmod(mode)
    if through_link:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        shm_dir.rename(theirs / "shm")
        os.chown(theirs, NOBODY, NOBODY)
        shm_dir.symlink_to(theirs / "shm")
    home = tmp_path / "home"
    out, err = run("train", home, tmp_path, COMMINSIGHT_PROFILER_SHM_DIR=str(shm_dir))
    refusals = said(err, rf"COMMINSIGHT_PROFILER_SHM_DIR={re.escape(str(shm_dir))} refused: ")
    assert len(refusals) == 1 and f"{home}/shms" in refusals[0], err
    assert out["init_result"] == 0
    assert not list(shm_dir.iterdir()), "a region was created in the refused directory"
    assert sorted(r.seq for r in ops_in(home / "inspector_logs")) == list(range(OPS))


def simulate(home: Path, tmp_path: Path, **env) -> tuple:
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        out=str(tmp_path / "truth"),
        ranks=2,
        steps=2,
        time_scale=0.01,
        timeout_s=120.0,
        env=tuple(
            {
                "COMMINSIGHT_AGENT_AUTOSTART": "0",
                "COMMINSIGHT_PROFILER_HEARTBEAT_MS": "50",
                "COMMINSIGHT_PROFILER_LOG_FLUSH_MS": "20",
                "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
                **env,
            }.items()
        ),
    )
    (tmp_path / "xdg").mkdir(mode=0o700, exist_ok=True)
    result = run_simulation(config)
    assert not result.errors, result.errors
    truths = read_ground_truth(result.run_dir)
    rank_logs = "".join(p.read_text() for p in sorted(result.run_dir.glob("rank-*.log")))
    return truths, rank_logs


def test_simulated_ranks_train_to_the_end_in_a_home_owned_by_another_user(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    os.chown(home, NOBODY, NOBODY)
    before = tree(home)
    truths, rank_logs = simulate(home, tmp_path)
    assert len(said(rank_logs, rf"home {re.escape(str(home))} refused: owned by uid {NOBODY}")) == 2
    completed = sum(sum(op["completed"] for op in t.ops) for t in truths)
    assert completed == sum(len(t.ops) for t in truths) > 0
    logged = sum(len(ops_in(p / "inspector_logs")) for p in private_homes(tmp_path))
    assert logged == completed, "every completed op is in the private logs"
    assert tree(home) == before


# ---- 2. the config file must never block ----


def test_a_fifo_as_config_file_does_not_block_init(tmp_path):
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True, mode=0o700)
    os.mkfifo(home / "etc" / "comminsight.conf", 0o600)
    truths, rank_logs = simulate(home, tmp_path)
    assert all(op["completed"] for t in truths for op in t.ops)
    assert len(said(rank_logs, r"comminsight.conf refused: is a FIFO, not a regular file")) == 2
    logs = ops_in(home / "inspector_logs")
    assert len(logs) == sum(len(t.ops) for t in truths)


def _symlink_to_good_file(conf: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.conf"
    target.write_text("COMMINSIGHT_PROFILER_COMM_SLOTS=8\n")
    conf.symlink_to(target)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda conf, tmp: os.mkfifo(conf, 0o600), "is a FIFO, not a regular file"),
        (
            lambda conf, tmp: os.mknod(conf, 0o600 | stat.S_IFCHR, os.makedev(1, 3)),
            "is a character device",
        ),
        (lambda conf, tmp: conf.mkdir(), "is a directory, not a regular file"),
        (_symlink_to_good_file, "is a symbolic link"),
        (
            lambda conf, tmp: (
                conf.write_text("COMMINSIGHT_PROFILER_COMM_SLOTS=8\n"),
                conf.chmod(0o666),
            ),
            "mode 0666 writable by group and others",
        ),
        (
            lambda conf, tmp: (
                conf.write_text("COMMINSIGHT_PROFILER_COMM_SLOTS=8\n"),
                os.chown(conf, NOBODY, NOBODY),
            ),
            f"owned by uid {NOBODY}",
        ),
    ],
    ids=["fifo", "device", "directory", "symlink", "world-writable", "other-owner"],
)
def test_a_config_file_that_is_not_a_trusted_regular_file_is_refused(make, reason, tmp_path):
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True, mode=0o700)
    conf = home / "etc" / "comminsight.conf"
    make(conf, tmp_path)
    out, err = run("train", home, tmp_path)
    assert len(said(err, rf"{re.escape(str(conf))} refused: {reason}")) == 1, err
    assert out["comm_capacity"] == 256, "the refused file's value was used"
    assert sorted(r.seq for r in ops_in(home / "inspector_logs")) == list(range(OPS))


def test_a_huge_config_file_is_read_up_to_a_bound(tmp_path):
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True, mode=0o700)
    conf = home / "etc" / "comminsight.conf"
    conf.write_text(
        "COMMINSIGHT_PROFILER_COMM_SLOTS=16\n" + "#" * 1000 + "\n" + ("# x\n" * 100_000)
    )
    out, err = run("train", home, tmp_path)
    assert said(err, rf"{re.escape(str(conf))} is larger than 262144 bytes; the rest is ignored"), (
        err
    )
    assert out["comm_capacity"] == 16  # what came before the bound is read
    assert len(ops_in(home / "inspector_logs")) == OPS


def test_a_config_line_with_a_nul_byte_is_rejected_and_the_rest_applied(tmp_path):
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True, mode=0o700)
    conf = home / "etc" / "comminsight.conf"
    conf.write_bytes(
        b"COMMINSIGHT_PROFILER_LOG_ENABLE=0\0garbage\nCOMMINSIGHT_PROFILER_COMM_SLOTS=16\n"
    )
    out, err = run("train", home, tmp_path)
    assert len(said(err, rf"{re.escape(str(conf))}:1: line contains a NUL byte; ignored")) == 1, err
    assert len(ops_in(home / "inspector_logs")) == OPS, "the cut line turned the logs off"
    assert out["comm_capacity"] == 16, "the next line was lost"


def test_a_config_line_cut_by_the_read_bound_is_not_applied(tmp_path):
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True, mode=0o700)
    conf = home / "etc" / "comminsight.conf"
    head = b"COMMINSIGHT_PROFILER_COMM_SLOTS=16\n"
    cut = b"COMMINSIGHT_PROFILER_COMM_SLOTS=1"  # the bound falls here; the line says 128
    filler = b"#" * (262144 - len(head) - len(cut) - 1) + b"\n"
    conf.write_bytes(head + filler + cut + b"28\n" + b"# more\n" * 10)
    out, err = run("train", home, tmp_path)
    assert len(said(err, rf"{re.escape(str(conf))} is larger than 262144 bytes")) == 1, err
    assert out["comm_capacity"] == 16, "the half-read line was applied"
    assert len(ops_in(home / "inspector_logs")) == OPS


def test_an_overlong_home_is_refused_for_the_private_directory(tmp_path):
    default = Path("/opt/comminsight")
    before = tree(default) if default.exists() else None
    home = tmp_path / ("x" * 5000)
    out, err = run("train", home, tmp_path)
    refusal = said(err, r"home COMMINSIGHT_HOME \(\d+ bytes\) refused: longer than 3071 bytes")
    assert len(refusal) == 1 and " /opt/comminsight" not in err, err
    (private,) = private_homes(tmp_path)
    assert out["init_result"] == 0 and len(ops_in(private / "inspector_logs")) == OPS
    assert (tree(default) if default.exists() else None) == before, "the default home was used"


def test_a_relative_home_is_refused_for_the_private_directory(tmp_path):
    work = tmp_path / "work"  # the rank's working directory, which a relative home would follow
    work.mkdir()
    out, err = run("train", Path("rel/home"), tmp_path, cwd=work)
    refusal = said(err, r"home rel/home refused: COMMINSIGHT_HOME is a relative path")
    assert len(refusal) == 1, err
    assert list(work.iterdir()) == [], "the relative home was created"
    (private,) = private_homes(tmp_path)
    assert out["init_result"] == 0 and len(ops_in(private / "inspector_logs")) == OPS


# ---- 3. links and foreign files planted inside our own home ----


@pytest.fixture
def precious(tmp_path) -> Path:
    """A root-only file a planted link points at: it must stay as it is."""
    target = tmp_path / "root-only"
    target.write_text("do not touch\n")
    target.chmod(0o600)
    return target


def unchanged(path: Path, before: tuple) -> bool:
    st = path.stat()
    return (path.read_text(), st.st_size, st.st_mtime_ns) == before


def fingerprint(path: Path) -> tuple:
    st = path.stat()
    return (path.read_text(), st.st_size, st.st_mtime_ns)


def test_a_symlinked_hang_event_fifo_is_not_followed(tmp_path, precious):
    home = tmp_path / "home"
    (home / "fifos").mkdir(parents=True, mode=0o700)
    (home / "fifos" / "hang-events.fifo").symlink_to(precious)
    before = fingerprint(precious)
    out, err = run("hang_with_fifo", home, tmp_path, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="0.3")
    assert unchanged(precious, before)
    assert len(said(err, r"fifos/hang-events.fifo refused: is a symbolic link")) == 1, err
    assert out["counters"]["hangs_flagged"] == 1 and out["counters"]["fifo_events_dropped"] == 1
    assert out["counters"]["fifo_events_written"] == 0


@pytest.mark.parametrize(
    ("owner", "mode", "reason"),
    [
        (NOBODY, 0o600, f"owned by uid {NOBODY}"),
        (0, 0o666, "mode 0666 writable by group and others"),
    ],
    ids=["other-owner", "world-writable"],
)
def test_a_fifo_others_can_write_gets_no_event(owner, mode, reason, tmp_path):
    home = tmp_path / "home"
    (home / "fifos").mkdir(parents=True, mode=0o700)
    fifo = home / "fifos" / "hang-events.fifo"
    os.mkfifo(fifo, 0o600)
    os.chown(fifo, owner, owner)
    fifo.chmod(mode)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # someone listening, ready to forge
    try:
        out, err = run("hang_with_fifo", home, tmp_path, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="0.3")
        try:
            data = os.read(reader, 4096)
        except BlockingIOError:  # a writer still has it open
            data = b""
        assert data == b"", "an event was written into a FIFO others can write"
    finally:
        os.close(reader)
    assert len(said(err, rf"hang-events.fifo refused: {reason}")) == 1, err
    assert (
        out["counters"]["fifo_events_dropped"] == 1 and out["counters"]["fifo_events_written"] == 0
    )


def fake_agent(path: Path, marker: Path, mode: int = 0o755) -> Path:
    path.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    path.chmod(mode)
    return path


def test_a_symlinked_agent_lock_is_not_followed_and_no_agent_starts(tmp_path, precious):
    home = tmp_path / "home"
    (home / "metadata").mkdir(parents=True, mode=0o700)
    (home / "metadata" / "agent.lock").symlink_to(precious)
    marker = tmp_path / "agent-ran"
    agent = fake_agent(tmp_path / "agent", marker)
    before = fingerprint(precious)
    out, err = run(
        "autostart",
        home,
        tmp_path,
        COMMINSIGHT_AGENT_AUTOSTART="1",
        COMMINSIGHT_PROFILER_AGENT_BIN=str(agent),
        LOCAL_RANK="0",
    )
    assert out["init_result"] == 0
    assert unchanged(precious, before) and not marker.exists()
    assert said(err, r"metadata/agent.lock refused: is a symbolic link"), err


def test_a_symlinked_agent_log_is_not_followed(tmp_path, precious):
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True, mode=0o700)
    (home / "logs" / "agent.log").symlink_to(precious)
    marker = tmp_path / "agent-ran"
    agent = tmp_path / "agent"
    agent.write_text(f"#!/bin/sh\necho to-the-log\necho ran >> {marker}\n")
    agent.chmod(0o755)
    before = fingerprint(precious)
    _, err = run(
        "autostart",
        home,
        tmp_path,
        COMMINSIGHT_AGENT_AUTOSTART="1",
        COMMINSIGHT_PROFILER_AGENT_BIN=str(agent),
        LOCAL_RANK="0",
    )
    wait_until(marker.exists, DEADLINE_S, "the agent to run")  # it starts, its output discarded
    assert unchanged(precious, before)
    assert said(err, r"logs/agent.log is a symbolic link; the agent's output is discarded"), err


@pytest.mark.parametrize("sub", ["inspector_logs", "shms"])
def test_a_symlinked_home_directory_is_not_followed(sub, tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    target = tmp_path / "root-dir"
    target.mkdir(mode=0o700)
    (target / "keep").write_text("x")
    (home / sub).symlink_to(target, target_is_directory=True)
    before = tree(target)
    out, err = run("train", home, tmp_path)
    assert tree(target) == before
    refusal = said(
        err, rf"{re.escape(str(home / sub))} refused: is a symbolic link; using .*/{sub} instead"
    )
    assert len(refusal) == 1, err
    (private,) = private_homes(tmp_path)
    logs = private / "inspector_logs" if sub == "inspector_logs" else home / "inspector_logs"
    assert len(ops_in(logs)) == OPS and out["init_result"] == 0


# ---- the agent binary: only from the environment or the installation ----


def test_agent_bin_from_the_home_config_is_never_run(tmp_path):
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True, mode=0o700)
    evil_marker = tmp_path / "evil-ran"
    evil = fake_agent(tmp_path / "evil", evil_marker)
    conf = home / "etc" / "comminsight.conf"
    conf.write_text(f"COMMINSIGHT_PROFILER_AGENT_BIN={evil}\n")
    installed = tmp_path / "bin"
    installed.mkdir()
    default_marker = tmp_path / "default-ran"
    fake_agent(installed / "comminsight-agent", default_marker)
    _, err = run(
        "autostart",
        home,
        tmp_path,
        COMMINSIGHT_AGENT_AUTOSTART="1",
        LOCAL_RANK="0",
        PATH=f"{installed}:{os.environ['PATH']}",
    )
    wait_until(default_marker.exists, DEADLINE_S, "the installation's agent to run")
    assert not evil_marker.exists()
    assert said(
        err,
        rf"{re.escape(str(conf))}:1: COMMINSIGHT_PROFILER_AGENT_BIN is taken only from the "
        "environment",
    ), err


def test_an_agent_bin_others_can_write_is_not_run(tmp_path):
    marker = tmp_path / "agent-ran"
    agent = fake_agent(tmp_path / "agent", marker, mode=0o777)
    out, err = run(
        "autostart",
        tmp_path / "home",
        tmp_path,
        COMMINSIGHT_AGENT_AUTOSTART="1",
        COMMINSIGHT_PROFILER_AGENT_BIN=str(agent),
        LOCAL_RANK="0",
    )
    assert out["init_result"] == 0 and not marker.exists()
    assert said(err, rf"{re.escape(str(agent))} refused: writable by group or others"), err


def test_the_agent_starts_with_no_descriptor_of_training_and_no_signal_blocked(tmp_path):
    # training holds a listening socket opened without O_CLOEXEC (as launchers and stores do);
    # the autostart runs on the Profiler's background thread, which blocks every signal
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    held.set_inheritable(True)
    marker = tmp_path / "agent-ran"
    agent = tmp_path / "agent"
    # the agent reads its own state, forking nothing (a shell script's `grep` read the shell's
    # mask while the shell blocked every signal to fork it), and looks for the socket by its
    # inode (a shell opens its script at fd 10 and up, which the socket's number may be)
    agent.write_text(
        f"#!{sys.executable}\n"
        "import os\n"
        "blocked = next(l for l in open('/proc/self/status') if l.startswith('SigBlk'))\n"
        "links = []\n"
        "for n in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        links.append(os.readlink(f'/proc/self/fd/{n}'))\n"
        "    except OSError:  # the listing's own descriptor, closed since\n"
        "        pass\n"
        "held = f\"socket:[{os.environ['HELD_INODE']}]\" in links\n"
        f"with open({str(marker)!r}, 'a') as f:\n"
        "    f.write(blocked + ('fd inherited' if held else 'fd closed') + '\\n')\n"
    )
    agent.chmod(0o755)
    try:
        proc = start(
            "autostart",
            tmp_path / "home",
            tmp_path,
            pass_fds=(held.fileno(),),
            COMMINSIGHT_AGENT_AUTOSTART="1",
            COMMINSIGHT_PROFILER_AGENT_BIN=str(agent),
            LOCAL_RANK="0",
            HELD_INODE=str(os.fstat(held.fileno()).st_ino),
        )
        out, _ = finish(proc)
        assert out["init_result"] == 0
        wait_until(
            lambda: marker.exists() and len(marker.read_text().splitlines()) == 2,
            DEADLINE_S,
            "the agent",
        )
    finally:
        held.close()
    blocked, fd = marker.read_text().splitlines()
    assert blocked.split() == ["SigBlk:", "0000000000000000"]
    assert fd == "fd closed"


def planted_agent(tmp_path: Path, how: str, marker: Path) -> tuple[Path, str]:
    """A comminsight-agent on PATH that someone else could have put there; its directory and
    the refusal the Profiler must give."""
    where = tmp_path / "planted"
    where.mkdir(mode=0o755)
    agent = fake_agent(where / "comminsight-agent", marker)
    if how == "other-owner":
        os.chown(agent, NOBODY, NOBODY)
        return where, f"owned by uid {NOBODY}, not by this process's uid 0 or root"
    if how == "other-owned-dir":
        os.chown(where, NOBODY, NOBODY)
        return where, f"its directory {re.escape(str(where))} is owned by uid {NOBODY}"
    if how == "world-writable-dir":
        where.chmod(0o777)
        return where, f"its directory {re.escape(str(where))} is writable by group or others"
    # a link in a trusted directory to an agent in a directory others can write
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    agent.rename(loose / "comminsight-agent")
    agent.symlink_to(loose / "comminsight-agent")
    return where, f"its directory {re.escape(str(loose))} is writable by group or others"


@pytest.mark.parametrize(
    "how", ["other-owner", "other-owned-dir", "world-writable-dir", "link-into-loose-dir"]
)
def test_an_agent_on_path_someone_else_controls_is_not_run(how, tmp_path):
    marker = tmp_path / "agent-ran"
    where, refusal = planted_agent(tmp_path, how, marker)
    out, err = run(
        "autostart",
        tmp_path / "home",
        tmp_path,
        COMMINSIGHT_AGENT_AUTOSTART="1",
        LOCAL_RANK="0",
        PATH=f"{where}:{os.environ['PATH']}",
    )
    assert out["init_result"] == 0 and not marker.exists()
    agent = re.escape(str(where / "comminsight-agent"))
    assert len(said(err, rf"agent autostart: {agent} refused: {refusal}.*; not started")) == 1, err


@pytest.mark.parametrize("entry", ["", ".", "bin"], ids=["empty", "dot", "relative"])
def test_an_agent_in_a_relative_path_entry_is_not_run(entry, tmp_path):
    cwd = tmp_path / "cwd"
    (cwd / "bin").mkdir(parents=True)
    marker = tmp_path / "agent-ran"
    fake_agent(cwd / "comminsight-agent", marker)
    fake_agent(cwd / "bin" / "comminsight-agent", marker)
    out, err = run(
        "autostart",
        tmp_path / "home",
        tmp_path,
        cwd=cwd,
        COMMINSIGHT_AGENT_AUTOSTART="1",
        LOCAL_RANK="0",
        PATH=f"{entry}:/nonexistent",
    )
    assert out["init_result"] == 0 and not marker.exists()
    assert len(said(err, r"comminsight-agent not found in an absolute PATH directory")) == 1, err


# ---- 4. disk full: every lost op inside a gap line, the .partial sealed once space returns ----


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs as the home, most of it taken by a file the scenario deletes later."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(home)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    filler = home / "filler"
    filler.write_bytes(b"\0" * (1200 * 1024))
    try:
        yield home, filler
    finally:
        subprocess.run(["umount", "-l", str(home)], check=True)


def coverage(log_dir: Path, include_open: bool = False) -> dict:
    """Per writing process: how often each ring ticket appears (a line or inside a gap), the
    gap total, and the op lines."""
    seen: dict = defaultdict(lambda: defaultdict(int))
    gaps: dict = defaultdict(int)
    ops: dict = defaultdict(int)
    other: dict = defaultdict(int)  # lines of ring records that are not ops (comm init/finalize)
    for path in segments_in(log_dir, include_open=include_open):
        pid = int(path.name.split("-")[2])
        for r in verify_segment(path).records:
            if isinstance(r.ci, CiGap):
                assert r.ci.reason.value in ("disk_full", "write_error"), r.ci
                gaps[pid] += r.ci.lost_count
                assert r.ci.lost_count == r.ci.last_lost_ring_seq - r.ci.first_lost_ring_seq + 1
                for t in range(r.ci.first_lost_ring_seq, r.ci.last_lost_ring_seq + 1):
                    seen[pid][t] += 1
            elif ring_seq(r.ci):
                seen[pid][ring_seq(r.ci)] += 1
                ops[pid] += is_coll(r)
                other[pid] += not is_coll(r)
    return {"seen": seen, "gaps": gaps, "ops": ops, "other": other}


@pytest.mark.parametrize(
    ("ranks", "env"),
    [
        (1, {}),
        # seals while full; uncompressed, so that the sealed segments fill the disk at all
        (
            2,
            {
                "COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES": "65536",
                "COMMINSIGHT_PROFILER_LOG_ZSTD_LEVEL": "0",
            },
        ),
        (1, {"SCENARIO_END_AT_ONCE": "1"}),  # training ends as space returns
    ],
    ids=["one-rank", "two-ranks-small-segments", "ends-as-space-returns"],
)
def test_disk_full_gap_lines_cover_every_lost_op_exactly(ranks, env, small_disk, tmp_path):
    home, filler = small_disk
    seen = tmp_path / "full-seen"  # outside the small disk, where a file can still be made
    seen.mkdir()
    procs = [
        start(
            "disk_fill",
            home,
            tmp_path,
            SCENARIO_FILLER=str(filler),
            SCENARIO_RANKS=str(ranks),
            SCENARIO_FULL_SEEN=str(seen),
            **env,
        )
        for _ in range(ranks)
    ]
    results = [finish(p) for p in procs]
    cov = coverage(home / "inspector_logs")
    assert not list((home / "inspector_logs").glob("*.partial")), "a segment was left unsealed"
    assert sorted(cov["seen"]) == sorted(out["pid"] for out, _ in results)
    for out, err in results:
        c, pid = out["counters"], out["pid"]
        assert c["log_records_dropped"] > 0, "the disk never filled"
        assert said(err, r"inspector_logs/.*failed \(No space left on device\)"), err
        seen = cov["seen"][pid]
        # every ring ticket exactly once: as its line, or inside a gap
        assert sorted(seen) == list(range(1, c["ring_head"] + 1))
        assert set(seen.values()) == {1}
        assert cov["gaps"][pid] == c["log_records_dropped"] + c["log_records_lost"]
        # the ring holds the ops and one comm init and finalize record
        assert c["ring_head"] == out["ops_issued"] + 2
        lost_ops = cov["gaps"][pid] - (2 - cov["other"][pid])
        assert cov["ops"][pid] + lost_ops == out["ops_issued"]


def test_disk_still_full_at_finalize_ends_at_once_with_counts_exact(small_disk, tmp_path):
    home, filler = small_disk
    out, _ = finish(start("full_at_finalize", home, tmp_path, SCENARIO_FILLER=str(filler)))
    c = out["counters"]
    assert c["log_records_dropped"] > 0
    assert c["log_records_written"] + c["log_records_dropped"] == c["ring_head"]
    cov = coverage(home / "inspector_logs", include_open=True)
    (pid,) = cov["seen"]
    seen = cov["seen"][pid]
    assert set(seen.values()) == {1} and max(seen) <= c["ring_head"]
    # what reached the disk is what was counted as written; gap lines, if the last retry found
    # room for them, cover only what was dropped
    assert cov["ops"][pid] + cov["other"][pid] == c["log_records_written"]
    assert cov["gaps"][pid] <= c["log_records_dropped"]


# ---- 5. SHM regions of dead processes ----


def start_ticks(pid: int) -> int:
    stat_line = Path(f"/proc/{pid}/stat").read_text()
    return int(stat_line[stat_line.rindex(")") + 2 :].split()[19])


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def fake_region(path: Path, pid: int, ticks: int, **fields) -> Path:
    h = np.zeros(1, dtype=shm_v1.HEADER_DTYPE)
    values = {
        "magic": shm_v1.MAGIC,
        "abi_version": 1,
        "header_size": shm_v1.HEADER_DTYPE.itemsize,
        "file_size": shm_v1.HEADER_DTYPE.itemsize,
        "state": shm_v1.FileState.LIVE,
        "pid": pid,
        "process_start_ticks": ticks,
        "pid_namespace": os.stat("/proc/self/ns/pid").st_ino,
        "boot_id": boot_id().encode(),
        **fields,
    }
    for k, v in values.items():
        h[k] = v
    path.write_bytes(h.tobytes())
    path.chmod(0o600)
    return path


DAY_NS = 24 * 3600 * 1_000_000_000


def test_regions_of_dead_processes_are_removed_once_unlinked_live_ones_kept(tmp_path):
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    home = tmp_path / "home"
    (home / "shms").mkdir(parents=True, mode=0o700)
    other_home = tmp_path / "other-home"
    (other_home / "shms").mkdir(parents=True, mode=0o700)
    dead = subprocess.Popen(["sleep", "60"])
    dead_ticks = start_ticks(dead.pid)
    dead.kill()
    dead.wait()
    live = subprocess.Popen(["sleep", "600"])

    def region(n: int, pid: int, ticks: int, linked_from: Path | None = None, **fields) -> Path:
        name = f"ci-h-{n}-{n}.shm"
        link = (linked_from or home) / "shms" / name
        path = fake_region(shm_dir / name, pid, ticks, link_path=str(link).encode(), **fields)
        if linked_from is not None:
            link.symlink_to(path)
        return path

    try:
        live_ticks = start_ticks(live.pid)
        ns = os.stat("/proc/self/ns/pid").st_ino
        long_ago = time.time_ns() - DAY_NS - 3600 * 1_000_000_000
        r = {
            # dead, and the home's link is gone (its Agent retired it): removed
            "dead-unlinked": region(1, dead.pid, dead_ticks),
            "reused": region(2, live.pid, live_ticks - 1),
            "earlier-boot": region(3, live.pid, live_ticks, boot_id=b"0" * 36),
            # dead, still linked, but silent for longer than the grace period: removed
            "past-grace": region(4, dead.pid, dead_ticks, home, heartbeat_real_ns=long_ago),
            # kept
            "live": region(5, live.pid, live_ticks, home),
            "no-start-time": region(6, dead.pid, 0),
            "other-user": region(7, dead.pid, dead_ticks),
            "other-pid-ns": region(8, dead.pid, dead_ticks, pid_namespace=ns + 1),
            "linked-here-no-agent": region(9, dead.pid, dead_ticks, home),
            "linked-from-another-home": region(10, dead.pid, dead_ticks, other_home),
            "home-unknown": fake_region(shm_dir / "ci-h-11-11.shm", dead.pid, dead_ticks),
        }
        os.chown(r["other-user"], NOBODY, NOBODY)
        os.mkfifo(shm_dir / "ci-h-12-12.shm", 0o600)  # must not block the sweep
        out, err = run("train", home, tmp_path, COMMINSIGHT_PROFILER_SHM_DIR=str(shm_dir))
        assert out["init_result"] == 0 and len(ops_in(home / "inspector_logs")) == OPS
        gone = {name for name, p in r.items() if not p.exists()}
        assert gone == {"dead-unlinked", "reused", "earlier-boot", "past-grace"}
        assert not (home / "shms" / "ci-h-4-4.shm").is_symlink(), "a removed region's link stays"
        for kept, n, where in [
            ("linked-here-no-agent", 9, home),
            ("linked-from-another-home", 10, other_home),
        ]:
            link = where / "shms" / f"ci-h-{n}-{n}.shm"
            assert link.resolve() == r[kept], f"{kept}: its link was touched"
        assert (shm_dir / "ci-h-12-12.shm").exists()
        assert said(
            err, rf"removed 4 SHM region\(s\) of dead processes from {re.escape(str(shm_dir))}"
        )
    finally:
        live.kill()
        live.wait()


def killed_run(home: Path, tmp_path: Path, **env) -> tuple[Path, int]:
    proc = start("killed", home, tmp_path, **env)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == -9
    facts = json.loads(out.splitlines()[0])
    return Path(facts["region"]), facts["pid"]


def test_a_sigkilled_process_region_waits_for_its_agent_then_goes(tmp_path):
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    home = tmp_path / "home"
    env = {"COMMINSIGHT_PROFILER_SHM_DIR": str(shm_dir)}
    left, pid = killed_run(home, tmp_path, **env)
    assert left.parent == shm_dir and left.exists(), "SIGKILL leaves the region behind"
    (link,) = (home / "shms").glob("*.shm")
    records = ShmRegion(link, shm_dir=str(shm_dir)).counter("ring_head")
    assert records >= 2  # its COMM_INIT and its one all-reduce, in SHM only

    # no Agent runs: the next Profiler leaves the region, records and all, for one
    train_out, err = run("train", home, tmp_path, **env)
    assert train_out["init_result"] == 0 and not said(err, "removed .* SHM region"), err
    region = ShmRegion(link, shm_dir=str(shm_dir))
    assert int(region.header["pid"]) == pid and region.counter("ring_head") == records

    # the Agent recovered it and removed the link: the next Profiler removes the region
    link.unlink()
    train_out, err = run("train", home, tmp_path, **env)
    assert train_out["init_result"] == 0 and not left.exists()
    assert len(said(err, r"removed 1 SHM region\(s\) of dead processes")) == 1, err
    assert not list(shm_dir.iterdir()), "the second process's own region is removed at its exit"


def test_a_region_nobody_retires_goes_after_the_grace_period(tmp_path):
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    home = tmp_path / "home"
    env = {"COMMINSIGHT_PROFILER_SHM_DIR": str(shm_dir)}
    left, _ = killed_run(home, tmp_path, **env)
    (link,) = (home / "shms").glob("*.shm")
    train_out, err = run(
        "train", home, tmp_path, COMMINSIGHT_PROFILER_STALE_REGION_GRACE_S="0", **env
    )
    assert train_out["init_result"] == 0
    sealed = [p for p in segments_in(home / "inspector_logs") if not p.name.endswith(".partial")]
    assert sum(is_coll(r) for p in sealed for r in verify_segment(p).records) == OPS
    assert not left.exists() and not link.is_symlink(), "the region and its link are removed"
    assert len(said(err, r"removed 1 SHM region\(s\) of dead processes")) == 1, err


@pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root")
def test_thousands_of_other_users_files_in_the_shm_dir_do_not_hide_a_dead_region(tmp_path):
    # a shared /dev/shm: another user's files, some named like regions, came first in the
    # directory and used up the sweep's bound on entries examined
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir(mode=0o1777)
    shm_dir.chmod(0o1777)
    home = tmp_path / "home"
    env = {"COMMINSIGHT_PROFILER_SHM_DIR": str(shm_dir)}
    left, _ = killed_run(home, tmp_path, **env)
    for i in range(5000):
        for name in (f"z{i}", f"ci-junk-{i}.shm"):
            fd = os.open(shm_dir / name, os.O_WRONLY | os.O_CREAT, 0o644)
            os.fchown(fd, NOBODY, NOBODY)
            os.close(fd)
    train_out, err = run(
        "train",
        tmp_path / "other-home",
        tmp_path,
        COMMINSIGHT_PROFILER_STALE_REGION_GRACE_S="0",
        **env,
    )
    assert train_out["init_result"] == 0
    assert not left.exists(), err
    assert len(said(err, r"removed 1 SHM region\(s\) of dead processes")) == 1, err
    assert len(list(shm_dir.glob("ci-junk-*.shm"))) == 5000  # not this user's: left alone


# ---- 6. a home that is ours but cannot be written: the logs move, nothing is lost ----


@pytest.fixture
def tmpfs_home(tmp_path):
    """The home on a tmpfs of its own, so that it can be remounted read-only."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(home)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], check=True)


HOME_DIRS = ("etc", "shms", "fifos", "logs", "metadata", "inspector_logs")


def moved_logs(text: str, home: Path, err: str) -> list[str]:
    """The warnings that the home's inspector_logs cannot be written; each names where the
    logs went (the private directory)."""
    pattern = (
        rf"{re.escape(str(home / 'inspector_logs'))} cannot be written \({err}\); "
        r"inspector_logs go to (\S+)/inspector_logs instead"
    )
    return [m.group(1) for line in text.splitlines() if (m := re.search(pattern, line))]


def logged_ops_by_pid(private_dirs: list[Path]) -> dict:
    """Per writing process: its op lines as sorted (communicator, function, NCCL seq)."""
    ops: dict = defaultdict(list)
    for private in private_dirs:
        for path in segments_in(private / "inspector_logs"):
            records = verify_segment(path).records
            pid = records[0].ci.process.pid  # the segment_start's
            for r in records:
                assert not isinstance(r.ci, CiGap), f"a gap in {path}: {r.ci}"
            ops[pid] += [(op.comm_id, op.func, op.seq) for op in logged_ops(records, True)]
    return {pid: sorted(keys) for pid, keys in ops.items()}


@pytest.mark.parametrize(
    "present",
    [(), HOME_DIRS],
    ids=["empty-so-nothing-can-be-created", "with-its-directories-so-no-segment-can-be-created"],
)
def test_a_read_only_home_logs_every_op_in_the_private_directory(present, tmpfs_home, tmp_path):
    home = tmpfs_home
    for sub in present:
        (home / sub).mkdir(mode=0o700)
    subprocess.run(["mount", "-o", "remount,ro", str(home)], check=True, capture_output=True)
    truths, rank_logs = simulate(home, tmp_path)
    # each rank says so once, naming the home's directory, the errno and where the logs went
    went_to = moved_logs(rank_logs, home, "EROFS: Read-only file system")
    privates = private_homes(tmp_path)
    assert sorted(went_to) == [str(p) for p in privates] and len(privates) == 2, rank_logs
    assert not said(rank_logs, r"log writing paused|inspector_logs disabled"), rank_logs
    # every op each rank issued (and completed: nothing blocked) is a line of its own logs
    assert all(op["completed"] for t in truths for op in t.ops)
    issued = {
        t.run["pid"]: sorted((int(op["comm_id"], 16), op["func"], op["seq"]) for op in t.ops)
        for t in truths
    }
    assert logged_ops_by_pid(privates) == issued
    assert sum(len(ops) for ops in issued.values()) > 0


@pytest.mark.parametrize("build", ["asan", "tsan"])
def test_a_read_only_home_moves_the_logs_cleanly_under_sanitizers(build, tmpfs_home, tmp_path):
    """The move happens on the writer thread while the background thread runs: checked for
    races and memory errors (a sanitizer finding fails the run)."""
    home = tmpfs_home
    for sub in HOME_DIRS:
        (home / sub).mkdir(mode=0o700)
    subprocess.run(["mount", "-o", "remount,ro", str(home)], check=True, capture_output=True)
    out, err = finish(start("train", home, tmp_path, build=build))
    assert "WARNING: ThreadSanitizer" not in err, err[-4000:]
    (private,) = private_homes(tmp_path)
    assert moved_logs(err, home, "EROFS: Read-only file system") == [str(private)], err
    assert sorted(r.seq for r in ops_in(private / "inspector_logs")) == list(range(OPS))


def test_a_home_turned_read_only_after_its_first_segment_drops_and_counts(tmpfs_home, tmp_path):
    """Read-only once a segment is there: a disk that broke mid-run, not a home to leave."""
    home = tmpfs_home
    out, err = run("read_only_after_a_segment", home, tmp_path, SCENARIO_REMOUNT=str(home))
    c = out["counters"]
    assert private_homes(tmp_path) == [] and not moved_logs(err, home, r"[^)]*"), err
    assert said(
        err,
        rf"cannot create {re.escape(str(home / 'inspector_logs'))}/\S+: Read-only file system; "
        "log writing paused",
    ), err
    # the first run is in the home, sealed; the second one's records are counted as dropped
    assert sorted(r.seq for r in ops_in(home / "inspector_logs")) == list(range(OPS))
    assert c["log_records_written"] == out["written_before"] == OPS + 2  # + comm init, finalize
    assert c["log_records_dropped"] == c["ring_head"] - c["log_records_written"] == OPS + 2


@pytest.mark.parametrize("immutable", ["home", "inspector_logs"])
def test_an_immutable_home_logs_every_op_in_the_private_directory(immutable, tmp_path):
    home = tmp_path / "home"
    (home / "inspector_logs").mkdir(parents=True, mode=0o700)
    if immutable == "home":
        (home / "inspector_logs").rmdir()  # to be created at init, in a home that refuses it
    frozen = home if immutable == "home" else home / "inspector_logs"
    made = subprocess.run(["chattr", "+i", str(frozen)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make a directory immutable here: {made.stderr.decode().strip()}")
    try:
        out, err = run("train", home, tmp_path)
    finally:
        subprocess.run(["chattr", "-i", str(frozen)], check=True)
    (private,) = private_homes(tmp_path)
    assert moved_logs(err, home, "EPERM: Operation not permitted") == [str(private)], err
    assert out["init_result"] == 0
    assert sorted(r.seq for r in ops_in(private / "inspector_logs")) == list(range(OPS))
    assert not list(home.rglob("*.jsonl*")), "a segment was written into the home"


@pytest.fixture
def reachable_dir():
    """A directory uid 65534 can reach (pytest's tmp_path is root's alone); removed after."""
    path = Path(tempfile.mkdtemp(prefix="ci-test-unwritable-home-"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.mark.parametrize(
    "logs_dir", [False, True], ids=["no-inspector_logs-yet", "inspector_logs-0500"]
)
def test_a_home_this_user_cannot_write_logs_every_op_in_the_private_directory(
    logs_dir, reachable_dir, tmp_path
):
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("no setpriv to run the plugin as another user")
    home, xdg = reachable_dir / "home", reachable_dir / "xdg"
    xdg.mkdir(mode=0o700)
    os.chown(xdg, NOBODY, NOBODY)
    home.mkdir()
    if logs_dir:
        (home / "inspector_logs").mkdir(mode=0o500)
        os.chown(home / "inspector_logs", NOBODY, NOBODY)
    os.chown(home, NOBODY, NOBODY)
    home.chmod(0o500)  # ours (uid 65534's), readable, but nothing can be created in it
    before = tree(home)
    as_nobody = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    proc = subprocess.Popen(
        [*as_nobody, sys.executable, str(SCENARIOS), "train", str(builds()["plain"].path)],
        env=scenario_env(home, tmp_path, XDG_RUNTIME_DIR=str(xdg), PYTHONDONTWRITEBYTECODE="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = finish(proc)
    went_to = moved_logs(err, home, "EACCES: Permission denied")
    (private,) = sorted(xdg.glob(f"comminsight-{NOBODY}-*"))
    assert went_to == [str(private)], err
    st = private.stat()
    assert st.st_uid == NOBODY and stat.S_IMODE(st.st_mode) == 0o700
    assert out["init_result"] == 0
    assert sorted(r.seq for r in ops_in(private / "inspector_logs")) == list(range(OPS))
    assert tree(home) == before


# ---- 9. compressing sealed segments ----


def test_segments_whose_compression_is_blocked_stay_whole_and_the_others_are_compressed(tmp_path):
    """Names planted where a segment's compressed copy goes make that compression fail: the
    segment stays as it was sealed, counted and said once, the planted entries are left as they
    are, a leftover .zst.partial file of the Profiler's own naming is replaced, and every op is
    read back from the two forms."""
    home = tmp_path / "home"
    out, err = run(
        "blocked_compression", home, tmp_path, COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES="4096"
    )
    c, logs = out["counters"], home / "inspector_logs"
    assert out["planted"] == {
        "dir_at_final_name": "dir",
        "dir_at_partial_name": "dir",
        "file_at_partial_name": "gone",  # replaced, then renamed to its .jsonl.zst
    }
    assert (Path(out["names"]["dir_at_final_name"]) / "keep").read_text() == "not the Profiler's\n"
    assert c["log_compress_errors"] == 2
    assert c["log_segments_compressed"] == c["log_segments_sealed"] - 2 >= 2
    stem = Path(out["names"]["dir_at_final_name"]).name.removesuffix("-000000.jsonl.zst")
    raw = sorted(p.name for p in logs.glob("*.jsonl"))
    assert raw == [f"{stem}-000000.jsonl", f"{stem}-000001.jsonl"]
    compressed = sorted(p.name for p in logs.glob("*.jsonl.zst") if p.is_file())
    assert len(compressed) == c["log_segments_compressed"]
    assert f"{stem}-000002.jsonl.zst" in compressed
    assert not [p for p in logs.glob("*.zst.partial") if p.is_file()]
    assert len(said(err, r"cannot compress inspector_logs/\S+")) == 1, err
    assert sorted(r.seq for r in ops_in(logs)) == list(range(out["ops_issued"]))
