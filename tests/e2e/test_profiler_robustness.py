"""The Profiler survives what NCCL (or a broken caller) may throw at it, in every build.

Each scenario of plugin_scenarios.py runs in a fresh interpreter against the plain build and
the ASan+UBSan and TSan builds; a sanitizer finding fails the run.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from logged_ops import logged_ops
from profiler_builds import builds
from profiler_builds import run_scenario as run
from waiting import wait_until

from comminsight.log_segments import segments_in, verify_segment
from comminsight_gen.abi import shm_v1

# a minute or more of simulated jobs and Agents: scheduled first (conftest)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "plugin_scenarios.py"
BUILDS = ["plain", "asan", "tsan"]


def sealed(home: Path) -> list:
    return [verify_segment(p) for p in segments_in(home / "inspector_logs")]


@pytest.mark.parametrize("build", BUILDS)
def test_null_and_odd_strings(build, tmp_path):
    out = run("odd_strings", build, tmp_path)
    assert out["kinds"] == [shm_v1.RecordKind.COMM_INIT] + [shm_v1.RecordKind.COLL] * 3
    assert out["funcs"][1:] == [shm_v1.Func.UNKNOWN, shm_v1.Func.UNKNOWN, shm_v1.Func.GATHER]
    assert out["raw_names"][2] == ("Frobnicate" * 10)[:31]  # kept, truncated to the field
    assert out["flags"][2] & shm_v1.SlotFlags.NAME_TRUNCATED
    assert out["datatypes"][1:] == [0, 0, shm_v1.Datatype.BFLOAT16]
    assert out["name"] == "x" * 127
    for seg in sealed(tmp_path):  # the odd names still make valid log lines
        assert seg.seal is not None


@pytest.mark.parametrize("build", BUILDS)
def test_names_in_a_reused_buffer_at_a_page_end(build, tmp_path):
    """The same pointer holds another name at the next op, and the name's NUL is the last
    readable byte: every op gets its own name, and nothing past the page is read."""
    out = run("names_at_page_end", build, tmp_path)
    F, D = shm_v1.Func, shm_v1.Datatype
    names = [F.ALL_REDUCE, F.BROADCAST, F.ALL_GATHER, F.ALL_REDUCE, F.BROADCAST]
    assert out["kinds"][1:] == [shm_v1.RecordKind.COLL] * 10
    assert out["funcs"][1:] == names * 2
    assert out["datatypes"][1:] == [D.INT8 if i % 2 else D.FLOAT32 for i in range(10)]


@pytest.mark.parametrize("build", BUILDS)
def test_unknown_event_types_are_counted_and_ignored(build, tmp_path):
    out = run("unknown_events", build, tmp_path)
    assert out["counters"]["events_unknown"] == 3
    assert out["kinds"].count(shm_v1.RecordKind.COLL) == 1


@pytest.mark.parametrize("build", BUILDS)
def test_stop_without_start_and_double_stop(build, tmp_path):
    out = run("stop_without_start", build, tmp_path)
    assert out["nonzero_returns"] == 0
    assert out["kinds"].count(shm_v1.RecordKind.COLL) == 1  # published once
    assert out["counters"]["events_unknown"] >= 5


@pytest.mark.parametrize("build", BUILDS)
def test_kernel_channels_after_their_parent_completed(build, tmp_path):
    out = run("late_kernel_channels", build, tmp_path)
    assert out["late_handle"] is False
    assert out["seqs"][1:] == [0, 1] and out["channels"][1:] == [2, 2]


@pytest.mark.parametrize("build", BUILDS)
def test_finalize_with_events_in_flight(build, tmp_path):
    out = run("finalize_in_flight", build, tmp_path)
    kinds = out["kinds"]
    assert kinds == [
        shm_v1.RecordKind.COMM_INIT,
        shm_v1.RecordKind.COLL,
        shm_v1.RecordKind.COLL,
        shm_v1.RecordKind.COMM_FINALIZE,
    ]
    forced = out["flags"][2]
    assert (
        forced & shm_v1.SlotFlags.FORCED_COMPLETE and forced & shm_v1.SlotFlags.CHANNELS_INCOMPLETE
    )
    (seg,) = sealed(tmp_path)
    assert seg.seal.reason.value == "finalize" and seg.seal.op_count == 2


@pytest.mark.parametrize("build", BUILDS)
def test_hundreds_of_inits(build, tmp_path):
    n = 300 if build == "plain" else 60
    out = run(
        "many_inits", build, tmp_path, COMMINSIGHT_PROFILER_COMM_SLOTS="8", SCENARIO_COMMS=str(n)
    )
    assert out["init_results"] == [0] * 20  # NCCL keeps running even when slots run out
    assert out["counters"]["comms_dropped"] == 12
    assert out["counters"]["comms_active"] == 8


@pytest.mark.parametrize(
    "home",
    [
        "/sys/comminsight-test-home",  # read-only file system
        "{tmp}/a-file/below-a-file",  # cannot be created
    ],
    ids=["read-only", "uncreatable"],
)
def test_unusable_home_keeps_nccl_running(home, tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    xdg = tmp_path / "xdg"  # the private directory that replaces the home goes here, not /tmp
    xdg.mkdir(mode=0o700)
    out = run("unusable_home", "plain", Path(home.format(tmp=tmp_path)), XDG_RUNTIME_DIR=str(xdg))
    assert out == {"init_result": 0, "context": True}
    assert len(list(xdg.glob("comminsight-*"))) == 1


def test_mask_without_kernel_channels_times_on_the_host(tmp_path):
    out = run("mask_change", "plain", tmp_path, COMMINSIGHT_PROFILER_EVENT_MASK="6")
    assert out["mask"] == 6
    assert out["timing"][1] == shm_v1.TimingSource.COLLECTIVE_CPU and out["channels"][1] == 0


@pytest.mark.parametrize("build", BUILDS)
def test_watchdog_flags_a_stuck_collective(build, tmp_path):
    out = run("hang", build, tmp_path, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="0.5")
    p = out["progress"]
    assert (p["coll_enqueued"], p["coll_started"], p["coll_completed"]) == (2, 2, 1)
    assert p["inflight_count"] == 1 and p["inflight_seq"] == 1 and p["hang_flagged_seq"] == 1
    assert p["inflight_channels_started"] == 1
    assert out["counters"]["hangs_flagged"] == 1
    assert out["counters"]["fifo_events_dropped"] == 1  # nobody reads the FIFO in this test
    assert shm_v1.RecordKind.HANG in out["kinds"]
    hang_lines = [
        r.ci for s in sealed(tmp_path) for r in s.records if type(r.ci).__name__ == "CiHangEvidence"
    ]
    assert len(hang_lines) == 1
    h = hang_lines[0]
    assert (
        h.seq == 1
        and h.comm_name == "dp:0"
        and h.channels_started == 1
        and h.fifo_event_written is False
    )
    assert h.age_ns >= 500_000_000 and h.threshold_ns == 500_000_000


@pytest.mark.parametrize("build", ["plain", "asan"])
def test_disk_full_drops_counts_and_resumes(build, tmp_path):
    out = run("disk_full", build, tmp_path)
    counters = out["log_counters"]
    assert counters["log_records_dropped"] > 0 and counters["log_write_errors"] > 0
    lines = [r for seg in sealed(tmp_path) for r in seg.records]
    gaps = [r.ci for r in lines if type(r.ci).__name__ == "CiGap"]
    assert gaps and all(g.reason.value in ("disk_full", "write_error") for g in gaps)
    ops = logged_ops(lines, coll_only=True)
    seqs = sorted(op.seq for op in ops)
    assert seqs[:5] == [0, 1, 2, 3, 4] and seqs[-5:] == [25, 26, 27, 28, 29]  # before and after
    lost = sum(g.lost_count for g in gaps)
    assert len(ops) + lost == 30, "every op is either written or counted in a gap"


def test_fifo_event_reaches_a_reader(tmp_path):
    from comminsight_gen.abi import fifo_event_v1, shm_v1

    out = run("fifo_reader", "plain", tmp_path, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="0.4")
    assert out["bytes"] == fifo_event_v1.EVENT_SIZE  # exactly one atomic event
    assert out["magic"] == fifo_event_v1.MAGIC
    assert out["event_type"] == fifo_event_v1.EventType.HANG_SUSPECTED
    assert (out["comm_id"], out["comm_name"], out["op_index"]) == (0xB2, "tp:0", 0)
    assert out["func"] == shm_v1.Func.ALL_REDUCE and out["channels_started"] == 1
    assert out["pid_matches"]


def lock_held(path: Path) -> bool:
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_agent_autostart_spawns_once_under_the_lock(tmp_path):
    marker = tmp_path / "agent-started"
    fake = tmp_path / "fake-agent"
    hold = tmp_path / "hold-the-lock"
    # A stand-in agent: records that it ran, then holds the lock as the real one will, until
    # the test lets it go (its loop is it staying alive, not a wait for anything).
    lock = tmp_path / "home/metadata/agent.lock"
    fake.write_text(
        f"#!/bin/sh\necho $$ >> {marker}\n"
        f"exec flock {lock} sh -c 'while [ -e {hold} ]; do sleep 0.05; done'\n"
    )
    fake.chmod(0o755)
    hold.touch()
    home = tmp_path / "home"
    env = {
        "COMMINSIGHT_AGENT_AUTOSTART": "1",
        "COMMINSIGHT_PROFILER_AGENT_BIN": str(fake),
        "LOCAL_RANK": "0",
    }
    try:
        run("autostart", "plain", home, **env)
        wait_until(lambda: marker.exists() and lock_held(lock), 60, "the agent holding the lock")
        run("autostart", "plain", home, **env)  # the first agent still holds the lock
        assert len(marker.read_text().split()) == 1
        run("autostart", "plain", home, **{**env, "LOCAL_RANK": "1"})  # only local rank 0 spawns
        assert len(marker.read_text().split()) == 1
    finally:
        hold.unlink()


def test_agent_autostart_failure_is_ignored(tmp_path):
    out = run(
        "autostart",
        "plain",
        tmp_path,
        COMMINSIGHT_AGENT_AUTOSTART="1",
        COMMINSIGHT_PROFILER_AGENT_BIN="/nonexistent/comminsight-agent",
        LOCAL_RANK="0",
    )
    assert out == {}


# Under AddressSanitizer (GCC's libsanitizer) the forked child's own writer and background
# threads sometimes block for good in the sanitizer's allocator (a size-class region mutex,
# taken to refill the free quarantine) that the fork copied locked: in 2 full `make test`
# runs of 3, and in 5 of 88 runs of this test alone with four at once, all waiting there
# (gdb), also with the plugin's own threads kept out of their passes across the fork. The
# plain build, whose allocator (glibc) takes its locks around a fork, never hung. The child
# path stays checked without the sanitizer until the lock's holder is found.
ASAN_FORK = pytest.mark.skip(
    reason="a forked child under ASan can inherit a locked sanitizer allocator mutex"
)


@pytest.mark.parametrize("build", ["plain", pytest.param("asan", marks=ASAN_FORK)])
def test_fork_after_init(build, tmp_path):
    out = run("fork_child", build, tmp_path)
    assert out["child_status"] == 0
    assert out["shm_files"] == 2  # the child made its own region
    assert out["seqs"][1:] == [0, 1]  # the parent's ring holds only the parent's ops


def test_mask_change_at_run_time(tmp_path):
    conf = tmp_path / "comminsight.conf"
    conf.write_text("COMMINSIGHT_PROFILER_EVENT_MASK=70\n")
    out = run("mask_reload", "plain", tmp_path, COMMINSIGHT_CONF=str(conf))
    assert out == {"before": 70, "after": 6}


def test_mask_change_at_run_time_keeps_kernel_ch_on_nccl_231_on(tmp_path):
    # there KernelCh events are matched to tasks by a count that only timed tasks advance:
    # the bit may not change in a running process (the other bits do)
    conf = tmp_path / "comminsight.conf"
    conf.write_text("COMMINSIGHT_PROFILER_EVENT_MASK=70\n")
    out = run(
        "mask_reload",
        "plain",
        tmp_path,
        COMMINSIGHT_CONF=str(conf),
        SCENARIO_ABI="7",
        SCENARIO_MASK="14",
    )
    assert out == {"before": 70, "after": 14 | 64}


def test_bad_config_values_fall_back_to_defaults(tmp_path):
    b = builds()["plain"]
    env = {
        **os.environ,
        "COMMINSIGHT_HOME": str(tmp_path),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_RING_SLOTS": "lots",
        "COMMINSIGHT_PROFILER_EVENT_MASK": "-5",
        "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S": "nan",
        "PYTHONPATH": str(ROOT / "tests"),
    }
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "mask_change", str(b.path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["mask"] == 70  # the default
    for key in (
        "COMMINSIGHT_PROFILER_RING_SLOTS='lots' (environment): expected an integer",
        "COMMINSIGHT_PROFILER_EVENT_MASK='-5' (environment): out of range",
        "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S='nan' (environment): expected a number",
    ):
        assert key in proc.stderr, proc.stderr


@pytest.mark.parametrize("build", ["plain", "tsan"])
def test_stream_and_graph_capture_come_from_the_api_call(build, tmp_path):
    out = run("api_info", build, tmp_path)
    assert out == {"streams": [0xABC000, 0xDEF000], "graph": [False, True], "unknown": 0}


def test_more_threads_than_thread_blocks(tmp_path):
    out = run(
        "many_threads",
        "plain",
        tmp_path,
        COMMINSIGHT_PROFILER_EVENT_POOL="4096",
        COMMINSIGHT_PROFILER_RING_SLOTS="8192",
    )
    assert out == {"colls": 1100, "distinct": 1100}


def test_abi_v6_ignores_copy_engine_events(tmp_path):
    out = run("ce_events", "plain", tmp_path, SCENARIO_ABI="6")
    assert out["counters"]["events_unknown"] == 0
    assert out["kinds"].count(shm_v1.RecordKind.COLL) == 1


@pytest.mark.parametrize("build", ["plain", "asan"])
def test_threads_outliving_the_unloaded_plugin_exit_cleanly(build, tmp_path):
    """Found on 2xH200 with PyTorch 2.11 / NCCL 2.28.9: every job ended in SIGSEGV after
    destroy_process_group, because NCCL unloads the plugin and a thread-exit destructor of
    the plugin ran later. The process must exit 0."""
    assert run("unload_then_threads_exit", build, tmp_path) == {"survived": True}
