"""Ranks whose clocks are not the Agent's: each in a time namespace of its own (a container
restored from a checkpoint has one), CLOCK_MONOTONIC and CLOCK_BOOTTIME shifted by hours or
back by minutes. Every time a Profiler writes is on its own clocks, so unless the Agent puts
them on its own, a healthy rank's ops look a day old (false hangs), records from the future are
refused as out of range, and a live process looks dead (its start time does not match)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import msgspec
import pytest
from live_agent import LiveAgent
from profiler_builds import builds

from comminsight.agent.core.liveness import ProcessIdentity, namespace_shift, process_runs
from comminsight.agent.receivers.producer_clock import ESTIMATE_SAME_CLOCK_NS, ProducerClock
from comminsight.sim import SimConfig, read_ground_truth, run_simulation, time_namespace
from comminsight.sim.faults import parse_fault
from comminsight_gen.models.hang_report_v1 import Resolution, Verdict

UNSUPPORTED = time_namespace.supported()
NEEDS_TIME_NAMESPACES = pytest.mark.skipif(UNSUPPORTED is not None, reason=str(UNSUPPORTED))

HOUR_S = 3600
# a clock set back must stay positive (the kernel refuses the offset otherwise): up to ten
# minutes back, less on a machine booted moments ago
BEHIND_S = min(600, int(time.monotonic()) - 30)
# rank 0 shares the Agent's clocks; the others are a day ahead (boot time too), behind (or,
# on a machine up for under a minute, half an hour ahead), and an hour ahead
SHIFTS = (
    (),
    time_namespace.prefix(27 * HOUR_S, 2 * HOUR_S),
    time_namespace.prefix(-BEHIND_S if BEHIND_S > 0 else HOUR_S // 2),
    time_namespace.prefix(HOUR_S),
)
SIM_ENV = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50"),
    ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", "0.5"),
)


def shifted_job(home, faults=(), steps=2):
    return SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        workload="ddp",
        ranks=4,
        steps=steps,
        time_scale=0.02,
        hang_hold_s=3.0,
        faults=tuple(parse_fault(f) for f in faults),
        env=SIM_ENV,
        process_prefixes=SHIFTS,
    )


def run_with_agent(home, config, threshold_s):
    """The job under a polling Agent; returns the Agent's service and the job's result."""
    agent = LiveAgent(
        home,
        agent_poll_interval_ms=100,
        agent_heartbeat_stale_ms=1000,
        profiler_hang_timeout_s=threshold_s,
    ).start()
    try:
        result = run_simulation(config)
        agent.wait_passes(3)
        return agent.service, result
    finally:
        agent.stop()


def times_in(value, path=""):
    """Every (path, value) of an *_age_ms or *_real_ns field in a report's JSON."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from times_in(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from times_in(v, f"{path}[{i}]")
    elif isinstance(value, int) and path.endswith(("_age_ms", "_real_ns")):
        yield path, value


@NEEDS_TIME_NAMESPACES
def test_ranks_in_time_namespaces_of_their_own_run_healthy_with_every_op_read(tmp_path):
    service, result = run_with_agent(tmp_path, shifted_job(tmp_path), threshold_s=30.0)
    assert not result.errors, result.errors
    ops = sum(len(rank.ops) for rank in read_ground_truth(result.run_dir))
    assert ops > 0
    counters = service.producers.counters
    assert counters.slots_rejected == 0, counters.slots_rejected_by_reason
    assert counters.records_lost == 0
    assert counters.records_recovered == 0  # no live process was taken for a dead one
    # every completed op of every rank, none refused for its time
    assert counters.records >= ops
    assert service.hangs.reports == {}, [r.summary for r in service.hangs.reports.values()]


def startup_race(report) -> bool:
    """A report of ranks not yet in the job's first op that their arrival resolved."""
    return (
        report.verdict is Verdict.rank_not_joined
        and report.op is not msgspec.UNSET
        and report.op.seq == 0
        and report.resolution is Resolution.op_completed
    )


@NEEDS_TIME_NAMESPACES
@pytest.mark.parametrize(
    ("fault", "culprit", "verdict"),
    [
        ("die:rank=1,op=5", 1, Verdict.process_died),  # a day ahead
        ("sleep:rank=2,op=5,seconds=2", 2, Verdict.stuck_outside_nccl),  # ten minutes behind
    ],
)
def test_a_fault_on_a_shifted_rank_names_it_with_times_on_one_clock(
    tmp_path, fault, culprit, verdict
):
    config = shifted_job(tmp_path, (fault,), steps=30)
    service, result = run_with_agent(tmp_path, config, threshold_s=0.5)
    reports = list(service.hangs.reports.values())
    ours = [r for r in reports if r.verdict is verdict]
    assert ours, [r.summary for r in reports]
    assert [c.comm_rank for c in ours[0].culprits] == [culprit]
    # no other rank is blamed, and every age and wall-clock time is of this run (a shifted
    # clock read raw gives ages of a day and times a day away). Left out: the job's start, where
    # the simulated NCCL lets a rank wait in the first op before a peer (slower to start through
    # `unshare` on a loaded machine) has initialized, which a 0.5 s threshold rightly reports
    # and the peer's arrival resolves; a clock misread would not resolve on its own.
    blamed = {c.comm_rank for r in reports if not startup_race(r) for c in r.culprits}
    assert blamed == {culprit}, [r.summary for r in reports]
    now_ns = time.time_ns()
    for report in ours:
        for path, value in times_in(msgspec.to_builtins(report)):
            if path.endswith("_age_ms"):
                assert 0 <= value < 120_000, (path, value)
            else:
                assert abs(now_ns - value) < 600 * 10**9, (path, value)


# ---- the offset itself ---------------------------------------------------------------------


@pytest.fixture
def shifted_child():
    """A process a day and a half ahead on CLOCK_MONOTONIC and an hour on CLOCK_BOOTTIME."""
    if UNSUPPORTED is not None:
        pytest.skip(UNSUPPORTED)
    child = subprocess.Popen(
        [
            *time_namespace.prefix(36 * HOUR_S, HOUR_S),
            sys.executable,
            "-c",
            "import sys, time; print(time.monotonic_ns(), flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    child_mono = int(child.stdout.readline())
    yield child, child_mono
    child.stdin.close()
    child.wait(timeout=30)


def _start_ticks_seen_here(pid: int) -> int:
    """A process's start time as this process reads /proc (on this namespace's boot clock)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rfind(b")") + 1 :].split()[19])


def test_the_kernel_gives_a_namespace_its_exact_shift(shifted_child):
    child, child_mono = shifted_child
    mono, boot = namespace_shift(child.pid)
    assert (mono, boot) == (36 * HOUR_S * 10**9, HOUR_S * 10**9)
    # the child's clock, read by itself, is ours plus the shift
    assert abs(child_mono - mono - time.monotonic_ns()) < 60 * 10**9
    assert namespace_shift(os.getpid()) == (0, 0)


def test_a_shifted_process_whose_recorded_start_time_is_its_own_view_runs(shifted_child):
    child, _ = shifted_child
    ours = _start_ticks_seen_here(child.pid)
    ticks = os.sysconf("SC_CLK_TCK")
    its_own = ours + HOUR_S * ticks  # what the Profiler in that process recorded
    assert process_runs(child.pid, ProcessIdentity(start_ticks=its_own))
    # a start time that is neither ours nor its own is another process's
    assert not process_runs(child.pid, ProcessIdentity(start_ticks=its_own + 5 * ticks))


class _Header(dict):
    pass


class _Region:
    def __init__(self, **header):
        self.header = _Header(header)


def test_a_producer_the_kernel_does_not_show_is_placed_by_its_heartbeat_pair():
    # another pid namespace: its pids are not ours, only the header can tell
    other = ProcessIdentity(pid_namespace=1)
    shift = 20 * HOUR_S * 10**9
    mono, real = time.monotonic_ns(), time.time_ns()
    region = _Region(
        pid=1,
        heartbeat_mono_ns=mono + shift,
        heartbeat_real_ns=real,
        start_mono_ns=mono + shift - 10**9,
        start_real_ns=real - 10**9,
    )
    clock = ProducerClock(region, other)
    assert abs(clock.offset_ns() - shift) < ESTIMATE_SAME_CLOCK_NS
    assert clock.source == "heartbeat"
    # the same clock, read a little apart: no shift at all
    same = _Region(
        pid=1,
        heartbeat_mono_ns=mono - 3 * 10**8,
        heartbeat_real_ns=real,
        start_mono_ns=mono,
        start_real_ns=real,
    )
    clock = ProducerClock(same, other)
    assert clock.offset_ns() == 0 and clock.source == "same"
    # a header that never recorded its clocks is taken as ours
    assert (
        ProducerClock(
            _Region(
                pid=1, heartbeat_mono_ns=0, heartbeat_real_ns=0, start_mono_ns=0, start_real_ns=0
            ),
            other,
        ).offset_ns()
        == 0
    )


def test_the_offset_from_the_kernel_is_kept_after_the_process_ended(shifted_child):
    child, child_mono = shifted_child
    region = _Region(
        pid=child.pid,
        heartbeat_mono_ns=child_mono,
        heartbeat_real_ns=0,
        start_mono_ns=child_mono,
        start_real_ns=0,
    )
    clock = ProducerClock(region, ProcessIdentity())
    assert clock.offset_ns() == 36 * HOUR_S * 10**9 and clock.source == "kernel"
    child.stdin.close()
    child.wait(timeout=30)
    assert clock.offset_ns() == 36 * HOUR_S * 10**9


def test_the_helper_names_what_it_cannot_do():
    done = subprocess.run(
        [sys.executable, "-m", "comminsight.sim.time_namespace", "x", "0", "--", "true"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "comminsight.sim.time_namespace" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "comminsight.sim.time_namespace"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "usage" in done.stderr
